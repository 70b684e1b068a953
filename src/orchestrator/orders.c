/* orders: see orders.h. */
#include "monotime.h"
#include "orders.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
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
	struct event *count_timer;
	struct refused_batch *refused_wait; /* refused starts waiting for their read */
	struct evbuffer *refused_keys;      /* ... their keys and bodies, a JSON array */
	struct event *refused_timer;
	char mark[64];         /* created_at from which the count counts created sagas */
	char next_mark[64];    /* the mark the next series will use */
	int64_t mark_ms;       /* when mark was set */
} R;

/* The mark moves this often: the count reads the sagas created since it. */
#define MARK_EVERY_MS 5000

/* --- POST /orders ----------------------------------------------------- */

/*
 * One statement, one transaction: the idempotency record, the saga, its
 * first history row and its PayCommand. ON CONFLICT DO UPDATE (not DO
 * NOTHING) so that a concurrent request with the same key waits for the
 * first to commit and then gets its row back: DO NOTHING would return
 * nothing, and a second SELECT in the same statement could not see a row
 * committed after the statement's snapshot. The update changes the row only
 * when it has expired, so the key then starts a new saga. The request is
 * new exactly when the record ends up holding this request's saga id.
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
	"                              deadline_at, trace_id)"
	"  SELECT $3, 'PendingPayment', 1, $6, $7, $8::int, $9::bigint,"
	"         now() + $10::bigint * interval '1 millisecond', $11"
	"    FROM rec WHERE rec.saga_id = $3::uuid"
	"  RETURNING saga_id),"
	" h AS ("
	"  INSERT INTO saga_history (saga_id, version, from_state, to_state, cause)"
	"  SELECT saga_id, 1, NULL, 'PendingPayment', 'OrderPlaced' FROM s),"
	" o AS ("
	"  INSERT INTO outbox_messages (message_id, kind, destination, type, payload, trace_id,"
	"                               next_attempt_at)"
	"  SELECT $12, 'command', 'payment', 'PayCommand', $13::jsonb, $11,"
	"         now() + $14::int * interval '1 millisecond' FROM s)"
	"SELECT rec.saga_id = $3::uuid,"
	"       rec.request_hash = encode(sha256(convert_to($2, 'UTF8')), 'hex'),"
	"       rec.status, rec.response->>'state', rec.saga_id"
	"  FROM rec";

struct order_ctx {
	struct evhttp_request *req;
	char saga_id[UUID_STR_LEN];
	char cmd_id[UUID_STR_LEN];
	char response[160];
	char payload[320];
	char trace[TRACE_ID_LEN];
	bool admitted; /* holds a reservation (admission_try) */
};

/* The trace of an incoming traceparent, or a new one. */
static void trace_id_of(struct evhttp_request *req, char out[TRACE_ID_LEN])
{
	if (!traceparent_parse(httpd_header(req, "traceparent"), out))
		trace_id_new(out);
}

/*
 * The answer to POST /orders, first time and replayed alike: the replay is
 * the first answer byte for byte but for "duplicated" (ids are UUIDs and
 * states are names: nothing to escape).
 */
static void order_answer(char *buf, size_t len, const char *saga_id, const char *state,
			 bool duplicated)
{
	snprintf(buf, len, "{\"sagaId\":\"%s\",\"state\":\"%s\",\"duplicated\":%s}", saga_id,
		 state, duplicated ? "true" : "false");
}

/* The first answer to an accepted key again, marked as a replay. */
static void reply_replayed(struct evhttp_request *req, const char *saga_id, const char *state,
			   int status)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	char body[160], location[64];

	snprintf(location, sizeof(location), "/orders/%s", saga_id);
	evhttp_add_header(out, "Location", location);
	order_answer(body, sizeof(body), saga_id, state, true);
	evhttp_add_header(out, "Idempotent-Replayed", "true");
	httpd_reply(req, status, body);
}

