/*
 * migrate: apply a schema's embedded migrations at start.
 *
 * Every step runs in a transaction that first takes the same transaction-level
 * advisory lock, keyed on the schema, so instances starting together take
 * turns: the second one waits, then finds the versions recorded and skips
 * them. Holding the lock only per transaction means a crashed instance
 * releases it with its connection.
 *
 * The steps: create schema_migrations if missing; then, in one transaction,
 * look at what the schema is (its major version, the versions recorded) and
 * decide: refuse it, adopt it (an earlier release's schema, adopted and
 * recorded in that same transaction), or go on; then each migration not
 * recorded, in order; then, when the schema was of an earlier major version,
 * record this binary's.
 */
#include "migrate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "db.h"
#include "log.h"

/* The key is text so that each schema gets its own lock from hashtext(). */
#define LOCK_SQL "SELECT pg_advisory_xact_lock(hashtext('pgsaga.migrate.' || $1::text))"

/* SQLSTATE invalid_schema_name: the usual first-run mistake, worth a hint. */
#define SQLSTATE_INVALID_SCHEMA "3F000"

/* How many names an error or log line lists before "...". */
#define LIST_MAX 6

struct mig {
	PGconn *conn;
	const char *schema;
	char *ident; /* schema quoted as an identifier, from PQescapeIdentifier */
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 2, 3))) static void set_err(struct mig *mg, const char *fmt, ...)
{
	va_list ap;
	char *w;
	int space = 0;

	if (mg->err == NULL || mg->errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(mg->err, mg->errlen, fmt, ap);
	va_end(ap);

	/*
	 * libpq messages end in a newline, some span lines with tabs: squeeze
	 * white space so the reason fits on the caller's one log line.
	 */
	w = mg->err;
	for (const char *r = mg->err; *r != '\0'; r++) {
		if (*r == ' ' || *r == '\n' || *r == '\r' || *r == '\t') {
			space = w != mg->err;
			continue;
		}
		if (space)
			*w++ = ' ';
		space = 0;
		*w++ = *r;
	}
	*w = '\0';
}

/*
 * Line of the 1-based character position pos in sql, which the server
 * reports for the whole query string even when it holds many statements.
 * Positions count characters: UTF-8 continuation bytes are skipped.
 */
static int line_of(const char *sql, long pos)
{
	int line = 1;

	for (const unsigned char *p = (const unsigned char *)sql; *p != '\0' && pos > 1; p++) {
		if ((*p & 0xC0) == 0x80)
			continue;
		if (*p == '\n')
			line++;
		pos--;
	}
	return line;
}

static const char *field(const PGresult *res, int code)
{
	const char *v = PQresultErrorField(res, code);

	return v != NULL ? v : "";
}

/*
 * Records why res (possibly NULL) failed, prefixed with what: the server's
 * fields when it sent an error, else the connection's message. sql, when
 * given, is the text the position refers to, to name the failing line.
 */
static void set_res_err(struct mig *mg, const char *what, const PGresult *res, const char *sql)
{
	const char *primary = res != NULL ? field(res, PG_DIAG_MESSAGE_PRIMARY) : "";
	const char *pos = res != NULL ? field(res, PG_DIAG_STATEMENT_POSITION) : "";
	const char *detail, *hint, *context, *state;
	char line[32] = "";
	int ctxlen;

	if (primary[0] == '\0') {
		const char *msg = PQerrorMessage(mg->conn);

		set_err(mg, "%s: %s", what, msg[0] != '\0' ? msg : "unexpected result from server");
		return;
	}
	detail = field(res, PG_DIAG_MESSAGE_DETAIL);
	hint = field(res, PG_DIAG_MESSAGE_HINT);
	context = field(res, PG_DIAG_CONTEXT);
	state = field(res, PG_DIAG_SQLSTATE);
	if (sql != NULL && pos[0] != '\0')
		snprintf(line, sizeof(line), "line %d: ", line_of(sql, strtol(pos, NULL, 10)));
	if (strcmp(state, SQLSTATE_INVALID_SCHEMA) == 0 && hint[0] == '\0')
		hint = "has sql/bootstrap.sql been run in this database?";
	/* The innermost context line says where inside a function body. */
	ctxlen = (int)strcspn(context, "\n");

	set_err(mg, "%s: %s%s (SQLSTATE %s)%s%s%s%s%s%.*s", what, line, primary, state,
		detail[0] != '\0' ? "; detail: " : "", detail,
		hint[0] != '\0' ? "; hint: " : "", hint,
		ctxlen > 0 ? "; context: " : "", ctxlen, context);
}

/* Runs a statement without parameters; 0 if it returned expect. */
static int exec_simple(struct mig *mg, const char *what, const char *sql, ExecStatusType expect)
{
	PGresult *res = PQexec(mg->conn, sql);
	int ok = res != NULL && PQresultStatus(res) == expect;

	if (!ok)
		set_res_err(mg, what, res, NULL);
	PQclear(res);
	return ok ? 0 : -1;
}

/* Runs a query without parameters; 0 with its rows in *out. */
static int exec_simple_res(struct mig *mg, const char *what, const char *sql, PGresult **out)
{
	PGresult *res = PQexec(mg->conn, sql);

	if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK) {
		set_res_err(mg, what, res, NULL);
		PQclear(res);
		return -1;
	}
	*out = res;
	return 0;
}

