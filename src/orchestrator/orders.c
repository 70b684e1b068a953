/* orders: see orders.h. */
#include "monotime.h"
#include "orders.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admission.h"
#include "db.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"
#include "saga_engine.h"
#include "saga_registry.h"
#include "service.h"
#include "traceparent.h"
#include "uuid.h"

static struct {
	struct service *service;
	int64_t step_timeout_ms;
	int64_t idempotency_ttl_s;
	struct metric_family *started;
	struct event *purge_timer;
	/* admission control (admission.h) */
	struct admission *adm;
	struct metric_series *refused;
	struct metric_series *refusal_seconds; /* from admission_try's no to the 429 */
	struct event *count_timer;
	struct db_pool *door;                  /* the replay reads' own connection */
	struct refused_batch *refused_wait;    /* refused starts waiting for their read */
	struct refused_batch *refused_reading; /* ... and those whose read is out */
	struct evbuffer *refused_keys;         /* the waiting's keys and bodies, a JSON array */
	struct event *refused_timer;           /* the first refusal's gathering */
	char mark[64];         /* created_at from which the count counts created sagas */
	char next_mark[64];    /* the mark the next series will use */
	int64_t mark_ms;       /* when mark was set */
} R;

/* The mark moves this often: the count reads the sagas created since it. */
#define MARK_EVERY_MS 5000

/* --- POST /orders, POST /sagas/{name} ------------------------------------ */

/*
 * One statement, one transaction: the idempotency record, the saga, its
 * first history row and its first command (its body from saga_first_body:
 * built here from the input in hand, it spares the statement a PL/pgSQL
 * call and two JSON parameters, and is sent from here once committed, as
 * 1.0 did; later commands get theirs from saga_step,
 * sql/orchestrator/010, which has the steps' outputs). ON CONFLICT DO UPDATE (not
 * DO NOTHING) so that a concurrent request with the same key waits for the
 * first to commit and then gets its row back: DO NOTHING would return
 * nothing, and a second SELECT in the same statement could not see a row
 * committed after the statement's snapshot. The update changes the row only
 * when it has expired, so the key then starts a new saga. The request is
 * new exactly when the record ends up holding this request's saga id. A
 * replay reads the definition of the saga it started (for /sagas' answer).
 */
static const char create_sql[] =
	"WITH rec AS ("
	"  INSERT INTO idempotency_records AS r"
	"         (key, request_hash, saga_id, status, response, expires_at)"
	"  VALUES ($1, encode(sha256(convert_to($2, 'UTF8')), 'hex'), $3, 201, $4::jsonb,"
	"          now() + $5::int * interval '1 second')"
	"  ON CONFLICT (key) DO UPDATE SET"
	"    request_hash = CASE WHEN r.expires_at <= now() THEN excluded.request_hash"
	"                        ELSE r.request_hash END,"
	"    saga_id = CASE WHEN r.expires_at <= now() THEN excluded.saga_id ELSE r.saga_id END,"
	"    status = CASE WHEN r.expires_at <= now() THEN excluded.status ELSE r.status END,"
	"    response = CASE WHEN r.expires_at <= now() THEN excluded.response ELSE r.response END,"
	"    created_at = CASE WHEN r.expires_at <= now() THEN now() ELSE r.created_at END,"
	"    expires_at = CASE WHEN r.expires_at <= now() THEN excluded.expires_at"
	"                      ELSE r.expires_at END"
	"  RETURNING saga_id, request_hash, status, response),"
	" s AS ("
	"  INSERT INTO saga_instances (saga_id, state, version, customer_id, item_id, qty, amount,"
	"                              deadline_at, trace_id, definition_name, definition_version,"
	"                              input)"
	"  SELECT $3, $15, 1, $6, $7, $8::int, $9::bigint,"
	"         now() + $10::bigint * interval '1 millisecond', $11, $19, $20::int, $21::jsonb"
	"    FROM rec WHERE rec.saga_id = $3::uuid"
	"  RETURNING saga_id),"
	" h AS ("
	"  INSERT INTO saga_history (saga_id, version, from_state, to_state, cause)"
	"  SELECT saga_id, 1, NULL, $15, $16 FROM s),"
	" o AS ("
	"  INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,"
	"                               next_attempt_at)"
	"  SELECT $12, 'command', $17, $18, $13::jsonb, $11,"
	"         now() + $14::int * interval '1 millisecond' FROM s)"
	"SELECT rec.saga_id = $3::uuid,"
	"       rec.request_hash = encode(sha256(convert_to($2, 'UTF8')), 'hex'),"
	"       rec.status, rec.response->>'state', rec.saga_id,"
	"       CASE WHEN rec.saga_id <> $3::uuid THEN"
	"         (SELECT definition_name || '/' || definition_version FROM saga_instances"
	"           WHERE saga_id = rec.saga_id) END"
	"  FROM rec";