static void order_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct order_ctx *c = arg;
	struct evhttp_request *req = c->req;
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	char location[64];

	if (c->admitted)
		admission_settle(R.adm, err->status == DB_OK && PQntuples(res) == 1 &&
						PQgetvalue(res, 0, 0)[0] == 't');
	if (err->status != DB_OK || PQntuples(res) != 1) {
		if (err->status == DB_OK)
			httpd_error(req, 500, "internal", "no idempotency record");
		else
			reply_db_error(req, err, "POST /orders");
		free(c);
		return;
	}
	bool fresh = PQgetvalue(res, 0, 0)[0] == 't';
	bool same = PQgetvalue(res, 0, 1)[0] == 't';

	if (!same) {
		httpd_error(req, 422, "idempotency_key_reused",
			    "this Idempotency-Key was used with a different body");
		free(c);
		return;
	}
	if (fresh) {
		snprintf(location, sizeof(location), "/orders/%s", PQgetvalue(res, 0, 4));
		evhttp_add_header(out, "Location", location);
		struct log_ctx lc = { .saga_id = c->saga_id, .trace_id = c->trace };

		metrics_inc(R.started, "", 1);
		metrics_inc(saga_transitions_metric(), "from=\"\",to=\"PendingPayment\"", 1);
		LOG_AT(LOG_INFO, &lc, "order accepted");
		/* the PayCommand row was written claimed: send it now */
		outbox_send(R.service->outbox, c->cmd_id, "command", "payment", "PayCommand", c->payload,
			    c->trace);
		httpd_reply(req, 201, c->response);
	} else {
		reply_replayed(req, PQgetvalue(res, 0, 4), PQgetvalue(res, 0, 3),
			       atoi(PQgetvalue(res, 0, 2)));
	}
	free(c);
}

/*
 * A start refused by admission control, unless it replays a key already
 * accepted: that one is answered as always. The refused starts wait here
 * up to REFUSED_WAIT_MS (or until REFUSED_BATCH of them) and one read by
 * the primary key answers them all, queued with the work already accepted
 * (db_query): no write, and one round trip for many refusals instead of
 * one each. Measured (tests/load/overload.c at 2.5 times capacity): with a
 * read per refusal, or per 2 ms, the reads took half the capacity of this
 * 2-core machine; per 10 ms, goodput stayed at 95 % of it.
 */
#define REFUSED_BATCH 64
#define REFUSED_WAIT_MS 10

static const char refused_sql[] =
	"SELECT e.i, r.request_hash = encode(sha256(convert_to(e.v->>1, 'UTF8')), 'hex'),"
	"       r.status, r.response->>'state', r.saga_id"
	"  FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(v, i)"
	"  JOIN idempotency_records r ON r.key = e.v->>0 AND r.expires_at > now()";

struct refused_batch {
	int n;
	struct evhttp_request *req[REFUSED_BATCH];
};

static void refused_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct refused_batch *b = arg;
	bool answered[REFUSED_BATCH] = { false };
	char retry[16];

	if (err->status != DB_OK) {
		for (int i = 0; i < b->n; i++)
			reply_db_error(b->req[i], err, "POST /orders");
		free(b);
		return;
	}
	for (int row = 0; row < PQntuples(res); row++) {
		int i = atoi(PQgetvalue(res, row, 0)) - 1;

		if (i < 0 || i >= b->n || answered[i])
			continue;
		answered[i] = true;
		if (PQgetvalue(res, row, 1)[0] != 't')
			httpd_error(b->req[i], 422, "idempotency_key_reused",
				    "this Idempotency-Key was used with a different body");
		else
			reply_replayed(b->req[i], PQgetvalue(res, row, 4), PQgetvalue(res, row, 3),
				       atoi(PQgetvalue(res, row, 2)));
	}
	snprintf(retry, sizeof(retry), "%d", admission_retry_after_s(R.adm));
	for (int i = 0; i < b->n; i++) {
		if (answered[i])
			continue;
		metric_add(R.refused, 1);
		evhttp_add_header(evhttp_request_get_output_headers(b->req[i]), "Retry-After", retry);
		httpd_error(b->req[i], 429, "overloaded",
			    "more sagas are in flight than this deployment finishes in time; "
			    "retry after Retry-After seconds with the same Idempotency-Key");
	}
	free(b);
}

