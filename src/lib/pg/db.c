/*
 * db: non-blocking libpq on libevent. See db.h for the contract.
 *
 * Each connection is a small state machine; its one event's interest is
 * derived from the state in conn_arm(), the only place that (re)arms it,
 * because PQsocket() may change while connecting.
 */
#include "db.h"

#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "backoff.h"
#include "log.h"
#include "metrics.h"

#define CONNECT_TIMEOUT_MS 5000
#define QUERY_TIMEOUT_MS 15000
#define RECONNECT_BASE_MS 100
#define RECONNECT_CAP_MS 5000

enum conn_state {
	CONN_DOWN,       /* waiting for the reconnect timer */
	CONN_CONNECTING, /* PQconnectPoll until OK */
	CONN_SETUP,      /* LISTEN sent, waiting for its result (listen only) */
	CONN_IDLE,       /* watching for EOF or notifications */
	CONN_PREPARING,  /* PQsendPrepare of the request's statement is out */
	CONN_BUSY,       /* a statement is out, flushing and reading */
	CONN_GROUP,      /* a pipeline of grouped statements is out (pool only) */
};

/*
 * Grouped statements (db_query_grouped) that wait together go out on one
 * connection as a libpq pipeline with one Sync at the end: the server runs
 * them in one implicit transaction, so they commit together, one commit
 * record and one WAL flush for all of them. Groups form only from
 * statements that wait anyway: for a writer slot (db_pool_set_writers) or a
 * connection. A group takes at most GROUP_MAX statements, and no more than
 * its writer's share of the grouped statements that wait.
 */
#define GROUP_MAX 16

/*
 * Statements are prepared on each connection the first time it runs them,
 * named after their slot here, and found again by the address of their text
 * (services pass literals), which saves the server parsing and planning the
 * same text for every saga. Single-threaded, like the event loop.
 */
#define MAX_PREPARED 64
static const char *prepared_sql[MAX_PREPARED];
static int nprepared;

static int prepared_slot(const char *sql)
{
	for (int i = 0; i < nprepared; i++)
		if (prepared_sql[i] == sql)
			return i;
	if (nprepared == MAX_PREPARED)
		return -1;
	prepared_sql[nprepared] = sql;
	return nprepared++;
}

struct db_req {
	TAILQ_ENTRY(db_req) link;
	const char *sql;
	int nparams;
	char **params;
	db_cb cb;
	void *arg;
	bool grouped;     /* may share a transaction (db_query_grouped) */
	bool low;         /* waits behind every other statement (db_query_grouped_low) */
	const char *key;  /* grouped: the order within the group */
	bool alone;       /* its group failed: it runs again by itself */
	bool prepare;     /* in a group: a Parse goes out before it */
	PGresult *res;    /* in a group: its result, until the Sync's */
};
TAILQ_HEAD(req_queue, db_req);

struct conn {
	enum conn_state state;
	PGconn *pg;
	struct event *ev;     /* socket readiness, interest set by conn_arm */
	struct event *timer;  /* connect/query deadline, or reconnect delay */
	int failures;         /* consecutive failed connects, for backoff */
	int armed_fd;
	short armed_what;
	struct db_req *req;   /* while CONN_BUSY (pool only) */
	struct req_queue group; /* while CONN_GROUP, in the order sent */
	int ngroup;
	struct db_req *cur;   /* CONN_GROUP: the statement whose results come next */
	bool cur_prepare;     /* ... and they are its Parse's */
	bool group_failed;    /* CONN_GROUP: an error no statement owns (the commit's) */
	bool writer;          /* running grouped statements: counts in pool->writing */
	PGresult *res;        /* the statement's result, until ReadyForQuery */
	uint64_t prepared;    /* prepared_slot bits prepared on this connection */
	struct db_pool *pool; /* NULL for a listen connection */
	struct db_listen *listen;
};

struct db_pool {
	struct event_base *base;
	char *conninfo;
	char *options;
	int size;
	int up;      /* connections in IDLE or BUSY */
	bool ever_up; /* until the first connect, queries wait instead of failing */
	int busy;
	int waiting;
	int writers;  /* connections that may run grouped statements at once */
	int writing;  /* ... and do now */
	struct req_queue queue; /* waiting statements, in order */
	struct req_queue low;   /* ... and behind them, the low-priority ones */
	struct conn *conns;
	struct metric_series *groups, *grouped; /* group commits, statements in them */
};