/* Where a start came: POST /orders or POST /sagas/{name}. */
enum start_route { ROUTE_ORDERS, ROUTE_SAGAS };

struct order_ctx {
	struct evhttp_request *req;
	enum start_route route;
	const struct saga_def *def;
	char saga_id[UUID_STR_LEN];
	char cmd_id[UUID_STR_LEN];
	char response[SAGA_DEF_NAME_MAX + 192];
	char trace[TRACE_ID_LEN];
	char *body;    /* the first command's, sent once committed */
	bool admitted; /* holds a reservation (admission_try) */
};

static void order_free(struct order_ctx *c)
{
	free(c->body);
	free(c);
}

/* The trace of an incoming traceparent, or a new one. */
static void trace_id_of(struct evhttp_request *req, char out[TRACE_ID_LEN])
{
	if (!traceparent_parse(httpd_header(req, "traceparent"), out))
		trace_id_new(out);
}

/*
 * The answer to a start, first time and replayed alike: the replay is the
 * first answer byte for byte but for "duplicated" (ids are UUIDs, states and
 * definition names are words: nothing to escape). POST /sagas/{name} adds
 * the definition; def is "name/version", or NULL for /orders.
 */
static void start_answer(char *buf, size_t len, const char *saga_id, const char *state,
			 const char *def, bool duplicated)
{
	const char *slash = def ? strrchr(def, '/') : NULL;

	if (!slash)
		snprintf(buf, len, "{\"sagaId\":\"%s\",\"state\":\"%s\",\"duplicated\":%s}",
			 saga_id, state, duplicated ? "true" : "false");
	else
		snprintf(buf, len,
			 "{\"sagaId\":\"%s\",\"state\":\"%s\",\"duplicated\":%s,"
			 "\"definition\":{\"name\":\"%.*s\",\"version\":%s}}",
			 saga_id, state, duplicated ? "true" : "false", (int)(slash - def), def,
			 slash + 1);
}

static void set_location(struct evhttp_request *req, enum start_route route, const char *saga_id)
{
	char location[64];

	snprintf(location, sizeof(location), "%s/%s", route == ROUTE_ORDERS ? "/orders" : "/sagas",
		 saga_id);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Location", location);
}

/* The first answer to an accepted key again, marked as a replay. */
static void reply_replayed(struct evhttp_request *req, enum start_route route, const char *saga_id,
			   const char *state, const char *def, int status)
{
	char body[SAGA_DEF_NAME_MAX + 192];

	set_location(req, route, saga_id);
	start_answer(body, sizeof(body), saga_id, state,
		     route == ROUTE_SAGAS ? (def ? def : "order/1") : NULL, true);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Idempotent-Replayed", "true");
	httpd_reply(req, status, body);
}

