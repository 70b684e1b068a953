/*
 * mq_link: one AMQP 0-9-1 connection to RabbitMQ, run on its own thread.
 *
 * Why a thread. The client library is Debian's rabbitmq-c 0.11
 * (librabbitmq-dev), which has no asynchronous API: login, declarations,
 * basic.qos and confirm.select are blocking RPCs; amqp_basic_publish blocks
 * with no timeout while the socket buffer is full (broker flow control, a
 * memory alarm), and 0.11 can wait forever in a publish when a heartbeat is
 * overdue (fixed upstream in 0.14). Heartbeats are also only served inside
 * library calls. None of that may happen on the event loop that serves HTTP
 * and libpq, so the connection lives on a thread of its own and nothing else
 * touches it. The loop and the thread exchange struct mq_msg records through
 * two mutex-protected lists, each signalled by an eventfd: the loop's
 * eventfd is watched by libevent (mq_link_fd), the thread's by poll(2)
 * together with the socket. The thread reads without blocking (a zero
 * timeout, draining while amqp_frames_enqueued/amqp_data_in_buffer say more
 * is buffered) and wakes at least every HEARTBEAT_S/2 to serve heartbeats.
 *
 * What the thread does: connect with backoff (100 ms doubling to 5 s, with
 * jitter; mq_setup.h; with several nodes in the URL, each of them in turn
 * before waiting, and after a lost connection the next node first; amqps://
 * over TLS, whose OpenSSL objects therefore live and die on this thread
 * only), declare the topology of docs/protocol.md (exchange pgsaga direct,
 * quorum queues pgsaga.<service> dead-lettering to the fanout pgsaga.dead,
 * bound to queue pgsaga.dead; what the broker user may declare, see
 * mq_setup.h), open channel 1 with publisher confirms, basic.qos
 * prefetch and a consumer on the service's own queue. Publishes are mandatory
 * and persistent, at most `window` unconfirmed at once; each comes back to
 * the loop as MQ_CONFIRMED with ok set only on the broker's basic.ack of a
 * message that was not returned. A nack, a basic.return, or losing the
 * connection with the message unconfirmed come back with ok false and the
 * reason. NACKS_MAX publishes to one destination nacked in a row (mq_link.c)
 * drop the connection as a lost one is. A publish the broker has not
 * confirmed within confirm_timeout_ms comes back failed too ("no confirm
 * ..."; a quorum queue without a majority holds its confirms for as long as
 * that lasts, and would otherwise fill the window and stop every publish),
 * and counts toward NACKS_MAX as a nack does; a confirm that comes later is
 * ignored, and the outbox's next attempt is a duplicate the receiver's inbox
 * absorbs. While the broker has blocked the connection (connection.blocked),
 * publishes wait on the thread, and the time blocked does not count.
 *
 * Deliveries come to the loop as MQ_DELIVERY and are settled with
 * mq_link_settle; a settlement for a delivery of an earlier connection is
 * dropped (the broker requeued it when that connection died).
 *
 * Ownership: a struct mq_msg is malloc'd by whoever creates it; passing it
 * to mq_link_publish gives it to the link; mq_link_take gives the loop the
 * records that came back (publishes, deliveries, state changes), which the
 * loop frees with free().
 */
#ifndef PGSAGA_MQ_LINK_H
#define PGSAGA_MQ_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

enum mq_kind {
	MQ_CONFIRMED, /* a publish, back from the broker: see ok, error */
	MQ_DELIVERY,  /* a message from the service's queue */
	MQ_STATE,     /* the connection came up or went down, was blocked or not */
};

struct mq_msg {
	struct mq_msg *next;
	enum mq_kind kind;
	/* MQ_CONFIRMED: the publish */
	void *token;           /* the caller's, untouched */
	bool ok;
	char error[256];
	struct timespec sent;  /* CLOCK_MONOTONIC, when written to the socket */
	/* MQ_DELIVERY */
	uint64_t generation, tag;
	bool redelivered;
	long delivery_count;   /* x-delivery-count of a quorum queue, 0 first */
	/* MQ_STATE */
	bool up, blocked;
	char node[80];         /* "host:port" of the node connected to, or tried next */
	/* publish and delivery */
	char id[64], type[64], dest[64], traceparent[64];
	size_t len;
	char body[]; /* len bytes and a NUL */
};

/* A record for a publish or a delivery with room for len bytes of body. */
struct mq_msg *mq_msg_new(size_t len);

enum mq_settle { MQ_ACK, MQ_REJECT /* no requeue: dead letter */, MQ_REQUEUE };

struct mq_link_opts {
	const char *url;       /* amqp[s]://user:pass@host:port/vhost, or several
				* nodes of one cluster (mq_nodes.h); copied */
	const char *service;   /* app_id, and the queue consumed: pgsaga.<service> */
	/* the destinations' names, NULL-terminated: their queues are declared
	 * too (the service's own always is) */
	const char *const *queues;
	int prefetch;
	int window;            /* unconfirmed publishes at most */
	int confirm_timeout_ms; /* a publish not confirmed by then failed (0: never) */
	/* amqps:// only (copied; NULL or "": unset): see mq_setup.h */
	const char *tls_ca, *tls_cert, *tls_key;
};

struct mq_link;

/*
 * Validates the URL and starts the thread (which connects by itself).
 * Returns NULL with a reason in err.
 */
struct mq_link *mq_link_new(const struct mq_link_opts *o, char *err, size_t errlen);

/* The i-th node of AMQP_URL as "host:port", NULL past the last (fixed for
 * the link's life: any thread may ask). */
const char *mq_link_node(const struct mq_link *l, size_t i);

/* Readable when records are waiting for mq_link_take. */
int mq_link_fd(const struct mq_link *l);

/* All records that came back, oldest first (a list through next), or NULL. */
struct mq_msg *mq_link_take(struct mq_link *l);

/* Publishes m (id, type, dest, traceparent, body) to exchange pgsaga. */
void mq_link_publish(struct mq_link *l, struct mq_msg *m);

void mq_link_settle(struct mq_link *l, uint64_t generation, uint64_t tag, enum mq_settle how);

/*
 * A destination more (name copied): its queue pgsaga.<name> is declared as
 * the others' are, now when connected and at every connection from then on.
 * The thread declares it before it publishes anything handed to it after
 * this call.
 */
void mq_link_add_queue(struct mq_link *l, const char *name);

/* Stops consuming; the connection stays for publishes and settlements. */
void mq_link_pause_consuming(struct mq_link *l);

/*
 * SIGHUP: the thread reads the TLS files again now (it does at every
 * connection attempt too), for the connections it makes next; the one open
 * stays. Files that do not load leave the last ones that did in use, logged
 * at level error with the file's name.
 */
void mq_link_reload_tls(struct mq_link *l);

/*
 * Closes the connection once nothing waits to be sent or settled (or at
 * once when the broker is gone), joins the thread and frees everything;
 * records not yet taken are freed unread.
 */
void mq_link_free(struct mq_link *l);

#endif
