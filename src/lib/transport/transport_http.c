/* transport_http: the HTTP side of transport.h (sending through httpc,
 * receiving through httpd). */
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpc.h"
#include "httpd.h"
#include "traceparent.h"

struct transport_http {
	struct transport t; /* first: the ops see a struct transport * */
	const char *const *dests;
	struct httpc_peer *const *peers;
	size_t n;
	const char *token;
	int pending;
};

static void answered(void *arg, const struct httpc_result *r)
{
	struct transport_send *s = arg;
	struct transport_http *h = (struct transport_http *)(uintptr_t)s->tag;
	char err[48];
	struct transport_result tr = { .where = r->instance, .delay_ms = r->retry_after_ms };

	h->pending--;
	tr.outcome = delivery_policy_http(r->status);
	if (r->status == 0) {
		tr.error = r->error;
		if (r->not_before_ms > 0) {
			tr.outcome = DELIVERY_NOT_ATTEMPTED;
			tr.delay_ms = r->not_before_ms;
		}
	} else if (tr.outcome == DELIVERY_OK) {
		tr.error = "";
	} else {
		snprintf(err, sizeof(err), "HTTP %d", r->status);
		tr.error = err;
	}
	s->cb(s, &tr);
}

static void http_send(struct transport *t, const struct transport_msg *m,
		      struct transport_send *s)
{
	struct transport_http *h = (struct transport_http *)t;
	struct httpc_peer *peer = NULL;
	char path[128], auth[300], traceparent[TRACEPARENT_LEN];
	const char *headers[5] = { "Authorization", auth, NULL, NULL, NULL };

	for (size_t i = 0; i < h->n && !peer; i++)
		if (strcmp(h->dests[i], m->dest) == 0)
			peer = h->peers[i];
	if (!peer) {
		/* a destination nobody configured: nothing to wait for */
		struct transport_result r = { DELIVERY_REFUSED, "unknown destination", m->dest, -1 };

		s->cb(s, &r);
		return;
	}
	snprintf(path, sizeof(path), "/%s/%s",
		 strcmp(m->kind, "command") == 0 ? "commands" : "events", m->type);
	snprintf(auth, sizeof(auth), "Bearer %s", h->token);
	if (traceparent_build(m->trace, traceparent)) {
		headers[2] = "traceparent";
		headers[3] = traceparent;
	}
	s->tag = (uint64_t)(uintptr_t)h;
	h->pending++;
	httpc_post(peer, path, m->payload, m->len, headers, answered, s);
}

static bool http_idle(const struct transport *t)
{
	return ((const struct transport_http *)t)->pending == 0;
}

static const char *http_broker(const struct transport *t)
{
	return NULL;
}

static void http_stop(struct transport *t)
{
}

static void http_free(struct transport *t)
{
	free(t);
}

static const char *http_breaker(const struct transport *t, const char *dest)
{
	const struct transport_http *h = (const struct transport_http *)t;

	for (size_t i = 0; i < h->n; i++)
		if (strcmp(h->dests[i], dest) == 0)
			return httpc_breaker_state(h->peers[i]);
	return NULL;
}

static const struct transport_ops http_ops = { http_send, http_idle,  http_broker,
					       http_stop, http_free, http_breaker };

struct transport *transport_http_new(const char *const *dests, struct httpc_peer *const *peers,
				     size_t n, const char *token)
{
	struct transport_http *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->t.ops = &http_ops;
	h->dests = dests;
	h->peers = peers;
	h->n = n;
	h->token = token;
	return &h->t;
}

/* --- receiving: an evhttp request as an inmsg ---------------------------- */

static const char *req_body(void *h, size_t *len)
{
	return httpd_body(h, len);
}

static const char *req_traceparent(void *h)
{
	return httpd_header(h, "traceparent");
}

static void req_reply(void *h, int status, const char *json)
{
	httpd_reply(h, status, json);
}

static void req_error(void *h, int status, const char *code, const char *message)
{
	httpd_error(h, status, code, "%s", message);
}

static void req_unavailable(void *h)
{
	httpd_unavailable(h);
}

static void req_drop(void *h)
{
	httpd_drop(h);
}

static const char *req_id(void *h)
{
	return NULL;
}

static const struct inmsg_ops req_ops = { req_body,	   req_traceparent, req_reply, req_error,
					  req_unavailable, req_drop,	    req_id };

struct inmsg inmsg_http(struct evhttp_request *req)
{
	return (struct inmsg){ &req_ops, req };
}
