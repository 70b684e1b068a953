/*
 * audit: the checks of sql/audit.sql (the queries an auditor runs to prove
 * the invariants hold), loaded and run as a test would: each check's rows
 * are the violations, with a sample of them for the failure message.
 */
#ifndef PGSAGA_TEST_AUDIT_H
#define PGSAGA_TEST_AUDIT_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
