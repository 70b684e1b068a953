/* admin_api: see admin_api.h. */
#include "admin_api.h"

#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "httpc.h"
#include "httpd.h"
#include "jsonx.h"
#include "log.h"
#include "outbox.h"
#include "transport.h"
#include "uuid.h"

#define MAX_PEERS ADMIN_MAX_PEERS
#define DEAD_LETTERS_SHOWN "500"
#define RETRY_IDS_MAX 1000

/* What the service gave admin_api_open; one service per process. */
static struct admin_ctx C;

/* The orchestrator's clients for asking its peers. */
static struct {
	struct httpc_peer *peer[MAX_PEERS];
	const char *name[MAX_PEERS];
	size_t n;
	char auth[300];
} P;

void admin_reply_json(struct evhttp_request *req, struct json_object *o)
{
	httpd_reply(req, 200,
		    json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							      JSON_C_TO_STRING_NOSLASHESCAPE));
}

void admin_method_not_allowed(struct evhttp_request *req, const char *allow)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	httpd_error(req, 405, "method_not_allowed", "only %s here", allow);
}

struct json_object *admin_parse_db(const char *text)
{
	return text ? json_tokener_parse(text) : NULL;
}

char *admin_param(struct evhttp_request *req, const char *name, size_t maxlen, bool *answered)
{
	bool bad;
	char *v = httpd_query(req, name, &bad);

	*answered = false;
	/* PostgreSQL takes text as UTF-8 only: anything else would be a 500 */
	if (bad || (v && (strlen(v) > maxlen || !jsonx_utf8_valid(v, strlen(v))))) {
		free(v);
		httpd_error(req, 400, "invalid_field", "%s: malformed, repeated, not UTF-8 or too long",
			    name);
		*answered = true;
		return NULL;
	}
	if (v && !*v) { /* "?service=&type=": an empty value is no filter */
		free(v);
		return NULL;
	}
	return v;
}

/* --- combining ---------------------------------------------------------- */

struct gather;

struct ask {
	struct gather *g;
	const char *service;
};

struct gather {
	struct evhttp_request *req;
	struct json_object *result;
	struct json_object *unavailable;
	int waiting;
	admin_finish_fn finish;
	void *arg;
	struct ask asks[MAX_PEERS];
};

static void gather_end(struct gather *g)
{
	json_object_object_add(g->result, "unavailable", g->unavailable);
	if (g->finish)
		g->finish(g->result, g->arg);
	admin_reply_json(g->req, g->result);
	json_object_put(g->result);
	free(g);
}

/* Joins arrays under the same key, fills keys the result lacks or has null. */
static void merge(struct json_object *into, struct json_object *part)
{
	json_object_object_foreach(part, key, val)
	{
		struct json_object *mine;

		if (!json_object_object_get_ex(into, key, &mine) || !mine) {
			json_object_object_add(into, key, json_object_get(val));
		} else if (json_object_is_type(mine, json_type_array) &&
			   json_object_is_type(val, json_type_array)) {
			for (size_t i = 0; i < json_object_array_length(val); i++)
				json_object_array_add(mine,
						      json_object_get(json_object_array_get_idx(val, i)));
		}
	}
}

static void peer_answered(void *arg, const struct httpc_result *r)
{
	struct ask *a = arg;
	struct gather *g = a->g;
	struct json_object *part = NULL;
	char err[128];

	if (r->status == 200)
		part = jsonx_parse(r->body, r->body_len, err, sizeof(err));
	if (part && json_object_is_type(part, json_type_object)) {
		merge(g->result, part);
	} else {
		if (r->status)
			log_warn("admin: %s answered %d (same ADMIN_TOKEN on all three?)", a->service,
				 r->status);
		else
			log_warn("admin: %s did not answer (%s)", a->service, r->error);
		json_object_array_add(g->unavailable, json_object_new_string(a->service));
	}
	json_object_put(part);
	if (--g->waiting == 0)
		gather_end(g);
}

