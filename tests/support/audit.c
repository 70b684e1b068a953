/* audit: see audit.h. */
#include "audit.h"

#include <check.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static void trim(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
}

/*
 * The format (see the head of sql/audit.sql): "-- check: ID | label" or
 * "-- info: ID | label" starts a query, which ends at the first line ending
 * with ';'.
 */
size_t audit_load(struct audit_check **out)
{
	const char *src = getenv("SAGA_SOURCE_DIR");
	char path[4096];
	char *text, *line, *save = NULL;
	struct audit_check *c = NULL, *cur = NULL;
	size_t n = 0, sqllen = 0;

	ck_assert_msg(src != NULL, "SAGA_SOURCE_DIR is not set");
	snprintf(path, sizeof(path), "%s/sql/audit.sql", src);
	text = file_read(path);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		bool check = strncmp(line, "-- check:", 9) == 0;
		bool info = strncmp(line, "-- info:", 8) == 0;

		trim(line);
		if (check || info) {
			const char *rest = line + (check ? 9 : 8);
			const char *bar = strchr(rest, '|');

			c = realloc(c, (n + 1) * sizeof(*c));
			ck_assert_ptr_nonnull(c);
			cur = &c[n++];
			memset(cur, 0, sizeof(*cur));
			cur->info = info;
			while (*rest == ' ')
				rest++;
			ck_assert_msg(bar != NULL, "%s: no '|' in: %s", path, line);
			snprintf(cur->id, sizeof(cur->id), "%.*s", (int)(bar - rest), rest);
			trim(cur->id);
			bar++;
			while (*bar == ' ')
				bar++;
			snprintf(cur->label, sizeof(cur->label), "%s", bar);
			cur->sql = calloc(1, 1);
			sqllen = 0;
			continue;
		}
		if (!cur)
			continue;
		size_t l = strlen(line);

		cur->sql = realloc(cur->sql, sqllen + l + 2);
		ck_assert_ptr_nonnull(cur->sql);
		memcpy(cur->sql + sqllen, line, l);
		sqllen += l;
		cur->sql[sqllen++] = '\n';
		cur->sql[sqllen] = '\0';
		if (l > 0 && line[l - 1] == ';')
			cur = NULL;
	}
	free(text);
	ck_assert_msg(n > 0, "no checks in %s", path);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(strchr(c[i].sql, ';') != NULL, "%s: check %s has no ending ';'", path,
			      c[i].id);
	*out = c;
	return n;
}

void audit_free(struct audit_check *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(c[i].sql);
	free(c);
}

void audit_run(const char *url, const struct audit_check *c, size_t n, struct audit_result *res)
{
	PGconn *conn = PQconnectdb(url);

	ck_assert_msg(PQstatus(conn) == CONNECTION_OK, "auditor cannot connect: %s",
		      PQerrorMessage(conn));
	sql_exec_ok(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL);
	for (size_t i = 0; i < n; i++) {
		PGresult *r = PQexec(conn, c[i].sql);
		size_t o = 0;

		ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "audit %s failed: %s", c[i].id,
			      PQresultErrorMessage(r));
		res[i].rows = PQntuples(r);
		res[i].sample[0] = '\0';
		for (int row = 0; row < PQntuples(r) && row < 10; row++) {
			for (int col = 0; col < PQnfields(r) && o < sizeof(res[i].sample) - 80; col++)
				o += (size_t)snprintf(res[i].sample + o, sizeof(res[i].sample) - o,
						      "%s%s=%.60s", col ? " " : "    ", PQfname(r, col),
						      PQgetisnull(r, row, col) ? "NULL"
									       : PQgetvalue(r, row, col));
			if (o < sizeof(res[i].sample) - 2)
				o += (size_t)snprintf(res[i].sample + o, sizeof(res[i].sample) - o, "\n");
		}
		PQclear(r);
	}
	sql_exec_ok(conn, "COMMIT", 0, NULL);
	PQfinish(conn);
}