static void order_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct order_ctx *c = arg;
	struct evhttp_request *req = c->req;

	if (c->admitted)
		admission_settle(R.adm, err->status == DB_OK && PQntuples(res) == 1 &&
						PQgetvalue(res, 0, 0)[0] == 't');
	if (err->status != DB_OK || PQntuples(res) != 1) {
		if (err->status == DB_OK)
			httpd_error(req, 500, "internal", "no idempotency record");
		else
			reply_db_error(req, err, "start");
		order_free(c);
		return;
	}
	bool fresh = PQgetvalue(res, 0, 0)[0] == 't';
	bool same = PQgetvalue(res, 0, 1)[0] == 't';

	if (!same) {
		httpd_error(req, 422, "idempotency_key_reused",
			    "this Idempotency-Key was used with a different body");
		order_free(c);
		return;
	}
	if (fresh) {
		struct saga_move first = saga_machine_start(c->def);
		struct log_ctx lc = { .saga_id = c->saga_id, .trace_id = c->trace };
		char labels[128];

		set_location(req, c->route, PQgetvalue(res, 0, 4));
		saga_engine_started(c->saga_id, c->def);
		metrics_inc(R.started, "", 1);
		snprintf(labels, sizeof(labels), "from=\"\",to=\"%s\"", first.to_state);
		metrics_inc(saga_transitions_metric(), labels, 1);
		LOG_AT(LOG_INFO, &lc, "%s saga accepted (version %d)", c->def->name,
		       (int)c->def->version);
		/* the first command's row was written claimed: send it now */
		outbox_send(R.service->outbox, c->cmd_id, "command", first.participant, first.message,
			    c->body, c->trace);
		httpd_reply(req, 201, c->response);
	} else {
		reply_replayed(req, c->route, PQgetvalue(res, 0, 4), PQgetvalue(res, 0, 3),
			       db_val(res, 0, 5), atoi(PQgetvalue(res, 0, 2)));
	}
	order_free(c);
}

/*
 * A start refused by admission control, unless it replays a key already
 * accepted: that one is answered as always. One read by the primary key
 * tells them apart, for all the refused starts waiting (no write), on the
 * door: a connection of its own (R.door), so that the read never queues
 * behind the work already accepted that fills the pool when starts are
 * refused. At most one read is out at a time: the refusals that arrive
 * meanwhile wait for the next one, and the first refusal after a quiet
 * spell waits REFUSED_GATHER_US for others; the reads thus follow the
 * refusals' rate up to one per round trip and carry more keys each as it
 * grows. Without a door (admission off, or its connection down) the read
 * goes to the pool, and so does a read whose door broke under it (a read
 * has no effect to repeat). Measured at 2.5 times the capacity (scripts/bench
 * --overload): docs/performance.md.
 */
#define REFUSED_GATHER_US 1000

static const char refused_sql[] =
	"SELECT e.i, r.request_hash = encode(sha256(convert_to(e.v->>1, 'UTF8')), 'hex'),"
	"       r.status, r.response->>'state', r.saga_id,"
	"       (SELECT definition_name || '/' || definition_version FROM saga_instances s"
	"         WHERE s.saga_id = r.saga_id)"
	"  FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(v, i)"
	"  JOIN idempotency_records r ON r.key = e.v->>0 AND r.expires_at > now()";

struct refused {
	struct evhttp_request *req;
	enum start_route route;
	int64_t refused_us; /* when it was refused (monotime_us) */
	bool answered;
};

struct refused_batch {
	int n, cap;
	struct refused *r;
	char *keys; /* the read's parameter, kept for a second try */
	bool door;  /* read on the door */
};

static void refused_free(struct refused_batch *b)
{
	if (b) {
		free(b->r);
		free(b->keys);
		free(b);
	}
}

static void refused_flush(evutil_socket_t fd, short what, void *arg);