void admin_gather(struct evhttp_request *req, struct json_object *local,
		  const char *const *paths, admin_finish_fn finish, void *arg)
{
	struct gather *g;
	const char *headers[3] = { "Authorization", P.auth, NULL };

	if (!C.spec || !C.spec->combine) {
		if (finish)
			finish(local, arg);
		admin_reply_json(req, local);
		json_object_put(local);
		return;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		abort();
	g->req = req;
	g->result = local;
	g->unavailable = json_object_new_array();
	g->finish = finish;
	g->arg = arg;
	g->waiting = 1; /* ours, released below: no peer may end it early */
	for (size_t i = 0; i < P.n; i++) {
		if (!paths || !paths[i])
			continue;
		g->asks[i].g = g;
		g->asks[i].service = P.name[i];
		g->waiting++;
		httpc_request(P.peer[i], "GET", paths[i], NULL, 0, headers, peer_answered,
			      &g->asks[i]);
	}
	if (--g->waiting == 0)
		gather_end(g);
}

size_t admin_api_peers(const char *const **names)
{
	*names = P.name;
	return P.n;
}

/* Which of our peers is called name; -1 for none. */
static int peer_index(const char *name)
{
	for (size_t i = 0; i < P.n; i++)
		if (strcmp(P.name[i], name) == 0)
			return (int)i;
	return -1;
}

void admin_api_add_peer(const char *name, const char *urls)
{
	struct httpc_opts o = {
		.max_in_flight = 8,
		.timeout_ms = C.http_timeout_ms,
		.breaker_failures = 3,
		.breaker_open_ms = 2000,
		.tls = C.tls,
	};
	struct httpc_peer *p;
	char err[256];

	if (!C.spec || !C.spec->combine || peer_index(name) >= 0)
		return;
	if (P.n == MAX_PEERS) {
		log_warn("admin: %s is not combined: already %d peers", name, MAX_PEERS);
		return;
	}
	/* its own clients: admin reads must not trip the delivery breaker */
	p = httpc_peer_new(C.base, name, urls, &o, err, sizeof(err));
	if (!p) {
		log_error("admin: %s", err); /* the same URLs opened before: unlikely */
		return;
	}
	P.peer[P.n] = p;
	P.name[P.n++] = name;
}

void admin_api_open(const struct admin_ctx *ctx)
{
	C = *ctx;
	snprintf(P.auth, sizeof(P.auth), "Bearer %s", C.token);
	for (size_t i = 0; i < C.npeers; i++)
		admin_api_add_peer(C.peer_names[i], C.peer_urls[i]);
}

void admin_api_close(void)
{
	for (size_t i = 0; i < P.n; i++)
		httpc_peer_free(P.peer[i]);
	memset(&P, 0, sizeof(P));
	memset(&C, 0, sizeof(C));
}

/* The same path and query for every peer. */
static void same_for_peers(struct evhttp_request *req, const char *paths[MAX_PEERS])
{
	const char *uri = evhttp_request_get_uri(req);

	for (size_t i = 0; i < MAX_PEERS; i++)
		paths[i] = i < P.n ? uri : NULL;
}

/* --- handlers ------------------------------------------------------------- */

struct query {
	struct evhttp_request *req;
	const char *key; /* the result goes under this key, or is the object itself */
	void (*fix)(struct json_object *local); /* before combining */
	const char *paths[MAX_PEERS];
	char path_buf[MAX_PEERS][160];
};

static void query_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct query *q = arg;
	struct json_object *o, *v;

	if (err->status != DB_OK) {
		reply_db_error(q->req, err, "admin");
		free(q);
		return;
	}
	v = admin_parse_db(db_val(res, 0, 0));
	if (q->key) {
		o = json_object_new_object();
		json_object_object_add(o, q->key, v);
	} else {
		o = v;
	}
	if (q->fix)
		q->fix(o);
	admin_gather(q->req, o, q->paths, NULL, NULL);
	free(q);
}

static struct query *query_new(struct evhttp_request *req, const char *key)
{
	struct query *q = calloc(1, sizeof(*q));

	if (!q)
		abort();
	q->req = req;
	q->key = key;
	return q;
}

/* Each destination's circuit, from this process's transport (HTTP or AMQP). */
static void add_breakers(struct json_object *o)
{
	struct json_object *rows;

	if (!json_object_object_get_ex(o, "deliveries", &rows))
		return;
	for (size_t i = 0; i < json_object_array_length(rows); i++) {
		struct json_object *row = json_object_array_get_idx(rows, i), *d;
		const char *state = NULL;

		if (!json_object_object_get_ex(row, "destination", &d))
			continue;
		for (size_t k = 0; k < C.npeers; k++)
			if (strcmp(C.peer_names[k], json_object_get_string(d)) == 0)
				state = C.transport->ops->breaker(C.transport,
								  json_object_get_string(d));
		json_object_object_add(row, "breaker", state ? json_object_new_string(state) : NULL);
	}
}