/* Runs a statement with one text parameter; 0 if it returned expect. */
static int exec_param(struct mig *mg, const char *what, const char *sql, const char *param,
		      ExecStatusType expect, PGresult **out)
{
	const char *params[1] = { param };
	PGresult *res = PQexecParams(mg->conn, sql, 1, NULL, params, NULL, NULL, 0);
	int ok = res != NULL && PQresultStatus(res) == expect;

	if (!ok)
		set_res_err(mg, what, res, NULL);
	if (ok && out != NULL)
		*out = res;
	else
		PQclear(res);
	return ok ? 0 : -1;
}

/*
 * Ends a failed transaction. The error is already recorded; a failing
 * ROLLBACK (connection gone) adds nothing useful, and PQfinish ends the
 * transaction anyway.
 */
static void rollback(struct mig *mg)
{
	PQclear(PQexec(mg->conn, "ROLLBACK"));
}

/* BEGIN, then wait for our turn. */
static int begin_locked(struct mig *mg, const char *what)
{
	if (exec_simple(mg, what, "BEGIN", PGRES_COMMAND_OK) < 0)
		return -1;
	if (exec_param(mg, what, LOCK_SQL, mg->schema, PGRES_TUPLES_OK, NULL) < 0) {
		rollback(mg);
		return -1;
	}
	return 0;
}

/*
 * Creates <schema>.schema_migrations under the lock: two concurrent CREATE
 * TABLE IF NOT EXISTS can both decide to create it, and the second then fails
 * on a unique index of the catalog.
 */
static int ensure_version_table(struct mig *mg)
{
	char what[128];
	char sql[512];
	PGresult *res = NULL;
	int missing;

	snprintf(what, sizeof(what), "%s.schema_migrations", mg->schema);
	if (begin_locked(mg, what) < 0)
		return -1;

	/* Checked first so the COMMENT is written once, not on every start. */
	if (exec_param(mg, what, "SELECT to_regclass(quote_ident($1) || '.schema_migrations') IS NULL",
		       mg->schema, PGRES_TUPLES_OK, &res) < 0)
		goto fail;
	missing = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);

	if (missing) {
		snprintf(sql, sizeof(sql),
			 "CREATE TABLE IF NOT EXISTS %s.schema_migrations ("
			 "version text PRIMARY KEY, "
			 "applied_at timestamptz NOT NULL DEFAULT now())",
			 mg->ident);
		if (exec_simple(mg, what, sql, PGRES_COMMAND_OK) < 0)
			goto fail;
		snprintf(sql, sizeof(sql),
			 "COMMENT ON TABLE %s.schema_migrations IS "
			 "'Migrations applied by the service at start: file name and when'",
			 mg->ident);
		if (exec_simple(mg, what, sql, PGRES_COMMAND_OK) < 0)
			goto fail;
	}
	if (exec_simple(mg, what, "COMMIT", PGRES_COMMAND_OK) < 0)
		goto fail;
	return 0;

