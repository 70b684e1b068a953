/*
 * outbox: the dispatcher that delivers a schema's outbox_messages.
 *
 * It wakes on NOTIFY (rows written by someone else), on outbox_kick() (rows
 * this process committed itself, so the NOTIFY can be left out), on a timer
 * (retries falling due, and anything a lost notification left behind) and
 * after its LISTEN connection (re)connects. Each round claims up to batch due
 * rows with FOR UPDATE SKIP LOCKED, pushing their next_attempt_at a lease
 * ahead instead of holding a transaction across the delivery; a dispatcher
 * that dies leaves its rows to be claimed again when the lease runs out.
 * Rows are delivered concurrently through a transport (transport.h: HTTP or
 * AMQP); successes are marked processed in batches.
 *
 * Delivery marks (processed_at) wait in memory for a window: the first
 * mark starts it, and mark_window_ms later every mark waiting (up to 256
 * per statement) goes out in one statement (outbox_ack, asynchronous
 * commit), off the path of the sagas; all waiting marks go out once the
 * outbox stops. A mark is never needed promptly: until it commits the row
 * stays claimed for its lease, and a mark lost in a crash only brings a
 * redelivery the receiver deduplicates.
 *
 * Delivery policy, whatever the transport: delivery_policy.h decides what a
 * failed attempt becomes (a retry after a backoff or the peer's Retry-After,
 * a dead letter, or, when an open circuit held it back, a retry that is not
 * counted as an attempt). The wake-up for a retry is armed once its failure
 * mark has committed, so it never comes before the row is due.
 */
#ifndef PGSAGA_OUTBOX_H
#define PGSAGA_OUTBOX_H

#include <stdbool.h>

#include "db.h"

struct event_base;
struct outbox;
struct transport;

struct outbox_opts {
	const char *schema;      /* its outbox; LISTEN channel <schema>_outbox */
	const char *conninfo;    /* for the LISTEN connection */
	int batch;               /* rows per claim */
	int max_attempts;
	int base_ms, cap_ms;     /* backoff */
	int lease_ms;
	int sweep_ms;            /* timer sweep */
	int retention_s;         /* processed rows and inbox rows kept this long */
	int mark_window_ms;      /* how long the first waiting delivery mark waits */
};

/*
 * opts is copied; the strings it points to and transport are borrowed and
 * must outlive the outbox.
 */
struct outbox *outbox_new(struct event_base *base, struct db_pool *pool,
			  const struct outbox_opts *opts, struct transport *transport);

/* Wake the dispatcher: this process just committed an outbox row. */
void outbox_kick(struct outbox *ob);

/*
 * Delivers a row this process has just committed with next_attempt_at a
 * lease ahead (outbox_lease_ms): the writer claims its own rows at birth, so
 * the hot path needs no claiming statement and no wake-up. If the process
 * dies first, the row is delivered by whoever sweeps after the lease.
 * The strings are copied.
 */
void outbox_send(struct outbox *ob, const char *id, const char *kind, const char *dest,
		 const char *type, const char *payload, const char *trace);

/* The lease, as text for a statement parameter (milliseconds). */
const char *outbox_lease_ms(const struct outbox *ob);

/* Stop claiming; deliveries in flight finish and their marks are written. */
void outbox_stop(struct outbox *ob);
/* True once stopped and nothing is in flight. */
bool outbox_idle(const struct outbox *ob);

void outbox_free(struct outbox *ob);

#endif