static void refused_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct refused_batch *b = arg;
	char retry[16];

	if (err->status == DB_UNAVAILABLE && b->door) {
		/* the door's connection broke (it reconnects meanwhile): the pool's */
		const char *params[1] = { b->keys };

		b->door = false;
		db_query(R.service->pool, refused_sql, 1, params, refused_done, b);
		return;
	}
	R.refused_reading = NULL;
	if (err->status != DB_OK) {
		for (int i = 0; i < b->n; i++)
			reply_db_error(b->r[i].req, err, "start");
		refused_free(b);
		refused_flush(-1, 0, NULL);
		return;
	}
	for (int row = 0; row < PQntuples(res); row++) {
		int i = atoi(PQgetvalue(res, row, 0)) - 1;

		if (i < 0 || i >= b->n || b->r[i].answered)
			continue;
		b->r[i].answered = true;
		if (PQgetvalue(res, row, 1)[0] != 't')
			httpd_error(b->r[i].req, 422, "idempotency_key_reused",
				    "this Idempotency-Key was used with a different body");
		else
			reply_replayed(b->r[i].req, b->r[i].route, PQgetvalue(res, row, 4),
				       PQgetvalue(res, row, 3), db_val(res, row, 5),
				       atoi(PQgetvalue(res, row, 2)));
	}
	snprintf(retry, sizeof(retry), "%d", admission_retry_after_s(R.adm));
	for (int i = 0; i < b->n; i++) {
		if (b->r[i].answered)
			continue;
		metric_add(R.refused, 1);
		metric_observe(R.refusal_seconds,
			       (double)(monotime_us() - b->r[i].refused_us) / 1e6);
		evhttp_add_header(evhttp_request_get_output_headers(b->r[i].req), "Retry-After",
				  retry);
		httpd_error(b->r[i].req, 429, "overloaded",
			    "more sagas are in flight than this deployment finishes in time; "
			    "retry after Retry-After seconds with the same Idempotency-Key");
	}
	refused_free(b);
	/* the refusals that came during this read: now, unless still gathering */
	if (!evtimer_pending(R.refused_timer, NULL))
		refused_flush(-1, 0, NULL);
}

/* Sends the read for the refused starts waiting, unless one is out. */
static void refused_flush(evutil_socket_t fd, short what, void *arg)
{
	struct refused_batch *b = R.refused_wait;
	size_t len;

	if (!b || R.refused_reading)
		return;
	R.refused_wait = NULL;
	R.refused_reading = b;
	b->door = R.door && db_pool_ready(R.door);
	evbuffer_add(R.refused_keys, "]", 2); /* with the NUL */
	len = evbuffer_get_length(R.refused_keys);
	b->keys = malloc(len);
	if (!b->keys)
		abort();
	evbuffer_remove(R.refused_keys, b->keys, len);
	const char *params[1] = { b->keys };

	db_query(b->door ? R.door : R.service->pool, refused_sql, 1, params, refused_done, b);
}

static void refuse(struct evhttp_request *req, enum start_route route, const char *key,
		   const char *canon)
{
	struct refused_batch *b = R.refused_wait;

	if (!b) {
		b = calloc(1, sizeof(*b));
		if (!b)
			abort();
		R.refused_wait = b;
		evbuffer_add(R.refused_keys, "[", 1);
		if (!R.refused_reading) {
			struct timeval gather = { 0, REFUSED_GATHER_US };

			evtimer_add(R.refused_timer, &gather);
		}
	} else {
		evbuffer_add(R.refused_keys, ",", 1);
	}
	if (b->n == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 16;
		b->r = realloc(b->r, (size_t)b->cap * sizeof(*b->r));
		if (!b->r)
			abort();
	}
	/* [key, body]: the body as the create hashes it */
	evbuffer_add(R.refused_keys, "[", 1);
	jsonx_buf_str(R.refused_keys, key);
	evbuffer_add(R.refused_keys, ",", 1);
	jsonx_buf_str(R.refused_keys, canon);
	evbuffer_add(R.refused_keys, "]", 1);
	b->r[b->n++] = (struct refused){ .req = req, .route = route, .refused_us = monotime_us() };
}

/* The Idempotency-Key header, checked; false when answered (400). */
static bool start_key(struct evhttp_request *req, char key[256])
{
	const char *kh = httpd_header(req, "Idempotency-Key");

	if (!kh) {
		httpd_error(req, 400, "idempotency_key_missing", "the Idempotency-Key header is required");
		return false;
	}
	/* two lines mean "k1, k2" in HTTP: not a key the client meant, even if equal */
	if (httpd_header_count(req, "Idempotency-Key") > 1 ||
	    !httpd_idempotency_key(kh, key, 256)) {
		httpd_error(req, 400, "idempotency_key_invalid",
			    "Idempotency-Key must be one header of 1-255 visible ASCII characters");
		return false;
	}
	return true;
}

