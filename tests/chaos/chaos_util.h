/*
 * chaos_util: what the chaos tests need beyond the harness: a PostgreSQL
 * restart, the audit queries of sql/audit.sql, a statement on a connection of
 * the test's own, and reading a counter from a service's /metrics.
 */
#ifndef PGSAGA_CHAOS_UTIL_H
#define PGSAGA_CHAOS_UTIL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * Stops the test cluster (fast shutdown: every session is cut) and starts
 * it again on the same port and data, with scripts/pg-cluster. Services keep
 * running and must reconnect by themselves. Returns how long the database
 * was unreachable, in ms.
 */
long harness_cluster_restart(int down_ms);

struct audit_check {
	bool info;      /* "-- info:": reported, never a violation */
	char id[32];
	char label[256];
	char *sql;      /* one statement, with its ';' */
};

/*
 * Reads the checks of sql/audit.sql ($SAGA_SOURCE_DIR/sql/audit.sql).
 * Returns how many; *out is malloc'd (free with audit_free).
 */
size_t audit_load(struct audit_check **out);
void audit_free(struct audit_check *c, size_t n);

struct audit_result {
	long rows;        /* rows the query returned */
	char sample[2048]; /* the first rows, one per line, for the failure message */
};

/*
 * Runs every check as the given role's URL (the auditor's) in one
 * REPEATABLE READ READ ONLY transaction; fills res[i] (n entries). Fails
 * the test on an SQL error.
 */
void audit_run(const char *url, const struct audit_check *c, size_t n, struct audit_result *res);

/* Runs sql with its params (nparams of them, may be 0 and NULL) on conn;
 * fails the test unless it succeeded (rows or not). */
void exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params);

/*
 * Sum of every series of counter name in the service's /metrics; -1 when
 * the service did not answer.
 */
double metrics_counter(int port, const char *name);

#endif
