/* httpd: see httpd.h. */
#include "httpd.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h> /* the request's HTTP version */
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include "http_flush.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "tls.h"

struct httpd {
	struct evhttp *http;
	struct evhttp_bound_socket *sock;
	const struct httpd_route *routes;
	size_t nroutes;
	const char *token;
	void *svc;
	int port;
	httpd_admin_gate gate;
	void *gate_arg;
	struct tls *tls; /* NULL: plain HTTP */
};

/*
 * Requests in flight are counted process-wide: a reply does not know its
 * server, and a process runs one server.
 */
static int in_flight;
static struct metric_family *requests_total;
/* Inside dispatch (evhttp's callback): a reply is left for evhttp to write. */
static int in_dispatch;
/* The process's server speaks HTTPS (one server per process, as above). */
static bool over_tls;

/* Which route a pending request belongs to, for the metric on reply. */
static const char *route_label(struct evhttp_request *req)
{
	const char *l = evhttp_find_header(evhttp_request_get_output_headers(req), "X-Route");

	return l ? l : "other";
}

static void count_reply(struct evhttp_request *req, int status)
{
	char labels[160];
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);

	snprintf(labels, sizeof(labels), "route=\"%s\",status=\"%d\"", route_label(req), status);
	metrics_inc(requests_total, labels, 1);
	evhttp_remove_header(out, "X-Route");
}

/*
 * The Date header, formatted once a second: evhttp would otherwise format
 * it for every reply (gmtime and a printf). Same text as evhttp's
 * (RFC 1123, C locale names).
 */
static const char *date_header(void)
{
	static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
	static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	static char text[64];
	static time_t at = -1;
	time_t now = time(NULL);
	struct tm tm;

	if (now == at)
		return text;
	gmtime_r(&now, &tm);
	snprintf(text, sizeof(text), "%s, %02d %s %4d %02d:%02d:%02d GMT", days[tm.tm_wday % 7],
		 tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
		 tm.tm_sec);
	at = now;
	return text;
}

/* evhttp knows no phrase for these and would send "Client Error". */
static const char *reason_phrase(int status)
{
	switch (status) {
	case 422:
		return "Unprocessable Content";
	case 429:
		return "Too Many Requests";
	default:
		return NULL; /* evhttp's own */
	}
}

/* After the answer to a CONNECT is out: see bodiless. */
static void shut_after_connect(struct evhttp_request *req, void *arg)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;

	(void)arg;
	/* the client reads the end, and evhttp reads EOF and frees the connection */
	if (bev && bufferevent_getfd(bev) >= 0)
		shutdown(bufferevent_getfd(bev), SHUT_RDWR);
}

/*
 * evhttp neither counts nor frames the answer to a HEAD or a CONNECT (it
 * expects no body), but writes whatever body it is given: a HEAD gets the
 * Content-Length of the GET it stands for and no body. A CONNECT gets its
 * error body with a Content-Length, and the connection is closed after it:
 * evhttp keeps a CONNECT's connection open for a tunnel, so a client that
 * waits for the end would wait for the 60 s timeout.
 */
static struct evbuffer *bodiless(struct evhttp_request *req, int status, struct evbuffer *body)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	size_t len = body ? evbuffer_get_length(body) : 0;
	char n[24];

	if (status == 204 || status == 304)
		return body;
	snprintf(n, sizeof(n), "%zu", len);
	evhttp_add_header(out, "Content-Length", n);
	if (evhttp_request_get_command(req) == EVHTTP_REQ_CONNECT) {
		evhttp_add_header(out, "Connection", "close");
		evhttp_request_set_on_complete_cb(req, shut_after_connect, NULL);
		return body;
	}
	if (body)
		evbuffer_drain(body, len);
	return NULL;
}

void httpd_reply_buf(struct evhttp_request *req, int status, struct evbuffer *body)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	/* NULL when the client has gone: evhttp then frees req in send_reply */
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);

	count_reply(req, status);
	if (!evhttp_find_header(out, "Content-Type"))
		evhttp_add_header(out, "Content-Type", "application/json");
	if (!evhttp_find_header(out, "Date"))
		evhttp_add_header(out, "Date", date_header());
	/* a browser that came once over HTTPS never falls back to clear text */
	if (over_tls && !evhttp_find_header(out, "Strict-Transport-Security"))
		evhttp_add_header(out, "Strict-Transport-Security", "max-age=31536000");
	if (cmd == EVHTTP_REQ_HEAD || cmd == EVHTTP_REQ_CONNECT)
		body = bodiless(req, status, body);
	evhttp_send_reply(req, status, reason_phrase(status), body);
	in_flight--;
	if (evcon && !in_dispatch)
		http_flush_now(evcon); /* evcon may be gone after this */
}