/*
 * The order saga's input lives in its columns (customer_id, item_id, qty,
 * amount) when the definition declares no other field; else in `input`.
 */
static bool input_in_columns(const struct saga_def *d)
{
	static const char *const cols[] = { "customerId", "itemId", "qty", "amount" };

	if (strcmp(d->name, SAGA_ORDER) != 0)
		return false;
	for (size_t i = 0; i < d->n_input; i++) {
		bool col = false;

		for (size_t k = 0; k < sizeof(cols) / sizeof(cols[0]); k++)
			col |= strcmp(d->input[i].name, cols[k]) == 0;
		if (!col)
			return false;
	}
	return true;
}

/* The declared fields of obj (valid: saga_input_check passed), canonical. */
static char *declared_input(const struct saga_def *d, struct json_object *obj)
{
	struct json_object *in = json_object_new_object(), *v;
	char *text;

	for (size_t i = 0; i < d->n_input; i++)
		if (json_object_object_get_ex(obj, d->input[i].name, &v) &&
		    json_object_object_add(in, d->input[i].name, json_object_get(v)))
			abort();
	text = jsonx_canonical(in);
	if (!text)
		abort();
	json_object_put(in);
	return text;
}

/* A field of the order saga's input as its column takes it, or NULL (another definition). */
static const char *order_field(struct json_object *obj, bool columns, const char *key,
			       char buf[24])
{
	const char *id;
	int64_t n;

	if (!columns)
		return NULL;
	if (jsonx_get_id(obj, key, &id) == 0)
		return id;
	if (jsonx_get_int(obj, key, INT64_MIN, INT64_MAX, &n) != 0)
		return NULL;
	snprintf(buf, 24, "%lld", (long long)n);
	return buf;
}

/*
 * Starts a saga of d with the input obj (valid): the one path of both
 * routes. The request hash covers the definition's name but for the order
 * saga, so that a key is one key across definitions, and POST /orders and
 * POST /sagas/order with the same key and body are the same request.
 */
static void start(struct evhttp_request *req, enum start_route route, const struct saga_def *d,
		  const char *key, struct json_object *obj)
{
	char ttl_s[24], step_s[24], version_s[16], def_s[SAGA_DEF_NAME_MAX + 16];
	char customer_s[24], item_s[24], qty_s[24], amount_s[24]; /* numbers only */
	char *canon = jsonx_canonical(obj), *hashed, *input = NULL;
	bool columns = input_in_columns(d);
	struct saga_move first = saga_machine_start(d);
	struct order_ctx *c;

	if (!canon)
		abort();
	if (strcmp(d->name, SAGA_ORDER) == 0) {
		hashed = canon;
	} else {
		size_t n = strlen(d->name) + strlen(canon) + 2;

		hashed = malloc(n);
		if (!hashed)
			abort();
		snprintf(hashed, n, "%s\n%s", d->name, canon);
	}
	if (!admission_try(R.adm, monotime_ms())) {
		refuse(req, route, key, hashed);
		if (hashed != canon)
			free(hashed);
		free(canon);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	c->req = req;
	c->route = route;
	c->def = d;
	c->admitted = true;
	uuid_new_v7(c->saga_id);
	uuid_new_v7(c->cmd_id);
	trace_id_of(req, c->trace);
	snprintf(def_s, sizeof(def_s), "%s/%d", d->name, (int)d->version);
	start_answer(c->response, sizeof(c->response), c->saga_id, first.to_state,
		     route == ROUTE_SAGAS ? def_s : NULL, false);
	if (!columns)
		input = declared_input(d, obj);
	c->body = saga_first_body(d, obj, c->cmd_id, c->saga_id);
	snprintf(ttl_s, sizeof(ttl_s), "%lld", (long long)R.idempotency_ttl_s);
	snprintf(step_s, sizeof(step_s), "%lld", (long long)saga_step_deadline_ms(d, 0));
	snprintf(version_s, sizeof(version_s), "%d", (int)d->version);
	const char *params[21] = {
		key, hashed, c->saga_id, c->response, ttl_s,
		order_field(obj, columns, "customerId", customer_s),
		order_field(obj, columns, "itemId", item_s), order_field(obj, columns, "qty", qty_s),
		order_field(obj, columns, "amount", amount_s), step_s,
		c->trace, c->cmd_id, c->body, outbox_lease_ms(R.service->outbox),
		first.to_state, first.cause, first.participant, first.message,
		d->name, version_s, input,
	};
	/*
	 * Commits with the creates and transitions that wait beside it (db.h).
	 * Under admission control it waits behind the work of the sagas
	 * already accepted, which keeps their latency whatever the rate of
	 * starts. Without it, it waits in line as 1.0's did: a start held back
	 * parks its client, and fewer sagas in flight share each commit; at
	 * 128 in flight that cost about 10 % of the sagas/s (docs/performance.md).
	 */
	(admission_limit(R.adm) > 0 ? db_query_grouped_low : db_query_grouped)(
		R.service->pool, c->saga_id, create_sql, 21, params, order_done, c);
	if (hashed != canon)
		free(hashed);
	free(canon);
	free(input);
}

/* The body, parsed: a JSON object, or NULL when answered (400). */
static struct json_object *start_body(struct evhttp_request *req)
{
	size_t len;
	const char *body = httpd_body(req, &len);
	char err[128];
	struct json_object *obj = jsonx_parse(body, len, err, sizeof(err));

	if (!obj) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return NULL;
	}
	if (!json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		httpd_error(req, 400, "invalid_json", "the body must be a JSON object");
		return NULL;
	}
	return obj;
}

