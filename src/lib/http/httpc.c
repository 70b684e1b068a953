/* httpc: see httpc.h. */
#include "monotime.h"
#include "httpc.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include "breaker.h"
#include "delivery_policy.h"
#include "http_flush.h"
#include "metrics.h"
#include "tls.h"

/*
 * How long an idle connection to a peer is kept. evhttp watches an idle
 * client connection with the request timeout (one attempt, HTTP_TIMEOUT_MS)
 * and closes it when that runs out, so a peer quiet for five seconds cost a
 * new connection, and over TLS a handshake, at its next message: a burst of
 * them whenever traffic resumed. An idle connection gets this long instead,
 * less than the 60 s after which the services' listeners close it (httpd.c),
 * so that the side that sends is the side that closes, and a request is
 * never written into a connection the peer is closing.
 */
#define HTTPC_IDLE_MS 50000

struct call {
	TAILQ_ENTRY(call) link;
	char *path;
	enum evhttp_cmd_type method;
	char *body;
	size_t len;
	char **headers; /* name, value, ..., NULL; one allocation with the call */
	httpc_cb cb;
	void *arg;
};
TAILQ_HEAD(call_queue, call);

struct slot {
	struct evhttp_connection *evcon; /* created on first use, kept alive */
	struct inst *inst;
	struct call *call;               /* NULL when free */
	const char *error;               /* from the error callback */
	/*
	 * TLS: the connection closed or failed. libevent would reconnect with
	 * the same SSL object, which carries the last connection's state: it is
	 * made anew instead, before the next request.
	 */
	bool dead;
	char why[200]; /* a TLS failure's reason */
};

struct inst {
	char *url;
	char host[256];
	int port;
	char hostport[300]; /* the Host header */
	struct tls_cache *cache; /* https: the session to resume; else NULL */
	struct breaker br;
	struct slot *slots;
	struct httpc_peer *peer;
	struct metric_series *up;
};

struct httpc_peer {
	struct event_base *base;
	const char *name;
	struct httpc_opts opts;
	struct inst *insts;
	int ninsts;
	int next; /* round robin start */
	int pending;
	struct call_queue queue;
	struct event *pump;
	/*
	 * Host names are resolved by libevent's asynchronous resolver:
	 * without one, evhttp calls the blocking getaddrinfo() on the loop
	 * that also serves HTTP and libpq, and a slow resolver (every peer is
	 * a name under docker compose) would stall all of it.
	 */
	struct evdns_base *dns;
	struct tls *tls;
};

static void schedule_pump(struct httpc_peer *p)
{
	event_active(p->pump, EV_TIMEOUT, 0);
}

static void call_done(struct httpc_peer *p, struct call *c, const struct httpc_result *r)
{
	p->pending--;
	c->cb(c->arg, r);
	free(c);
}

static int64_t parse_retry_after(struct evhttp_request *req)
{
	const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), "Retry-After");
	char *end;
	long long s;

	if (!v)
		return -1;
	s = strtoll(v, &end, 10);
	if (end == v || *end != '\0' || s < 0 || s > 86400)
		return -1; /* HTTP dates are not worth supporting between our services */
	return s * 1000;
}

static void request_error_cb(enum evhttp_request_error e, void *arg)
{
	struct slot *s = arg;

	switch (e) {
	case EVREQ_HTTP_TIMEOUT:
		s->error = "timeout";
		break;
	case EVREQ_HTTP_EOF:
		s->error = "connection closed before the answer";
		break;
	case EVREQ_HTTP_INVALID_HEADER:
		s->error = "invalid response";
		break;
	case EVREQ_HTTP_BUFFER_ERROR:
		s->error = "connection error";
		break;
	case EVREQ_HTTP_DATA_TOO_LONG:
		s->error = "response too long";
		break;
	default:
		s->error = "request cancelled";
		break;
	}
}