void httpd_reply(struct evhttp_request *req, int status, const char *json)
{
	struct evbuffer *b = evbuffer_new();

	if (!b)
		abort();
	evbuffer_add(b, json, strlen(json));
	httpd_reply_buf(req, status, b);
	evbuffer_free(b);
}

void httpd_error(struct evhttp_request *req, int status, const char *code, const char *fmt, ...)
{
	struct evbuffer *b = evbuffer_new();
	char msg[512];
	va_list ap;

	if (!b)
		abort();
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	evbuffer_add_printf(b, "{\"error\":{\"code\":\"%s\",\"message\":", code);
	jsonx_buf_str(b, msg);
	evbuffer_add(b, "}}", 2);
	httpd_reply_buf(req, status, b);
	evbuffer_free(b);
}

void httpd_drop(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);

	in_flight--;
	count_reply(req, 0);
	if (evcon)
		evhttp_connection_free(evcon); /* frees req with it */
	else
		evhttp_request_free(req); /* the client left already */
}

void httpd_unavailable(struct evhttp_request *req)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
	httpd_error(req, 503, "database_unavailable", "the database is unavailable, retry later");
}

const char *httpd_body(struct evhttp_request *req, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = evbuffer_get_length(in);
	char *p;

	/* a NUL after the body, so parsers may treat it as a string */
	evbuffer_add(in, "", 1);
	p = (char *)evbuffer_pullup(in, -1);
	*len = n;
	return p;
}

const char *httpd_header(struct evhttp_request *req, const char *name)
{
	return evhttp_find_header(evhttp_request_get_input_headers(req), name);
}

int httpd_header_count(struct evhttp_request *req, const char *name)
{
	struct evkeyval *kv;
	int n = 0;

	TAILQ_FOREACH(kv, evhttp_request_get_input_headers(req), next)
		if (strcasecmp(kv->key, name) == 0)
			n++;
	return n;
}

bool httpd_idempotency_key(const char *h, char *out, size_t outlen)
{
	size_t n = strlen(h);

	if (n < 1 || n > 255 || n >= outlen)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)h[i] < 0x21 || (unsigned char)h[i] > 0x7e)
			return false;
	memcpy(out, h, n + 1);
	return true;
}

/* Compares in time independent of where the first difference is. */
static bool token_ok(const char *got, const char *want)
{
	size_t gl = strlen(got), wl = strlen(want);
	unsigned char diff = gl != wl;

	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return diff == 0;
}

static bool authorized(struct evhttp_request *req, const char *token)
{
	const char *auth = httpd_header(req, "Authorization");

	if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
		return false;
	return token_ok(auth + 7, token);
}

static const char *method_name(enum evhttp_cmd_type t)
{
	switch (t) {
	case EVHTTP_REQ_GET:
		return "GET";
	case EVHTTP_REQ_POST:
		return "POST";
	case EVHTTP_REQ_HEAD:
		return "HEAD";
	case EVHTTP_REQ_PUT:
		return "PUT";
	case EVHTTP_REQ_DELETE:
		return "DELETE";
	case EVHTTP_REQ_PATCH:
		return "PATCH";
	case EVHTTP_REQ_OPTIONS:
		return "OPTIONS";
	case EVHTTP_REQ_TRACE:
		return "TRACE";
	case EVHTTP_REQ_CONNECT:
		return "CONNECT";
	default:
		return "OTHER";
	}
}

static bool has_control_byte(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return true;
	return false;
}

/* 1*DIGIT (RFC 9110 §8.6); evhttp's strtoll would take "+56" as well. */
static bool digits_only(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s);
}

/*
 * When the router runs, evhttp has taken the body by its rules: chunked when
 * Transfer-Encoding is exactly "chunked" (any case, spaces trimmed), else
 * the Content-Length, else none; a Content-Length with a Transfer-Encoding
 * it has refused itself. Here is what a proxy in front may have framed
 * otherwise, so that what we took for the next request was this one's body
 * (request smuggling). Returns why, or NULL.
 */
