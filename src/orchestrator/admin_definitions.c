/* admin_definitions: see admin_definitions.h. */
#include "admin_definitions.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_api.h"
#include "db.h"
#include "definitions_migrate.h"
#include "httpd.h"
#include "jsonx.h"
#include "log.h"
#include "saga_registry.h"
#include "service.h"
#include "transport.h"

/* --- POST /admin/api/definitions ----------------------------------------- */

struct reg {
	struct evhttp_request *req;
	/* what the body names, for the conflict's message (a valid definition's) */
	char name[SAGA_DEF_NAME_MAX + 1];
	int64_t version;
};

static void registered(void *arg, enum saga_reg_outcome o, const struct saga_def *d,
		       const char *msg)
{
	struct reg *r = arg;
	char body[SAGA_DEF_NAME_MAX + 64];

	switch (o) {
	case REG_CREATED:
	case REG_SAME:
		if (o == REG_CREATED)
			log_info("saga definition %s version %d registered (admin API)", d->name,
				 (int)d->version);
		snprintf(body, sizeof(body), "{\"name\":\"%s\",\"version\":%d}", d->name,
			 (int)d->version);
		httpd_reply(r->req, o == REG_CREATED ? 201 : 200, body);
		break;
	case REG_CONFLICT:
		if (r->name[0] && r->version > 0)
			httpd_error(r->req, 409, "definition_exists",
				    "%s version %" PRId64 " is registered already with another content"
				    " (a version never changes: register it as a new version)",
				    r->name, r->version);
		else
			httpd_error(r->req, 409, "definition_exists",
				    "this version is registered already with another content");
		break;
	case REG_INVALID:
		/* saga_def.h: safe to put in a JSON string */
		httpd_error(r->req, 400, "invalid_definition", "%s", msg);
		break;
	case REG_DB_ERROR:
		log_error("registering a saga definition: %s", msg);
		httpd_unavailable(r->req);
		break;
	}
	free(r);
}

void admin_definitions_post(struct evhttp_request *req, void *svc, const char *tail)
{
	size_t len;
	const char *body = httpd_body(req, &len), *name;
	char err[128];
	struct json_object *doc = jsonx_parse(body, len, err, sizeof(err));
	struct reg *r;

	(void)svc;
	(void)tail;
	/* text that is not JSON is invalid_json, as everywhere; JSON that is
	 * not a definition is invalid_definition, naming the path */
	if (!doc) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	r->req = req;
	if (json_object_is_type(doc, json_type_object)) {
		if (jsonx_get_str(doc, "name", SAGA_DEF_NAME_MAX, &name) == 0)
			snprintf(r->name, sizeof(r->name), "%s", name);
		if (jsonx_get_int(doc, "version", 1, INT32_MAX, &r->version) != 0)
			r->version = 0;
	}
	json_object_put(doc);
	saga_registry_register(body, len, registered, r);
}

/* --- GET /admin/api/definitions ----------------------------------------- */

static const char list_sql[] =
	"SELECT json_build_object('definitions', coalesce(json_agg(json_build_object("
	"    'name', d.name, 'versions', d.versions, 'latest', d.versions[cardinality(d.versions)])"
	"    ORDER BY d.name COLLATE \"C\"), '[]'::json))::text"
	"  FROM (SELECT name, array_agg(version ORDER BY version) AS versions"
	"          FROM saga_definitions GROUP BY name) d";

static void listed(void *arg, PGresult *res, const struct db_error *err)
{
	struct evhttp_request *req = arg;
	char *text;

	if (err->status != DB_OK) {
		reply_db_error(req, err, "listing saga definitions");
		return;
	}
	text = jsonx_compact(PQgetvalue(res, 0, 0));
	if (!text) {
		httpd_error(req, 500, "internal", "the definitions could not be read");
		return;
	}
	httpd_reply(req, 200, text);
	free(text);
}

void admin_definitions_list(struct evhttp_request *req, void *svc, const char *tail)
{
	struct service *service = svc;

	(void)tail;
	db_query(service->pool, list_sql, 0, NULL, listed, req);
}

