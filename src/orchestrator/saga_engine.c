/* saga_engine: see saga_engine.h. */
#include "saga_engine.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "db.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"
#include "service.h"
#include "uuid.h"

#define TRANSITION_TRIES 5
#define DEADLINE_BATCH 100

static struct {
	struct service *service;
	struct admission *adm;
	int64_t step_timeout_ms;
	struct metric_family *transitions;
	struct event *deadline_timer;
	bool sweeping;
} E;

/* See saga_apply in sql/orchestrator/005_saga_functions.sql. */
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
	const char *why;             /* SAGA_OUT_IGNORED: reason */
	struct db_error err;         /* SAGA_OUT_DB_ERROR: copy without message */
	char cmd_id[UUID_STR_LEN];
	char payload[160];
	void (*done)(struct transition *t, enum saga_outcome o);
	struct inmsg m;              /* events only */
	char *reason;                /* cancellations only (malloc'd) */
	saga_apply_cb ext_done;      /* saga_transition_apply's caller */
	void *ext_arg;
	bool ending;                 /* to a terminal state: admission counts it */
};

static void transition_send(struct transition *t);

/* The transition's outcome to its owner; a saga that ended leaves admission's count. */
static void transition_done(struct transition *t, enum saga_outcome o)
{
	if (t->ending)
		admission_end_done(E.adm, o == SAGA_OUT_APPLIED);
	t->done(t, o);
}

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
		transition_done(t, SAGA_OUT_DB_ERROR);
		return;
	}
	result = PQgetvalue(res, 0, 0);
	if (strcmp(result, "not_found") == 0) {
		transition_done(t, SAGA_OUT_NOT_FOUND);
		return;
	}
	if (strcmp(result, "duplicate") == 0) {
		transition_done(t, SAGA_OUT_DUPLICATE);
		return;
	}
	if (strcmp(result, "ignored") == 0) {
		int st = saga_state_parse(PQgetvalue(res, 0, 1));
		int undo = saga_undo_parse(db_val(res, 0, 2));
		struct saga_step unused;

		t->why = "unknown_state";
		if (st >= 0 && undo >= 0)
			saga_next((enum saga_state)st, (enum saga_undo)undo, t->ev, &unused, &t->why);
		transition_done(t, SAGA_OUT_IGNORED);
		return;
	}

	const char *trace = db_val(res, 0, 4);
	struct log_ctx lc = { .saga_id = t->saga_id,
			      .message_id = t->event_id[0] ? t->event_id : NULL,
			      .trace_id = trace };
	char labels[96];

	snprintf(labels, sizeof(labels), "from=\"%s\",to=\"%s\"", saga_state_name(t->from),
		 saga_state_name(t->step.to));
	metrics_inc(E.transitions, labels, 1);
	LOG_AT(LOG_INFO, &lc, "%s -> %s on %s", saga_state_name(t->from),
	       saga_state_name(t->step.to), saga_event_name(t->ev));
	if (t->step.command != SAGA_CMD_NONE)
		outbox_send(E.service->outbox, t->cmd_id, "command",
			    saga_command_destination(t->step.command),
			    saga_command_name(t->step.command), PQgetvalue(res, 0, 3), trace);
	transition_done(t, SAGA_OUT_APPLIED);
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
	if (!t->ending && saga_state_terminal(t->step.to)) {
		t->ending = true;
		admission_end_begin(E.adm);
	}
	snprintf(deadline_s, sizeof(deadline_s), "%lld", (long long)E.step_timeout_ms);
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
		outbox_lease_ms(E.service->outbox),
		t->reason,
	};
	db_query_grouped(E.service->pool, t->saga_id,
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

static void event_done(struct transition *t, enum saga_outcome o)
{
	struct inmsg m = t->m;
	char body[128];

	switch (o) {
	case SAGA_OUT_APPLIED:
		inmsg_reply(m, 200, "{\"duplicated\":false}");
		break;
	case SAGA_OUT_DUPLICATE:
		metrics_inc(metrics_family("saga_inbox_duplicates_total",
					   "Messages received again and not applied again",
					   METRIC_COUNTER),
			    "", 1);
		inmsg_reply(m, 200, "{\"duplicated\":true}");
		break;
	case SAGA_OUT_IGNORED:
		snprintf(body, sizeof(body), "{\"ignored\":true,\"reason\":\"%s\"}", t->why);
		inmsg_reply(m, 200, body);
		break;
	case SAGA_OUT_NOT_FOUND:
		inmsg_error(m, 404, "not_found", "no such saga");
		break;
	case SAGA_OUT_DB_ERROR:
		inmsg_db_error(m, &t->err, "event");
		break;
	}
	free(t);
}

/* An event from payment or inventory, over HTTP or AMQP. */
void saga_handle_event(struct inmsg m, const char *type)
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
	/* docs/protocol.md: the failures carry a reason; without it the event is malformed
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

void saga_post_event(struct evhttp_request *req, void *svc, const char *tail)
{
	saga_handle_event(inmsg_http(req), tail);
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

static void deadline_done(struct transition *t, enum saga_outcome o)
{
	if (o == SAGA_OUT_DB_ERROR && t->err.status == DB_SQL_ERROR)
		log_warn("step timeout of saga %s failed: SQLSTATE %s", t->saga_id,
			 t->err.sqlstate);
	sweep_applied += o == SAGA_OUT_APPLIED;
	free(t);
	if (--sweeps_open == 0) {
		E.sweeping = false;
		/* a backlog of overdue sagas drains at once, not a batch a tick */
		if (sweep_full && sweep_applied > 0)
			deadline_cb(-1, 0, NULL);
	}
}

