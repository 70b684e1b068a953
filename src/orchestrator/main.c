/*
 * saga-orchestrator: accepts orders (POST /orders, idempotent by key),
 * drives each saga through saga_fsm on the events payment and inventory
 * send back, and compensates sagas whose step passed its deadline.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_api.h"
#include "admin_sagas.h"
#include "app.h"
#include "console.h"
#include "db.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"
#include "saga_fsm.h"
#include "uuid.h"

#define TRANSITION_TRIES 5
#define DEADLINE_BATCH 100

static struct {
	struct app app;
	int64_t step_timeout_ms;
	int64_t idempotency_ttl_s;
	struct event *deadline_timer, *purge_timer;
	bool sweeping;
	struct metric_family *transitions, *started;
} O;

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
	char trace[33];
};

/* The trace of an incoming traceparent, or a new one. */
static void trace_id_of(struct evhttp_request *req, char out[33])
{
	char u[UUID_STR_LEN];

	if (httpd_trace_id(httpd_header(req, "traceparent"), out))
		return;
	uuid_new(u);
	snprintf(out, 33, "%.8s%.4s%.4s%.4s%.12s", u, u + 9, u + 14, u + 19, u + 24);
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

static void order_done(void *arg, PGresult *res, const struct db_error *err)
{
	struct order_ctx *c = arg;
	struct evhttp_request *req = c->req;
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	char location[64];

	if (err->status != DB_OK || PQntuples(res) != 1) {
		if (err->status == DB_OK)
			httpd_error(req, 500, "internal", "no idempotency record");
		else
			app_db_error(req, err, "POST /orders");
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
	snprintf(location, sizeof(location), "/orders/%s", PQgetvalue(res, 0, 4));
	evhttp_add_header(out, "Location", location);
	if (fresh) {
		struct log_ctx lc = { .saga_id = c->saga_id, .trace_id = c->trace };

		metrics_inc(O.started, "", 1);
		metrics_inc(O.transitions, "from=\"\",to=\"PendingPayment\"", 1);
		LOG_AT(LOG_INFO, &lc, "order accepted");
		/* the PayCommand row was written claimed: send it now */
		outbox_send(O.app.outbox, c->cmd_id, "command", "payment", "PayCommand", c->payload,
			    c->trace);
		httpd_reply(req, 201, c->response);
	} else {
		char again[sizeof(c->response)];

		order_answer(again, sizeof(again), PQgetvalue(res, 0, 4), PQgetvalue(res, 0, 3), true);
		evhttp_add_header(out, "Idempotent-Replayed", "true");
		httpd_reply(req, atoi(PQgetvalue(res, 0, 2)), again);
	}
	free(c);
}

static void post_orders(struct evhttp_request *req, void *svc, const char *tail)
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
	c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	c->req = req;
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
	snprintf(ttl_s, sizeof(ttl_s), "%lld", (long long)O.idempotency_ttl_s);
	snprintf(step_s, sizeof(step_s), "%lld", (long long)O.step_timeout_ms);
	const char *params[14] = { key,	  canon,     c->saga_id, c->response, ttl_s,
				   customer, item,	     qty_s,	 amount_s,    step_s,
				   c->trace, c->cmd_id, c->payload, outbox_lease_ms(O.app.outbox) };
	/* commits with the creates and transitions that wait beside it (db.h) */
	db_query_grouped(O.app.pool, c->saga_id, create_sql, 14, params, order_done, c);
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
		app_db_error(req, err, "GET /orders");
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

static void get_order(struct evhttp_request *req, void *svc, const char *tail)
{
	if (!uuid_valid(tail)) {
		httpd_error(req, 400, "invalid_id", "expected a saga id (a UUID)");
		return;
	}
	const char *params[1] = { tail };
	db_query(O.app.pool, get_sql, 1, params, get_done, req);
}

/* --- transitions: events and deadlines --------------------------------- */

/* See saga_apply in sql/orchestrator/002_saga.sql. */
static const char apply_sql[] =
	"SELECT * FROM saga_apply($1, $2, $3, $4, $5, $6, $7, $8::bigint, $9, $10, $11,"
	"                         $12::jsonb, $13::boolean, $14::int)";

/* The same, for a cancellation: its reason is written in the same transaction. */
static const char cancel_sql[] =
	"WITH a AS (SELECT * FROM saga_apply($1, $2, $3, $4, $5, $6, $7, $8::bigint, $9, $10, $11,"
	"                                    $12::jsonb, $13::boolean, $14::int)),"
	" c AS (INSERT INTO saga_cancellations (saga_id, reason)"
	"       SELECT $2, $15 FROM a WHERE a.result = 'applied')"
	"SELECT * FROM a";

enum outcome { OUT_APPLIED, OUT_DUPLICATE, OUT_IGNORED, OUT_NOT_FOUND, OUT_DB_ERROR };

/*
 * One event (or deadline) applied to one saga. The decision is made here,
 * for the one state the event can act in (saga_expected; for a deadline,
 * the state the sweep saw), and sent with the read: saga_apply writes it
 * only if the saga is still there, guarded by its version.
 */
struct transition {
	enum saga_event ev;
	char event_id[UUID_STR_LEN]; /* "" for StepTimeout */
	char saga_id[UUID_STR_LEN];
	enum saga_state from;
	enum saga_undo undo;
	struct saga_step step;
	int tries;
	const char *why;             /* OUT_IGNORED: reason */
	struct db_error err;         /* OUT_DB_ERROR: copy without message */
	char cmd_id[UUID_STR_LEN];
	char payload[160];
	void (*done)(struct transition *t, enum outcome o);
	struct inmsg m;              /* events only */
	char *reason;                /* cancellations only (malloc'd) */
	saga_apply_cb ext_done;      /* saga_transition_apply's caller */
	void *ext_arg;
};

static void transition_send(struct transition *t);

static void transition_applied(void *arg, PGresult *res, const struct db_error *err)
{
	struct transition *t = arg;
	const char *result;

	if (err->status != DB_OK) {
		if (db_retryable(err) && ++t->tries < TRANSITION_TRIES) {
			transition_send(t); /* the saga moved meanwhile: see where it is now */
			return;
		}
		t->err = *err;
		t->err.message = NULL;
		t->done(t, OUT_DB_ERROR);
		return;
	}
	result = PQgetvalue(res, 0, 0);
	if (strcmp(result, "not_found") == 0) {
		t->done(t, OUT_NOT_FOUND);
		return;
	}
	if (strcmp(result, "duplicate") == 0) {
		t->done(t, OUT_DUPLICATE);
		return;
	}
	if (strcmp(result, "ignored") == 0) {
		int st = saga_state_parse(PQgetvalue(res, 0, 1));
		int undo = saga_undo_parse(db_val(res, 0, 2));
		struct saga_step unused;

		t->why = "unknown_state";
		if (st >= 0 && undo >= 0)
			saga_next((enum saga_state)st, (enum saga_undo)undo, t->ev, &unused, &t->why);
		t->done(t, OUT_IGNORED);
		return;
	}

	const char *trace = db_val(res, 0, 4);
	struct log_ctx lc = { .saga_id = t->saga_id,
			      .message_id = t->event_id[0] ? t->event_id : NULL,
			      .trace_id = trace };
	char labels[96];

	snprintf(labels, sizeof(labels), "from=\"%s\",to=\"%s\"", saga_state_name(t->from),
		 saga_state_name(t->step.to));
	metrics_inc(O.transitions, labels, 1);
	LOG_AT(LOG_INFO, &lc, "%s -> %s on %s", saga_state_name(t->from),
	       saga_state_name(t->step.to), saga_event_name(t->ev));
	if (t->step.command != SAGA_CMD_NONE)
		outbox_send(O.app.outbox, t->cmd_id, "command",
			    saga_command_destination(t->step.command),
			    saga_command_name(t->step.command), PQgetvalue(res, 0, 3), trace);
	t->done(t, OUT_APPLIED);
}

static void transition_send(struct transition *t)
{
	const char *cmd_name = saga_command_name(t->step.command);
	char deadline_s[24];

	if (cmd_name) {
		uuid_new_v7(t->cmd_id);
		snprintf(t->payload, sizeof(t->payload), "{\"commandId\":\"%s\",\"sagaId\":\"%s\"}",
			 t->cmd_id, t->saga_id);
	}
	snprintf(deadline_s, sizeof(deadline_s), "%lld", (long long)O.step_timeout_ms);
	const char *params[15] = {
		t->event_id[0] ? t->event_id : NULL,
		t->saga_id,
		saga_state_name(t->from),
		saga_undo_name(t->undo),
		saga_state_name(t->step.to),
		saga_undo_name(t->step.undo),
		saga_event_name(t->ev),
		t->step.deadline ? deadline_s : NULL,
		cmd_name ? t->cmd_id : NULL,
		saga_command_destination(t->step.command),
		cmd_name,
		cmd_name ? t->payload : NULL,
		t->step.command == SAGA_CMD_RESERVE ? "true" : "false",
		outbox_lease_ms(O.app.outbox),
		t->reason,
	};
	db_query_grouped(O.app.pool, t->saga_id,
			 t->reason ? cancel_sql : apply_sql, t->reason ? 15 : 14, params,
			 transition_applied, t);
}

/* Decides what ev does to a saga in from/undo; false when it does nothing. */
static bool transition_decide(struct transition *t, enum saga_state from, enum saga_undo undo)
{
	t->from = from;
	t->undo = undo;
	return saga_next(from, undo, t->ev, &t->step, &t->why);
}

static void event_done(struct transition *t, enum outcome o)
{
	struct inmsg m = t->m;
	char body[128];

	switch (o) {
	case OUT_APPLIED:
		inmsg_reply(m, 200, "{\"duplicated\":false}");
		break;
	case OUT_DUPLICATE:
		metrics_inc(metrics_family("saga_inbox_duplicates_total",
					   "Messages received again and not applied again",
					   METRIC_COUNTER),
			    "", 1);
		inmsg_reply(m, 200, "{\"duplicated\":true}");
		break;
	case OUT_IGNORED:
		snprintf(body, sizeof(body), "{\"ignored\":true,\"reason\":\"%s\"}", t->why);
		inmsg_reply(m, 200, body);
		break;
	case OUT_NOT_FOUND:
		inmsg_error(m, 404, "not_found", "no such saga");
		break;
	case OUT_DB_ERROR:
		app_msg_db_error(m, &t->err, "event");
		break;
	}
	free(t);
}

/* An event from payment or inventory, over HTTP or AMQP. */
static void handle_event(struct inmsg m, const char *type)
{
	int ev = saga_event_parse(type);
	const char *event_id, *saga_id, *reason, *bad = NULL;
	bool needs_reason;
	struct json_object *obj;
	struct transition *t;
	char err[128];
	size_t len;
	const char *body;

	if (ev < 0 || !saga_event_is_message((enum saga_event)ev)) {
		inmsg_error(m, 404, "unknown_type", "unknown event type");
		return;
	}
	/* SPEC §5: the failures carry a reason; without it the event is malformed
	 * whatever the saga's state, so it is refused before the state is read */
	needs_reason = ev == SAGA_PAYMENT_FAILED || ev == SAGA_INVENTORY_RESERVATION_FAILED;
	body = inmsg_body(m, &len);
	obj = jsonx_parse(body, len, err, sizeof(err));
	if (!obj) {
		inmsg_error(m, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object))
		bad = "body";
	else if (jsonx_get_uuid(obj, "eventId", &event_id) != 0)
		bad = "eventId";
	else if (jsonx_get_uuid(obj, "sagaId", &saga_id) != 0)
		bad = "sagaId";
	else if ((needs_reason || json_object_object_get_ex(obj, "reason", NULL)) &&
		 jsonx_get_str(obj, "reason", 200, &reason) != 0)
		bad = "reason";
	if (bad) {
		inmsg_error(m, 400, strcmp(bad, "body") ? "invalid_field" : "invalid_json",
			    "%s is missing or invalid", bad);
		json_object_put(obj);
		return;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		abort();
	t->ev = (enum saga_event)ev;
	t->m = m;
	t->done = event_done;
	snprintf(t->event_id, sizeof(t->event_id), "%s", event_id);
	snprintf(t->saga_id, sizeof(t->saga_id), "%s", saga_id);
	json_object_put(obj);

	enum saga_state from;
	enum saga_undo undo;

	if (!saga_expected(t->ev, &from, &undo) || !transition_decide(t, from, undo))
		abort(); /* saga_fsm guarantees one state per event (unit-tested) */
	transition_send(t);
}

static void post_event(struct evhttp_request *req, void *svc, const char *tail)
{
	handle_event(inmsg_http(req), tail);
}

/* Step deadlines: sagas past theirs compensate (StepTimeout). */
static const char overdue_sql[] =
	"SELECT saga_id, state, compensation FROM saga_instances"
	" WHERE state IN ('PendingPayment', 'PendingInventory') AND deadline_at <= now()"
	" ORDER BY deadline_at LIMIT $1";

static int sweeps_open;
static bool sweep_full;   /* the last batch was full: more may be overdue */
static int sweep_applied; /* and it made progress (else wait for the tick) */

static void deadline_cb(evutil_socket_t fd, short what, void *arg);

static void deadline_done(struct transition *t, enum outcome o)
{
	if (o == OUT_DB_ERROR && t->err.status == DB_SQL_ERROR)
		log_warn("step timeout of saga %s failed: SQLSTATE %s", t->saga_id,
			 t->err.sqlstate);
	sweep_applied += o == OUT_APPLIED;
	free(t);
	if (--sweeps_open == 0) {
		O.sweeping = false;
		/* a backlog of overdue sagas drains at once, not a batch a tick */
		if (sweep_full && sweep_applied > 0)
			deadline_cb(-1, 0, NULL);
	}
}

static void overdue_found(void *arg, PGresult *res, const struct db_error *err)
{
	int n = err->status == DB_OK ? PQntuples(res) : 0;

	if (n == 0) {
		O.sweeping = false;
		return;
	}
	sweeps_open = n;
	sweep_full = n == DEADLINE_BATCH;
	sweep_applied = 0;
	for (int i = 0; i < n; i++) {
		struct transition *t = calloc(1, sizeof(*t));

		if (!t)
			abort();
		int st = saga_state_parse(PQgetvalue(res, i, 1));
		int undo = saga_undo_parse(db_val(res, i, 2));

		t->ev = SAGA_STEP_TIMEOUT;
		t->done = deadline_done;
		snprintf(t->saga_id, sizeof(t->saga_id), "%s", PQgetvalue(res, i, 0));
		if (st < 0 || undo < 0 ||
		    !transition_decide(t, (enum saga_state)st, (enum saga_undo)undo)) {
			deadline_done(t, OUT_IGNORED);
			continue;
		}
		transition_send(t);
	}
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	if (O.sweeping || O.app.stopping)
		return;
	char limit[16];

	snprintf(limit, sizeof(limit), "%d", DEADLINE_BATCH);
	const char *params[1] = { limit };

	O.sweeping = true;
	db_query(O.app.pool, overdue_sql, 1, params, overdue_found, NULL);
}

/* --- transitions the admin API asks for (admin_sagas.c) ----------------- */

static void ext_done(struct transition *t, enum outcome o)
{
	static const enum saga_outcome map[] = {
		[OUT_APPLIED] = SAGA_OUT_APPLIED,     [OUT_DUPLICATE] = SAGA_OUT_DUPLICATE,
		[OUT_IGNORED] = SAGA_OUT_IGNORED,     [OUT_NOT_FOUND] = SAGA_OUT_NOT_FOUND,
		[OUT_DB_ERROR] = SAGA_OUT_DB_ERROR,
	};

	t->ext_done(t->ext_arg, map[o], o == OUT_DB_ERROR ? &t->err : NULL);
	free(t->reason);
	free(t);
}

void saga_transition_apply(const char *saga_id, enum saga_state from, enum saga_undo undo,
			   enum saga_event ev, const char *reason, saga_apply_cb done, void *arg)
{
	struct transition *t = calloc(1, sizeof(*t));

	if (!t)
		abort();
	t->ev = ev;
	t->done = ext_done;
	t->ext_done = done;
	t->ext_arg = arg;
	snprintf(t->saga_id, sizeof(t->saga_id), "%s", saga_id);
	if (reason && !(t->reason = strdup(reason)))
		abort();
	if (!transition_decide(t, from, undo)) {
		ext_done(t, OUT_IGNORED);
		return;
	}
	transition_send(t);
}

struct app *orchestrator_app(void)
{
	return &O.app;
}

static void purge_done(void *arg, PGresult *res, const struct db_error *err)
{
	if (err->status == DB_SQL_ERROR)
		log_warn("idempotency purge failed: %s", err->message);
}

static void purge_cb(evutil_socket_t fd, short what, void *arg)
{
	if (!O.app.stopping)
		db_query(O.app.pool, "SELECT purge_idempotency(1000)", 0, NULL, purge_done, NULL);
}

/* --- wiring ------------------------------------------------------------- */

static const struct httpd_route routes[] = {
	{ "POST", "/orders", false, post_orders, "/orders" },
	{ "GET", "/orders/", false, get_order, "/orders/{id}" },
	{ "POST", "/events/", true, post_event, "/events/{type}" },
	{ "GET", "/console", false, console_redirect, "/console", HTTPD_ADMIN_OPEN },
	{ "GET", "/console/", false, console_get, "/console/{file}", HTTPD_ADMIN_OPEN },
};

static const struct envcfg_var vars[] = {
	{ "STEP_TIMEOUT_MS", ENVCFG_INT, &O.step_timeout_ms, "120000", 10, 86400000,
	  "a saga step's deadline, after which it compensates" },
	{ "IDEMPOTENCY_TTL_S", ENVCFG_INT, &O.idempotency_ttl_s, "86400", 1, 31536000,
	  "how long an Idempotency-Key is remembered" },
};

static const struct app_peer_spec peers[] = {
	{ "payment", "PAYMENT_URL", "http://127.0.0.1:8081" },
	{ "inventory", "INVENTORY_URL", "http://127.0.0.1:8082" },
};

static const struct app_spec spec = {
	.service = "orchestrator",
	.about = "the order saga's orchestrator: POST /orders, GET /orders/{id}, POST /events/{type}",
	.default_addr = "127.0.0.1:8080",
	.migrations = migrations_orchestrator,
	.nmigrations = 0, /* set in main: the count is not a constant expression */
	.vars = vars,
	.nvars = sizeof(vars) / sizeof(vars[0]),
	.routes = routes,
	.nroutes = sizeof(routes) / sizeof(routes[0]),
	.peers = peers,
	.npeers = sizeof(peers) / sizeof(peers[0]),
	.admin = &admin_sagas_spec,
	.consume = handle_event,
};

int main(int argc, char **argv)
{
	struct app_spec s = spec;
	bool done;
	int rc;

	s.nmigrations = migrations_orchestrator_count;
	rc = app_init(&O.app, &s, argc, argv, &done);
	if (rc != 0 || done) {
		app_free(&O.app);
		return rc;
	}
	O.transitions = metrics_family("saga_transitions_total", "Saga transitions by from and to state",
				       METRIC_COUNTER);
	O.started = metrics_family("saga_started_total", "Sagas started by POST /orders",
				   METRIC_COUNTER);
	metrics_series(O.started, "");

	/* deadlines are checked often enough to be late by a fraction of one */
	int64_t every = O.step_timeout_ms / 4 < 1000 ? O.step_timeout_ms / 4 : 1000;
	struct timeval dtv = { (time_t)(every / 1000), (suseconds_t)(every % 1000) * 1000 };
	struct timeval ptv = { 60, 0 };

	O.deadline_timer = event_new(O.app.base, -1, EV_PERSIST, deadline_cb, NULL);
	O.purge_timer = event_new(O.app.base, -1, EV_PERSIST, purge_cb, NULL);
	event_add(O.deadline_timer, &dtv);
	event_add(O.purge_timer, &ptv);

	rc = app_run(&O.app);
	event_free(O.deadline_timer);
	event_free(O.purge_timer);
	app_free(&O.app);
	return rc;
}