/* Starts a saga of d for req once its body is valid input (else answers 400). */
static void start_checked(struct evhttp_request *req, enum start_route route,
			  const struct saga_def *d, const char *key)
{
	struct json_object *obj = start_body(req);
	const char *bad;

	if (!obj)
		return;
	if (saga_input_check(d, obj, &bad) != 0)
		httpd_error(req, 400, "invalid_field", "%s is missing or invalid", bad);
	else
		start(req, route, d, key, obj);
	json_object_put(obj);
}

void orders_post(struct evhttp_request *req, void *svc, const char *tail)
{
	char key[256];

	if (start_key(req, key))
		start_checked(req, ROUTE_ORDERS, saga_registry_latest(SAGA_ORDER), key);
}

/* POST /sagas/{name} once the registry was read again for a name not loaded. */
struct held_start {
	struct evhttp_request *req;
	char key[256];
	char name[SAGA_DEF_NAME_MAX + 1];
};

static void sagas_reloaded(void *arg, int rc)
{
	struct held_start *h = arg;
	const struct saga_def *d = saga_registry_latest(h->name);

	if (d)
		start_checked(h->req, ROUTE_SAGAS, d, h->key);
	else if (rc != 0)
		inmsg_unavailable(inmsg_http(h->req)); /* the definitions could not be read */
	else
		httpd_error(h->req, 404, "unknown_saga", "no saga definition is named %s", h->name);
	free(h);
}

void sagas_post(struct evhttp_request *req, void *svc, const char *tail)
{
	const struct saga_def *d;
	struct held_start *h;
	char key[256];

	if (!saga_def_name_valid(tail, strlen(tail))) {
		httpd_error(req, 404, "unknown_saga", "no saga definition has this name");
		return;
	}
	if (!start_key(req, key))
		return;
	d = saga_registry_latest(tail);
	if (d) {
		start_checked(req, ROUTE_SAGAS, d, key);
		return;
	}
	/* registered through another orchestrator, or never: read them again */
	h = calloc(1, sizeof(*h));
	if (!h)
		abort();
	h->req = req;
	snprintf(h->key, sizeof(h->key), "%s", key);
	snprintf(h->name, sizeof(h->name), "%s", tail);
	saga_registry_reload(sagas_reloaded, h);
}

/* --- GET /orders/{id}, GET /sagas/{id} ------------------------------- */

