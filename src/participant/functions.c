/* functions: see functions.h. */
#include "functions.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"

/*
 * The functions of that name in the schema: how many, how many fit, and
 * what they are. $3 true: a command's signature, else a compensation's.
 */
static const char lookup_sql[] =
	"SELECT count(*), count(*) FILTER (WHERE p.prokind = 'f' AND NOT p.proretset"
	"   AND p.pronargs = 1 AND p.proargtypes[0] = 'jsonb'::regtype"
	"   AND CASE WHEN $3::boolean"
	"       THEN p.proallargtypes = ARRAY['jsonb', 'text', 'jsonb']::regtype[]::oid[]"
	"            AND p.proargmodes = '{i,o,o}'::\"char\"[]"
	"            AND p.proargnames[2:3] = ARRAY['reason', 'output']"
	"       ELSE p.proallargtypes IS NULL AND p.prorettype = 'void'::regtype END),"
	" string_agg(format('%s(%s) RETURNS %s', p.proname, pg_get_function_arguments(p.oid),"
	"                   pg_get_function_result(p.oid)), '; ')"
	" FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
	" WHERE n.nspname = $1 AND p.proname = $2";

static int check_one(PGconn *conn, const char *schema, const char *function, bool command,
		     char *err, size_t errlen)
{
	const char *params[3] = { schema, function, command ? "true" : "false" };
	const char *want = command ? "(body jsonb, OUT reason text, OUT output jsonb)"
				   : "(body jsonb) RETURNS void";
	PGresult *res = PQexecParams(conn, lookup_sql, 3, NULL, params, NULL, NULL, 0);
	int rc = 0;

	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "looking up %s.%s: %s", schema, function,
			 PQresultErrorMessage(res));
		rc = -1;
	} else if (strcmp(PQgetvalue(res, 0, 0), "0") == 0) {
		snprintf(err, errlen, "the function %s.%s is missing: create %s.%s%s", schema,
			 function, schema, function, want);
		rc = -1;
	} else if (strcmp(PQgetvalue(res, 0, 1), "0") == 0) {
		snprintf(err, errlen, "the function %s.%s has the wrong signature: %s; want %s%s",
			 schema, function, PQgetvalue(res, 0, 2), function, want);
		rc = -1;
	}
	PQclear(res);
	return rc;
}

/*
 * participant_call and participant_undo with a static call for each
 * function (sql/participant/005_participant_functions.sql): the names go as
 * two text[] parameters, and the SQL quotes them itself.
 */
static int compile(PGconn *conn, const char *schema, const struct steps *steps, char *err,
		   size_t errlen)
{
	const char *names[2][STEPS_MAX];
	char *commands, *undos;
	char *ident = PQescapeIdentifier(conn, schema, strlen(schema));
	char sql[160];
	PGresult *res;
	int rc = 0;

	if (!ident) {
		snprintf(err, errlen, "quoting %s: %s", schema, PQerrorMessage(conn));
		return -1;
	}
	snprintf(sql, sizeof(sql), "SELECT %s.participant_compile($1::text[], $2::text[])", ident);
	PQfreemem(ident);

	for (size_t i = 0; i < steps->n; i++) {
		names[0][i] = steps->step[i].function;
		names[1][i] = steps->step[i].undo;
	}
	commands = db_text_array(names[0], steps->n);
	undos = db_text_array(names[1], steps->n);
	res = PQexecParams(conn, sql, 2, NULL, (const char *const[]){ commands, undos }, NULL, NULL,
			   0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "writing %s.participant_call: %s", schema,
			 PQresultErrorMessage(res));
		rc = -1;
	}
	PQclear(res);
	free(commands);
	free(undos);
	return rc;
}

int functions_check(const char *conninfo, const char *schema, const struct steps *steps, char *err,
		    size_t errlen)
{
	PGconn *conn = PQconnectdb(conninfo);
	int rc = 0;

	if (PQstatus(conn) != CONNECTION_OK) {
		snprintf(err, errlen, "connecting to check the functions: %s", PQerrorMessage(conn));
		PQfinish(conn);
		return -1;
	}
	for (size_t i = 0; i < steps->n && rc == 0; i++) {
		rc = check_one(conn, schema, steps->step[i].function, true, err, errlen);
		if (rc == 0)
			rc = check_one(conn, schema, steps->step[i].undo, false, err, errlen);
	}
	if (rc == 0 && steps->n > 0)
		rc = compile(conn, schema, steps, err, errlen);
	PQfinish(conn);
	return rc;
}