fail:
	rollback(mg);
	return -1;
}

/*
 * Applies one migration unless recorded. Returns 1 if applied, 0 if it already
 * was, -1 on error (transaction rolled back).
 */
static int apply_one(struct mig *mg, const struct migration *m)
{
	char sql[512];
	PGresult *res = NULL;
	int applied;

	if (begin_locked(mg, m->name) < 0)
		return -1;

	/*
	 * SET LOCAL: the migration's unqualified names land in the schema, and the
	 * setting ends with the transaction. Functions that need the schema
	 * later pin it with SET search_path FROM CURRENT.
	 */
	snprintf(sql, sizeof(sql), "SET LOCAL search_path = %s", mg->ident);
	if (exec_simple(mg, m->name, sql, PGRES_COMMAND_OK) < 0)
		goto fail;

	snprintf(sql, sizeof(sql), "SELECT 1 FROM %s.schema_migrations WHERE version = $1",
		 mg->ident);
	if (exec_param(mg, m->name, sql, m->name, PGRES_TUPLES_OK, &res) < 0)
		goto fail;
	applied = PQntuples(res) > 0;
	PQclear(res);
	if (applied)
		return exec_simple(mg, m->name, "COMMIT", PGRES_COMMAND_OK) < 0 ? -1 : 0;

	/*
	 * Simple query protocol, so one file may hold many statements; PQexec
	 * returns the first error if there is one. A file must not contain
	 * BEGIN or COMMIT of its own.
	 */
	res = PQexec(mg->conn, m->sql);
	if (res == NULL ||
	    (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK &&
	     PQresultStatus(res) != PGRES_EMPTY_QUERY)) {
		set_res_err(mg, m->name, res, m->sql);
		PQclear(res);
		goto fail;
	}
	PQclear(res);

	snprintf(sql, sizeof(sql), "INSERT INTO %s.schema_migrations (version) VALUES ($1)",
		 mg->ident);
	if (exec_param(mg, m->name, sql, m->name, PGRES_COMMAND_OK, NULL) < 0)
		goto fail;
	if (exec_simple(mg, m->name, "COMMIT", PGRES_COMMAND_OK) < 0)
		goto fail;
	return 1;

fail:
	rollback(mg);
	return -1;
}

/*
 * Server messages would otherwise go raw to stderr, between JSON log lines.
 * NOTICEs ("relation already exists, skipping") are expected noise; anything
 * above is worth a log line.
 */
static void on_notice(void *arg, const PGresult *res)
{
	const struct mig *mg = arg;
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

	if (sev == NULL || strcmp(sev, "WARNING") != 0)
		return;
	log_warn("migrate %s: server warning: %s", mg->schema, msg != NULL ? msg : "");
}

/*
 * The schema's owner, and no one else, applies its migrations: what they
 * create belongs to whoever runs them, and tables owned by a superuser
 * (its URL pasted into the wrong DATABASE_URL) lock the service's own role
 * out for good and escape the auditor's default privileges (docs/protocol.md, "Tables"). A
 * schema that does not exist yet is left to the hint of the first statement.
 */
static int check_owner(struct mig *mg)
{
	PGresult *res;
	int rc = 0;

	if (exec_param(mg, "schema owner",
		       "SELECT pg_get_userbyid(nspowner), current_user"
		       "  FROM pg_namespace WHERE nspname = $1",
		       mg->schema, PGRES_TUPLES_OK, &res) < 0)
		return -1;
	if (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1)) != 0) {
		set_err(mg, "schema %s belongs to role %s, but DATABASE_URL connects as %s: "
			    "connect as %s (each service as its own role)",
			mg->schema, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
			PQgetvalue(res, 0, 0));
		rc = -1;
	}
	PQclear(res);
	return rc;
}

/* Appends item to the comma-separated list in buf (cut short, with "...",
 * after LIST_MAX items); *count counts every item. */