static void overdue_found(void *arg, PGresult *res, const struct db_error *err)
{
	int n = err->status == DB_OK ? PQntuples(res) : 0;

	if (n == 0) {
		E.sweeping = false;
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
			deadline_done(t, SAGA_OUT_IGNORED);
			continue;
		}
		transition_send(t);
	}
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	if (E.sweeping || E.service->stopping)
		return;
	char limit[16];

	snprintf(limit, sizeof(limit), "%d", DEADLINE_BATCH);
	const char *params[1] = { limit };

	E.sweeping = true;
	db_query(E.service->pool, overdue_sql, 1, params, overdue_found, NULL);
}

/* --- transitions the admin API asks for (admin_sagas.c) ----------------- */

static void ext_done(struct transition *t, enum saga_outcome o)
{
	t->ext_done(t->ext_arg, o, o == SAGA_OUT_DB_ERROR ? &t->err : NULL);
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
		ext_done(t, SAGA_OUT_IGNORED);
		return;
	}
	transition_send(t);
}

/* --- lifetime ---------------------------------------------------------- */

struct metric_family *saga_transitions_metric(void)
{
	return E.transitions;
}

void saga_engine_open(struct service *service, struct admission *adm, int64_t step_timeout_ms)
{
	/* deadlines are checked often enough to be late by a fraction of one */
	int64_t every = step_timeout_ms / 4 < 1000 ? step_timeout_ms / 4 : 1000;
	struct timeval tv = { (time_t)(every / 1000), (suseconds_t)(every % 1000) * 1000 };

	E.service = service;
	E.adm = adm;
	E.step_timeout_ms = step_timeout_ms;
	E.transitions = metrics_family("saga_transitions_total",
				       "Saga transitions by from and to state", METRIC_COUNTER);
	E.deadline_timer = event_new(service->base, -1, EV_PERSIST, deadline_cb, NULL);
	if (!E.deadline_timer)
		abort();
	event_add(E.deadline_timer, &tv);
}

void saga_engine_close(void)
{
	if (E.deadline_timer)
		event_free(E.deadline_timer);
	memset(&E, 0, sizeof(E));
}
