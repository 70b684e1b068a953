/*
 * db: a small pool of non-blocking libpq connections driven by libevent, and
 * a LISTEN connection.
 *
 * Every query is one statement sent with PQsendQueryParams on an idle
 * connection; in autocommit that statement is its own transaction, so a
 * transaction costs one round trip (services write multi-step work as one
 * statement with CTEs or one call of a PL/pgSQL function). Queries that find
 * no idle connection wait in a FIFO, and behind it those queued as low
 * priority (db_query_grouped_low). When no connection is up, a query fails
 * at once with DB_UNAVAILABLE instead of waiting: a caller answering HTTP
 * turns that into 503 with Retry-After.
 *
 * Connections that break are reopened in the background with backoff; the
 * query that was running on one fails with DB_UNAVAILABLE (its outcome is
 * unknown: it may have committed).
 */
#ifndef PGSAGA_DB_H
#define PGSAGA_DB_H

#include <libpq-fe.h>
#include <stdbool.h>

struct event_base;
struct db_pool;
struct db_listen;

enum db_status {
	DB_OK = 0,          /* res is a PGRES_TUPLES_OK or PGRES_COMMAND_OK result */
	DB_UNAVAILABLE,     /* no connection, or it broke: retry later */
	DB_SQL_ERROR,       /* the server refused the statement: see sqlstate */
};

struct db_error {
	enum db_status status;
	char sqlstate[6];   /* "" unless DB_SQL_ERROR */
	const char *message; /* valid during the callback only */
};

/*
 * res is borrowed: valid during the callback only, NULL unless DB_OK.
 * The callback may issue new queries and may free the object arg points to.
 */
typedef void (*db_cb)(void *arg, PGresult *res, const struct db_error *err);

/*
 * The parameters every connection of a service is opened with, for libpq's
 * PQconnectStartParams or PQconnectdbParams with expand_dbname = 1. First
 * the defaults below, then conninfo (a connection string or URI, expanded
 * by libpq; a setting it has overrides the default), then what
 * db_conn_params_add appends (which overrides conninfo). keys and vals end
 * with NULL; the strings are borrowed.
 *
 * The defaults: TCP keepalives (keepalives=1, keepalives_idle=4,
 * keepalives_interval=2, keepalives_count=3) and tcp_user_timeout=10000
 * (ms). A connection whose peer went silent (a network partition: no reset,
 * no FIN) is then given up by the kernel 10 s after it last heard from the
 * server, whether it is idle (probes at 4, 6 and 8 s go unanswered; the
 * next one finds 10 s passed) or has a statement out (its data stays
 * unacknowledged for 10 s), instead of after TCP's own retransmissions (15
 * minutes and more), or never for an idle one. They apply to TCP
 * connections only; libpq ignores them on a Unix-domain socket.
 */
#define DB_CONN_PARAMS_MAX 12
struct db_conn_params {
	const char *keys[DB_CONN_PARAMS_MAX + 1];
	const char *vals[DB_CONN_PARAMS_MAX + 1];
	int n;
};
void db_conn_params_init(struct db_conn_params *p, const char *conninfo);
/* Appends key = val; aborts past DB_CONN_PARAMS_MAX (a programming error). */
void db_conn_params_add(struct db_conn_params *p, const char *key, const char *val);

/*
 * conninfo: a libpq connection string or URI. schema: set as search_path on
 * every connection, together with pgsaga.local_wake=on (see the outbox
 * trigger) and pgsaga.writer=service (a service's writes are effects, not an
 * operator's top-ups: sql/common/003_track_starting_value.sql). size: number of
 * connections.
 */
struct db_pool *db_pool_new(struct event_base *base, const char *conninfo, const char *schema,
			    int size);
void db_pool_free(struct db_pool *pool);

/*
 * Queues one statement. sql is borrowed and must outlive the query (services
 * pass string literals); params are copied, so they may live on the caller's
 * stack. Exactly one callback follows, never from inside this call.
 */
void db_query(struct db_pool *pool, const char *sql, int nparams, const char *const *params,
	      db_cb cb, void *arg);

/*
 * As db_query, for a statement that may commit in one transaction with other
 * grouped statements (group commit: one commit record and one WAL flush for
 * all). Grouping happens only when statements wait for a connection; then
 * up to 16 of them go out on one connection as a pipeline. When any of them
 * fails, none of them commits and each runs again alone, so every caller
 * sees the outcome its statement would have had by itself. Only for
 * statements that need no transaction of their own: no transaction control,
 * no setting left behind for the statements after it (set_config(..., true)),
 * and now() is the group's start, not the statement's.
 *
 * A group runs its statements ordered by key (strcmp; the order they came in
 * among equal keys): key names the row the statement contends for (a
 * customer's account, an item's stock), so that two groups lock such rows in
 * the same order and never wait for each other in a cycle. Rows a statement
 * locks beyond the one its key names can still deadlock two groups; the
 * server breaks that after deadlock_timeout and both groups run again alone.
 */
void db_query_grouped(struct db_pool *pool, const char *key, const char *sql, int nparams,
		      const char *const *params, db_cb cb, void *arg);

/*
 * As db_query_grouped, at low priority: it starts only when no other
 * statement waits (it may still share a group with them). New work (a saga
 * to start) waits so behind the work already accepted (its transitions,
 * deliveries, deadlines, operators' actions), which thus keeps its pace
 * whatever the rate of new work; admission control keeps the new work from
 * starving (orchestrator/admission.h).
 */
void db_query_grouped_low(struct db_pool *pool, const char *key, const char *sql, int nparams,
			  const char *const *params, db_cb cb, void *arg);

/*
 * At most writers connections run grouped statements at once (default: the
 * pool's size); grouped statements that arrive meanwhile wait and go out
 * together when one of them is free. The other connections stay for the
 * statements that are not grouped (reads, acknowledgements, sweeps).
 */
void db_pool_set_writers(struct db_pool *pool, int writers);

/* True while at least one connection is up. */
bool db_pool_ready(const struct db_pool *pool);

/* Queries queued or running, for graceful shutdown and metrics. */
int db_pool_busy(const struct db_pool *pool);
int db_pool_waiting(const struct db_pool *pool);
int db_pool_size(const struct db_pool *pool);

/* Helpers for reading results. */
static inline const char *db_val(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

/*
 * The text[] literal of the n strings of elems, for a parameter: each
 * element double-quoted with its " and \ escaped, a NULL one as NULL
 * ({"a",NULL,"b\"c"}; {} when n is 0). malloc'd; aborts without memory.
 */
char *db_text_array(const char *const *elems, size_t n);

/* True for SQLSTATEs worth retrying at once: serialization failure, deadlock. */
bool db_retryable(const struct db_error *err);

/*
 * LISTEN on channel over a dedicated connection. on_notify runs for every
 * notification (payload ignored); on_connect runs after every (re)connect,
 * once LISTEN is in place, so the owner can sweep for anything it missed.
 */
typedef void (*db_listen_cb)(void *arg);
struct db_listen *db_listen_new(struct event_base *base, const char *conninfo,
				const char *channel, db_listen_cb on_notify,
				db_listen_cb on_connect, void *arg);
void db_listen_free(struct db_listen *l);

#endif
