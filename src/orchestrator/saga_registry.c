/* saga_registry: see saga_registry.h. */
#include "saga_registry.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "embedded.h"
#include "jsonx.h"
#include "log.h"
#include "service.h"

#define FILE_MAX (1 << 20) /* a definition file larger than this is refused */

struct entry {
	struct saga_def *def;
	char *json; /* canonical text */
};

struct waiter {
	void (*done)(void *arg, int rc);
	void *arg;
	struct waiter *next;
};

static struct {
	struct service *svc;
	struct entry *v;
	size_t n, cap;
	bool reading;
	struct waiter *waiting; /* for the read under way */
	void (*added)(const struct saga_def *d, void *arg); /* saga_registry_watch */
	void *added_arg;
} G;

/*
 * Registers one definition: stored unless its (name, version) is, and then
 * the stored one must be the same JSON value. Column 0: 'created', 'same'
 * or 'conflict'.
 */
/*
 * ON CONFLICT DO UPDATE (a no-op update), not DO NOTHING: when another
 * orchestrator inserts the same version at the same moment, DO NOTHING
 * waits for it to commit and then returns no row, and a read in the same
 * statement, with the snapshot taken before that commit, does not see it:
 * two orchestrators started together on a new database then took their
 * own compiled-in definition for a conflict (CI saw it). DO UPDATE returns
 * the committed row; xmax is 0 only for a row this statement inserted.
 */
static const char register_sql[] =
	"INSERT INTO saga_definitions AS d (name, version, definition)"
	"     VALUES ($1, $2::int, $3::jsonb)"
	"  ON CONFLICT (name, version) DO UPDATE SET definition = d.definition"
	"  RETURNING CASE WHEN d.xmax = 0 THEN 'created'"
	"                 WHEN d.definition = $3::jsonb THEN 'same' ELSE 'conflict' END";

static const char load_sql[] =
	"SELECT definition::text FROM saga_definitions ORDER BY name, version";

const struct saga_def *saga_registry_get(const char *name, int version)
{
	for (size_t i = 0; i < G.n; i++)
		if (G.v[i].def->version == version && strcmp(G.v[i].def->name, name) == 0)
			return G.v[i].def;
	return NULL;
}

const struct saga_def *saga_registry_latest(const char *name)
{
	const struct saga_def *best = NULL;

	for (size_t i = 0; i < G.n; i++)
		if (strcmp(G.v[i].def->name, name) == 0 &&
		    (!best || G.v[i].def->version > best->version))
			best = G.v[i].def;
	return best;
}

size_t saga_registry_count(void)
{
	return G.n;
}

const struct saga_def *saga_registry_at(size_t i)
{
	return i < G.n ? G.v[i].def : NULL;
}

const char *saga_registry_json(const struct saga_def *d)
{
	for (size_t i = 0; i < G.n; i++)
		if (G.v[i].def == d)
			return G.v[i].json;
	return NULL;
}

/*
 * Compiles text and keeps it, unless its (name, version) is here already.
 * Returns the definition here, or NULL with err (invalid).
 */
static const struct saga_def *add(const char *text, size_t len, char *err, size_t errlen)
{
	struct json_object *doc = jsonx_parse(text, len, err, errlen);
	struct saga_def *d;
	const struct saga_def *have;

	if (!doc) {
		char why[200];

		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, errlen, "definition: not valid JSON (%s)", why);
		return NULL;
	}
	d = saga_def_compile(doc, err, errlen);
	if (!d) {
		json_object_put(doc);
		return NULL;
	}
	have = saga_registry_get(d->name, d->version);
	if (have) {
		saga_def_free(d);
		json_object_put(doc);
		return have;
	}
	if (G.n == G.cap) {
		G.cap = G.cap ? 2 * G.cap : 8;
		G.v = realloc(G.v, G.cap * sizeof(*G.v));
		if (!G.v)
			abort();
	}
	G.v[G.n].def = d;
	G.v[G.n].json = jsonx_canonical(doc);
	if (!G.v[G.n].json)
		abort();
	json_object_put(doc);
	G.n++;
	if (G.added)
		G.added(d, G.added_arg);
	return d;
}