struct db_listen {
	struct event_base *base;
	char *conninfo;
	char *listen_sql;
	db_listen_cb on_notify, on_connect;
	void *arg;
	struct conn conn;
};

static void conn_event_cb(evutil_socket_t fd, short what, void *arg);
static void conn_timer_cb(evutil_socket_t fd, short what, void *arg);
static void conn_start(struct conn *c);
static void pool_dispatch(struct db_pool *pool);
static void conn_unwrite(struct conn *c);
static void conn_send(struct conn *c, struct db_req *r);

static struct event_base *conn_base(const struct conn *c)
{
	return c->pool ? c->pool->base : c->listen->base;
}

static void conn_timer(struct conn *c, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(c->timer, &tv);
}

/* Derives the event's interest from the state; re-reads the socket. */
static void conn_arm(struct conn *c, short what)
{
	int fd = c->pg ? PQsocket(c->pg) : -1;

	if (fd < 0 || what == 0) {
		event_del(c->ev);
		c->armed_fd = -1;
		c->armed_what = 0;
		return;
	}
	if (fd == c->armed_fd && what == c->armed_what)
		return;
	event_del(c->ev);
	event_assign(c->ev, conn_base(c), fd, what | EV_PERSIST, conn_event_cb, c);
	event_add(c->ev, NULL);
	c->armed_fd = fd;
	c->armed_what = what;
}

/* The parameters live in the same allocation as the request. */
static void req_free(struct db_req *r)
{
	free(r);
}

static void req_finish(struct db_req *r, PGresult *res, enum db_status st, const char *sqlstate,
		       const char *msg)
{
	struct db_error err = { .status = st, .message = msg ? msg : "" };

	if (sqlstate)
		snprintf(err.sqlstate, sizeof(err.sqlstate), "%s", sqlstate);
	r->cb(r->arg, st == DB_OK ? res : NULL, &err);
	req_free(r);
}

/*
 * The waiting statements are two queues read as one: pool->queue, then
 * pool->low.
 */
static struct req_queue *queue_of(struct db_pool *pool, const struct db_req *r)
{
	return r->low ? &pool->low : &pool->queue;
}

static struct db_req *queue_first(struct db_pool *pool)
{
	struct db_req *r = TAILQ_FIRST(&pool->queue);

	return r ? r : TAILQ_FIRST(&pool->low);
}

static struct db_req *queue_next(struct db_pool *pool, const struct db_req *r)
{
	struct db_req *n = TAILQ_NEXT(r, link);

	return n || r->low ? n : TAILQ_FIRST(&pool->low);
}

static void pool_fail_queue(struct db_pool *pool, const char *why)
{
	struct db_req *r;

	while ((r = queue_first(pool)) != NULL) {
		TAILQ_REMOVE(queue_of(pool, r), r, link);
		pool->waiting--;
		req_finish(r, NULL, DB_UNAVAILABLE, NULL, why);
	}
}

/*
 * SQLSTATE 25006 (read_only_sql_transaction): the server this connection
 * reached takes no more writes, as a primary demoted in a failover does.
 * It counts as a lost connection: the caller sees DB_UNAVAILABLE (a 503, a
 * delivery tried again) and the connection is made anew, which with
 * target_session_attrs=read-write finds the new primary. A statement of
 * ours never writes in a read-only transaction on purpose.
 */
static bool went_read_only(const PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state && strcmp(state, "25006") == 0;
}

/*
 * The connection broke or never came up: drop it, fail what ran on it and
 * schedule a reconnect. Called from the connection's own callbacks only
 * after they are done touching c->pg.
 */
