/*
 * httpc: HTTP client to a peer service (one or more instances), on evhttp.
 *
 * Each instance keeps up to max_in_flight keep-alive connections, each
 * carrying one request at a time; requests beyond that wait in a FIFO.
 * Instances are tried in turn; one whose circuit breaker is open is skipped.
 * There is no retry inside a request: the caller (the outbox) owns retrying.
 */
#ifndef PGSAGA_HTTPC_H
#define PGSAGA_HTTPC_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct httpc_peer;
struct tls;

struct httpc_opts {
	int max_in_flight;    /* per instance */
	int timeout_ms;       /* one attempt */
	int breaker_failures; /* consecutive failures that open the circuit */
	int breaker_open_ms;
	/*
	 * For https:// URLs (borrowed, may be reloaded meanwhile); NULL refuses
	 * them. Over TLS a connection is made anew after it closed, resuming
	 * the instance's TLS session, and a handshake that fails is a failed
	 * attempt with the reason as error ("certificate verify failed (...)").
	 */
	struct tls *tls;
};

struct httpc_result {
	int status;             /* HTTP status; 0 when no answer came */
	const char *error;      /* why, when status is 0 (or "circuit open") */
	int64_t retry_after_ms; /* from a Retry-After header, else -1 */
	int64_t not_before_ms;  /* circuit open: earliest retry, relative; else 0 */
	const char *instance;   /* the base URL that was used (borrowed) */
	const char *body;       /* the answer's body, NUL-terminated ("" when none) */
	size_t body_len;
};

/* r and its strings are valid during the callback only. */
typedef void (*httpc_cb)(void *arg, const struct httpc_result *r);

/*
 * name: the peer's name for logs and metrics (borrowed). urls: comma-separated
 * base URLs "http://host:port" or "https://host:port" (copied). Returns NULL
 * with a reason in err.
 */
struct httpc_peer *httpc_peer_new(struct event_base *base, const char *name, const char *urls,
				  const struct httpc_opts *opts, char *err, size_t errlen);
void httpc_peer_free(struct httpc_peer *p);

/*
 * POSTs body (copied) as application/json to path on one instance, with the
 * extra headers given as a NULL-terminated list of name, value pairs.
 * Exactly one callback follows, never from inside this call.
 */
void httpc_post(struct httpc_peer *p, const char *path, const char *body, size_t len,
		const char *const *headers, httpc_cb cb, void *arg);

/* The same with any method ("GET": body may be NULL). */
void httpc_request(struct httpc_peer *p, const char *method, const char *path, const char *body,
		   size_t len, const char *const *headers, httpc_cb cb, void *arg);

/*
 * The peer's circuit as one word: "closed" while some instance takes
 * traffic, else "half_open" when one may be probed now, else "open".
 */
const char *httpc_breaker_state(const struct httpc_peer *p);

/* Requests sent or queued and not yet called back. */
int httpc_pending(const struct httpc_peer *p);
const char *httpc_name(const struct httpc_peer *p);

#endif