void saga_registry_watch(void (*added)(const struct saga_def *d, void *arg), void *arg)
{
	G.added = added;
	G.added_arg = arg;
	for (size_t i = 0; i < G.n; i++)
		added(G.v[i].def, arg);
}

/* --- at start ---------------------------------------------------------- */

/* One registration on the start's connection; 0, or -1 with err. */
static int register_sync(PGconn *conn, const char *what, const char *text, size_t len, char *err,
			 size_t errlen)
{
	char why[512], version[16];
	struct json_object *doc = jsonx_parse(text, len, why, sizeof(why));
	struct saga_def *d = NULL;
	char *canon = NULL;
	PGresult *res = NULL;
	int rc = -1;

	if (!doc) {
		snprintf(err, errlen, "%s: definition: not valid JSON (%s)", what, why);
		return -1;
	}
	d = saga_def_compile(doc, why, sizeof(why));
	if (!d) {
		snprintf(err, errlen, "%s: %s", what, why);
		goto out;
	}
	canon = jsonx_canonical(doc);
	if (!canon)
		abort();
	snprintf(version, sizeof(version), "%d", (int)d->version);
	const char *params[3] = { d->name, version, canon };

	res = PQexecParams(conn, register_sql, 3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "%s: registering it: %s", what, PQerrorMessage(conn));
		goto out;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "conflict") == 0) {
		snprintf(err, errlen,
			 "%s: %s version %s is registered already with another content"
			 " (a version never changes: register it as a new version)",
			 what, d->name, version);
		goto out;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "created") == 0)
		log_info("saga definition %s version %s registered (%s)", d->name, version, what);
	rc = 0;
out:
	PQclear(res);
	free(canon);
	saga_def_free(d);
	json_object_put(doc);
	return rc;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_json_file(const char *name)
{
	size_t n = strlen(name);

	return name[0] != '.' && n > 5 && strcmp(name + n - 5, ".json") == 0;
}

/* Reads path whole; NULL with err when it cannot or it is too large. */
static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	buf = malloc(FILE_MAX + 1);
	if (!buf)
		abort();
	*len = fread(buf, 1, FILE_MAX + 1, f);
	if (ferror(f) || *len > FILE_MAX) {
		snprintf(err, errlen, "%s: %s", path,
			 ferror(f) ? strerror(errno) : "larger than 1 MiB");
		fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	buf[*len] = '\0';
	return buf;
}

/* Every *.json of dir, in name order. */
static int register_dir(PGconn *conn, const char *dir, char *err, size_t errlen)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!d) {
		snprintf(err, errlen, "SAGA_DEFINITIONS_DIR %s: %s", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		if (!is_json_file(e->d_name))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			names = realloc(names, cap * sizeof(*names));
			if (!names)
				abort();
		}
		if (!(names[n++] = strdup(e->d_name)))
			abort();
	}
	closedir(d);
	if (n > 0)
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		size_t len;
		char *text;

		if (rc != 0)
			break;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		text = read_file(path, &len, err, errlen);
		if (!text || register_sync(conn, path, text, len, err, errlen) != 0)
			rc = -1;
		free(text);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/* Adds the rows of load_sql; -1 with err when one does not compile (a bug). */
static int add_rows(PGresult *res, char *err, size_t errlen)
{
	for (int i = 0; i < PQntuples(res); i++) {
		char why[512];
		const char *text = PQgetvalue(res, i, 0);

		if (!add(text, strlen(text), why, sizeof(why))) {
			snprintf(err, errlen, "a registered definition does not compile: %s", why);
			return -1;
		}
	}
	return 0;
}

