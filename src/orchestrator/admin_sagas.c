/* admin_sagas: see admin_sagas.h. */
#include "admin_sagas.h"

#include <ctype.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_api.h"
#include "admin_definitions.h"
#include "saga_engine.h"
#include "saga_registry.h"
#include "service.h"
#include "db.h"
#include "httpd.h"
#include "jsonx.h"
#include "log.h"
#include "uuid.h"

#define CANCEL_TRIES 5

/* --- GET /admin/api/sagas ------------------------------------------------ */

/* See admin_sagas_v2() in sql/orchestrator/009_admin_definitions_list.sql. */
static const char list_sql[] =
	"SELECT admin_sagas_v2($1::text[], $2, $3, $4, $5, $6::int, $7::int, $8::bigint, $9::uuid,"
	"                      $10)::text";

static bool digits(const char *s, size_t min, size_t max)
{
	size_t n = strspn(s, "0123456789");

	return n >= min && n <= max && s[n] == '\0';
}

/* RFC 3339 date-time, or a bare date; PostgreSQL parses it, this keeps out
 * the words it would also take ("now", "epoch", "infinity"). */
static bool rfc3339ish(const char *s)
{
	size_t n = strlen(s);

	if (n < 10 || n > 40 || !isdigit((unsigned char)s[0]) || s[4] != '-' || s[7] != '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("0123456789-:.TZtz+ ", s[i]))
			return false;
	return true;
}

/* A state of some definition: Pending<Step>, Completed, Failed, Compensating, Compensated. */
static bool state_name_valid(const char *s)
{
	static const char *const fixed[] = { "Completed", "Failed", "Compensating", "Compensated" };
	size_t n = strlen(s);

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (strcmp(s, fixed[i]) == 0)
			return true;
	return n > 7 && n <= 7 + SAGA_DEF_WORD_MAX && strncmp(s, "Pending", 7) == 0 &&
	       strspn(s + 7, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") ==
		       n - 7;
}

/* "{A,B}" from "A,B" when every one is a state name; else false. */
static bool states_param(const char *v, char *out, size_t outlen)
{
	char copy[160], *tok, *save = NULL;
	int n = 0;

	if (strlen(v) >= sizeof(copy) || !*v || v[0] == ',' || v[strlen(v) - 1] == ',' ||
	    strstr(v, ",,"))
		return false;
	strcpy(copy, v);
	snprintf(out, outlen, "{");
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!state_name_valid(tok))
			return false;
		snprintf(out + strlen(out), outlen - strlen(out), "%s%s", n++ ? "," : "", tok);
	}
	snprintf(out + strlen(out), outlen - strlen(out), "}");
	return n > 0;
}

#define LIST_PARAMS 9

struct list_params {
	/* state customerId itemId since until stuckSeconds limit cursor definition */
	char *v[LIST_PARAMS];
};

static const char *const list_names[LIST_PARAMS] = { "state", "customerId",   "itemId",
						     "since", "until",	      "stuckSeconds",
						     "limit", "cursor",	      "definition" };

static void list_params_free(struct list_params *p)
{
	for (int i = 0; i < LIST_PARAMS; i++)
		free(p->v[i]);
}

/* NULL when all are well-formed, else the name of the first that is not. */
static const char *list_bad(struct list_params *p, char *states, size_t slen, char cursor_us[24],
			    char cursor_id[UUID_STR_LEN])
{
	const char *cur = p->v[7], *dot;

	if (p->v[0] && !states_param(p->v[0], states, slen))
		return "state";
	if (p->v[3] && !rfc3339ish(p->v[3]))
		return "since";
	if (p->v[4] && !rfc3339ish(p->v[4]))
		return "until";
	if (p->v[5] && !digits(p->v[5], 1, 9))
		return "stuckSeconds";
	if (p->v[6] && (!digits(p->v[6], 1, 3) || atoi(p->v[6]) < 1 || atoi(p->v[6]) > 500))
		return "limit";
	if (p->v[8] && !saga_def_name_valid(p->v[8], strlen(p->v[8])))
		return "definition";
	if (cur) {
		dot = strchr(cur, '.');
		if (!dot || dot - cur > 19 || !uuid_valid(dot + 1))
			return "cursor";
		snprintf(cursor_us, 24, "%.*s", (int)(dot - cur), cur);
		if (!digits(cursor_us, 1, 16)) /* microseconds to the year 2286 */
			return "cursor";
		snprintf(cursor_id, UUID_STR_LEN, "%s", dot + 1);
	}
	return NULL;
}

