/* outbox: see outbox.h. */
#include "outbox.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backoff.h"
#include "db.h"
#include "delivery_policy.h"
#include "transport.h"
#include "log.h"
#include "metrics.h"
#include "uuid.h"

#define ACK_MAX 256 /* ids per "processed" statement */

/* Both commit asynchronously: see outbox_claim and outbox_ack in SQL. */
static const char claim_sql[] = "SELECT * FROM outbox_claim($1::int, $2::int)";

static const char ack_sql[] = "SELECT outbox_ack($1::uuid[])";

/* $2 attempts to add, $3 delay, $4 dead, $5 error */
static const char fail_sql[] =
	"UPDATE outbox_messages"
	"   SET attempt_count = attempt_count + $2::int,"
	"       next_attempt_at = now() + $3::bigint * interval '1 millisecond',"
	"       dead_at = CASE WHEN $4::bool THEN now() END, last_error = $5"
	" WHERE message_id = $1";

/* For the gauges; the partial indexes keep it cheap. */
static const char stats_sql[] =
	"SELECT (SELECT count(*) FROM outbox_messages"
	"         WHERE processed_at IS NULL AND dead_at IS NULL),"
	"       (SELECT count(*) FROM outbox_messages WHERE dead_at IS NOT NULL),"
	"       coalesce((SELECT extract(epoch FROM now() - min(created_at))"
	"                   FROM outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL),"
	"                0)";

static const char purge_sql[] = "SELECT purge_processed($1::int * interval '1 second', 500)";

struct delivery {
	struct transport_send send; /* the transport's, until delivered() */
	struct outbox *ob;
	char id[UUID_STR_LEN];
	char type[64];
	int attempts; /* before this one */
	struct timespec start;
	struct metric_series *latency;
	char peer[64]; /* a destination's name: up to 63 characters */
};

struct outbox {
	struct event_base *base;
	struct db_pool *pool;
	struct db_listen *listen;
	struct outbox_opts o;
	char lease[16];
	struct transport *transport;
	bool claiming, again, stopping;
	bool more;         /* the last claim stopped short: due rows may remain */
	int in_flight;     /* deliveries sent, not yet marked */
	int asked;         /* rows the claim out asked for */
	int marking;       /* fail/ack statements out */
	struct event *timer;
	struct event *purge_timer;
	char (*acks)[UUID_STR_LEN]; /* delivered, not yet marked processed */
	int nacks, acks_cap;
	bool acking;
	struct event *ack_ev;       /* fires mark_window_ms after the first unsent mark */
	struct metric_family *attempts_total, *latency;
	struct event *stats_timer;
	bool stats_running;
	struct metric_series *pending, *dead, *oldest;
};

static void claim(struct outbox *ob);

static void wake_in(struct outbox *ob, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };
	struct timeval left;

	/* keep the earlier of the pending wake-up and this one */
	if (evtimer_pending(ob->timer, &left)) {
		struct timeval now, want;

		event_base_gettimeofday_cached(ob->base, &now);
		evutil_timeradd(&now, &tv, &want);
		if (evutil_timercmp(&left, &want, <=))
			return;
	}
	evtimer_add(ob->timer, &tv);
}

void outbox_kick(struct outbox *ob)
{
	if (ob->stopping)
		return;
	if (ob->claiming) {
		ob->again = true;
		return;
	}
	claim(ob);
}

static void kick_cb(void *arg)
{
	outbox_kick(arg);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct outbox *ob = arg;

	wake_in(ob, ob->o.sweep_ms);
	outbox_kick(ob);
}

static void mark_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct outbox *ob = arg;

	ob->marking--;
	if (err->status != DB_OK)
		log_warn("outbox: marking a delivery failed (%s); the lease will retry it",
			 err->message);
}

static void flush_acks(struct outbox *ob);
static void marks_waiting(struct outbox *ob);

static void ack_ev_cb(evutil_socket_t fd, short what, void *arg)
{
	flush_acks(arg);
}

static void ack_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct outbox *ob = arg;

	ob->acking = false;
	mark_done(ob, res, err);
	/* more than one statement's worth, or marks that came meanwhile */
	if (ob->nacks >= ACK_MAX || ob->stopping)
		flush_acks(ob);
	else if (ob->nacks > 0)
		marks_waiting(ob);
}

/* The text of n marks as a uuid[] literal: '{' n ids ',' between '}' NUL. */
#define MARKS_LEN(n) ((size_t)(n) * UUID_STR_LEN + 2)