static void conn_down(struct conn *c, const char *why)
{
	bool was_up = c->state != CONN_DOWN && c->state != CONN_CONNECTING;
	struct db_req *r = c->req;
	struct req_queue group = TAILQ_HEAD_INITIALIZER(group);
	char reason[256];

	/* why often points into c->pg, which PQfinish frees below */
	snprintf(reason, sizeof(reason), "%s", why && *why ? why : "connection lost");
	reason[strcspn(reason, "\n")] = '\0';
	why = reason;

	if (c->state != CONN_CONNECTING || c->failures == 0)
		log_warn("database connection lost: %s", why);
	conn_arm(c, 0);
	evtimer_del(c->timer);
	PQclear(c->res);
	c->res = NULL;
	if (c->pg)
		PQfinish(c->pg);
	c->pg = NULL;
	c->req = NULL;
	TAILQ_CONCAT(&group, &c->group, link);
	c->ngroup = 0;
	c->cur = NULL;
	c->prepared = 0;
	c->state = CONN_DOWN;
	c->failures++;
	conn_timer(c, backoff_delay_ms(RECONNECT_BASE_MS, RECONNECT_CAP_MS, c->failures,
				       backoff_random()) + RECONNECT_BASE_MS / 2);
	if (c->pool) {
		conn_unwrite(c);
		if (was_up)
			c->pool->up--;
		if (r) {
			c->pool->busy--;
			req_finish(r, NULL, DB_UNAVAILABLE, NULL, why);
		}
		/* a group's outcome is as unknown as a statement's: the Sync may have gone out */
		while ((r = TAILQ_FIRST(&group)) != NULL) {
			TAILQ_REMOVE(&group, r, link);
			c->pool->busy--;
			PQclear(r->res);
			req_finish(r, NULL, DB_UNAVAILABLE, NULL, why);
		}
		if (c->pool->up == 0 && (c->pool->ever_up || c->failures > 1))
			pool_fail_queue(c->pool, "database unavailable");
	}
}

/* Gives back the connection's writer slot, if it holds one. */
static void conn_unwrite(struct conn *c)
{
	if (c->writer)
		c->pool->writing--;
	c->writer = false;
}

static void conn_idle(struct conn *c)
{
	c->state = CONN_IDLE;
	evtimer_del(c->timer);
	conn_arm(c, EV_READ);
}