static void request_done_cb(struct evhttp_request *req, void *arg)
{
	struct slot *s = arg;
	struct inst *in = s->inst;
	struct httpc_peer *p = in->peer;
	struct call *c = s->call;
	struct httpc_result r = { .retry_after_ms = -1, .instance = in->url, .body = "" };

	s->call = NULL;
	r.status = req ? evhttp_request_get_response_code(req) : 0;
	if (r.status == 0) {
		const char *why = NULL;

		if (in->cache) {
			why = tls_failure(evhttp_connection_get_bufferevent(s->evcon), s->why,
					  sizeof(s->why));
			s->dead = true;
		}
		r.error = why ? why : s->error ? s->error : "connection failed";
	} else {
		struct evbuffer *b = evhttp_request_get_input_buffer(req);

		r.retry_after_ms = parse_retry_after(req);
		r.body_len = evbuffer_get_length(b);
		evbuffer_add(b, "", 1);
		r.body = (const char *)evbuffer_pullup(b, -1);
	}
	s->error = NULL;
	if (r.status != 0 && !s->dead) {
		/* answered, kept alive: idle from now on (the next request sets its timeout) */
		struct timeval idle = { HTTPC_IDLE_MS / 1000, (HTTPC_IDLE_MS % 1000) * 1000 };

		bufferevent_set_timeouts(evhttp_connection_get_bufferevent(s->evcon), &idle, &idle);
	}
	/* only the peer's own trouble counts against its circuit */
	breaker_report(&in->br, delivery_policy_breaker_ok(delivery_policy_http(r.status)),
		       monotime_ms());
	metric_set(in->up, in->br.state == BREAKER_CLOSED ? 0 : in->br.state == BREAKER_OPEN ? 1 : 2);
	call_done(p, c, &r);
	schedule_pump(p);
}

static void closed_cb(struct evhttp_connection *evcon, void *arg)
{
	struct slot *s = arg;

	s->dead = true;
}

/* A new connection to in, over TLS for https. */
static struct evhttp_connection *connect_to(struct httpc_peer *p, struct inst *in,
					    struct slot *s)
{
	struct evhttp_connection *evcon;
	struct bufferevent *bev;

	if (!in->cache)
		return evhttp_connection_base_new(p->base, p->dns, in->host, (ev_uint16_t)in->port);
	bev = tls_connect_bev(p->tls, p->base, in->host, in->cache);
	if (!bev)
		return NULL;
	evcon = evhttp_connection_base_bufferevent_new(p->base, p->dns, bev, in->host,
						       (ev_uint16_t)in->port);
	if (!evcon) {
		bufferevent_free(bev);
		return NULL;
	}
	evhttp_connection_set_closecb(evcon, closed_cb, s);
	return evcon;
}

static bool send_call(struct slot *s, struct call *c)
{
	struct inst *in = s->inst;
	struct httpc_peer *p = in->peer;
	struct evhttp_request *req;
	struct evkeyvalq *h;

	if (s->evcon && s->dead) {
		evhttp_connection_free(s->evcon);
		s->evcon = NULL;
	}
	s->dead = false;
	if (!s->evcon) {
		s->evcon = connect_to(p, in, s);
		if (!s->evcon)
			return false;
		evhttp_connection_set_retries(s->evcon, 0);
	}
	/* one attempt's timeout, also on a connection that was idle */
	struct timeval tv = { p->opts.timeout_ms / 1000, (p->opts.timeout_ms % 1000) * 1000 };
	evhttp_connection_set_timeout_tv(s->evcon, &tv);
	req = evhttp_request_new(request_done_cb, s);
	if (!req)
		return false;
	evhttp_request_set_error_cb(req, request_error_cb);
	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", in->hostport);
	if (c->method == EVHTTP_REQ_POST)
		evhttp_add_header(h, "Content-Type", "application/json");
	for (char **kv = c->headers; kv && kv[0]; kv += 2)
		evhttp_add_header(h, kv[0], kv[1]);
	if (c->method == EVHTTP_REQ_POST)
		evbuffer_add(evhttp_request_get_output_buffer(req), c->body, c->len);
	s->call = c;
	s->error = NULL;
	if (evhttp_make_request(s->evcon, req, c->method, c->path) != 0) {
		/* evhttp freed req; the connection may be broken: start afresh */
		s->call = NULL;
		evhttp_connection_free(s->evcon);
		s->evcon = NULL;
		return false;
	}
	http_flush_now(s->evcon);
	return true;
}

static struct slot *free_slot(struct inst *in, int max)
{
	for (int i = 0; i < max; i++)
		if (!in->slots[i].call)
			return &in->slots[i];
	return NULL;
}

