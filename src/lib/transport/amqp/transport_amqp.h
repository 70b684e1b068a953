/*
 * transport_amqp: the RabbitMQ transport behind struct transport (see
 * transport.h), the only part of pgsaga that links librabbitmq.
 */
#ifndef PGSAGA_TRANSPORT_AMQP_H
#define PGSAGA_TRANSPORT_AMQP_H

#include "transport.h"

/* A message a receiver refused for good: what transport_amqp_opts.refused keeps. */
struct transport_refusal {
	const char *id;   /* the message_id property, as it came ("" when absent) */
	const char *type; /* the type property ("" when absent) */
	const char *body; /* len bytes, NUL-terminated */
	size_t len;
	int status;       /* the handler's answer */
	const char *why;  /* and its text */
};

struct transport_amqp_opts {
	const char *url, *service;
	/* where it sends (the peers), ndests of them: their queues are declared too */
	const char *const *dests;
	size_t ndests;
	int prefetch;
	int confirm_timeout_ms; /* mq_link_opts */
	const char *tls_ca, *tls_cert, *tls_key; /* amqps:// (NULL or "": unset) */
	int breaker_failures, breaker_open_ms;
	int retry_base_ms, retry_cap_ms; /* a delivery that failed for now waits this */
	inmsg_fn consume;
	void (*on_up)(void *arg);
	/*
	 * A delivery refused for good (a 4xx answer) is handed here before it is
	 * rejected into pgsaga.dead, so that the service keeps it where operators
	 * look (a dead letter of its own outbox); the call ends with
	 * done(tok, retry): retry asks for the delivery again later (the record
	 * could not be written for now), else it is rejected. NULL: rejected at
	 * once.
	 */
	void (*refused)(void *arg, const struct transport_refusal *r,
			void (*done)(void *tok, bool retry), void *tok);
	void *arg;
};
/*
 * AMQP (docs/protocol.md, "RabbitMQ"), through an mq_link thread (see mq_link.h for why):
 * publishes confirmed and mandatory, a breaker per destination as over
 * HTTP; deliveries of pgsaga.<service> handed to consume. on_up(arg) runs
 * each time the broker connection comes up (the outbox sweeps then).
 * o is copied; the names in dests are copied, service must outlive the
 * transport, the other strings are borrowed for the call only. Returns NULL
 * with a reason in err.
 */
struct transport *transport_amqp_new(struct event_base *base, const struct transport_amqp_opts *o,
				     char *err, size_t errlen);

/*
 * One destination more, at run time (service_destination_add): dest
 * (copied) is sent to with routing key dest, and its queue pgsaga.<dest> is
 * declared before the first publish to it (mq_link_add_queue), and again at
 * every connection. A known one is left as it is.
 */
void transport_amqp_add_dest(struct transport *t, const char *dest);


#endif