/*
 * Takes up to ACK_MAX waiting marks off the queue into buf (MARKS_LEN of
 * them at least) as "{id,id,...}"; returns how many (0: buf untouched).
 */
static int take_marks(struct outbox *ob, char *buf)
{
	char *p = buf;
	int n = ob->nacks < ACK_MAX ? ob->nacks : ACK_MAX;

	if (n == 0)
		return 0;
	*p++ = '{';
	for (int i = 0; i < n; i++) {
		memcpy(p, ob->acks[ob->nacks - n + i], UUID_STR_LEN - 1);
		p += UUID_STR_LEN - 1;
		*p++ = i + 1 < n ? ',' : '}';
	}
	*p = '\0';
	ob->nacks -= n;
	return n;
}

static void queue_mark(struct outbox *ob, const char *id)
{
	if (ob->nacks == ob->acks_cap) {
		ob->acks_cap = ob->acks_cap ? 2 * ob->acks_cap : ACK_MAX;
		ob->acks = realloc(ob->acks, (size_t)ob->acks_cap * UUID_STR_LEN);
		if (!ob->acks)
			abort();
	}
	memcpy(ob->acks[ob->nacks], id, UUID_STR_LEN - 1);
	ob->acks[ob->nacks++][UUID_STR_LEN - 1] = '\0';
}

/*
 * Marks are waiting: the window's first starts the window, whose end sends
 * them all in one statement. Once stopping, nothing waits.
 */
static void marks_waiting(struct outbox *ob)
{
	if (ob->stopping) {
		flush_acks(ob);
		return;
	}
	if (!ob->acking && !evtimer_pending(ob->ack_ev, NULL)) {
		struct timeval tv = { ob->o.mark_window_ms / 1000,
				      (suseconds_t)(ob->o.mark_window_ms % 1000) * 1000 };

		evtimer_add(ob->ack_ev, &tv);
	}
}

/* One statement marks every delivery that finished since the last one. */
static void flush_acks(struct outbox *ob)
{
	char buf[MARKS_LEN(ACK_MAX)];

	if (ob->acking || take_marks(ob, buf) == 0)
		return;
	ob->acking = true;
	ob->marking++;
	const char *params[1] = { buf };
	db_query(ob->pool, ack_sql, 1, params, ack_done, ob);
}

/* A failure mark out: once it commits, the wake for the retry is armed. */
struct fail_mark {
	struct outbox *ob;
	int64_t delay_ms; /* -1: a dead letter, nothing to wake for */
};

static void fail_marked(void *arg, PGresult *res, const struct db_error *err)
{
	struct fail_mark *fm = arg;
	struct outbox *ob = fm->ob;

	/*
	 * Armed now, not when the attempt failed: next_attempt_at is now() of
	 * the mark's transaction, which starts after the failure, so a wake
	 * armed at the failure fired just before the row fell due and the retry
	 * waited for the next sweep (a peer's "Retry-After: 1" became 2 s).
	 * From the commit on, delay_ms later is never early.
	 */
	if (err->status == DB_OK && fm->delay_ms >= 0 && !ob->stopping)
		wake_in(ob, fm->delay_ms);
	free(fm);
	mark_done(ob, res, err);
}

static void delivered(struct transport_send *s, const struct transport_result *r)
{
	struct delivery *d = (struct delivery *)s;
	struct outbox *ob = d->ob;
	const struct delivery_policy policy = { ob->o.max_attempts, ob->o.base_ms, ob->o.cap_ms };
	struct timespec end;
	char labels[160];
	const char *outcome;
	struct delivery_decision dd;

	clock_gettime(CLOCK_MONOTONIC, &end);
	ob->in_flight--;
	dd = delivery_policy_decide(&policy, r->outcome, d->attempts, r->delay_ms,
				    (int64_t)end.tv_sec * 1000 + end.tv_nsec / 1000000,
				    backoff_random);
	if (dd.next == DELIVERY_DONE) {
		outcome = "ok";
		metric_observe(d->latency, (double)(end.tv_sec - d->start.tv_sec) +
						   (double)(end.tv_nsec - d->start.tv_nsec) / 1e9);
		queue_mark(ob, d->id);
		marks_waiting(ob);
	} else {
		char delay_s[32], add_s[4], err_s[300];
		bool dead = dd.next == DELIVERY_DEAD;
		struct fail_mark *fm = malloc(sizeof(*fm));

		if (!fm)
			abort();
		outcome = dead ? "dead" : dd.reason == DELIVERY_CIRCUIT_OPEN ? "circuit_open" : "retry";
		if (r->where)
			snprintf(err_s, sizeof(err_s), "%s: %s", r->where, r->error);
		else
			snprintf(err_s, sizeof(err_s), "%s", r->error);
		snprintf(delay_s, sizeof(delay_s), "%" PRId64, dd.delay_ms);
		snprintf(add_s, sizeof(add_s), "%d", dd.attempts);
		const char *params[5] = { d->id, add_s, delay_s, dead ? "true" : "false", err_s };
		struct log_ctx ctx = { .message_id = d->id, .peer = d->peer };

		LOG_AT(dead ? LOG_WARN : LOG_DEBUG, &ctx, "delivery of %s %s (%s): %s", d->type,
		       dead ? "dead-lettered" : "will be retried", delivery_reason_name(dd.reason),
		       err_s);
		fm->ob = ob;
		fm->delay_ms = dead ? -1 : dd.delay_ms;
		ob->marking++;
		db_query(ob->pool, fail_sql, 5, params, fail_marked, fm);
	}
	snprintf(labels, sizeof(labels), "peer=\"%s\",outcome=\"%s\"", d->peer, outcome);
	metrics_inc(ob->attempts_total, labels, 1);
	free(d);
	/*
	 * Room again: claim if the last claim had to leave due rows behind.
	 * Not after every delivery: rows this service writes are born claimed
	 * and sent from memory, and a claim that finds nothing still costs a
	 * statement (once per message, the most frequent one a service ran).
	 */
	if (ob->more)
		outbox_kick(ob);
}

