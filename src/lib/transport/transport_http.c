/* transport_http: the HTTP side of transport.h (sending through httpc,
 * receiving through httpd). */
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpc.h"
#include "httpd.h"
#include "traceparent.h"

/* A destination: its peer, or why it has none (its messages are refused). */
struct http_dest {
	char *name;
	struct httpc_peer *peer; /* borrowed; NULL: missing */
	char *missing;           /* "SHIPPING_URL is not set" when peer is NULL */
};

struct transport_http {
	struct transport t; /* first: the ops see a struct transport * */
	struct http_dest *dests;
	size_t n, cap;
	const char *token;
	int pending;
};

static const struct http_dest *dest_of(const struct transport_http *h, const char *name)
{
	for (size_t i = 0; i < h->n; i++)
		if (strcmp(h->dests[i].name, name) == 0)
			return &h->dests[i];
	return NULL;
}

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
	const struct http_dest *d = dest_of(h, m->dest);
	char path[128], auth[300], traceparent[TRACEPARENT_LEN];
	const char *headers[5] = { "Authorization", auth, NULL, NULL, NULL };

	if (!d || !d->peer) {
		/*
		 * a destination nobody configured: nothing to wait for. A missing
		 * one's error names the variable alone (no instance was used), so
		 * that last_error says what to set.
		 */
		struct transport_result r = { DELIVERY_REFUSED, d ? d->missing : "unknown destination",
					      d ? NULL : m->dest, -1 };

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
	httpc_post(d->peer, path, m->payload, m->len, headers, answered, s);
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
	struct transport_http *h = (struct transport_http *)t;

	for (size_t i = 0; i < h->n; i++) {
		free(h->dests[i].name);
		free(h->dests[i].missing);
	}
	free(h->dests);
	free(h);
}

/* NULL for a destination without a peer: there is no circuit. */
static const char *http_breaker(const struct transport *t, const char *dest)
{
	const struct http_dest *d = dest_of((const struct transport_http *)t, dest);

	return d && d->peer ? httpc_breaker_state(d->peer) : NULL;
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
	h->token = token;
	for (size_t i = 0; i < n; i++)
		transport_http_add(&h->t, dests[i], peers[i], NULL);
	return &h->t;
}

void transport_http_add(struct transport *t, const char *dest, struct httpc_peer *peer,
			const char *missing)
{
	struct transport_http *h = (struct transport_http *)t;
	struct http_dest *d;

	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 8;
		h->dests = realloc(h->dests, h->cap * sizeof(*h->dests));
		if (!h->dests)
			abort();
	}
	d = &h->dests[h->n++];
	d->name = strdup(dest);
	d->peer = peer;
	d->missing = peer ? NULL : strdup(missing ? missing : "unknown destination");
	if (!d->name || (!peer && !d->missing))
		abort();
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