struct list_ctx {
	struct evhttp_request *req;
};

static void list_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct evhttp_request *req = arg;
	struct json_object *o, *bad;

	if (err->status != DB_OK) {
		reply_db_error(req, err, "admin sagas");
		return;
	}
	o = admin_parse_db(db_val(res, 0, 0));
	if (!o) {
		httpd_error(req, 500, "internal", "no answer from admin_sagas");
		return;
	}
	if (json_object_object_get_ex(o, "invalidField", &bad))
		httpd_error(req, 400, "invalid_field", "%s: not a valid time",
			    json_object_get_string(bad));
	else
		admin_reply_json(req, o);
	json_object_put(o);
}

static void list_sagas(struct evhttp_request *req, void *svc, const char *tail)
{
	struct service *service = svc;
	struct list_params p = { { NULL } };
	char states[160], cursor_us[24], cursor_id[UUID_STR_LEN];
	const char *bad;
	bool answered = false;

	for (int i = 0; i < LIST_PARAMS && !answered; i++)
		p.v[i] = admin_param(req, list_names[i], 200, &answered);
	if (answered) {
		list_params_free(&p);
		return;
	}
	bad = list_bad(&p, states, sizeof(states), cursor_us, cursor_id);
	if (bad) {
		httpd_error(req, 400, "invalid_field", "%s: not a valid value", bad);
		list_params_free(&p);
		return;
	}
	const char *params[10] = {
		p.v[0] ? states : NULL, p.v[1], p.v[2], p.v[3], p.v[4], p.v[5],
		p.v[6] ? p.v[6] : "50",	p.v[7] ? cursor_us : NULL, p.v[7] ? cursor_id : NULL,
		p.v[8],
	};
	db_query(service->pool, list_sql, 10, params, list_done, req);
	list_params_free(&p);
}

/* --- GET /admin/api/sagas/{id} ----------------------------------------- */

/* See admin_saga_v2() in sql/orchestrator/009_admin_definitions_list.sql. */
static const char saga_sql[] = "SELECT admin_saga_v2($1)::text";

struct detail {
	struct service *service;
	struct evhttp_request *req;
	char id[UUID_STR_LEN];
};

static const char *str_of(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) && v ? json_object_get_string(v) : NULL;
}

static int by_time(const void *a, const void *b)
{
	struct json_object *const *x = a, *const *y = b;
	const char *tx = str_of(*x, "createdAt"), *ty = str_of(*y, "createdAt");

	return strcmp(tx ? tx : "", ty ? ty : "");
}

/*
 * The inbox keeps ids only: an "in" row takes the type of the "out" row
 * with its id (the sender's, when the sender answered). Then all in time
 * order.
 */
static void finish_messages(struct json_object *result, void *arg)
{
	struct json_object *msgs;

	if (!json_object_object_get_ex(result, "messages", &msgs) ||
	    !json_object_is_type(msgs, json_type_array))
		return;
	size_t n = json_object_array_length(msgs);

	for (size_t i = 0; i < n; i++) {
		struct json_object *in = json_object_array_get_idx(msgs, i);
		const char *dir = str_of(in, "direction"), *id = str_of(in, "messageId");

		if (!dir || strcmp(dir, "in") != 0 || !id || str_of(in, "type"))
			continue;
		for (size_t k = 0; k < n; k++) {
			struct json_object *out = json_object_array_get_idx(msgs, k);
			const char *oid = str_of(out, "messageId"), *d = str_of(out, "direction");

			if (k != i && d && strcmp(d, "out") == 0 && oid && strcmp(oid, id) == 0) {
				const char *t = str_of(out, "type");

				json_object_object_add(in, "type", t ? json_object_new_string(t) : NULL);
				break;
			}
		}
	}
	json_object_array_sort(msgs, by_time);
}

/* "?received=a,b": our messages to that peer, whose inbox rows it shows. */
static void received_for(struct json_object *saga, const char *peer, char *out, size_t outlen)
{
	struct json_object *msgs;
	int n = 0;

	out[0] = '\0';
	if (!json_object_object_get_ex(saga, "messages", &msgs) || !msgs)
		return;
	for (size_t i = 0; i < json_object_array_length(msgs) && n < 64; i++) {
		struct json_object *m = json_object_array_get_idx(msgs, i);
		const char *dest = str_of(m, "destination"), *dir = str_of(m, "direction");

		if (dir && strcmp(dir, "out") == 0 && dest && strcmp(dest, peer) == 0)
			snprintf(out + strlen(out), outlen - strlen(out), "%s%s",
				 n++ ? "," : "?received=", str_of(m, "messageId"));
	}
}