/* A saga's timeline, the last member of both answers. */
#define HISTORY_JSON                                                                       \
	"  'history', (SELECT json_agg(json_build_object("                                 \
	"                'version', h.version, 'fromState', h.from_state, 'toState', h.to_state," \
	"                'cause', h.cause, 'messageId', h.message_id, 'at', rfc3339(h.at))"  \
	"              ORDER BY h.version)"                                                  \
	"              FROM saga_history h WHERE h.saga_id = s.saga_id))::text"

static const char get_sql[] =
	"SELECT json_build_object("
	"  'sagaId', s.saga_id, 'state', s.state, 'version', s.version,"
	"  'customerId', s.customer_id, 'itemId', s.item_id, 'qty', s.qty, 'amount', s.amount,"
	"  'createdAt', rfc3339(s.created_at), 'updatedAt', rfc3339(s.updated_at),"
	HISTORY_JSON
	"  FROM saga_instances s WHERE s.saga_id = $1";

/* GET /sagas/{id}: any definition's saga, with its input and outputs. */
static const char get_saga_sql[] =
	"SELECT json_build_object("
	"  'sagaId', s.saga_id,"
	"  'definition', json_build_object('name', s.definition_name,"
	"                                  'version', s.definition_version),"
	"  'state', s.state, 'version', s.version, 'input', saga_input(s),"
	"  'outputs', coalesce(s.outputs, '{}'),"
	"  'createdAt', rfc3339(s.created_at), 'updatedAt', rfc3339(s.updated_at),"
	HISTORY_JSON
	"  FROM saga_instances s WHERE s.saga_id = $1";

static void get_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct evhttp_request *req = arg;

	if (err->status != DB_OK) {
		reply_db_error(req, err, "GET");
		return;
	}
	if (PQntuples(res) == 0) {
		httpd_error(req, 404, "not_found", "no such saga");
		return;
	}
	char *body = jsonx_compact(PQgetvalue(res, 0, 0));

	if (!body) {
		httpd_error(req, 500, "internal", "could not write the saga");
		return;
	}
	httpd_reply(req, 200, body);
	free(body);
}

static void get_one(struct evhttp_request *req, const char *sql, const char *tail)
{
	if (!uuid_valid(tail)) {
		httpd_error(req, 400, "invalid_id", "expected a saga id (a UUID)");
		return;
	}
	const char *params[1] = { tail };
	db_query(R.service->pool, sql, 1, params, get_done, req);
}

void orders_get(struct evhttp_request *req, void *svc, const char *tail)
{
	get_one(req, get_sql, tail);
}

void sagas_get(struct evhttp_request *req, void *svc, const char *tail)
{
	get_one(req, get_saga_sql, tail);
}

/* --- expired idempotency records --------------------------------------- */

static void purge_done(void *arg, PGresult *res, const struct db_error *err)
{
	if (err->status == DB_SQL_ERROR)
		log_warn("idempotency purge failed: %s", err->message);
}

static void purge_cb(evutil_socket_t fd, short what, void *arg)
{
	if (!R.service->stopping)
		db_query(R.service->pool, "SELECT purge_idempotency(1000)", 0, NULL, purge_done, NULL);
}

/* --- sagas in flight, counted in the database (admission.h) ------------ */

/*
 * The sagas in flight (an index-only scan of the partial index of unfinished
 * sagas) and, in the same snapshot, those created since the mark (the same
 * index and the one of finished sagas by created_at), from which admission
 * derives how many ended meanwhile.
 */
static const char count_sql[] =
	"SELECT (SELECT count(*) FROM saga_instances"
	"         WHERE state NOT IN ('Completed', 'Failed', 'Compensated')),"
	"       (SELECT count(*) FROM saga_instances"
	"         WHERE state NOT IN ('Completed', 'Failed', 'Compensated')"
	"           AND created_at >= $1::timestamptz)"
	"     + (SELECT count(*) FROM saga_instances"
	"         WHERE state IN ('Completed', 'Failed', 'Compensated')"
	"           AND created_at >= $1::timestamptz),"
	"       (now() - interval '1 second')::text";

