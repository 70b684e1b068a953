/* definitions_migrate: see definitions_migrate.h. */
#include "definitions_migrate.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_api.h"
#include "db.h"
#include "httpd.h"
#include "jsonx.h"
#include "log.h"
#include "saga_machine.h"
#include "saga_registry.h"
#include "service.h"
#include "transport.h"
#include "uuid.h"

#define PAGE "500"    /* sagas read at a time */
#define PAGE_ROWS 500
#define WINDOW 4      /* moves out at once */
#define IDS_MAX 1000  /* sagaIds */

static const char page_sql[] =
	"SELECT saga_id, state, compensation, version, input::text"
	"  FROM saga_migrate_candidates($1, $2::int, $3::uuid, $4::uuid[], $5::int)";

static const char move_sql[] =
	"SELECT saga_migrate($1::uuid, $2, $3::int, $4::int, $5::int, $6)";

struct migrate_job;

/* A saga that may move, as it was read. */
struct move {
	struct migrate_job *m;
	char id[UUID_STR_LEN];
	char version[12];
	char state[sizeof("Pending") + SAGA_DEF_WORD_MAX];
};

struct migrate_job {
	struct service *svc;
	struct evhttp_request *req;
	char name[SAGA_DEF_NAME_MAX + 1];
	int32_t from, to;
	char from_s[12], to_s[12];
	const struct saga_def *a, *b;
	char (*want)[UUID_STR_LEN]; /* sagaIds, sorted and distinct; NULL: every saga */
	bool *seen;                 /* ... and whether the reads met it */
	size_t nwant;
	char *ids;                  /* the same as a uuid[] literal */
	char after[UUID_STR_LEN];   /* the last saga read: the next page starts after it */
	bool last_page;
	struct move *moves;         /* of the page read last */
	size_t nmoves, next, out;
	long migrated;
	struct json_object *refused;
	bool failed; /* answered with an error: the moves still out are waited for */
};

static void migration_free(struct migrate_job *m)
{
	free(m->want);
	free(m->seen);
	free(m->ids);
	free(m->moves);
	json_object_put(m->refused);
	free(m);
}

static void refuse(struct migrate_job *m, const char *id, const char *reason)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "sagaId", json_object_new_string(id));
	json_object_object_add(o, "reason", json_object_new_string(reason));
	json_object_array_add(m->refused, o);
}

static void fail(struct migrate_job *m, const struct db_error *err)
{
	if (!m->failed)
		reply_db_error(m->req, err, "migrating sagas");
	m->failed = true;
}

static void finish(struct migrate_job *m)
{
	struct json_object *o = json_object_new_object();

	/* a saga asked for and never read: unknown, finished or of another version */
	for (size_t i = 0; i < m->nwant; i++)
		if (!m->seen[i])
			refuse(m, m->want[i], "moved");
	json_object_object_add(o, "migrated", json_object_new_int64(m->migrated));
	json_object_object_add(o, "refused", json_object_get(m->refused));
	log_info("saga definition %s: %ld sagas migrated from version %d to %d, %zu refused",
		 m->name, m->migrated, (int)m->from, (int)m->to,
		 json_object_array_length(m->refused));
	admin_reply_json(m->req, o);
	json_object_put(o);
	migration_free(m);
}

static void read_page(struct migrate_job *m);
static void moved(void *arg, PGresult *res, const struct db_error *err);

/* Keeps up to WINDOW moves out; reads the next page, or ends, when all are back. */
static void pump(struct migrate_job *m)
{
	while (!m->failed && m->out < WINDOW && m->next < m->nmoves) {
		struct move *mv = &m->moves[m->next++];
		const char *params[6] = { mv->id, m->name, m->from_s, m->to_s, mv->version, mv->state };

		m->out++;
		db_query(m->svc->pool, move_sql, 6, params, moved, mv);
	}
	if (m->out > 0)
		return;
	if (m->failed)
		migration_free(m);
	else if (!m->last_page)
		read_page(m);
	else
		finish(m);
}