static void detail_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct detail *d = arg;
	struct json_object *saga;
	const char *const *names;
	size_t npeers = admin_api_peers(&names);
	char paths[ADMIN_MAX_PEERS][64 * 38 + 96];
	const char *pp[ADMIN_MAX_PEERS] = { NULL };

	if (err->status != DB_OK) {
		reply_db_error(d->req, err, "admin saga");
		free(d);
		return;
	}
	saga = PQntuples(res) ? admin_parse_db(db_val(res, 0, 0)) : NULL;
	if (!saga) {
		httpd_error(d->req, 404, "not_found", "no such saga");
		free(d);
		return;
	}
	for (size_t i = 0; i < npeers && i < ADMIN_MAX_PEERS; i++) {
		int n = snprintf(paths[i], sizeof(paths[i]), "/admin/api/sagas/%s", d->id);

		received_for(saga, names[i], paths[i] + n, sizeof(paths[i]) - (size_t)n);
		pp[i] = paths[i];
	}
	admin_gather(d->req, saga, pp, finish_messages, NULL);
	free(d);
}

/*
 * The two routes share the prefix /admin/api/sagas/, so httpd finds one for
 * either method and leaves the 405 of the other's path to them.
 */

static bool cancel_path(const char *tail)
{
	size_t n = strlen(tail);

	return n > 7 && strcmp(tail + n - 7, "/cancel") == 0;
}