static void deliveries(struct evhttp_request *req, void *svc, const char *tail)
{
	struct query *q = query_new(req, "deliveries");

	q->fix = add_breakers;
	char dests[256] = "{";

	for (size_t i = 0; i < C.npeers; i++)
		snprintf(dests + strlen(dests), sizeof(dests) - strlen(dests), "%s%s", i ? "," : "",
			 C.peer_names[i]);
	strcat(dests, "}");
	same_for_peers(req, q->paths);
	const char *params[2] = { C.service, dests };
	db_query(C.pool, "SELECT admin_deliveries($1, $2::text[])::text", 2, params, query_done,
		 q);
}



/*
 * GET /admin/api/dead-letters?service=&type=. With service naming a peer,
 * only that peer is asked; naming this service, only it answers.
 */
static void dead_letters(struct evhttp_request *req, void *svc, const char *tail)
{
	bool answered;
	char *service = admin_param(req, "service", 64, &answered), *type;
	struct query *q;
	int peer = -1;

	if (answered)
		return;
	type = admin_param(req, "type", 100, &answered);
	if (answered) {
		free(service);
		return;
	}
	if (service && strcmp(service, C.service) != 0 &&
	    (peer = peer_index(service)) < 0) {
		httpd_error(req, 400, "invalid_field", "service: expected orchestrator, payment or inventory%s",
			    P.n ? "" : " (this one's own)");
		free(service);
		free(type);
		return;
	}
	q = query_new(req, NULL);
	same_for_peers(req, q->paths);
	if (peer >= 0) {
		/* only the peer's part: ours stays empty */
		for (size_t i = 0; i < MAX_PEERS; i++)
			if ((int)i != peer)
				q->paths[i] = NULL;
		admin_gather(req, admin_parse_db("{\"deadLetters\":[],\"groups\":[]}"), q->paths,
			     NULL, NULL);
		free(q);
	} else {
		if (service) /* ours only */
			memset(q->paths, 0, sizeof(q->paths));
		const char *params[3] = { C.service, type, DEAD_LETTERS_SHOWN };
		db_query(C.pool, "SELECT admin_dead_letters($1, $2, $3::int)::text", 3, params,
			 query_done, q);
	}
	free(service);
	free(type);
}

/* --- POST /admin/api/dead-letters/retry -------------------------------- */

struct retry {
	struct evhttp_request *req;
};

static void retried(void *arg, PGresult *res, const struct db_error *err)
{
	struct retry *r = arg;
	char body[64];
	int n;

	if (err->status != DB_OK) {
		reply_db_error(r->req, err, "admin retry");
		free(r);
		return;
	}
	n = atoi(PQgetvalue(res, 0, 0));
	if (n > 0)
		outbox_kick(C.outbox); /* delivered again at once */
	log_info("admin: %d dead letter(s) back to pending", n);
	snprintf(body, sizeof(body), "{\"retried\":%d}", n);
	httpd_reply(r->req, 200, body);
	free(r);
}

/* The peer's answer, passed on as it is. */
static void forwarded(void *arg, const struct httpc_result *res)
{
	struct retry *r = arg;

	if (res->status == 0) {
		httpd_error(r->req, 503, "service_unavailable", "that service does not answer: %s",
			    res->error);
	} else {
		char *copy = strndup(res->body, res->body_len);

		if (!copy)
			abort();
		httpd_reply(r->req, res->status, copy);
		free(copy);
	}
	free(r);
}

/* "{id,id,...}" of the messageIds array, or the name of the bad field. */
static const char *retry_ids(struct json_object *obj, char **ids)
{
	struct json_object *arr;
	size_t n;
	char *p;

	*ids = NULL;
	if (!json_object_object_get_ex(obj, "messageIds", &arr))
		return NULL;
	if (!json_object_is_type(arr, json_type_array) ||
	    (n = json_object_array_length(arr)) < 1 || n > RETRY_IDS_MAX)
		return "messageIds";
	p = *ids = malloc(n * UUID_STR_LEN + 3);
	if (!p)
		abort();
	*p++ = '{';
	for (size_t i = 0; i < n; i++) {
		struct json_object *v = json_object_array_get_idx(arr, i);
		const char *id = json_object_get_string(v);

		/* the length too: a \u0000 would end id early */
		if (!json_object_is_type(v, json_type_string) || !uuid_valid(id) ||
		    json_object_get_string_len(v) != UUID_STR_LEN - 1) {
			free(*ids);
			*ids = NULL;
			return "messageIds";
		}
		p += sprintf(p, "%s%s", i ? "," : "", id);
	}
	strcpy(p, "}");
	return NULL;
}