static void count_done(void *arg, PGresult *res, const struct db_error *err)
{
	bool new_mark = arg != NULL;

	if (err->status != DB_OK || PQntuples(res) != 1) {
		admission_count_failed(R.adm);
		return;
	}
	admission_refreshed(R.adm, monotime_ms(), atoll(PQgetvalue(res, 0, 0)),
			    atoll(PQgetvalue(res, 0, 1)), new_mark);
	snprintf(R.next_mark, sizeof(R.next_mark), "%s", PQgetvalue(res, 0, 2));
}

static void count_cb(evutil_socket_t fd, short what, void *arg)
{
	int64_t now = monotime_ms();
	bool new_mark = R.mark[0] == '\0';

	if (R.service->stopping || R.adm->counting)
		return;
	/* the mark lags a second: a saga created just before it may still commit */
	if (R.next_mark[0] && (new_mark || now - R.mark_ms >= MARK_EVERY_MS)) {
		snprintf(R.mark, sizeof(R.mark), "%s", R.next_mark);
		R.mark_ms = now;
		new_mark = true;
	}
	const char *params[1] = { R.mark[0] ? R.mark : NULL };

	admission_count_sent(R.adm, now);
	db_query(R.service->pool, count_sql, 1, params, count_done, new_mark ? &R : NULL);
}

static double inflight_fn(void *arg)
{
	return (double)admission_inflight(R.adm);
}

static double limit_fn(void *arg)
{
	return (double)admission_limit(R.adm);
}

void orders_open(struct service *service, struct admission *adm, int64_t step_timeout_ms,
		 int64_t idempotency_ttl_s)
{
	struct timeval every = { 60, 0 };
	/* admission off: the count feeds only the saga_inflight gauge, every 5 s */
	struct timeval count_every = { 0, ADMISSION_REFRESH_MS * 1000 };

	if (admission_limit(adm) == 0) {
		count_every.tv_sec = 5;
		count_every.tv_usec = 0;
	}

	R.service = service;
	R.adm = adm;
	R.refused = metrics_series(metrics_family("saga_admission_refused_total",
						  "Starts refused with 429 overloaded",
						  METRIC_COUNTER),
				   "");
	R.refusal_seconds = metrics_series(
		metrics_family("saga_admission_refusal_seconds",
			       "Time from a start's refusal to its 429: the wait for the shared "
			       "replay read and the read",
			       METRIC_HISTOGRAM),
		"");
	metrics_gauge_fn("saga_inflight", "Sagas in flight (not terminal), as admission counts them",
			 "", inflight_fn, NULL);
	metrics_gauge_fn("saga_admission_limit",
			 "Sagas in flight at which starts are refused (0: admission control off)", "",
			 limit_fn, NULL);
	R.refused_keys = evbuffer_new();
	R.refused_timer = evtimer_new(service->base, refused_flush, NULL);
	if (!R.refused_keys || !R.refused_timer)
		abort();
	if (admission_limit(adm) != 0) {
		R.door = db_pool_new(service->base, service->database_url, "orchestrator", 1);
		if (!R.door)
			abort();
	}
	R.count_timer = event_new(service->base, -1, EV_PERSIST, count_cb, NULL);
	if (!R.count_timer)
		abort();
	event_add(R.count_timer, &count_every);
	count_cb(-1, 0, NULL); /* the count to start from */
	R.step_timeout_ms = step_timeout_ms;
	R.idempotency_ttl_s = idempotency_ttl_s;
	R.started = metrics_family("saga_started_total", "Sagas started (POST /orders, POST /sagas/{name})",
				   METRIC_COUNTER);
	metrics_series(R.started, "");
	R.purge_timer = event_new(service->base, -1, EV_PERSIST, purge_cb, NULL);
	if (!R.purge_timer)
		abort();
	event_add(R.purge_timer, &every);
}

void orders_close(void)
{
	if (R.purge_timer)
		event_free(R.purge_timer);
	if (R.count_timer)
		event_free(R.count_timer);
	if (R.refused_timer)
		event_free(R.refused_timer);
	if (R.refused_keys)
		evbuffer_free(R.refused_keys);
	db_pool_free(R.door); /* drops a read out, without its callback */
	refused_free(R.refused_wait);
	refused_free(R.refused_reading);
	memset(&R, 0, sizeof(R));
}