/* Sends queued calls while some instance has room and a closed circuit. */
static void pump_cb(evutil_socket_t fd, short what, void *arg)
{
	struct httpc_peer *p = arg;
	struct call *c;

	while ((c = TAILQ_FIRST(&p->queue)) != NULL) {
		int64_t now = monotime_ms(), soonest = INT64_MAX;
		bool busy = false, sent = false;

		for (int k = 0; k < p->ninsts && !sent; k++) {
			struct inst *in = &p->insts[(p->next + k) % p->ninsts];
			struct slot *s = free_slot(in, p->opts.max_in_flight);
			int64_t at = breaker_retry_at(&in->br, now);

			if (at > now) {
				soonest = at < soonest ? at : soonest;
				continue;
			}
			if (!s || !breaker_allow(&in->br, now)) {
				busy = true; /* full, or its half-open probe is out */
				continue;
			}
			TAILQ_REMOVE(&p->queue, c, link);
			if (!send_call(s, c)) {
				struct httpc_result r = { .status = 0, .error = "cannot send",
							  .retry_after_ms = -1, .instance = in->url };

				breaker_report(&in->br, false, now);
				call_done(p, c, &r);
			}
			p->next = (p->next + k + 1) % p->ninsts;
			sent = true;
		}
		if (sent)
			continue;
		if (busy)
			return; /* a completion will pump again */
		/* every instance's circuit is open */
		TAILQ_REMOVE(&p->queue, c, link);
		struct httpc_result r = { .status = 0, .error = "circuit open",
					  .retry_after_ms = -1, .not_before_ms = soonest - now,
					  .instance = p->insts[0].url };
		call_done(p, c, &r);
	}
}

static int parse_url(struct inst *in, const char *url, char *err, size_t errlen)
{
	struct evhttp_uri *u = evhttp_uri_parse(url);
	const char *host, *path, *scheme = u ? evhttp_uri_get_scheme(u) : NULL;
	bool https = scheme && strcmp(scheme, "https") == 0;
	int port;

	/*
	 * A base URL is scheme, host and port: the paths of docs/protocol.md are asked at
	 * the peer's root, so a path (a proxy's prefix, say) would be dropped
	 * without a word; refused, like an empty host, rather than found out
	 * at the first delivery.
	 */
	if (!u || !scheme || (strcmp(scheme, "http") != 0 && !https) ||
	    !(host = evhttp_uri_get_host(u)) || !*host || strlen(host) >= sizeof(in->host) ||
	    ((path = evhttp_uri_get_path(u)) && *path && strcmp(path, "/") != 0) ||
	    evhttp_uri_get_query(u) || evhttp_uri_get_fragment(u) || evhttp_uri_get_userinfo(u)) {
		snprintf(err, errlen, "not an http(s)://host[:port] URL: '%s'", url);
		if (u)
			evhttp_uri_free(u);
		return -1;
	}
	port = evhttp_uri_get_port(u);
	snprintf(in->host, sizeof(in->host), "%s", host);
	in->port = port > 0 ? port : https ? 443 : 80;
	if (https)
		in->cache = tls_cache_new();
	snprintf(in->hostport, sizeof(in->hostport), "%s:%d", in->host, in->port);
	evhttp_uri_free(u);
	return 0;
}

struct httpc_peer *httpc_peer_new(struct event_base *base, const char *name, const char *urls,
				  const struct httpc_opts *opts, char *err, size_t errlen)
{
	struct httpc_peer *p = calloc(1, sizeof(*p));
	char *copy = strdup(urls), *tok, *save = NULL;
	struct metric_family *fam = metrics_family(
		"saga_peer_circuit_state", "Circuit breaker per peer instance: 0 closed, 1 open, 2 half-open",
		METRIC_GAUGE);
	int n = 1;

	if (!p || !copy)
		goto oom;
	for (const char *s = urls; *s; s++)
		n += *s == ',';
	p->insts = calloc((size_t)n, sizeof(*p->insts));
	if (!p->insts)
		goto oom;
	p->base = base;
	p->name = name;
	p->opts = *opts;
	p->tls = opts->tls;
	if (p->opts.max_in_flight < 1)
		p->opts.max_in_flight = 1;
	TAILQ_INIT(&p->queue);
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct inst *in = &p->insts[p->ninsts];
		char labels[400];

		while (*tok == ' ')
			tok++;
		if (!*tok)
			continue;
		if (parse_url(in, tok, err, errlen) != 0)
			goto fail;
		if (in->cache && !p->tls) {
			snprintf(err, errlen, "%s: https:// needs TLS settings", name);
			tls_cache_free(in->cache);
			in->cache = NULL;
			goto fail;
		}
		in->url = strdup(tok);
		in->slots = calloc((size_t)p->opts.max_in_flight, sizeof(*in->slots));
		if (!in->url || !in->slots)
			goto oom;
		for (int i = 0; i < p->opts.max_in_flight; i++)
			in->slots[i].inst = in;
		in->peer = p;
		breaker_init(&in->br, opts->breaker_failures, opts->breaker_open_ms);
		snprintf(labels, sizeof(labels), "peer=\"%s\",instance=\"%s\"", name, in->url);
		in->up = metrics_series(fam, labels);
		p->ninsts++;
	}
	if (p->ninsts == 0) {
		snprintf(err, errlen, "%s: no URL given", name);
		goto fail;
	}
	p->pump = event_new(base, -1, 0, pump_cb, p);
	/* /etc/resolv.conf and /etc/hosts, read once here, before the loop runs */
	p->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
					      EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!p->dns && (p->dns = evdns_base_new(base, EVDNS_BASE_DISABLE_WHEN_INACTIVE)))
		(void)evdns_base_load_hosts(p->dns, NULL); /* no resolv.conf: hosts only */
	if (!p->pump || !p->dns)
		goto oom;
	free(copy);
	return p;