static void list_add(char *buf, size_t len, int *count, const char *item)
{
	size_t used = strlen(buf);

	if (*count < LIST_MAX)
		snprintf(buf + used, len - used, "%s%s", *count > 0 ? ", " : "", item);
	else if (*count == LIST_MAX)
		snprintf(buf + used, len - used, ", ...");
	(*count)++;
}

/* Whether version is among the rows of rec (one text column). */
static int recorded(const PGresult *rec, const char *version)
{
	for (int i = 0; i < PQntuples(rec); i++) {
		if (strcmp(PQgetvalue(rec, i, 0), version) == 0)
			return 1;
	}
	return 0;
}

static int in_list(const char *const *list, const char *version)
{
	for (; *list != NULL; list++) {
		if (strcmp(*list, version) == 0)
			return 1;
	}
	return 0;
}

/* Whether this binary knows version: one of its migrations, or one that an
 * earlier release it adopts recorded. */
static int known(const struct migration *m, size_t n, const char *version)
{
	for (size_t i = 0; i < n; i++) {
		if (m[i].adopts == NULL ? strcmp(m[i].name, version) == 0
					: in_list(m[i].adopts, version))
			return 1;
	}
	return 0;
}

/* The major version this binary's migrations bring a schema to. */
static int binary_major(const struct migration *m, size_t n)
{
	int major = 0;

	for (size_t i = 0; i < n; i++) {
		if (m[i].major > major)
			major = m[i].major;
	}
	return major;
}

/* Creates <schema>.schema_version holding major, in the caller's transaction. */
static int create_major(struct mig *mg, int major)
{
	char sql[768];

	snprintf(sql, sizeof(sql),
		 "CREATE TABLE %s.schema_version ("
		 "major int NOT NULL CHECK (major >= 0), "
		 "updated_at timestamptz NOT NULL DEFAULT now()); "
		 "CREATE UNIQUE INDEX schema_version_one_row ON %s.schema_version ((true)); "
		 "COMMENT ON TABLE %s.schema_version IS "
		 "'Major version of this schema (one row): a pgsaga binary of an older major "
		 "version refuses to start on it'; "
		 "INSERT INTO %s.schema_version (major) VALUES (%d)",
		 mg->ident, mg->ident, mg->ident, mg->ident, major);
	return exec_simple(mg, "schema_version", sql, PGRES_COMMAND_OK);
}

/*
 * A schema with versions recorded and no schema_version: made by an earlier
 * release. Adopts it (the adoption's SQL, then the migrations before it
 * recorded, then the major version) when it recorded exactly the versions
 * of a release this binary adopts; else says what is wrong. In the caller's
 * locked transaction. Returns 1 if adopted, -1 on refusal or error.
 */