/* Sends one message; its row is claimed (leased) already. */
static void deliver(struct outbox *ob, const char *id, const char *kind, const char *dest,
		    const char *type, const char *payload, size_t len, int attempts,
		    const char *trace)
{
	struct delivery *d = calloc(1, sizeof(*d));
	char l[80];
	const struct transport_msg m = { id, kind, dest, type, payload, len, trace };

	if (!d)
		abort();
	d->send.cb = delivered;
	d->ob = ob;
	snprintf(d->id, sizeof(d->id), "%s", id);
	snprintf(d->type, sizeof(d->type), "%s", type);
	snprintf(d->peer, sizeof(d->peer), "%s", dest);
	d->attempts = attempts;
	clock_gettime(CLOCK_MONOTONIC, &d->start);
	ob->in_flight++;
	snprintf(l, sizeof(l), "peer=\"%s\"", d->peer);
	d->latency = metrics_series(ob->latency, l);
	transport_send(ob->transport, &m, &d->send);
}

void outbox_send(struct outbox *ob, const char *id, const char *kind, const char *dest,
		 const char *type, const char *payload, const char *trace)
{
	deliver(ob, id, kind, dest, type, payload, strlen(payload), 0, trace);
}

static void claimed(void *arg, PGresult *res, const struct db_error *err)
{
	struct outbox *ob = arg;
	int n;

	ob->claiming = false;
	if (err->status != DB_OK) {
		if (err->status == DB_SQL_ERROR)
			log_error("outbox: claim failed: %s", err->message);
		return; /* the sweep or the reconnect tries again */
	}
	n = PQntuples(res);
	ob->more = n == ob->asked;
	for (int i = 0; i < n; i++)
		deliver(ob, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
			PQgetvalue(res, i, 3), PQgetvalue(res, i, 4),
			(size_t)PQgetlength(res, i, 4), atoi(PQgetvalue(res, i, 5)),
			db_val(res, i, 6));
	if ((n == ob->o.batch || ob->again) && !ob->stopping) {
		ob->again = false;
		outbox_kick(ob);
	}
}

static void claim(struct outbox *ob)
{
	char batch[16];
	int room = 4 * ob->o.batch - ob->in_flight;

	/* enough in flight already; each completion kicks again */
	if (room <= 0) {
		ob->more = true;
		return;
	}
	ob->asked = room < ob->o.batch ? room : ob->o.batch;
	snprintf(batch, sizeof(batch), "%d", ob->asked);
	const char *params[2] = { batch, ob->lease };

	ob->claiming = true;
	ob->again = false;
	db_query(ob->pool, claim_sql, 2, params, claimed, ob);
}

static void purge_cb(evutil_socket_t fd, short what, void *arg);

static void stats_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct outbox *ob = arg;

	ob->stats_running = false;
	if (err->status != DB_OK)
		return;
	metric_set(ob->pending, atof(PQgetvalue(res, 0, 0)));
	metric_set(ob->dead, atof(PQgetvalue(res, 0, 1)));
	metric_set(ob->oldest, atof(PQgetvalue(res, 0, 2)));
}