static void retry(struct evhttp_request *req, void *svc, const char *tail)
{
	size_t len;
	const char *body = httpd_body(req, &len), *service = NULL, *type = NULL, *error = NULL;
	const char *bad = NULL, *narrows = NULL;
	char err[128], *ids = NULL;
	struct json_object *obj = jsonx_parse(body, len, err, sizeof(err)), *all_v = NULL;
	bool all = false;
	int peer = -1;

	if (!obj) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object))
		bad = "body";
	else if (jsonx_get_str(obj, "service", 64, &service) != 0 ||
		 (strcmp(service, C.service) != 0 && (peer = peer_index(service)) < 0))
		bad = "service";
	else if (json_object_object_get_ex(obj, "all", &all_v) &&
		 !json_object_is_type(all_v, json_type_boolean))
		bad = "all";
	else if ((bad = retry_ids(obj, &ids)) != NULL)
		;
	else if ((all = all_v && json_object_get_boolean(all_v)) == (ids != NULL))
		bad = ids ? "all" : "messageIds"; /* exactly one of them */
	else if (json_object_object_get_ex(obj, "type", NULL) &&
		 jsonx_get_str(obj, "type", 100, &type) != 0)
		bad = "type";
	else if (json_object_object_get_ex(obj, "lastError", NULL) &&
		 jsonx_get_str(obj, "lastError", 2000, &error) != 0)
		bad = "lastError";
	else if (ids && (type || error))
		bad = narrows = type ? "type" : "lastError"; /* not silently ignored */
	if (bad) {
		if (strcmp(bad, "body") == 0)
			httpd_error(req, 400, "invalid_json", "the body must be a JSON object");
		else if (narrows)
			httpd_error(req, 400, "invalid_field",
				    "%s narrows \"all\": true only, not messageIds", bad);
		else
			httpd_error(req, 400, "invalid_field", "%s is missing or invalid", bad);
		json_object_put(obj);
		free(ids);
		return;
	}
	struct retry *r = calloc(1, sizeof(*r));

	if (!r)
		abort();
	r->req = req;
	if (peer >= 0) {
		const char *headers[3] = { "Authorization", P.auth, NULL };

		httpc_request(P.peer[peer], "POST", "/admin/api/dead-letters/retry", body, len,
			      headers, forwarded, r);
	} else {
		const char *params[4] = { ids, all ? "true" : "false", type, error };

		db_query(C.pool, "SELECT admin_retry($1::uuid[], $2::boolean, $3, $4)", 4, params,
			 retried, r);
	}
	json_object_put(obj);
	free(ids);
}

/* --- GET /admin/api/sagas/{id} on payment and inventory ----------------- */

/*
 * Their part of a saga: its messages here and this service's row.
 * ?received=id,id names the messages the orchestrator sent here about it,
 * whose inbox rows are shown.
 */
static void saga_part(struct evhttp_request *req, void *svc, const char *tail)
{
	const struct admin_spec *as = C.spec;
	bool answered;
	char *received, ids[40 * 64 + 3] = "{", *tok, *save = NULL;
	struct query *q;
	int n = 0;

	if (!as || !as->saga_row_sql) {
		httpd_error(req, 404, "not_found", "no such endpoint");
		return;
	}
	if (!uuid_valid(tail)) {
		httpd_error(req, 400, "invalid_id", "expected a saga id (a UUID)");
		return;
	}
	received = admin_param(req, "received", 38 * 64, &answered);
	if (answered)
		return;
	for (tok = received ? strtok_r(received, ",", &save) : NULL; tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!uuid_valid(tok) || ++n > 64) {
			httpd_error(req, 400, "invalid_field", "received: a list of message ids");
			free(received);
			return;
		}
		snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%s%s", n > 1 ? "," : "", tok);
	}
	strcat(ids, "}");
	free(received);
	q = query_new(req, NULL);
	const char *params[3] = { tail, C.service, ids };
	db_query(C.pool, as->saga_row_sql, 3, params, query_done, q);
}

static const struct httpd_route routes[] = {
	{ "GET", "/admin/api/deliveries", false, deliveries, "/admin/api/deliveries",
	  HTTPD_ADMIN_AUTH },
	{ "GET", "/admin/api/dead-letters", false, dead_letters, "/admin/api/dead-letters",
	  HTTPD_ADMIN_AUTH },
	{ "POST", "/admin/api/dead-letters/retry", false, retry, "/admin/api/dead-letters/retry",
	  HTTPD_ADMIN_AUTH },
	{ "GET", "/admin/api/sagas/", false, saga_part, "/admin/api/sagas/{id}", HTTPD_ADMIN_AUTH },
};

size_t admin_api_routes(const struct httpd_route **out)
{
	*out = routes;
	return sizeof(routes) / sizeof(routes[0]);
}