static const char *ambiguous_framing(struct evhttp_request *req)
{
	struct evkeyval *kv;
	int lengths = 0, codings = 0;

	TAILQ_FOREACH(kv, evhttp_request_get_input_headers(req), next) {
		if (strcasecmp(kv->key, "Content-Length") == 0) {
			if (++lengths > 1)
				return "more than one Content-Length header";
			if (!digits_only(kv->value))
				return "Content-Length is not a plain decimal number";
		} else if (strcasecmp(kv->key, "Transfer-Encoding") == 0) {
			/* "xchunked", "gzip, chunked": evhttp reads no body */
			if (++codings > 1 || strcasecmp(kv->value, "chunked") != 0)
				return "Transfer-Encoding other than one plain chunked";
			/* RFC 9112 §6.1: framing to treat as faulty (a proxy may ignore it) */
			if (req->major == 1 && req->minor == 0)
				return "Transfer-Encoding on an HTTP/1.0 request";
		}
	}
	return NULL;
}

/*
 * A header evhttp reads otherwise than a proxy may: "Content-Length : 5" is
 * no Content-Length to evhttp (RFC 9112 §5.1 says refuse it), and a control
 * byte (a NUL arrives as 0x01, see nul_to_soh) would be cut or passed on.
 */
static const char *invalid_header(struct evhttp_request *req)
{
	struct evkeyval *kv;

	TAILQ_FOREACH(kv, evhttp_request_get_input_headers(req), next) {
		if (strpbrk(kv->key, " \t"))
			return "a header name holds white space";
		if (has_control_byte(kv->key) || has_control_byte(kv->value))
			return "a header holds a control byte";
	}
	return NULL;
}

/*
 * RFC 9112 §3.2: an HTTP/1.1 request carries exactly one Host, any request
 * at most one (two could name one host to a proxy and another to us); an
 * HTTP/1.0 one may have none.
 */
static const char *invalid_host(struct evhttp_request *req)
{
	struct evkeyval *kv;
	int hosts = 0;

	TAILQ_FOREACH(kv, evhttp_request_get_input_headers(req), next)
		if (strcasecmp(kv->key, "Host") == 0 && ++hosts > 1)
			return "more than one Host header";
	if (hosts == 0 && (req->major > 1 || (req->major == 1 && req->minor >= 1)))
		return "no Host header on an HTTP/1.1 request";
	return NULL;
}

/*
 * evhttp takes the request target as all between the first and the last
 * space of the request line, so "GET /healthz x HTTP/1.1" reached the router
 * as the path "/healthz x" (a 404). A target holds no white space and no
 * control byte (RFC 9112 §3.2); a request line that has them is malformed.
 */
static const char *invalid_target(struct evhttp_request *req)
{
	const char *t = evhttp_request_get_uri(req);

	for (; t && *t; t++)
		if ((unsigned char)*t <= 0x20 || *t == 0x7f)
			return "the request target holds white space or a control byte";
	return NULL;
}

/*
 * Refuses what must not reach a handler, before anything is done. Answers
 * 400 and closes the connection, whose remaining bytes cannot be trusted.
 * Returns true when it answered.
 */
static bool refuse_bad_framing(struct evhttp_request *req)
{
	const char *code = "ambiguous_framing", *why = ambiguous_framing(req);

	if (!why) {
		code = "invalid_header";
		why = invalid_header(req);
	}
	if (!why) {
		code = "invalid_host";
		why = invalid_host(req);
	}
	if (!why) {
		code = "invalid_target";
		why = invalid_target(req);
	}
	if (!why)
		return false;
	evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	httpd_error(req, 400, code, "%s", why);
	return true;
}

static bool path_matches(const struct httpd_route *r, const char *path, const char **tail)
{
	size_t n = strlen(r->path);

	if (n > 0 && r->path[n - 1] == '/') {
		if (strncmp(path, r->path, n) != 0)
			return false;
		*tail = path + n;
		return true;
	}
	*tail = "";
	return strcmp(path, r->path) == 0;
}

/*
 * The route for method on path (HEAD is served wherever GET is), or NULL;
 * *path_known tells whether any route serves path.
 */