static void conn_connected(struct conn *c)
{
	c->failures = 0;
	if (PQsetnonblocking(c->pg, 1) != 0) {
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
	if (c->pool) {
		c->pool->up++;
		c->pool->ever_up = true;
		conn_idle(c);
		pool_dispatch(c->pool);
		return;
	}
	/* listen: send LISTEN, and report the (re)connect once it is in place. */
	if (!PQsendQuery(c->pg, c->listen->listen_sql)) {
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
	c->state = CONN_SETUP;
	conn_timer(c, QUERY_TIMEOUT_MS);
	conn_arm(c, PQflush(c->pg) == 1 ? EV_READ | EV_WRITE : EV_READ);
}

static void conn_poll_connect(struct conn *c)
{
	switch (PQconnectPoll(c->pg)) {
	case PGRES_POLLING_READING:
		conn_arm(c, EV_READ);
		return;
	case PGRES_POLLING_WRITING:
		conn_arm(c, EV_WRITE);
		return;
	case PGRES_POLLING_OK:
		conn_connected(c);
		return;
	default:
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
}


/*
 * What the server says outside a statement went raw to stderr (libpq's
 * default), between the JSON log lines: "FATAL: terminating connection due
 * to administrator command" as the database shuts down. It becomes a log
 * line; NOTICEs and below ("relation already exists, skipping") are noise.
 */
static void conn_notice(void *arg, const PGresult *res)
{
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	if (sev && (strcmp(sev, "NOTICE") == 0 || strcmp(sev, "INFO") == 0 ||
		    strcmp(sev, "LOG") == 0 || strcmp(sev, "DEBUG") == 0))
		return;
	log_warn("database says %s: %s", sev ? sev : "?", msg ? msg : "");
}
/*
 * A connection cut off by a partition goes silent: nothing resets it, and
 * without these the kernel notices only after its retransmissions give up
 * (tcp_retries2, 15 minutes and more) or, for an idle one, never. Until
 * then the pool counts it as up and hands it statements, and the LISTEN
 * connection waits for notifications that cannot come. See db.h.
 */
static const char *const conn_defaults[][2] = {
	{ "keepalives", "1" },
	{ "keepalives_idle", "4" },
	{ "keepalives_interval", "2" },
	{ "keepalives_count", "3" },
	{ "tcp_user_timeout", "10000" },
};

void db_conn_params_add(struct db_conn_params *p, const char *key, const char *val)
{
	if (p->n >= DB_CONN_PARAMS_MAX)
		abort();
	p->keys[p->n] = key;
	p->vals[p->n++] = val;
	p->keys[p->n] = NULL;
	p->vals[p->n] = NULL;
}

void db_conn_params_init(struct db_conn_params *p, const char *conninfo)
{
	p->n = 0;
	/* before dbname: what conninfo sets itself wins (libpq: the last value counts) */
	for (size_t i = 0; i < sizeof(conn_defaults) / sizeof(conn_defaults[0]); i++)
		db_conn_params_add(p, conn_defaults[i][0], conn_defaults[i][1]);
	db_conn_params_add(p, "dbname", conninfo ? conninfo : "");
}

static void conn_start(struct conn *c)
{
	struct db_conn_params p;

	db_conn_params_init(&p, c->pool ? c->pool->conninfo : c->listen->conninfo);
	if (c->pool)
		db_conn_params_add(&p, "options", c->pool->options);
	db_conn_params_add(&p, "fallback_application_name", "pgsaga");
	c->pg = PQconnectStartParams(p.keys, p.vals, 1);
	if (!c->pg || PQstatus(c->pg) == CONNECTION_BAD) {
		conn_down(c, c->pg ? PQerrorMessage(c->pg) : "out of memory");
		return;
	}
	PQsetNoticeReceiver(c->pg, conn_notice, NULL);
	c->state = CONN_CONNECTING;
	conn_timer(c, CONNECT_TIMEOUT_MS);
	conn_poll_connect(c);
}

/* Reads whatever arrived; returns false when the connection broke. */
static bool conn_consume(struct conn *c)
{
	PGnotify *n;
	bool notified = false;

	if (!PQconsumeInput(c->pg)) {
		conn_down(c, PQerrorMessage(c->pg));
		return false;
	}
	while ((n = PQnotifies(c->pg)) != NULL) {
		notified = true;
		PQfreemem(n);
	}
	if (notified && c->listen && c->state == CONN_IDLE)
		c->listen->on_notify(c->listen->arg);
	return true;
}

/*
 * Collects the statement's result. The result can arrive before the
 * ReadyForQuery that ends it, in another read, so it is kept on the
 * connection until PQgetResult says the statement is over.
 */
static void conn_finish_busy(struct conn *c)
{
	PGresult *res;
	struct db_req *r = c->req;

	while (!PQisBusy(c->pg) && (res = PQgetResult(c->pg)) != NULL) {
		if (!c->res)
			c->res = res;
		else
			PQclear(res);
	}
	if (PQisBusy(c->pg))
		return;
	res = c->res;
	c->res = NULL;
	if (PQstatus(c->pg) == CONNECTION_BAD) {
		PQclear(res);
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
	if (went_read_only(res)) {
		conn_down(c, PQresultErrorMessage(res)); /* copies the message first */
		PQclear(res);
		return;
	}
	if (c->state == CONN_PREPARING && res && PQresultStatus(res) == PGRES_COMMAND_OK) {
		PQclear(res);
		c->prepared |= UINT64_C(1) << prepared_slot(r->sql);
		c->req = NULL;
		c->pool->busy--;
		conn_send(c, r);
		return;
	}
	c->req = NULL;
	c->pool->busy--;
	conn_unwrite(c);
	conn_idle(c);

	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
		req_finish(r, res, DB_OK, NULL, NULL);
	} else {
		const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
		const char *msg = res ? PQresultErrorMessage(res) : "no result";

		req_finish(r, NULL, DB_SQL_ERROR, state ? state : "XX000", msg);
	}
	PQclear(res);
	pool_dispatch(c->pool);
}

/*
 * The group is over (its Sync's result came): hand each statement its
 * result, or, when any of them failed, none committed and each runs again
 * alone, at the head of the queue, so that its caller sees the outcome it
 * would have had without the others.
 */
static void group_done(struct conn *c)
{
	struct req_queue group = TAILQ_HEAD_INITIALIZER(group);
	struct db_req *r;
	bool ok = !c->group_failed;

	if (!PQexitPipelineMode(c->pg)) {
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
	TAILQ_FOREACH(r, &c->group, link) {
		ExecStatusType st = r->res ? PQresultStatus(r->res) : PGRES_FATAL_ERROR;

		ok = ok && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK);
	}
	TAILQ_CONCAT(&group, &c->group, link);
	c->pool->busy -= c->ngroup;
	if (ok) {
		metric_add(c->pool->groups, 1);
		metric_add(c->pool->grouped, c->ngroup);
	}
	c->ngroup = 0;
	c->cur = NULL;
	conn_unwrite(c);
	conn_idle(c);
	if (!ok) {
		log_debug("a group of statements failed; each runs again alone");
		while ((r = TAILQ_LAST(&group, req_queue)) != NULL) {
			TAILQ_REMOVE(&group, r, link);
			PQclear(r->res);
			r->res = NULL;
			r->alone = true;
			TAILQ_INSERT_HEAD(queue_of(c->pool, r), r, link);
			c->pool->waiting++;
		}
	}
	while ((r = TAILQ_FIRST(&group)) != NULL) {
		PGresult *res = r->res;

		TAILQ_REMOVE(&group, r, link);
		req_finish(r, res, DB_OK, NULL, NULL);
		PQclear(res);
	}
	pool_dispatch(c->pool);
}

/*
 * Reads a group's results: each Parse sent and each statement yields its
 * results and then a NULL, and the Sync a PGRES_PIPELINE_SYNC.
 */
static void conn_finish_group(struct conn *c)
{
	PGresult *res;

	while (!PQisBusy(c->pg)) {
		res = PQgetResult(c->pg);
		if (!res) {
			if (!c->cur) {
				conn_down(c, "pipeline out of step");
				return;
			}
			if (c->cur_prepare) {
				c->cur_prepare = false;
			} else {
				c->cur = TAILQ_NEXT(c->cur, link);
				c->cur_prepare = c->cur && c->cur->prepare;
			}
			continue;
		}
		ExecStatusType st = PQresultStatus(res);

		if (st == PGRES_PIPELINE_SYNC) {
			PQclear(res);
			group_done(c);
			return;
		}
		if (!c->cur) {
			c->group_failed = c->group_failed || st != PGRES_COMMAND_OK;
			PQclear(res);
		} else if (c->cur_prepare && st == PGRES_COMMAND_OK) {
			c->prepared |= UINT64_C(1) << prepared_slot(c->cur->sql);
			PQclear(res);
		} else if (!c->cur->res) {
			c->cur->res = res; /* a failed Parse stands for its statement */
		} else {
			PQclear(res);
		}
	}
	if (PQstatus(c->pg) == CONNECTION_BAD)
		conn_down(c, PQerrorMessage(c->pg));
}

static void conn_finish_setup(struct conn *c)
{
	PGresult *res;
	bool ok = true;

	while (!PQisBusy(c->pg) && (res = PQgetResult(c->pg)) != NULL) {
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			ok = false;
		PQclear(res);
	}
	if (PQisBusy(c->pg))
		return;
	if (!ok) {
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
	conn_idle(c);
	c->listen->on_connect(c->listen->arg);
}

static void conn_event_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	switch (c->state) {
	case CONN_CONNECTING:
		conn_poll_connect(c);
		return;
	case CONN_IDLE:
		if (!conn_consume(c))
			return;
		if (PQstatus(c->pg) == CONNECTION_BAD)
			conn_down(c, "connection closed");
		return;
	case CONN_SETUP:
	case CONN_PREPARING:
	case CONN_BUSY:
	case CONN_GROUP:
		if (what & EV_WRITE) {
			int f = PQflush(c->pg);

			if (f < 0) {
				conn_down(c, PQerrorMessage(c->pg));
				return;
			}
			conn_arm(c, f == 1 ? EV_READ | EV_WRITE : EV_READ);
		}
		if (what & EV_READ) {
			if (!conn_consume(c))
				return;
			if (c->state == CONN_SETUP)
				conn_finish_setup(c);
			else if (c->state == CONN_GROUP)
				conn_finish_group(c);
			else
				conn_finish_busy(c);
		}
		return;
	case CONN_DOWN:
		return;
	}
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	switch (c->state) {
	case CONN_DOWN:
		conn_start(c);
		return;
	case CONN_CONNECTING:
		conn_down(c, "connect timed out");
		return;
	case CONN_SETUP:
	case CONN_PREPARING:
	case CONN_BUSY:
	case CONN_GROUP:
		conn_down(c, "statement timed out");
		return;
	case CONN_IDLE:
		return;
	}
}

static void conn_init(struct conn *c, struct event_base *base)
{
	c->ev = event_new(base, -1, 0, conn_event_cb, c);
	c->timer = evtimer_new(base, conn_timer_cb, c);
	c->armed_fd = -1;
	c->state = CONN_DOWN;
	TAILQ_INIT(&c->group);
}

static void conn_fini(struct conn *c)
{
	if (c->ev)
		event_free(c->ev);
	if (c->timer)
		event_free(c->timer);
	if (c->pg)
		PQfinish(c->pg);
}

static void conn_send(struct conn *c, struct db_req *r)
{
	int slot = prepared_slot(r->sql), f, ok;
	char name[16];

	snprintf(name, sizeof(name), "s%d", slot);
	if (slot < 0) {
		ok = PQsendQueryParams(c->pg, r->sql, r->nparams, NULL,
				       (const char *const *)r->params, NULL, NULL, 0);
	} else if (c->prepared & (UINT64_C(1) << slot)) {
		ok = PQsendQueryPrepared(c->pg, name, r->nparams, (const char *const *)r->params,
					 NULL, NULL, 0);
	} else {
		ok = PQsendPrepare(c->pg, name, r->sql, r->nparams, NULL);
	}
	if (!ok) {
		TAILQ_INSERT_HEAD(queue_of(c->pool, r), r, link);
		c->pool->waiting++;
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
	c->state = slot >= 0 && !(c->prepared & (UINT64_C(1) << slot)) ? CONN_PREPARING
									: CONN_BUSY;
	c->req = r;
	c->pool->busy++;
	conn_timer(c, QUERY_TIMEOUT_MS);
	f = PQflush(c->pg);
	if (f < 0) {
		conn_down(c, PQerrorMessage(c->pg));
		return;
	}
	conn_arm(c, f == 1 ? EV_READ | EV_WRITE : EV_READ);
}

/* Sends one statement of a group, with its Parse the first time. */
static bool group_send_one(struct conn *c, struct db_req *r, uint64_t *parsing)
{
	int slot = prepared_slot(r->sql);
	uint64_t bit = slot < 0 ? 0 : UINT64_C(1) << slot;
	char name[16];

	snprintf(name, sizeof(name), "s%d", slot);
	if (slot < 0)
		return PQsendQueryParams(c->pg, r->sql, r->nparams, NULL,
					 (const char *const *)r->params, NULL, NULL, 0);
	r->prepare = !((c->prepared | *parsing) & bit);
	if (r->prepare && !PQsendPrepare(c->pg, name, r->sql, r->nparams, NULL))
		return false;
	*parsing |= bit;
	return PQsendQueryPrepared(c->pg, name, r->nparams, (const char *const *)r->params, NULL,
				   NULL, 0);
}

/*
 * Sends first and up to max - 1 more grouped statements from the queue as
 * one pipeline. Returns false, having sent nothing, when no other grouped
 * statement waits.
 */
static bool conn_send_group(struct conn *c, struct db_req *first, int max)
{
	struct db_pool *pool = c->pool;
	struct db_req *r, *next;
	uint64_t parsing = 0;
	int f;

	for (r = queue_first(pool); r && c->ngroup + 1 < max; r = next) {
		next = queue_next(pool, r);
		if (!r->grouped || r->alone)
			continue;
		TAILQ_REMOVE(queue_of(pool, r), r, link);
		pool->waiting--;
		TAILQ_INSERT_TAIL(&c->group, r, link);
		c->ngroup++;
	}
	if (c->ngroup == 0)
		return false;
	/* by key, stably: groups lock contended rows in one order, so never in a cycle */
	struct req_queue sorted = TAILQ_HEAD_INITIALIZER(sorted);
	TAILQ_INSERT_HEAD(&c->group, first, link);
	while ((r = TAILQ_FIRST(&c->group)) != NULL) {
		struct db_req *at = TAILQ_LAST(&sorted, req_queue);

		TAILQ_REMOVE(&c->group, r, link);
		while (at && strcmp(at->key, r->key) > 0)
			at = TAILQ_PREV(at, req_queue, link);
		if (at)
			TAILQ_INSERT_AFTER(&sorted, at, r, link);
		else
			TAILQ_INSERT_HEAD(&sorted, r, link);
	}
	TAILQ_CONCAT(&c->group, &sorted, link);
	first = TAILQ_FIRST(&c->group);
	c->ngroup++;
	c->state = CONN_GROUP;
	c->pool->busy += c->ngroup;
	c->cur = first;
	c->group_failed = false;
	bool ok = PQenterPipelineMode(c->pg);
	TAILQ_FOREACH(r, &c->group, link)
		ok = ok && group_send_one(c, r, &parsing);
	c->cur_prepare = first->prepare;
	if (!ok || !PQpipelineSync(c->pg) || (f = PQflush(c->pg)) < 0) {
		/* nothing commits without the Sync: the statements can wait for another connection */
		while ((r = TAILQ_LAST(&c->group, req_queue)) != NULL) {
			TAILQ_REMOVE(&c->group, r, link);
			TAILQ_INSERT_HEAD(queue_of(pool, r), r, link);
			pool->waiting++;
			pool->busy--;
		}
		c->ngroup = 0;
		conn_down(c, PQerrorMessage(c->pg));
		return true;
	}
	conn_timer(c, QUERY_TIMEOUT_MS);
	conn_arm(c, f == 1 ? EV_READ | EV_WRITE : EV_READ);
	return true;
}

static bool groupable(const struct db_req *r)
{
	return r->grouped && !r->alone;
}

/*
 * The first statement in the queue that may start now (grouped ones only
 * while a writer slot is free), and how many grouped statements wait.
 */
static struct db_req *next_startable(struct db_pool *pool, int *grouped)
{
	struct db_req *r, *found = NULL;

	*grouped = 0;
	for (r = queue_first(pool); r; r = queue_next(pool, r)) {
		*grouped += groupable(r);
		if (!found && (!groupable(r) || pool->writing < pool->writers))
			found = r;
	}
	return found;
}

static void pool_dispatch(struct db_pool *pool)
{
	for (int i = 0; i < pool->size && pool->waiting > 0; i++) {
		struct conn *c = &pool->conns[i];
		struct db_req *r;
		int grouped;

		if (c->state != CONN_IDLE)
			continue;
		r = next_startable(pool, &grouped);
		if (!r)
			return;
		TAILQ_REMOVE(queue_of(pool, r), r, link);
		pool->waiting--;
		if (groupable(r)) {
			/* this writer's share of the grouped statements that wait */
			int slots = pool->writers - pool->writing;
			int share = (grouped + slots - 1) / slots;

			c->writer = true;
			pool->writing++;
			if (share > 1 && conn_send_group(c, r, share < GROUP_MAX ? share : GROUP_MAX))
				continue;
		}
		conn_send(c, r);
	}
}

struct db_pool *db_pool_new(struct event_base *base, const char *conninfo, const char *schema,
			    int size)
{
	struct db_pool *pool = calloc(1, sizeof(*pool));
	char opts[256];

	if (!pool)
		return NULL;
	snprintf(opts, sizeof(opts), "-c search_path=%s -c pgsaga.local_wake=on -c pgsaga.writer=service", schema);
	pool->base = base;
	pool->conninfo = strdup(conninfo);
	pool->options = strdup(opts);
	pool->size = size;
	pool->writers = size;
	pool->groups = metrics_series(
		metrics_family("saga_db_group_commits_total",
			       "Transactions that committed several statements (db_query_grouped)",
			       METRIC_COUNTER),
		"");
	pool->grouped = metrics_series(
		metrics_family("saga_db_grouped_statements_total",
			       "Statements committed in those transactions", METRIC_COUNTER),
		"");
	pool->conns = calloc((size_t)size, sizeof(*pool->conns));
	TAILQ_INIT(&pool->queue);
	TAILQ_INIT(&pool->low);
	if (!pool->conninfo || !pool->options || !pool->conns) {
		db_pool_free(pool);
		return NULL;
	}
	for (int i = 0; i < size; i++) {
		pool->conns[i].pool = pool;
		conn_init(&pool->conns[i], base);
		conn_start(&pool->conns[i]);
	}
	return pool;
}

void db_pool_free(struct db_pool *pool)
{
	if (!pool)
		return;
	struct db_req *r;

	for (int i = 0; pool->conns && i < pool->size; i++) {
		struct conn *c = &pool->conns[i];

		if (c->req)
			req_free(c->req);
		while ((r = TAILQ_FIRST(&c->group)) != NULL) {
			TAILQ_REMOVE(&c->group, r, link);
			PQclear(r->res);
			req_free(r);
		}
		conn_fini(c);
	}
	while ((r = queue_first(pool)) != NULL) {
		TAILQ_REMOVE(queue_of(pool, r), r, link);
		req_free(r);
	}
	free(pool->conns);
	free(pool->conninfo);
	free(pool->options);
	free(pool);
}

static void unavailable_cb(evutil_socket_t fd, short what, void *arg)
{
	req_finish(arg, NULL, DB_UNAVAILABLE, NULL, "database unavailable");
}

static void enqueue(struct db_pool *pool, bool low, const char *key, const char *sql,
		    int nparams, const char *const *params, db_cb cb, void *arg)
{
	size_t len = key ? strlen(key) + 1 : 0;
	struct db_req *r;
	char **pv, *p;

	for (int i = 0; i < nparams; i++)
		len += params[i] ? strlen(params[i]) + 1 : 0;
	/* the request, its parameter array, the parameter texts and the key in one block */
	r = malloc(sizeof(*r) + (size_t)nparams * sizeof(char *) + len);
	if (!r)
		abort();
	pv = (char **)(r + 1);
	p = (char *)(pv + nparams);
	for (int i = 0; i < nparams; i++) {
		size_t l;

		if (!params[i]) {
			pv[i] = NULL;
			continue;
		}
		l = strlen(params[i]) + 1;
		memcpy(p, params[i], l);
		pv[i] = p;
		p += l;
	}
	r->sql = sql;
	r->nparams = nparams;
	r->params = pv;
	r->cb = cb;
	r->arg = arg;
	r->grouped = key != NULL;
	r->low = low;
	r->key = key ? memcpy(p, key, strlen(key) + 1) : NULL;
	r->alone = false;
	r->prepare = false;
	r->res = NULL;
	if (pool->up == 0 && pool->ever_up) {
		/* fail soon, but never from inside this call */
		if (event_base_once(pool->base, -1, EV_TIMEOUT, unavailable_cb, r, NULL) != 0)
			abort();
		return;
	}
	TAILQ_INSERT_TAIL(queue_of(pool, r), r, link);
	pool->waiting++;
	pool_dispatch(pool);
}

void db_query(struct db_pool *pool, const char *sql, int nparams, const char *const *params,
	      db_cb cb, void *arg)
{
	enqueue(pool, false, NULL, sql, nparams, params, cb, arg);
}

void db_query_grouped(struct db_pool *pool, const char *key, const char *sql, int nparams,
		      const char *const *params, db_cb cb, void *arg)
{
	enqueue(pool, false, key, sql, nparams, params, cb, arg);
}

void db_query_grouped_low(struct db_pool *pool, const char *key, const char *sql, int nparams,
			  const char *const *params, db_cb cb, void *arg)
{
	enqueue(pool, true, key, sql, nparams, params, cb, arg);
}

bool db_pool_ready(const struct db_pool *pool)
{
	return pool->up > 0;
}

int db_pool_busy(const struct db_pool *pool)
{
	return pool->busy;
}

int db_pool_waiting(const struct db_pool *pool)
{
	return pool->waiting;
}

void db_pool_set_writers(struct db_pool *pool, int writers)
{
	pool->writers = writers < 1 ? 1 : writers;
	pool_dispatch(pool);
}

int db_pool_size(const struct db_pool *pool)
{
	return pool->size;
}

char *db_text_array(const char *const *elems, size_t n)
{
	size_t len = 3; /* {} NUL */
	char *a, *p;

	for (size_t i = 0; i < n; i++)
		len += elems[i] ? 2 * strlen(elems[i]) + 3 : 5; /* "…", or NULL, */
	if (!(p = a = malloc(len)))
		abort();
	*p++ = '{';
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		if (!elems[i]) {
			memcpy(p, "NULL", 4);
			p += 4;
			continue;
		}
		*p++ = '"';
		for (const char *c = elems[i]; *c; c++) {
			if (*c == '"' || *c == '\\')
				*p++ = '\\';
			*p++ = *c;
		}
		*p++ = '"';
	}
	*p++ = '}';
	*p = '\0';
	return a;
}

bool db_retryable(const struct db_error *err)
{
	return err->status == DB_SQL_ERROR &&
	       (strcmp(err->sqlstate, "40001") == 0 || strcmp(err->sqlstate, "40P01") == 0);
}

struct db_listen *db_listen_new(struct event_base *base, const char *conninfo,
				const char *channel, db_listen_cb on_notify,
				db_listen_cb on_connect, void *arg)
{
	struct db_listen *l = calloc(1, sizeof(*l));
	char *ident;

	if (!l)
		return NULL;
	l->base = base;
	l->conninfo = strdup(conninfo);
	/* channel is the program's constant, but quote it anyway */
	ident = malloc(strlen(channel) * 2 + 16);
	if (!l->conninfo || !ident) {
		free(ident);
		db_listen_free(l);
		return NULL;
	}
	char *q = ident;
	q += sprintf(q, "LISTEN \"");
	for (const char *s = channel; *s; s++) {
		if (*s == '"')
			*q++ = '"';
		*q++ = *s;
	}
	strcpy(q, "\"");
	l->listen_sql = ident;
	l->on_notify = on_notify;
	l->on_connect = on_connect;
	l->arg = arg;
	l->conn.listen = l;
	conn_init(&l->conn, base);
	conn_start(&l->conn);
	return l;
}

void db_listen_free(struct db_listen *l)
{
	if (!l)
		return;
	conn_fini(&l->conn);
	free(l->conninfo);
	free(l->listen_sql);
	free(l);
}