static void moved(void *arg, PGresult *res, const struct db_error *err)
{
	struct move *mv = arg;
	struct migrate_job *m = mv->m;

	m->out--;
	if (err->status != DB_OK)
		fail(m, err);
	else if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
		m->migrated++;
	else
		refuse(m, mv->id, "moved"); /* it changed since it was read */
	pump(m);
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Why the saga of this row may not move, or NULL when it may. */
static const char *decide(struct migrate_job *m, PGresult *res, int row)
{
	const char *state = PQgetvalue(res, row, 1), *why;
	struct json_object *input;
	struct saga_pos pos;

	/*
	 * Before the position: the order saga's compensation column keeps its
	 * 1.0 names (refund, release), not step names.
	 */
	if (strcmp(state, "Compensating") == 0)
		return "compensating";
	if (saga_machine_pos(m->a, state, db_val(res, row, 2), &pos) != 0) {
		log_error("saga %s: state %s is not one of %s version %d", PQgetvalue(res, row, 0),
			  state, m->name, (int)m->from);
		return "moved";
	}
	input = admin_parse_db(db_val(res, row, 4));
	why = saga_migrate_check(m->a, m->b, pos, input);
	json_object_put(input);
	return why;
}

static void page_read(void *arg, PGresult *res, const struct db_error *err)
{
	struct migrate_job *m = arg;
	int n;

	if (err->status != DB_OK) {
		fail(m, err);
		migration_free(m);
		return;
	}
	n = PQntuples(res);
	m->nmoves = m->next = 0;
	m->moves = realloc(m->moves, (size_t)(n > 0 ? n : 1) * sizeof(*m->moves));
	if (!m->moves)
		abort();
	for (int i = 0; i < n; i++) {
		const char *id = PQgetvalue(res, i, 0), *why = decide(m, res, i);
		char(*w)[UUID_STR_LEN] =
			m->want ? bsearch(id, m->want, m->nwant, sizeof(*m->want), id_cmp) : NULL;

		if (w)
			m->seen[w - m->want] = true;
		if (why) {
			refuse(m, id, why);
			continue;
		}
		struct move *mv = &m->moves[m->nmoves++];

		mv->m = m;
		snprintf(mv->id, sizeof(mv->id), "%s", id);
		snprintf(mv->version, sizeof(mv->version), "%s", PQgetvalue(res, i, 3));
		snprintf(mv->state, sizeof(mv->state), "%s", PQgetvalue(res, i, 1));
	}
	if (n > 0)
		snprintf(m->after, sizeof(m->after), "%s", PQgetvalue(res, n - 1, 0));
	m->last_page = n < PAGE_ROWS;
	pump(m);
}

static void read_page(struct migrate_job *m)
{
	const char *params[5] = { m->name, m->from_s, m->after[0] ? m->after : NULL, m->ids, PAGE };

	db_query(m->svc->pool, page_sql, 5, params, page_read, m);
}

/* Both versions known here, else 404; then the sagas. */
static void resolve(struct migrate_job *m)
{
	m->a = saga_registry_get(m->name, m->from);
	m->b = saga_registry_get(m->name, m->to);
	if (!m->a || !m->b) {
		httpd_error(m->req, 404, "not_found", "%s version %d is not registered", m->name,
			    (int)(m->a ? m->to : m->from));
		migration_free(m);
		return;
	}
	read_page(m);
}

static void reloaded(void *arg, int rc)
{
	struct migrate_job *m = arg;

	if (rc != 0) {
		httpd_unavailable(m->req);
		migration_free(m);
		return;
	}
	resolve(m);
}

/* sagaIds into m (sorted, distinct, lower case); false when malformed. */
static bool saga_ids(struct migrate_job *m, struct json_object *arr)
{
	size_t n, k = 0;
	char *p;

	if (!json_object_is_type(arr, json_type_array) || (n = json_object_array_length(arr)) < 1 ||
	    n > IDS_MAX)
		return false;
	m->want = calloc(n, sizeof(*m->want));
	if (!m->want)
		abort();
	for (size_t i = 0; i < n; i++) {
		struct json_object *v = json_object_array_get_idx(arr, i);
		const char *id = json_object_get_string(v);

		/* the length too: a \u0000 would end id early */
		if (!json_object_is_type(v, json_type_string) || !uuid_valid(id) ||
		    json_object_get_string_len(v) != UUID_STR_LEN - 1)
			return false;
		for (size_t j = 0; j < UUID_STR_LEN; j++)
			m->want[i][j] = (char)tolower((unsigned char)id[j]);
	}
	qsort(m->want, n, sizeof(*m->want), id_cmp);
	for (size_t i = 0; i < n; i++)
		if (k == 0 || strcmp(m->want[i], m->want[k - 1]) != 0)
			memmove(m->want[k++], m->want[i], UUID_STR_LEN);
	m->nwant = k;
	m->seen = calloc(k, sizeof(*m->seen));
	p = m->ids = malloc(k * UUID_STR_LEN + 3);
	if (!m->seen || !p)
		abort();
	*p++ = '{';
	for (size_t i = 0; i < k; i++)
		p += sprintf(p, "%s%s", i ? "," : "", m->want[i]);
	strcpy(p, "}");
	return true;
}

/* The body into m; NULL, or the name of the first bad field. */
static const char *parse_body(struct migrate_job *m, struct json_object *obj)
{
	struct json_object *ids;
	int64_t v;

	if (jsonx_get_int(obj, "fromVersion", 1, INT32_MAX, &v) != 0)
		return "fromVersion";
	m->from = (int32_t)v;
	if (jsonx_get_int(obj, "toVersion", 1, INT32_MAX, &v) != 0 || v == m->from)
		return "toVersion";
	m->to = (int32_t)v;
	if (json_object_object_get_ex(obj, "sagaIds", &ids) && !saga_ids(m, ids))
		return "sagaIds";
	return NULL;
}

void definitions_migrate(struct evhttp_request *req, struct service *svc, const char *name)
{
	size_t len;
	const char *body = httpd_body(req, &len), *bad;
	char err[128];
	struct json_object *obj = jsonx_parse(body, len, err, sizeof(err));
	struct migrate_job *m;

	if (!obj) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		httpd_error(req, 400, "invalid_json", "the body must be a JSON object");
		return;
	}
	m = calloc(1, sizeof(*m));
	if (!m || !(m->refused = json_object_new_array()))
		abort();
	m->svc = svc;
	m->req = req;
	snprintf(m->name, sizeof(m->name), "%s", name);
	bad = parse_body(m, obj);
	json_object_put(obj);
	if (bad) {
		if (strcmp(bad, "sagaIds") == 0)
			httpd_error(req, 400, "invalid_field", "sagaIds: must be 1 to %d saga ids (UUIDs)",
				    IDS_MAX);
		else if (strcmp(bad, "toVersion") == 0 && m->from > 0)
			httpd_error(req, 400, "invalid_field",
				    "toVersion: must be an integer from 1 to 2147483647"
				    " other than fromVersion");
		else
			httpd_error(req, 400, "invalid_field", "%s: must be an integer from 1 to 2147483647",
				    bad);
		migration_free(m);
		return;
	}
	snprintf(m->from_s, sizeof(m->from_s), "%d", (int)m->from);
	snprintf(m->to_s, sizeof(m->to_s), "%d", (int)m->to);
	/* registered by another orchestrator since this one read the table? */
	if (!saga_registry_get(m->name, m->from) || !saga_registry_get(m->name, m->to))
		saga_registry_reload(reloaded, m);
	else
		resolve(m);
}