/* Sends the read for the refused starts waiting. */
static void refused_flush(evutil_socket_t fd, short what, void *arg)
{
	struct refused_batch *b = R.refused_wait;
	size_t len;

	if (!b)
		return;
	R.refused_wait = NULL;
	evtimer_del(R.refused_timer);
	evbuffer_add(R.refused_keys, "]", 2); /* with the NUL */
	len = evbuffer_get_length(R.refused_keys);
	const char *params[1] = { (const char *)evbuffer_pullup(R.refused_keys, (ev_ssize_t)len) };

	db_query(R.service->pool, refused_sql, 1, params, refused_done, b);
	evbuffer_drain(R.refused_keys, len);
}

static void refuse(struct evhttp_request *req, const char *key, const char *canon)
{
	struct refused_batch *b = R.refused_wait;

	if (!b) {
		struct timeval wait = { 0, REFUSED_WAIT_MS * 1000 };

		b = calloc(1, sizeof(*b));
		if (!b)
			abort();
		R.refused_wait = b;
		evbuffer_add(R.refused_keys, "[", 1);
		evtimer_add(R.refused_timer, &wait);
	} else {
		evbuffer_add(R.refused_keys, ",", 1);
	}
	/* [key, body]: the body as the create hashes it */
	evbuffer_add(R.refused_keys, "[", 1);
	jsonx_buf_str(R.refused_keys, key);
	evbuffer_add(R.refused_keys, ",", 1);
	jsonx_buf_str(R.refused_keys, canon);
	evbuffer_add(R.refused_keys, "]", 1);
	b->req[b->n++] = req;
	if (b->n == REFUSED_BATCH)
		refused_flush(-1, 0, NULL);
}

void orders_post(struct evhttp_request *req, void *svc, const char *tail)
{
	const char *kh = httpd_header(req, "Idempotency-Key");
	char key[256], err[128], qty_s[24], amount_s[24], ttl_s[24], step_s[24];
	const char *customer, *item, *bad = NULL;
	int64_t qty, amount;
	struct json_object *obj;
	size_t len;
	const char *body;
	char *canon;
	struct order_ctx *c;

	if (!kh) {
		httpd_error(req, 400, "idempotency_key_missing", "the Idempotency-Key header is required");
		return;
	}
	/* two lines mean "k1, k2" in HTTP: not a key the client meant, even if equal */
	if (httpd_header_count(req, "Idempotency-Key") > 1 ||
	    !httpd_idempotency_key(kh, key, sizeof(key))) {
		httpd_error(req, 400, "idempotency_key_invalid",
			    "Idempotency-Key must be one header of 1-255 visible ASCII characters");
		return;
	}
	body = httpd_body(req, &len);
	obj = jsonx_parse(body, len, err, sizeof(err));
	if (!obj) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object))
		bad = "body";
	else if (jsonx_get_id(obj, "customerId", &customer) != 0)
		bad = "customerId";
	else if (jsonx_get_id(obj, "itemId", &item) != 0)
		bad = "itemId";
	else if (jsonx_get_int(obj, "qty", 1, 1000, &qty) != 0)
		bad = "qty";
	else if (jsonx_get_int(obj, "amount", 1, 1000000000000LL, &amount) != 0)
		bad = "amount";
	if (bad) {
		json_object_put(obj);
		if (strcmp(bad, "body") == 0)
			httpd_error(req, 400, "invalid_json", "the body must be a JSON object");
		else
			httpd_error(req, 400, "invalid_field", "%s is missing or invalid", bad);
		return;
	}
	canon = jsonx_canonical(obj);
	if (!canon)
		abort();
	if (!admission_try(R.adm, monotime_ms())) {
		refuse(req, key, canon);
		free(canon);
		json_object_put(obj);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	c->req = req;
	c->admitted = true;
	uuid_new_v7(c->saga_id);
	uuid_new_v7(c->cmd_id);
	trace_id_of(req, c->trace);
	order_answer(c->response, sizeof(c->response), c->saga_id, "PendingPayment", false);
	/* ids match [A-Za-z0-9_-]{1,64}: nothing to escape */
	snprintf(c->payload, sizeof(c->payload),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"%s\",\"amount\":%lld}",
		 c->cmd_id, c->saga_id, customer, (long long)amount);
	snprintf(qty_s, sizeof(qty_s), "%lld", (long long)qty);
	snprintf(amount_s, sizeof(amount_s), "%lld", (long long)amount);
	snprintf(ttl_s, sizeof(ttl_s), "%lld", (long long)R.idempotency_ttl_s);
	snprintf(step_s, sizeof(step_s), "%lld", (long long)R.step_timeout_ms);
	const char *params[14] = { key,	  canon,     c->saga_id, c->response, ttl_s,
				   customer, item,	     qty_s,	 amount_s,    step_s,
				   c->trace, c->cmd_id, c->payload, outbox_lease_ms(R.service->outbox) };
	/* commits with the creates and transitions that wait beside it, behind the
	 * work of the sagas already accepted (db.h) */
	db_query_grouped_low(R.service->pool, c->saga_id, create_sql, 14, params, order_done, c);
	free(canon);
	json_object_put(obj);
}

