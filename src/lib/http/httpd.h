/*
 * httpd: the HTTP server side on evhttp: a route table, the JSON error
 * envelope, the 64 KiB body limit and the bearer-token check.
 *
 * Every request that reaches a handler must be answered exactly once with
 * httpd_reply/httpd_error, also when the answer comes later from a database
 * callback and the client has gone meanwhile (evhttp detaches such a request
 * from its connection and frees it when it is answered).
 */
#ifndef PGSAGA_HTTPD_H
#define PGSAGA_HTTPD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct evhttp_request;
struct evbuffer;
struct tls;

#define HTTPD_MAX_BODY (64 * 1024)

/*
 * tail: the rest of the path after a prefix route ("" for exact routes),
 * NUL-terminated, borrowed for the call.
 */
typedef void (*httpd_fn)(struct evhttp_request *req, void *svc, const char *tail);

/*
 * Admin routes exist only while an admin gate is set (ADMIN_TOKEN); without
 * one they answer 404 like any unknown path. The gate runs before the
 * handler: it adds the admin answers' security headers and, for
 * HTTPD_ADMIN_AUTH, checks the credential (see admin_gate.h).
 */
enum httpd_admin {
	HTTPD_ADMIN_NONE = 0, /* an ordinary route */
	HTTPD_ADMIN_OPEN,     /* admin route without credential: sign-in, console files */
	HTTPD_ADMIN_AUTH,     /* admin route that needs the admin credential */
};

struct httpd_route {
	const char *method; /* "GET" (which serves HEAD too), "POST" */
	const char *path;   /* exact path, or a prefix when it ends with '/' */
	/*
	 * Needs Authorization: Bearer $INTERNAL_TOKEN (else 401) and, when the
	 * server checks client certificates, one that verified (else 403
	 * client_certificate_required).
	 */
	bool internal;
	httpd_fn fn;
	const char *name;   /* route label in metrics, e.g. "/orders/{id}" */
	enum httpd_admin admin;
};

/*
 * Runs before an admin route's handler. Returns true to go on; false when it
 * has answered the request itself (401, 403, 429).
 */
typedef bool (*httpd_admin_gate)(struct evhttp_request *req, void *arg, bool need_auth);

struct httpd;

/*
 * Binds host:port and serves routes (borrowed for the server's life).
 * token is the INTERNAL_TOKEN (borrowed). Returns NULL with a reason in err.
 */
struct httpd *httpd_new(struct event_base *base, const char *host, int port,
			const struct httpd_route *routes, size_t nroutes, const char *token,
			void *svc, char *err, size_t errlen);
/*
 * Serves HTTPS only when tls has a certificate (tls_server_on), and checks
 * client certificates on internal routes when it has a client CA. Call
 * before the loop runs; tls is borrowed for the server's life and may be
 * reloaded meanwhile (new connections take the new contexts).
 */
void httpd_set_tls(struct httpd *h, struct tls *tls);
/*
 * The process's server speaks HTTPS: every answer carries
 * Strict-Transport-Security, and cookies should be Secure.
 */
bool httpd_over_tls(void);
/* Turns the admin routes on (gate not NULL) or off (NULL: they answer 404). */
void httpd_set_admin_gate(struct httpd *h, httpd_admin_gate gate, void *arg);
/* Stops accepting new connections; requests in flight still get answers. */
void httpd_stop_accepting(struct httpd *h);
void httpd_free(struct httpd *h);
/* Requests handed to a handler and not answered yet. */
int httpd_in_flight(const struct httpd *h);
/* The port actually bound (useful with port 0). */
int httpd_port(const struct httpd *h);

/*
 * Answers with a JSON body (copied) and the given status. A HEAD gets the
 * headers of the GET it stands for, Content-Length included, and no body.
 */
void httpd_reply(struct evhttp_request *req, int status, const char *json);
/* Same, draining body (an evbuffer the caller keeps and frees). */
void httpd_reply_buf(struct evhttp_request *req, int status, struct evbuffer *body);
/* Answers {"error":{"code":code,"message":...}}. */
void httpd_error(struct evhttp_request *req, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/*
 * Closes the request's connection without answering (fault injection:
 * "the response was lost"). Counts as the request's one answer.
 */
void httpd_drop(struct evhttp_request *req);

/* 503 database_unavailable with Retry-After. */
void httpd_unavailable(struct evhttp_request *req);

/*
 * The request body as one contiguous NUL-terminated buffer (borrowed from
 * the request). len excludes the NUL.
 */
const char *httpd_body(struct evhttp_request *req, size_t *len);

/* A request header (the first, when repeated), or NULL. */
const char *httpd_header(struct evhttp_request *req, const char *name);
/* How many times the request carries header name (any case). */
int httpd_header_count(struct evhttp_request *req, const char *name);

/* The value of query parameter name in the request's URI (decoded, malloc'd: the
 * caller frees), or NULL when absent. *bad is set (and NULL returned) when the
 * query cannot be parsed, holds an encoded NUL (%00) anywhere, or names the
 * parameter more than once. */
char *httpd_query(struct evhttp_request *req, const char *name, bool *bad);

/* The client's address as text ("" when unknown). */
void httpd_peer_addr(struct evhttp_request *req, char *out, size_t outlen);

/*
 * An Idempotency-Key header value: 1-255 visible ASCII characters, taken
 * byte for byte (docs/protocol.md: "abc" with its quotes is another key than abc).
 * Copies it into out (outlen >= 256) and returns true when valid.
 */
bool httpd_idempotency_key(const char *h, char *out, size_t outlen);

#endif