static void get_saga(struct evhttp_request *req, void *svc, const char *tail)
{
	struct detail *d;

	if (cancel_path(tail)) {
		admin_method_not_allowed(req, "POST");
		return;
	}
	if (!uuid_valid(tail)) {
		httpd_error(req, 400, "invalid_id", "expected a saga id (a UUID)");
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		abort();
	d->service = svc;
	d->req = req;
	/* lower case, as the services write it in their messages */
	for (size_t i = 0; i < UUID_STR_LEN - 1; i++)
		d->id[i] = (char)tolower((unsigned char)tail[i]);
	const char *params[1] = { d->id };
	db_query(d->service->pool, saga_sql, 1, params, detail_done, d);
}

/* --- POST /admin/api/sagas/{id}/cancel ---------------------------------- */

static const char state_sql[] =
	"SELECT state, compensation, definition_name, definition_version"
	"  FROM saga_instances WHERE saga_id = $1";

struct cancel {
	struct service *service;
	struct evhttp_request *req;
	char id[UUID_STR_LEN];
	char *reason;
	int tries;
	bool reloaded; /* the registry was read again for it */
};

static void cancel_free(struct cancel *c)
{
	free(c->reason);
	free(c);
}

static void cancel_reply(struct cancel *c, const char *state, bool cancelled)
{
	char body[160];

	snprintf(body, sizeof(body), "{\"sagaId\":\"%s\",\"state\":\"%s\",\"cancelled\":%s}", c->id,
		 state, cancelled ? "true" : "false");
	httpd_reply(c->req, 200, body);
	cancel_free(c);
}

static void cancel_read(struct cancel *c);
static void cancel_reloaded(void *arg, int rc);

static void cancel_applied(void *arg, enum saga_outcome o, const struct db_error *err)
{
	struct cancel *c = arg;

	switch (o) {
	case SAGA_OUT_APPLIED:
		log_info("saga %s cancelled by an operator", c->id);
		cancel_reply(c, "Compensating", true);
		return;
	case SAGA_OUT_NOT_FOUND:
		httpd_error(c->req, 404, "not_found", "no such saga");
		break;
	case SAGA_OUT_DB_ERROR:
		reply_db_error(c->req, err, "cancel");
		break;
	default:
		/* it moved on meanwhile: decide again from where it is now */
		if (++c->tries < CANCEL_TRIES) {
			cancel_read(c);
			return;
		}
		httpd_error(c->req, 409, "saga_busy", "the saga keeps changing; try again");
		break;
	}
	cancel_free(c);
}

static void cancel_state(void *arg, PGresult *res, const struct db_error *err)
{
	struct cancel *c = arg;
	const struct saga_def *d;
	struct saga_pos pos;
	struct saga_move move;
	const char *why = NULL;

	if (err->status != DB_OK) {
		reply_db_error(c->req, err, "cancel");
		cancel_free(c);
		return;
	}
	if (PQntuples(res) == 0) {
		httpd_error(c->req, 404, "not_found", "no such saga");
		cancel_free(c);
		return;
	}
	d = saga_registry_get(PQgetvalue(res, 0, 2), atoi(PQgetvalue(res, 0, 3)));
	if (!d || saga_machine_pos(d, PQgetvalue(res, 0, 0), db_val(res, 0, 1), &pos) != 0) {
		if (!d && !c->reloaded) {
			/* registered through another orchestrator: read them again */
			c->reloaded = true;
			saga_registry_reload(cancel_reloaded, c);
			return;
		}
		inmsg_unavailable(inmsg_http(c->req)); /* its definition is not loaded yet */
		cancel_free(c);
		return;
	}
	if (saga_machine_next(d, pos, SAGA_ON_CANCEL, NULL, &move, &why)) {
		saga_transition_apply(c->id, d, pos, SAGA_ON_CANCEL, c->reason, cancel_applied, c);
		return;
	}
	if (strcmp(why, "saga_compensating") == 0) {
		/* compensating already (cancelled before, or for another cause) */
		cancel_reply(c, PQgetvalue(res, 0, 0), false);
		return;
	}
	httpd_error(c->req, 409, "saga_finished", "the saga is %s: nothing to cancel",
		    PQgetvalue(res, 0, 0));
	cancel_free(c);
}

static void cancel_reloaded(void *arg, int rc)
{
	cancel_read(arg);
}

static void cancel_read(struct cancel *c)
{
	const char *params[1] = { c->id };

	db_query(c->service->pool, state_sql, 1, params, cancel_state, c);
}

static void post_saga(struct evhttp_request *req, void *svc, const char *tail)
{
	size_t len, n = strlen(tail);
	const char *body, *reason;
	struct json_object *obj;
	struct cancel *c;
	char err[128];

	if (!cancel_path(tail)) {
		if (uuid_valid(tail))
			admin_method_not_allowed(req, "GET, HEAD");
		else
			httpd_error(req, 404, "not_found", "no such endpoint");
		return;
	}
	char id[UUID_STR_LEN] = "";

	if (n == 36 + 7) {
		memcpy(id, tail, 36);
		id[36] = '\0';
	}
	if (!uuid_valid(id)) {
		httpd_error(req, 400, "invalid_id", "expected a saga id (a UUID)");
		return;
	}
	body = httpd_body(req, &len);
	obj = jsonx_parse(body, len, err, sizeof(err));
	if (!obj) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object) ||
	    jsonx_get_str(obj, "reason", 500, &reason) != 0 || !*reason) {
		bool not_obj = !json_object_is_type(obj, json_type_object);

		json_object_put(obj);
		if (not_obj)
			httpd_error(req, 400, "invalid_json", "the body must be a JSON object");
		else
			httpd_error(req, 400, "invalid_field", "reason: 1-500 characters");
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c || !(c->reason = strdup(reason)))
		abort();
	json_object_put(obj);
	c->service = svc;
	c->req = req;
	for (size_t i = 0; i < UUID_STR_LEN - 1; i++)
		c->id[i] = (char)tolower((unsigned char)id[i]);
	cancel_read(c);
}

static const struct httpd_route routes[] = {
	{ "GET", "/admin/api/sagas", false, list_sagas, "/admin/api/sagas", HTTPD_ADMIN_AUTH },
	{ "GET", "/admin/api/sagas/", false, get_saga, "/admin/api/sagas/{id}", HTTPD_ADMIN_AUTH },
	{ "POST", "/admin/api/sagas/", false, post_saga, "/admin/api/sagas/{id}/cancel",
	  HTTPD_ADMIN_AUTH },
	{ "GET", "/admin/api/definitions", false, admin_definitions_list,
	  "/admin/api/definitions", HTTPD_ADMIN_AUTH },
	{ "POST", "/admin/api/definitions", false, admin_definitions_post,
	  "/admin/api/definitions", HTTPD_ADMIN_AUTH },
	{ "GET", "/admin/api/definitions/", false, admin_definition_get,
	  "/admin/api/definitions/{name}/{version}", HTTPD_ADMIN_AUTH },
	{ "POST", "/admin/api/definitions/", false, admin_definition_post,
	  "/admin/api/definitions/{name}/migrate", HTTPD_ADMIN_AUTH },
};

const struct admin_spec admin_sagas_spec = {
	.combine = true,
	.routes = routes,
	.nroutes = sizeof(routes) / sizeof(routes[0]),
};