static const struct httpd_route *find_route(const struct httpd *h, const char *path,
					    const char *method, const char **tail,
					    bool *path_known)
{
	if (strcmp(method, "HEAD") == 0)
		method = "GET";
	*path_known = false;
	for (size_t i = 0; i < h->nroutes; i++) {
		const struct httpd_route *r = &h->routes[i];

		if (r->admin != HTTPD_ADMIN_NONE && !h->gate)
			continue; /* admin off: the route does not exist */
		if (!path_matches(r, path, tail))
			continue;
		*path_known = true;
		if (strcmp(r->method, method) == 0)
			return r;
	}
	return NULL;
}

/* A 405 names the methods path has (RFC 9110 §15.5.6), from the route table. */
static void method_not_allowed(struct evhttp_request *req, const struct httpd *h,
			       const char *path, const char *method)
{
	static const char *const methods[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH" };
	char allow[64] = "";
	const char *tail;
	bool known;

	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (find_route(h, path, methods[i], &tail, &known))
			snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s",
				 *allow ? ", " : "", methods[i]);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	httpd_error(req, 405, "method_not_allowed", "method %s not allowed here", method);
}

/* The request came on a TLS connection whose client certificate verified. */
static bool client_cert_ok(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);

	return evcon && tls_client_verified(evhttp_connection_get_bufferevent(evcon));
}

static void route(struct evhttp_request *req, void *arg)
{
	struct httpd *h = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	const char *method = method_name(evhttp_request_get_command(req));
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	const struct httpd_route *r;
	bool path_known;
	const char *tail;

	in_flight++;
	if (refuse_bad_framing(req))
		return;
	if (!path || !*path)
		path = "/";
	r = find_route(h, path, method, &tail, &path_known);
	if (!r) {
		if (path_known)
			method_not_allowed(req, h, path, method);
		else
			httpd_error(req, 404, "not_found", "no such endpoint");
		return;
	}
	evhttp_add_header(out, "X-Route", r->name);
	if (r->internal && !authorized(req, h->token)) {
		evhttp_add_header(out, "WWW-Authenticate", "Bearer");
		httpd_error(req, 401, "unauthorized", "missing or wrong bearer token");
		return;
	}
	if (r->internal && tls_client_certs_on(h->tls) && !client_cert_ok(req)) {
		httpd_error(req, 403, "client_certificate_required",
			    "this endpoint needs a client certificate that verifies");
		return;
	}
	if (r->admin != HTTPD_ADMIN_NONE && !h->gate(req, h->gate_arg, r->admin == HTTPD_ADMIN_AUTH))
		return;
	r->fn(req, h->svc, tail);
}

static void dispatch(struct evhttp_request *req, void *arg)
{
	in_dispatch++;
	route(req, arg);
	in_dispatch--;
}

/*
 * evhttp keeps header values as C strings, so a NUL byte cut a value short
 * without a word: "Idempotency-Key: ab<NUL>cd" arrived as "ab", and two
 * different keys became one. Each connection's input buffer calls this as
 * bytes arrive, before evhttp parses them, and it turns every NUL into 0x01
 * in place: the value keeps its length and refuse_bad_framing refuses its
 * control byte. A NUL is never valid in a request line, a header or a JSON
 * body, so nothing accepted before is refused now. It costs one memchr over
 * the new bytes and copies nothing.
 */
static void nul_to_soh(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct evbuffer_ptr at;
	struct evbuffer_iovec byte;
	size_t len = evbuffer_get_length(buf);

	if (info->n_added == 0 || info->n_added > len ||
	    evbuffer_ptr_set(buf, &at, len - info->n_added, EVBUFFER_PTR_SET) < 0)
		return;
	for (;;) {
		at = evbuffer_search(buf, "", 1, &at);
		if (at.pos < 0 || evbuffer_peek(buf, 1, &at, &byte, 1) < 1)
			return;
		*(char *)byte.iov_base = 0x01;
	}
}

static struct bufferevent *connection_bev(struct event_base *base, void *arg)
{
	struct httpd *h = arg;
	/*
	 * Over TLS every connection starts with a handshake: a plain-text
	 * request fails it and the connection is closed without an answer.
	 */
	struct bufferevent *bev = tls_server_on(h->tls)
					  ? tls_accept_bev(h->tls, base)
					  : bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);

	if (bev && !evbuffer_add_cb(bufferevent_get_input(bev), nul_to_soh, NULL)) {
		bufferevent_free(bev);
		return NULL;
	}
	return bev;
}