static int adopt(struct mig *mg, const struct migration *m, size_t n, const PGresult *rec)
{
	char sql[512];
	const struct migration *best = NULL;
	int best_found = 0;
	size_t at = 0;

	/* The release whose versions the schema holds most of. */
	for (size_t i = 0; i < n; i++) {
		int found = 0;

		if (m[i].adopts == NULL)
			continue;
		for (const char *const *v = m[i].adopts; *v != NULL; v++)
			found += recorded(rec, *v);
		if (best == NULL || found > best_found) {
			best = &m[i];
			best_found = found;
			at = i;
		}
	}

	if (best == NULL || best_found == 0) {
		char list[512] = "";
		int count = 0;

		for (int i = 0; i < PQntuples(rec); i++)
			list_add(list, sizeof(list), &count, PQgetvalue(rec, i, 0));
		set_err(mg, "schema %s records %d migration(s) (%s) but has no %s.schema_version: "
			    "it was not made by a pgsaga release this binary can upgrade",
			mg->schema, count, list, mg->schema);
		return -1;
	}

	char missing[512] = "", unknown[512] = "";
	int nmissing = 0, nunknown = 0;

	for (const char *const *v = best->adopts; *v != NULL; v++) {
		if (!recorded(rec, *v))
			list_add(missing, sizeof(missing), &nmissing, *v);
	}
	for (int i = 0; i < PQntuples(rec); i++) {
		if (!in_list(best->adopts, PQgetvalue(rec, i, 0)))
			list_add(unknown, sizeof(unknown), &nunknown, PQgetvalue(rec, i, 0));
	}
	if (nmissing > 0) {
		set_err(mg, "schema %s was made by a pgsaga build older than %s: %d of its "
			    "migrations are not recorded (%s); start pgsaga %s on this database "
			    "once (it applies them), then this binary",
			mg->schema, best->name, nmissing, missing, best->name);
		return -1;
	}
	if (nunknown > 0) {
		set_err(mg, "schema %s records the migrations of pgsaga %s and %d more this "
			    "binary does not know (%s): not a schema it can adopt",
			mg->schema, best->name, nunknown, unknown);
		return -1;
	}

	snprintf(sql, sizeof(sql), "SET LOCAL search_path = %s", mg->ident);
	if (exec_simple(mg, best->name, sql, PGRES_COMMAND_OK) < 0)
		return -1;
	PGresult *res = PQexec(mg->conn, best->sql);

	if (res == NULL ||
	    (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK &&
	     PQresultStatus(res) != PGRES_EMPTY_QUERY)) {
		char what[64];

		snprintf(what, sizeof(what), "adopt-%s.sql", best->name);
		set_res_err(mg, what, res, best->sql);
		PQclear(res);
		return -1;
	}
	PQclear(res);

	/* The earlier release's rows stay: its binaries still start on it. */
	snprintf(sql, sizeof(sql),
		 "INSERT INTO %s.schema_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING",
		 mg->ident);
	for (size_t i = 0; i < at; i++) {
		if (m[i].adopts == NULL &&
		    exec_param(mg, m[i].name, sql, m[i].name, PGRES_COMMAND_OK, NULL) < 0)
			return -1;
	}
	if (create_major(mg, binary_major(m, n)) < 0)
		return -1;
	log_info("schema %s: adopted the schema of pgsaga %s in place (%d versions it recorded)",
		 mg->schema, best->name, best_found);
	return 1;
}

/*
 * Looks at the schema under the lock and decides, in one transaction: a
 * fresh schema gets its major version; one of an earlier release is adopted;
 * one of a newer major version, or with versions this binary cannot place,
 * is refused. *db_major: the schema's major version before this start (-1
 * when it had none). Returns 1 if adopted, 0 to go on, -1 to stop.
 */
static int check_schema(struct mig *mg, const struct migration *m, size_t n, int *db_major)
{
	char sql[512];
	PGresult *rec = NULL, *res = NULL;
	int want = binary_major(m, n);
	int rc = -1;

	*db_major = -1;
	if (begin_locked(mg, "schema version") < 0)
		return -1;
	snprintf(sql, sizeof(sql), "SELECT version FROM %s.schema_migrations ORDER BY version",
		 mg->ident);
	if (exec_simple_res(mg, "schema_migrations", sql, &rec) < 0)
		goto out;
	if (exec_param(mg, "schema_version",
		       "SELECT to_regclass(quote_ident($1) || '.schema_version') IS NOT NULL",
		       mg->schema, PGRES_TUPLES_OK, &res) < 0)
		goto out;
	int has_major = strcmp(PQgetvalue(res, 0, 0), "t") == 0;

	PQclear(res);
	res = NULL;

	if (!has_major) {
		if (PQntuples(rec) == 0)
			rc = create_major(mg, want) < 0 ? -1 : 0; /* a new schema */
		else
			rc = adopt(mg, m, n, rec);
		goto out;
	}

	snprintf(sql, sizeof(sql), "SELECT max(major) FROM %s.schema_version", mg->ident);
	if (exec_simple_res(mg, "schema_version", sql, &res) < 0)
		goto out;
	if (PQgetisnull(res, 0, 0)) {
		set_err(mg, "%s.schema_version is empty: it should hold the schema's major version",
			mg->schema);
		goto out;
	}
	*db_major = atoi(PQgetvalue(res, 0, 0));
	if (*db_major > want) {
		set_err(mg, "schema %s is at major version %d (%s.schema_version), newer than this "
			    "binary, which runs major version %d: run a pgsaga %d.x binary, or newer",
			mg->schema, *db_major, mg->schema, want, *db_major);
		goto out;
	}

	char unknown[512] = "";
	int nunknown = 0;

	for (int i = 0; i < PQntuples(rec); i++) {
		if (!known(m, n, PQgetvalue(rec, i, 0)))
			list_add(unknown, sizeof(unknown), &nunknown, PQgetvalue(rec, i, 0));
	}
	if (nunknown > 0 && *db_major < want) {
		set_err(mg, "schema %s (major version %d) records %d migration(s) this binary "
			    "(major version %d) does not know (%s): it upgrades only a schema "
			    "whose every migration it knows",
			mg->schema, *db_major, nunknown, want, unknown);
		goto out;
	}
	if (nunknown > 0) {
		/* Within one major version migrations only add: run on it. */
		log_info("schema %s: %d migration(s) this binary does not know (%s), applied by a "
			 "newer release of major version %d; running on it",
			 mg->schema, nunknown, unknown, want);
	}
	rc = 0;

out:
	PQclear(rec);
	PQclear(res);
	if (rc < 0 || exec_simple(mg, "schema version", "COMMIT", PGRES_COMMAND_OK) < 0) {
		rollback(mg);
		return -1;
	}
	return rc;
}