/* --- /admin/api/definitions/{name}/... ---------------------------------- */

/* A version in a path: 1-2147483647, in decimal digits. */
static bool version_parse(const char *s, int32_t *out)
{
	size_t n = strspn(s, "0123456789");
	long long v;

	if (n < 1 || n > 10 || s[n] != '\0')
		return false;
	v = strtoll(s, NULL, 10);
	if (v < 1 || v > INT32_MAX)
		return false;
	*out = (int32_t)v;
	return true;
}

/*
 * tail "{name}/{rest}" with one slash: the name into name and the rest.
 * False (answered 404) for any other shape; a malformed name is answered
 * 400 later, by the caller, once the method is known to fit.
 */
static bool split_tail(struct evhttp_request *req, const char *tail,
		       char name[SAGA_DEF_NAME_MAX + 2], const char **rest, bool *name_ok)
{
	const char *slash = strchr(tail, '/');

	if (!slash || slash == tail || !slash[1] || strchr(slash + 1, '/')) {
		httpd_error(req, 404, "not_found", "no such endpoint");
		return false;
	}
	*name_ok = saga_def_name_valid(tail, (size_t)(slash - tail));
	snprintf(name, SAGA_DEF_NAME_MAX + 2, "%.*s", *name_ok ? (int)(slash - tail) : 0, tail);
	*rest = slash + 1;
	return true;
}

static void bad_name(struct evhttp_request *req)
{
	httpd_error(req, 400, "invalid_field",
		    "name: must be 1-63 characters of [a-z0-9_-], starting with a letter");
}

static void bad_version(struct evhttp_request *req)
{
	httpd_error(req, 400, "invalid_field", "version: must be an integer from 1 to 2147483647");
}

static const char one_sql[] =
	"SELECT definition::text FROM saga_definitions WHERE name = $1 AND version = $2::int";

static void got_one(void *arg, PGresult *res, const struct db_error *err)
{
	struct evhttp_request *req = arg;
	char *text;

	if (err->status != DB_OK) {
		reply_db_error(req, err, "reading a saga definition");
		return;
	}
	if (PQntuples(res) == 0) {
		httpd_error(req, 404, "not_found", "no such saga definition");
		return;
	}
	text = jsonx_compact(PQgetvalue(res, 0, 0));
	if (!text) {
		httpd_error(req, 500, "internal", "the definition could not be read");
		return;
	}
	httpd_reply(req, 200, text);
	free(text);
}

/* The two routes share the prefix: each answers the other's path with 405. */
void admin_definition_get(struct evhttp_request *req, void *svc, const char *tail)
{
	struct service *service = svc;
	char name[SAGA_DEF_NAME_MAX + 2], version[12];
	const char *rest;
	bool name_ok;
	int32_t v;

	if (!split_tail(req, tail, name, &rest, &name_ok))
		return;
	if (strcmp(rest, "migrate") == 0) {
		admin_method_not_allowed(req, "POST");
		return;
	}
	if (!name_ok) {
		bad_name(req);
		return;
	}
	if (!version_parse(rest, &v)) {
		bad_version(req);
		return;
	}
	snprintf(version, sizeof(version), "%d", (int)v);
	const char *params[2] = { name, version };

	db_query(service->pool, one_sql, 2, params, got_one, req);
}

void admin_definition_post(struct evhttp_request *req, void *svc, const char *tail)
{
	char name[SAGA_DEF_NAME_MAX + 2];
	const char *rest;
	bool name_ok;
	int32_t v;

	if (!split_tail(req, tail, name, &rest, &name_ok))
		return;
	if (strcmp(rest, "migrate") != 0) {
		if (version_parse(rest, &v))
			admin_method_not_allowed(req, "GET, HEAD");
		else
			httpd_error(req, 404, "not_found", "no such endpoint");
		return;
	}
	if (!name_ok) {
		bad_name(req);
		return;
	}
	definitions_migrate(req, svc, name);
}