struct httpd *httpd_new(struct event_base *base, const char *host, int port,
			const struct httpd_route *routes, size_t nroutes, const char *token,
			void *svc, char *err, size_t errlen)
{
	struct httpd *h = calloc(1, sizeof(*h));
	evutil_socket_t fd;
	struct sockaddr_storage ss;
	ev_socklen_t sl = sizeof(ss);

	if (!h || !(h->http = evhttp_new(base))) {
		snprintf(err, errlen, "out of memory");
		free(h);
		return NULL;
	}
	requests_total = metrics_family("saga_http_requests_total",
					"HTTP requests answered, by route and status",
					METRIC_COUNTER);
	h->routes = routes;
	h->nroutes = nroutes;
	h->token = token;
	h->svc = svc;
	/* Bodies over the limit are refused from their Content-Length (bare 413). */
	evhttp_set_max_body_size(h->http, HTTPD_MAX_BODY);
	evhttp_set_max_headers_size(h->http, 16 * 1024);
	evhttp_set_timeout(h->http, 60);
	/* every method evhttp knows reaches the router, which answers JSON */
	evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
						    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
						    EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS |
						    EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
	evhttp_set_gencb(h->http, dispatch, h);
	evhttp_set_bevcb(h->http, connection_bev, h);
	h->sock = evhttp_bind_socket_with_handle(h->http, host, (ev_uint16_t)port);
	if (!h->sock) {
		snprintf(err, errlen, "cannot listen on %s:%d", host, port);
		evhttp_free(h->http);
		free(h);
		return NULL;
	}
	fd = evhttp_bound_socket_get_fd(h->sock);
	h->port = port;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			h->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return h;
}

void httpd_set_tls(struct httpd *h, struct tls *tls)
{
	h->tls = tls;
	over_tls = tls_server_on(tls);
}

bool httpd_over_tls(void)
{
	return over_tls;
}

void httpd_set_admin_gate(struct httpd *h, httpd_admin_gate gate, void *arg)
{
	h->gate = gate;
	h->gate_arg = arg;
}

/*
 * Whether name's raw value in query q holds "%00": evhttp decodes it into a
 * C string, so the value would end there unseen ("c-1%00zzz" as "c-1").
 * Names are compared as evhttp_find_header does (raw, any case).
 */
static bool encoded_nul(const char *q, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = q;; p++) {
		const char *end = strchrnul(p, '&'), *nul = strstr(p, "%00");

		if (strncasecmp(p, name, n) == 0 && p[n] == '=' && nul && nul < end)
			return true;
		if (!*end)
			return false;
		p = end;
	}
}

char *httpd_query(struct evhttp_request *req, const char *name, bool *bad)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
	struct evkeyvalq kv;
	const char *v;
	char *out = NULL;

	*bad = false;
	if (!q || !*q)
		return NULL;
	TAILQ_INIT(&kv);
	if (evhttp_parse_query_str(q, &kv) != 0) {
		*bad = true;
		evhttp_clear_headers(&kv);
		return NULL;
	}
	v = evhttp_find_header(&kv, name);
	for (struct evkeyval *e = TAILQ_FIRST(&kv); e; e = TAILQ_NEXT(e, next))
		if (e->value != v && strcmp(e->key, name) == 0)
			*bad = true; /* twice: which one was meant? */
	if (v && encoded_nul(q, name))
		*bad = true;
	if (v && !*bad) {
		out = strdup(v);
		if (!out)
			abort();
	}
	evhttp_clear_headers(&kv);
	return out;
}

void httpd_peer_addr(struct evhttp_request *req, char *out, size_t outlen)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	char *addr = NULL;
	ev_uint16_t port;

	if (evcon)
		evhttp_connection_get_peer(evcon, &addr, &port);
	snprintf(out, outlen, "%s", addr ? addr : "");
}

void httpd_stop_accepting(struct httpd *h)
{
	if (h->sock) {
		evhttp_del_accept_socket(h->http, h->sock);
		h->sock = NULL;
	}
}

void httpd_free(struct httpd *h)
{
	if (!h)
		return;
	evhttp_free(h->http);
	free(h);
}

int httpd_in_flight(const struct httpd *h)
{
	return in_flight;
}

int httpd_port(const struct httpd *h)
{
	return h->port;
}