/* --- GET /orders/{id} ------------------------------------------------- */

static const char get_sql[] =
	"SELECT json_build_object("
	"  'sagaId', s.saga_id, 'state', s.state, 'version', s.version,"
	"  'customerId', s.customer_id, 'itemId', s.item_id, 'qty', s.qty, 'amount', s.amount,"
	"  'createdAt', rfc3339(s.created_at), 'updatedAt', rfc3339(s.updated_at),"
	"  'history', (SELECT json_agg(json_build_object("
	"                'version', h.version, 'fromState', h.from_state, 'toState', h.to_state,"
	"                'cause', h.cause, 'messageId', h.message_id, 'at', rfc3339(h.at))"
	"              ORDER BY h.version)"
	"              FROM saga_history h WHERE h.saga_id = s.saga_id))::text"
	"  FROM saga_instances s WHERE s.saga_id = $1";

static void get_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct evhttp_request *req = arg;

	if (err->status != DB_OK) {
		reply_db_error(req, err, "GET /orders");
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

void orders_get(struct evhttp_request *req, void *svc, const char *tail)
{
	if (!uuid_valid(tail)) {
		httpd_error(req, 400, "invalid_id", "expected a saga id (a UUID)");
		return;
	}
	const char *params[1] = { tail };
	db_query(R.service->pool, get_sql, 1, params, get_done, req);
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
	"         WHERE state IN ('PendingPayment', 'PendingInventory', 'Compensating')),"
	"       (SELECT count(*) FROM saga_instances"
	"         WHERE state IN ('PendingPayment', 'PendingInventory', 'Compensating')"
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
	struct timeval count_every = { 0, ADMISSION_REFRESH_MS * 1000 };

	R.service = service;
	R.adm = adm;
	R.refused = metrics_series(metrics_family("saga_admission_refused_total",
						  "Starts refused with 429 overloaded",
						  METRIC_COUNTER),
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
	R.count_timer = event_new(service->base, -1, EV_PERSIST, count_cb, NULL);
	if (!R.count_timer)
		abort();
	event_add(R.count_timer, &count_every);
	count_cb(-1, 0, NULL); /* the count to start from */
	R.step_timeout_ms = step_timeout_ms;
	R.idempotency_ttl_s = idempotency_ttl_s;
	R.started = metrics_family("saga_started_total", "Sagas started by POST /orders",
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
	free(R.refused_wait);
	memset(&R, 0, sizeof(R));
}
