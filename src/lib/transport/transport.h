/*
 * transport: how a message travels, seen from its two ends.
 *
 * Everything that makes delivery safe is shared and does not know the
 * transport: the outbox (claiming, leases, backoff, dead letters), the
 * receivers' one transaction (inbox + effect + outbox) and the state guards.
 * Only two things differ, and they meet here:
 *
 *  - sending one outbox row: struct transport, behind which sit
 *    transport_http.c (a POST to the peer, through httpc and its breaker)
 *    and transport_amqp.c (a confirmed, mandatory publish to the broker);
 *  - a message that arrived: struct inmsg, a handle that a service's handler
 *    reads (body, traceparent) and answers once with an HTTP-like status.
 *    Over HTTP the status is the reply; over AMQP 2xx acknowledges the
 *    delivery, 400/404 reject it without requeue (it can never succeed: it
 *    goes to the dead-letter queue) and anything else has it delivered again
 *    after a delay.
 *
 * Both are small values or caller-embedded structs, so the HTTP path costs
 * no allocation and no hop more than calling httpc/httpd directly.
 */
#ifndef PGSAGA_TRANSPORT_H
#define PGSAGA_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "delivery_policy.h"

struct event_base;
struct evhttp_request;
struct httpc_peer;

struct inmsg;
/*
 * A service's handler for messages of one kind ("commands" on payment and
 * inventory, "events" on the orchestrator): type is the message's type,
 * borrowed for the call. Both the HTTP route and the AMQP consumer call it.
 */
typedef void (*inmsg_fn)(struct inmsg m, const char *type);

/* --- sending ------------------------------------------------------------ */

/* One outbox row. Strings are borrowed for the call of transport_send. */
struct transport_msg {
	const char *id;      /* message_id */
	const char *kind;    /* "command" or "event" */
	const char *dest;    /* destination service */
	const char *type;    /* "PayCommand", ... */
	const char *payload; /* the JSON body */
	size_t len;
	const char *trace;   /* a trace id (traceparent.h), or NULL */
};

struct transport_result {
	enum delivery_outcome outcome; /* delivery_policy.h */
	const char *error;  /* "HTTP 500", "connection refused", "returned: NO_ROUTE" */
	const char *where;  /* the instance or broker that was used; NULL: none */
	/* RETRYABLE: a delay the peer asked for (Retry-After), else -1;
	 * NOT_ATTEMPTED: when to try again, relative */
	int64_t delay_ms;
};

struct transport_send;
/* r and its strings are valid during the callback only. */
typedef void (*transport_cb)(struct transport_send *s, const struct transport_result *r);

/*
 * Embedded by the caller in its own per-message struct (container_of), so
 * sending allocates nothing; owned by the transport from transport_send
 * until cb, which runs exactly once and never from inside transport_send.
 */
struct transport_send {
	transport_cb cb;
	uint64_t tag; /* the transport's own use */
	struct transport_send *next;
};

struct transport;
struct transport_ops {
	void (*send)(struct transport *t, const struct transport_msg *m, struct transport_send *s);
	/* Nothing sent and not yet called back, no delivery unanswered. */
	bool (*idle)(const struct transport *t);
	/* For /readyz: "broker":"up" or "down"; NULL when it has no broker. */
	const char *(*broker_state)(const struct transport *t);
	/* Shutting down: take no new messages in (sending goes on). */
	void (*stop)(struct transport *t);
	void (*free)(struct transport *t);
	/* The circuit toward dest, as breaker_state_name() says it (admin API). */
	const char *(*breaker)(const struct transport *t, const char *dest);
	/* For /readyz: the broker node in use ("host:port"), or NULL (none, or
	 * no broker); the member may be NULL too. */
	const char *(*broker_node)(const struct transport *t);
	/* SIGHUP: read the TLS files again for new connections; NULL: nothing
	 * of its own to read (HTTP's contexts are tls.c's). */
	void (*reload_tls)(struct transport *t);
};
struct transport {
	const struct transport_ops *ops;
};

static inline void transport_send(struct transport *t, const struct transport_msg *m,
				  struct transport_send *s)
{
	t->ops->send(t, m, s);
}

/*
 * HTTP: POST /commands/{type} or /events/{type} to the destination's peer,
 * with Authorization: Bearer token and a traceparent for a new span.
 * dests[i] names peers[i] (the names are copied, the peers and token
 * borrowed). A message to a destination it does not know is refused
 * (a dead letter, "<dest>: unknown destination").
 */
struct transport *transport_http_new(const char *const *dests, struct httpc_peer *const *peers,
				     size_t n, const char *token);

/*
 * One destination more, at run time (service_destination_add): dest (copied)
 * served by peer (borrowed, must outlive the transport), or, peer NULL, a
 * destination that has no URL: every message to it is refused at once with
 * error missing (copied; "SHIPPING_URL is not set") and no instance, so its
 * last_error is that text alone. dest must not be known yet.
 */
void transport_http_add(struct transport *t, const char *dest, struct httpc_peer *peer,
			const char *missing);

/* --- receiving ---------------------------------------------------------- */

struct inmsg_ops {
	const char *(*body)(void *h, size_t *len);
	const char *(*traceparent)(void *h); /* NULL when absent */
	/* The one answer. json is borrowed for the call. */
	void (*reply)(void *h, int status, const char *json);
	void (*error)(void *h, int status, const char *code, const char *message);
	void (*unavailable)(void *h); /* the database: try again later */
	/* The effect committed but the answer is lost (fault injection). */
	void (*drop)(void *h);
	const char *(*id)(void *h); /* the transport's message id, or NULL */
};

/* A message that arrived; passed by value, h owned by the transport. */
struct inmsg {
	const struct inmsg_ops *ops;
	void *h;
};

struct inmsg inmsg_http(struct evhttp_request *req);

static inline const char *inmsg_body(struct inmsg m, size_t *len)
{
	return m.ops->body(m.h, len);
}

static inline const char *inmsg_traceparent(struct inmsg m)
{
	return m.ops->traceparent(m.h);
}

static inline void inmsg_reply(struct inmsg m, int status, const char *json)
{
	m.ops->reply(m.h, status, json);
}

static inline void inmsg_unavailable(struct inmsg m)
{
	m.ops->unavailable(m.h);
}

static inline void inmsg_drop(struct inmsg m)
{
	m.ops->drop(m.h);
}

/* Answers {"error":{"code":code,"message":...}} with status. */
void inmsg_error(struct inmsg m, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * The generic database failure as the answer to a message: 503 with
 * Retry-After for DB_UNAVAILABLE (HTTP; over AMQP, delivered again later),
 * else 500, logged once here with what.
 */
struct db_error;
void inmsg_db_error(struct inmsg m, const struct db_error *err, const char *what);
/* The same for an HTTP request: inmsg_db_error(inmsg_http(req), ...). */
void reply_db_error(struct evhttp_request *req, const struct db_error *err, const char *what);


#endif