oom:
	snprintf(err, errlen, "out of memory");
fail:
	free(copy);
	httpc_peer_free(p);
	return NULL;
}

void httpc_peer_free(struct httpc_peer *p)
{
	struct call *c;

	if (!p)
		return;
	for (int i = 0; p->insts && i < p->ninsts; i++) {
		struct inst *in = &p->insts[i];

		for (int j = 0; in->slots && j < p->opts.max_in_flight; j++) {
			if (in->slots[j].evcon)
				evhttp_connection_free(in->slots[j].evcon);
			free(in->slots[j].call);
		}
		free(in->slots);
		free(in->url);
		tls_cache_free(in->cache); /* after the connections that fill it */
	}
	while ((c = TAILQ_FIRST(&p->queue)) != NULL) {
		TAILQ_REMOVE(&p->queue, c, link);
		free(c);
	}
	if (p->pump)
		event_free(p->pump);
	/* after the connections, which cancel their own lookups */
	if (p->dns)
		evdns_base_free(p->dns, 0);
	free(p->insts);
	free(p);
}

void httpc_post(struct httpc_peer *p, const char *path, const char *body, size_t len,
		const char *const *headers, httpc_cb cb, void *arg)
{
	httpc_request(p, "POST", path, body, len, headers, cb, arg);
}

void httpc_request(struct httpc_peer *p, const char *method, const char *path, const char *body,
		   size_t len, const char *const *headers, httpc_cb cb, void *arg)
{
	size_t nh = 0, extra = strlen(path) + 1 + len + 1;
	struct call *c;
	char *q;

	for (; headers && headers[nh]; nh++)
		extra += strlen(headers[nh]) + 1;
	/* the call, its header array and every string in one allocation */
	c = malloc(sizeof(*c) + (nh + 1) * sizeof(char *) + extra);
	if (!c)
		abort();
	c->headers = (char **)(c + 1);
	q = (char *)(c->headers + nh + 1);
	for (size_t i = 0; i < nh; i++) {
		size_t l = strlen(headers[i]) + 1;

		c->headers[i] = memcpy(q, headers[i], l);
		q += l;
	}
	c->headers[nh] = NULL;
	c->path = memcpy(q, path, strlen(path) + 1);
	q += strlen(path) + 1;
	c->body = len ? memcpy(q, body, len) : q;
	c->body[len] = '\0';
	c->method = strcmp(method, "GET") == 0 ? EVHTTP_REQ_GET : EVHTTP_REQ_POST;
	c->len = len;
	c->cb = cb;
	c->arg = arg;
	TAILQ_INSERT_TAIL(&p->queue, c, link);
	p->pending++;
	schedule_pump(p);
}

int httpc_pending(const struct httpc_peer *p)
{
	return p->pending;
}

const char *httpc_name(const struct httpc_peer *p)
{
	return p->name;
}

const char *httpc_breaker_state(const struct httpc_peer *p)
{
	int64_t now = monotime_ms();
	const char *best = "open";

	for (int i = 0; i < p->ninsts; i++) {
		const char *st = breaker_state_name(&p->insts[i].br, now);

		if (strcmp(st, "closed") == 0)
			return st;
		if (strcmp(st, "half_open") == 0)
			best = st;
	}
	return best;
}