static void stats_cb(evutil_socket_t fd, short what, void *arg)
{
	struct outbox *ob = arg;

	if (ob->stats_running || ob->stopping)
		return;
	ob->stats_running = true;
	db_query(ob->pool, stats_sql, 0, NULL, stats_done, ob);
}

static void purged(void *arg, PGresult *res, const struct db_error *err)
{
	struct outbox *ob = arg;
	/* a full batch means more is waiting: come back soon, not in a minute */
	bool more = err->status == DB_OK && atoi(PQgetvalue(res, 0, 0)) >= 500;
	struct timeval tv = { more ? 0 : 60, more ? 100000 : 0 };

	if (err->status == DB_SQL_ERROR)
		log_warn("outbox: purge failed: %s", err->message);
	if (!ob->stopping)
		evtimer_add(ob->purge_timer, &tv);
}

static void purge_cb(evutil_socket_t fd, short what, void *arg)
{
	struct outbox *ob = arg;
	char s[16];

	snprintf(s, sizeof(s), "%d", ob->o.retention_s);
	const char *params[1] = { s };
	db_query(ob->pool, purge_sql, 1, params, purged, ob);
}

struct outbox *outbox_new(struct event_base *base, struct db_pool *pool,
			  const struct outbox_opts *opts, struct transport *transport)
{
	struct outbox *ob = calloc(1, sizeof(*ob));
	char channel[80];
	struct timeval purge_first = { 5, 0 };

	if (!ob)
		return NULL;
	ob->base = base;
	ob->pool = pool;
	ob->o = *opts;
	snprintf(ob->lease, sizeof(ob->lease), "%d", opts->lease_ms);
	ob->transport = transport;
	ob->attempts_total = metrics_family("saga_outbox_delivery_attempts_total",
					    "Outbox delivery attempts by peer and outcome",
					    METRIC_COUNTER);
	ob->latency = metrics_family("saga_outbox_delivery_seconds",
				     "Time from sending a message to its 2xx answer",
				     METRIC_HISTOGRAM);
	ob->timer = evtimer_new(base, timer_cb, ob);
	ob->purge_timer = evtimer_new(base, purge_cb, ob);
	ob->ack_ev = event_new(base, -1, 0, ack_ev_cb, ob);
	ob->stats_timer = event_new(base, -1, EV_PERSIST, stats_cb, ob);
	ob->pending = metrics_series(metrics_family("saga_outbox_pending",
						    "Outbox rows not yet delivered (not dead)",
						    METRIC_GAUGE), "");
	ob->dead = metrics_series(metrics_family("saga_outbox_dead",
						 "Outbox rows given up on (dead letters)",
						 METRIC_GAUGE), "");
	ob->oldest = metrics_series(metrics_family("saga_outbox_oldest_pending_seconds",
						   "Age of the oldest undelivered outbox row",
						   METRIC_GAUGE), "");
	snprintf(channel, sizeof(channel), "%s_outbox", opts->schema);
	ob->listen = db_listen_new(base, opts->conninfo, channel, kick_cb, kick_cb, ob);
	if (!ob->timer || !ob->purge_timer || !ob->ack_ev || !ob->stats_timer || !ob->listen) {
		outbox_free(ob);
		return NULL;
	}
	wake_in(ob, ob->o.sweep_ms);
	evtimer_add(ob->purge_timer, &purge_first);
	{
		struct timeval every = { 5, 0 };

		evtimer_add(ob->stats_timer, &every);
	}
	return ob;
}

const char *outbox_lease_ms(const struct outbox *ob)
{
	return ob->lease;
}

void outbox_stop(struct outbox *ob)
{
	ob->stopping = true;
	evtimer_del(ob->timer);
	evtimer_del(ob->purge_timer);
	evtimer_del(ob->stats_timer);
	db_listen_free(ob->listen);
	ob->listen = NULL;
	/* nothing waits for the window any more */
	evtimer_del(ob->ack_ev);
	flush_acks(ob);
}

bool outbox_idle(const struct outbox *ob)
{
	return ob->stopping && !ob->claiming && ob->in_flight == 0 && ob->marking == 0 &&
	       ob->nacks == 0 && !ob->stats_running;
}

void outbox_free(struct outbox *ob)
{
	if (!ob)
		return;
	if (ob->timer)
		event_free(ob->timer);
	if (ob->purge_timer)
		event_free(ob->purge_timer);
	if (ob->ack_ev)
		event_free(ob->ack_ev);
	if (ob->stats_timer)
		event_free(ob->stats_timer);
	db_listen_free(ob->listen);
	free(ob->acks);
	free(ob);
}