int saga_registry_open(struct service *svc, const char *dir, char *err, size_t errlen)
{
	struct db_conn_params params;
	PGconn *conn;
	PGresult *res = NULL;
	int rc = -1;

	G.svc = svc;
	db_conn_params_init(&params, svc->database_url);
	conn = PQconnectdbParams(params.keys, params.vals, 1);
	if (PQstatus(conn) != CONNECTION_OK) {
		snprintf(err, errlen, "saga definitions: connecting: %s", PQerrorMessage(conn));
		goto out;
	}
	res = PQexec(conn, "SET search_path = orchestrator");
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		snprintf(err, errlen, "saga definitions: %s", PQerrorMessage(conn));
		goto out;
	}
	PQclear(res);
	res = NULL;
	for (size_t i = 0; i < definitions_files_count; i++)
		if (register_sync(conn, definitions_files[i].name, definitions_files[i].data,
				  definitions_files[i].len, err, errlen) != 0)
			goto out;
	if (dir && dir[0] && register_dir(conn, dir, err, errlen) != 0)
		goto out;
	res = PQexec(conn, load_sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "saga definitions: loading: %s", PQerrorMessage(conn));
		goto out;
	}
	rc = add_rows(res, err, errlen);
out:
	PQclear(res);
	PQfinish(conn);
	return rc;
}

void saga_registry_close(void)
{
	for (size_t i = 0; i < G.n; i++) {
		saga_def_free(G.v[i].def);
		free(G.v[i].json);
	}
	free(G.v);
	memset(&G, 0, sizeof(G));
}

/* --- while running ----------------------------------------------------- */

static void loaded(void *arg, PGresult *res, const struct db_error *err)
{
	struct waiter *w = G.waiting;
	char why[512];
	int rc = -1;

	if (err->status == DB_OK) {
		rc = add_rows(res, why, sizeof(why));
		if (rc != 0)
			log_error("%s", why);
	}
	G.reading = false;
	G.waiting = NULL;
	while (w) {
		struct waiter *next = w->next;

		if (w->done)
			w->done(w->arg, rc);
		free(w);
		w = next;
	}
}

void saga_registry_reload(void (*done)(void *arg, int rc), void *arg)
{
	struct waiter *w = malloc(sizeof(*w));

	if (!w)
		abort();
	*w = (struct waiter){ done, arg, G.waiting };
	G.waiting = w;
	if (G.reading)
		return;
	G.reading = true;
	db_query(G.svc->pool, load_sql, 0, NULL, loaded, NULL);
}

struct reg {
	saga_reg_cb done;
	void *arg;
	char *canon;
};

static void registered(void *arg, PGresult *res, const struct db_error *err)
{
	struct reg *r = arg;
	char why[512];

	if (err->status != DB_OK) {
		r->done(r->arg, REG_DB_ERROR, NULL,
			err->status == DB_SQL_ERROR ? err->message : "database unavailable");
	} else if (strcmp(PQgetvalue(res, 0, 0), "conflict") == 0) {
		r->done(r->arg, REG_CONFLICT, NULL, NULL);
	} else {
		const struct saga_def *d = add(r->canon, strlen(r->canon), why, sizeof(why));

		if (!d)
			abort(); /* it compiled before it was stored */
		r->done(r->arg, strcmp(PQgetvalue(res, 0, 0), "created") == 0 ? REG_CREATED : REG_SAME,
			d, NULL);
	}
	free(r->canon);
	free(r);
}

void saga_registry_register(const char *text, size_t len, saga_reg_cb done, void *arg)
{
	char why[512], version[16];
	struct json_object *doc = jsonx_parse(text, len, why, sizeof(why));
	struct saga_def *d;
	struct reg *r;

	if (!doc) {
		char msg[600];

		snprintf(msg, sizeof(msg), "definition: not valid JSON (%s)", why);
		done(arg, REG_INVALID, NULL, msg);
		return;
	}
	d = saga_def_compile(doc, why, sizeof(why));
	if (!d) {
		json_object_put(doc);
		done(arg, REG_INVALID, NULL, why);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	r->done = done;
	r->arg = arg;
	r->canon = jsonx_canonical(doc);
	if (!r->canon)
		abort();
	snprintf(version, sizeof(version), "%d", (int)d->version);
	const char *params[3] = { d->name, version, r->canon };

	db_query(G.svc->pool, register_sql, 3, params, registered, r);
	saga_def_free(d);
	json_object_put(doc);
}