/* A schema of an earlier major version, migrated: records this binary's. */
static int raise_major(struct mig *mg, int major)
{
	char sql[256];

	if (begin_locked(mg, "schema_version") < 0)
		return -1;
	snprintf(sql, sizeof(sql),
		 "UPDATE %s.schema_version SET major = %d, updated_at = now() WHERE major < %d",
		 mg->ident, major, major);
	if (exec_simple(mg, "schema_version", sql, PGRES_COMMAND_OK) < 0 ||
	    exec_simple(mg, "schema_version", "COMMIT", PGRES_COMMAND_OK) < 0) {
		rollback(mg);
		return -1;
	}
	log_info("schema %s: now at major version %d", mg->schema, major);
	return 0;
}

int migrate_apply(const char *conninfo, const char *schema, const struct migration *m, size_t n,
		  char *err, size_t errlen)
{
	struct mig mg = { .schema = schema, .err = err, .errlen = errlen };
	int count = 0;
	int db_major = -1;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (schema == NULL || schema[0] == '\0' || (m == NULL && n > 0)) {
		set_err(&mg, "migrate: no schema or no migrations given");
		return -1;
	}

	struct db_conn_params params;

	db_conn_params_init(&params, conninfo);
	mg.conn = PQconnectdbParams(params.keys, params.vals, 1);
	if (mg.conn == NULL) {
		set_err(&mg, "connect: out of memory");
		return -1;
	}
	if (PQstatus(mg.conn) != CONNECTION_OK) {
		set_err(&mg, "connect: %s", PQerrorMessage(mg.conn));
		PQfinish(mg.conn);
		return -1;
	}
	PQsetNoticeReceiver(mg.conn, on_notice, &mg);

	mg.ident = PQescapeIdentifier(mg.conn, schema, strlen(schema));
	if (mg.ident == NULL) {
		set_err(&mg, "schema %s: %s", schema, PQerrorMessage(mg.conn));
		count = -1;
		goto out;
	}
	if (strlen(mg.ident) > 200) {
		/* Keeps the statements built with it within their buffers. */
		set_err(&mg, "schema %s: name too long", schema);
		count = -1;
		goto out;
	}

	if (check_owner(&mg) < 0 || ensure_version_table(&mg) < 0) {
		count = -1;
		goto out;
	}
	count = check_schema(&mg, m, n, &db_major);
	if (count < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		int r = m[i].adopts == NULL ? apply_one(&mg, &m[i]) : 0;

		if (r < 0) {
			count = -1;
			goto out;
		}
		count += r;
	}
	if (db_major >= 0 && db_major < binary_major(m, n) &&
	    raise_major(&mg, binary_major(m, n)) < 0)
		count = -1;

out:
	PQfreemem(mg.ident);
	PQfinish(mg.conn);
	return count;
}
