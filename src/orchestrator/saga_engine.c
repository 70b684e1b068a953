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
#include "monotime.h"
#include "outbox.h"
#include "saga_registry.h"
#include "service.h"
#include "uuid.h"

#define TRANSITION_TRIES 5
#define DEADLINE_BATCH 100
/* the registry is read again for an unknown type at most this often */
#define RELOAD_EVERY_MS 1000

static struct {
	struct service *service;
	struct admission *adm;
	int64_t step_timeout_ms;
	struct metric_family *transitions;
	struct event *deadline_timer;
	bool sweeping;
	int64_t reloaded_at;
} E;

/* See saga_step in sql/orchestrator/010_saga_step.sql. */
#define STEP_ARGS                                                                              \
	"$1, $2, $3, $4::int, $5, $6, $7, $8, $9, $10::bigint, $11, $12::jsonb, $13, $14, $15,"   \
	" $16::text[], $17::text[], $18::text[], $19, $20, $21, $22, $23, $24::int"
#define STEP_PARAMS 24

static const char step_sql[] = "SELECT * FROM saga_step(" STEP_ARGS ")";

/* The same, for a cancellation: its reason is written in the same transaction. */
static const char cancel_sql[] =
	"WITH a AS (SELECT * FROM saga_step(" STEP_ARGS ")),"
	" c AS (INSERT INTO saga_cancellations (saga_id, reason)"
	"       SELECT $2, $25 FROM a WHERE a.result = 'applied')"
	"SELECT * FROM a";

/* saga_step's columns */
enum { C_RESULT, C_STATE, C_COMP, C_DEF, C_DEFV, C_PAYLOAD, C_TRACE, C_MISSING };

/*
 * What saga_step is asked to do (the plan of one definition, see
 * saga_engine.h): its parameters as text, pointing into the definition
 * (the registry only grows) or into the plan itself.
 */
struct plan {
	const struct saga_def *def;
	char version[12];
	const char *from, *undo, *to, *new_undo, *cause;
	char deadline_ms[24];  /* "" for none */
	const char *step;      /* the step a succeeded event's output is kept under */
	char out_id[UUID_STR_LEN];
	const struct saga_step_def *out_step; /* whose command (with fields) is sent, or NULL */
	const char *out_dest, *out_type;
	char *fields, *field_steps, *input_drop; /* text[] literals (malloc'd), see plan_fields */
	const char *alt_to, *alt_new_undo, *alt_cause, *alt_dest, *alt_type;
	bool ends, alt_ends; /* the move, the alternative move end the saga */
};

/*
 * One event, deadline or cancellation applied to one saga: its plan (see
 * saga_engine.h) goes with the read, and saga_step applies it only if the
 * saga runs that definition and is still where the plan starts, guarded by
 * its version.
 */
struct transition {
	enum saga_trigger trigger;
	char type[SAGA_DEF_WORD_MAX + 1]; /* the event's type; "" for the others */
	char event_id[UUID_STR_LEN];      /* "" for StepTimeout and Cancelled */
	char saga_id[UUID_STR_LEN];
	const struct saga_def *def; /* deadline, cancel: the saga's, as read */
	struct saga_pos from;       /* deadline, cancel: where it was read */
	struct plan plan;
	char *output;               /* the event's output (JSON text) or NULL */
	int tries;
	bool reloaded;   /* the registry was read again for it */
	bool ending;     /* a plan ends the saga: admission counts it */
	bool wrong_type; /* the saga's definition has no such event type */
	const char *why; /* SAGA_OUT_IGNORED: reason */
	struct db_error err; /* SAGA_OUT_DB_ERROR: copy without message */
	void (*done)(struct transition *t, enum saga_outcome o);
	struct inmsg m;       /* events only */
	char *reason;         /* cancellations only (malloc'd) */
	saga_apply_cb ext_done; /* saga_transition_apply's caller */
	void *ext_arg;
};

static void transition_send(struct transition *t);
static bool transition_plan(struct transition *t);

/*
 * The definition of each saga this orchestrator started or moved, so that
 * an event for it carries the plan of the saga's own definition. An event
 * names its saga, not the saga's definition; without an entry, the plan is
 * for the first definition loaded in which the event's type acts, and when
 * the saga runs another, saga_step answers no_plan naming the saga's: one
 * more round trip, for a saga another orchestrator started or one that
 * migrated meanwhile. Direct-mapped: a slot per hash of the saga's id,
 * taken over by the next saga that hashes there, cleared when the saga
 * ends.
 */
#define KNOWN_SLOTS 4096 /* a power of two; 48 bytes each */

static struct known {
	char saga_id[UUID_STR_LEN];
	const struct saga_def *def; /* stable: the registry only grows */
} known_sagas[KNOWN_SLOTS];

static struct known *known_slot(const char *saga_id)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const char *c = saga_id; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	return &known_sagas[h & (KNOWN_SLOTS - 1)];
}

static void known_set(const char *saga_id, const struct saga_def *d)
{
	struct known *k = known_slot(saga_id);

	snprintf(k->saga_id, sizeof(k->saga_id), "%s", saga_id);
	k->def = d;
}

static const struct saga_def *known_def(const char *saga_id)
{
	const struct known *k = known_slot(saga_id);

	return strcmp(k->saga_id, saga_id) == 0 ? k->def : NULL;
}

static void known_forget(const char *saga_id)
{
	struct known *k = known_slot(saga_id);

	if (strcmp(k->saga_id, saga_id) == 0)
		memset(k, 0, sizeof(*k));
}

void saga_engine_started(const char *saga_id, const struct saga_def *d)
{
	known_set(saga_id, d);
}

int64_t saga_step_deadline_ms(const struct saga_def *d, int step)
{
	return d->steps[step].deadline_ms > 0 ? d->steps[step].deadline_ms : E.step_timeout_ms;
}

static void add(struct json_object *o, const char *key, struct json_object *v)
{
	if (json_object_object_add(o, key, v))
		abort();
}

char *saga_first_body(const struct saga_def *d, struct json_object *input, const char *cmd_id,
		      const char *saga_id)
{
	const struct saga_step_def *s = &d->steps[0];
	struct json_object *b = json_object_new_object(), *v;
	char *text;

	add(b, "commandId", json_object_new_string(cmd_id));
	add(b, "sagaId", json_object_new_string(saga_id));
	for (size_t i = 0; i < s->n_fields; i++)
		if (json_object_object_get_ex(input, s->fields[i].name, &v))
			add(b, s->fields[i].name, json_object_get(v));
	text = strdup(json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN));
	if (!text)
		abort();
	json_object_put(b);
	return text;
}

static bool terminal(struct saga_pos p)
{
	return p.phase != SAGA_RUNNING && p.phase != SAGA_UNDOING;
}

/*
 * The body of the command of step (fields, field_steps, input_drop), as
 * saga_step takes it: input_drop, the input fields the command does not
 * carry, only when it carries input fields alone (the body is then the
 * input less them, without a loop).
 */
static void plan_fields(struct plan *p, const struct saga_def *d, const struct saga_step_def *step)
{
	size_t n = step->n_fields > d->n_input ? step->n_fields : d->n_input, n_drop = 0;
	const char **names = calloc(n + 1, sizeof(*names)), **steps = calloc(n + 1, sizeof(*steps));
	bool outputs = false;

	if (!names || !steps)
		abort();
	for (size_t i = 0; i < step->n_fields; i++) {
		const struct saga_field_ref *f = &step->fields[i];

		names[i] = f->name;
		steps[i] = f->step < 0 ? NULL : d->steps[f->step].name;
		outputs |= f->step >= 0;
	}
	p->fields = db_text_array(names, step->n_fields);
	p->field_steps = db_text_array(steps, step->n_fields);
	for (size_t i = 0; !outputs && i < d->n_input; i++) {
		bool carried = false;

		for (size_t k = 0; k < step->n_fields; k++)
			carried |= strcmp(d->input[i].name, step->fields[k].name) == 0;
		if (!carried)
			names[n_drop++] = d->input[i].name;
	}
	if (!outputs)
		p->input_drop = db_text_array(names, n_drop);
	free(names);
	free(steps);
}

static void plan_clear(struct plan *p)
{
	free(p->fields);
	free(p->field_steps);
	free(p->input_drop);
	memset(p, 0, sizeof(*p));
}

/*
 * The plan of what trigger does to a saga of d at from (an event of type),
 * as saga_step takes it; false when it does nothing there (*why says why).
 */
static bool plan_make(struct plan *p, const struct saga_def *d, struct saga_pos from,
		      enum saga_trigger trigger, const char *type, const char **why)
{
	struct saga_move mv, alt;

	plan_clear(p);
	if (!saga_machine_next(d, from, trigger, type, &mv, why))
		return false;
	p->def = d;
	snprintf(p->version, sizeof(p->version), "%d", (int)d->version);
	p->from = saga_machine_state(d, from);
	p->undo = saga_machine_compensation(d, from);
	p->to = mv.to_state;
	p->new_undo = mv.compensation;
	p->cause = mv.cause;
	if (mv.deadline)
		snprintf(p->deadline_ms, sizeof(p->deadline_ms), "%lld",
			 (long long)saga_step_deadline_ms(d, mv.to.step));
	/* a succeeded event's output is kept under its step's name */
	if (trigger == SAGA_ON_EVENT && from.phase == SAGA_RUNNING &&
	    strcmp(type, d->steps[from.step].succeeded) == 0)
		p->step = d->steps[from.step].name;
	p->ends = terminal(mv.to);
	if (mv.action == SAGA_SEND_NONE)
		return true;
	uuid_new_v7(p->out_id);
	p->out_dest = mv.participant;
	p->out_type = mv.message;
	if (mv.action != SAGA_SEND_COMMAND)
		return true;
	p->out_step = &d->steps[mv.action_step];
	plan_fields(p, d, p->out_step);
	/* a field from an output an event did not carry: the step fails (missing_field) */
	if (!p->input_drop &&
	    saga_machine_next(d, mv.to, SAGA_ON_EVENT, d->steps[mv.to.step].failed, &alt, why)) {
		p->alt_to = alt.to_state;
		p->alt_new_undo = alt.compensation;
		p->alt_cause = alt.cause;
		p->alt_dest = alt.action == SAGA_SEND_NONE ? NULL : alt.participant;
		p->alt_type = alt.action == SAGA_SEND_NONE ? NULL : alt.message;
		p->alt_ends = terminal(alt.to);
	}
	return true;
}

/*
 * The plan of t: for an event, with its saga's definition when known and
 * the type acts in it, else with the first loaded definition in which the
 * type acts; for a deadline or a cancellation, with the saga's definition.
 * False when there is none.
 */
static bool transition_plan(struct transition *t)
{
	const char *why = NULL;
	bool planned;

	if (t->trigger == SAGA_ON_EVENT) {
		const struct saga_def *d = known_def(t->saga_id);
		struct saga_pos at;

		if (!d || !saga_machine_expected(d, t->type, &at)) {
			d = NULL;
			for (size_t i = 0; !d && i < saga_registry_count(); i++)
				if (saga_machine_expected(saga_registry_at(i), t->type, &at))
					d = saga_registry_at(i);
		}
		planned = d && plan_make(&t->plan, d, at, SAGA_ON_EVENT, t->type, &why);
		if (d && !planned)
			abort(); /* an event acts where saga_machine_expected says (unit-tested) */
	} else {
		planned = plan_make(&t->plan, t->def, t->from, t->trigger, NULL, &why);
		if (!planned)
			t->why = why;
	}
	if (planned && (t->plan.ends || t->plan.alt_ends) && !t->ending) {
		t->ending = true;
		admission_end_begin(E.adm);
	}
	return planned;
}

/* The outcome to its owner; a saga that ended leaves admission's count. */
static void transition_done(struct transition *t, enum saga_outcome o, bool ended)
{
	if (t->ending)
		admission_end_done(E.adm, o == SAGA_OUT_APPLIED && ended);
	t->done(t, o);
}

static void reloaded(void *arg, int rc)
{
	struct transition *t = arg;

	if (t->trigger == SAGA_ON_EVENT && !transition_plan(t)) {
		t->wrong_type = true;
		transition_done(t, SAGA_OUT_IGNORED, false);
		return;
	}
	transition_send(t);
}

/* Reads the registry again once for t (definitions another orchestrator registered). */
static bool transition_reload(struct transition *t)
{
	if (t->reloaded)
		return false;
	t->reloaded = true;
	E.reloaded_at = monotime_ms();
	saga_registry_reload(reloaded, t);
	return true;
}

/* Why a saga of d at (state, compensation) ignores t. */
static const char *ignored_why(struct transition *t, const struct saga_def *d, const char *state,
			       const char *compensation)
{
	struct saga_pos pos;
	struct saga_move unused;
	const char *why = "unknown_state";

	if (d && saga_machine_pos(d, state, compensation, &pos) == 0)
		saga_machine_next(d, pos, t->trigger, t->type, &unused, &why);
	return why;
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
		transition_done(t, SAGA_OUT_DB_ERROR, false);
		return;
	}
	result = PQgetvalue(res, 0, C_RESULT);
	if (strcmp(result, "not_found") == 0) {
		transition_done(t, SAGA_OUT_NOT_FOUND, false);
		return;
	}
	if (strcmp(result, "duplicate") == 0) {
		transition_done(t, SAGA_OUT_DUPLICATE, false);
		return;
	}
	if (strcmp(result, "no_plan") == 0 || strcmp(result, "ignored") == 0) {
		const struct saga_def *d = saga_registry_get(PQgetvalue(res, 0, C_DEF),
							     atoi(PQgetvalue(res, 0, C_DEFV)));

		if (!d && transition_reload(t))
			return;
		if (d)
			known_set(t->saga_id, d);
		if (d && strcmp(result, "no_plan") == 0 && t->trigger == SAGA_ON_EVENT) {
			struct saga_pos unused;

			/* loaded since the plans were made, or not the definition this
			 * orchestrator knew the saga by: plan again */
			if (saga_machine_expected(d, t->type, &unused) && ++t->tries < TRANSITION_TRIES &&
			    transition_plan(t)) {
				transition_send(t);
				return;
			}
			t->wrong_type = !saga_machine_expected(d, t->type, &unused);
		}
		t->why = d ? ignored_why(t, d, PQgetvalue(res, 0, C_STATE), db_val(res, 0, C_COMP))
			   : "unknown_definition";
		transition_done(t, SAGA_OUT_IGNORED, false);
		return;
	}

	const struct plan *p = &t->plan;
	const char *trace = db_val(res, 0, C_TRACE);
	const char *to = PQgetvalue(res, 0, C_STATE);
	const char *missing = db_val(res, 0, C_MISSING);
	bool ended = missing ? p->alt_ends : p->ends;
	struct log_ctx lc = { .saga_id = t->saga_id,
			      .message_id = t->event_id[0] ? t->event_id : NULL,
			      .trace_id = trace };
	char labels[192];

	snprintf(labels, sizeof(labels), "from=\"%s\",to=\"%s\"", p->from, to);
	metrics_inc(E.transitions, labels, 1);
	if (missing)
		LOG_AT(LOG_WARN, &lc, "%s -> %s on %s: %s is missing (missing_field)", p->from, to,
		       t->trigger == SAGA_ON_EVENT ? t->type : "a deadline",
		       p->out_step->fields[atoi(missing) - 1].ref);
	else
		LOG_AT(LOG_INFO, &lc, "%s -> %s on %s", p->from, to,
		       t->trigger == SAGA_ON_EVENT  ? t->type
		       : t->trigger == SAGA_ON_DEADLINE ? "StepTimeout"
							: "Cancelled");
	if (db_val(res, 0, C_PAYLOAD))
		outbox_send(E.service->outbox, p->out_id, "command",
			    missing ? p->alt_dest : p->out_dest, missing ? p->alt_type : p->out_type,
			    PQgetvalue(res, 0, C_PAYLOAD), trace);
	if (ended)
		known_forget(t->saga_id);
	else
		known_set(t->saga_id, p->def);
	transition_done(t, SAGA_OUT_APPLIED, ended);
}

static void transition_send(struct transition *t)
{
	const struct plan *p = &t->plan;
	const char *params[STEP_PARAMS + 1] = {
		t->event_id[0] ? t->event_id : NULL,
		t->saga_id,
		p->def ? p->def->name : NULL,
		p->def ? p->version : NULL,
		p->from,
		p->undo,
		p->to,
		p->new_undo,
		p->cause,
		p->deadline_ms[0] ? p->deadline_ms : NULL,
		p->step,
		t->output,
		p->out_id[0] ? p->out_id : NULL,
		p->out_dest,
		p->out_type,
		p->fields,
		p->field_steps,
		p->input_drop,
		p->alt_to,
		p->alt_new_undo,
		p->alt_cause,
		p->alt_dest,
		p->alt_type,
		outbox_lease_ms(E.service->outbox),
		t->reason,
	};

	db_query_grouped(E.service->pool, t->saga_id, t->reason ? cancel_sql : step_sql,
			 t->reason ? STEP_PARAMS + 1 : STEP_PARAMS, params, transition_applied, t);
}

static void transition_free(struct transition *t)
{
	plan_clear(&t->plan);
	free(t->output);
	free(t->reason);
	free(t);
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
		if (t->wrong_type) {
			inmsg_error(m, 404, "unknown_type",
				    "the saga's definition has no event type %s", t->type);
		} else if (strcmp(t->why, "unknown_definition") == 0) {
			inmsg_unavailable(m); /* its definition is not loaded yet: later */
		} else {
			snprintf(body, sizeof(body), "{\"ignored\":true,\"reason\":\"%s\"}", t->why);
			inmsg_reply(m, 200, body);
		}
		break;
	case SAGA_OUT_NOT_FOUND:
		inmsg_error(m, 404, "not_found", "no such saga");
		break;
	case SAGA_OUT_DB_ERROR:
		inmsg_db_error(m, &t->err, "event");
		break;
	}
	transition_free(t);
}

/* Which kinds of event type is in the loaded definitions. */
static void type_kinds(const char *type, bool *known, bool *failed, bool *succeeded)
{
	*known = *failed = *succeeded = false;
	for (size_t i = 0; i < saga_registry_count(); i++) {
		const struct saga_def *d = saga_registry_at(i);

		for (size_t k = 0; k < d->n_steps; k++) {
			const struct saga_step_def *s = &d->steps[k];

			*failed |= strcmp(type, s->failed) == 0;
			*succeeded |= strcmp(type, s->succeeded) == 0;
			*known |= strcmp(type, s->failed) == 0 || strcmp(type, s->succeeded) == 0 ||
				  strcmp(type, s->compensated) == 0;
		}
	}
}

static void unknown_reloaded(void *arg, int rc);

/* An event from a participant, over HTTP or AMQP. */
static void event_handle(struct inmsg m, const char *type, bool reloaded)
{
	const char *event_id, *saga_id, *reason, *bad = NULL;
	bool known, failed, succeeded;
	struct json_object *obj, *output = NULL;
	struct transition *t;
	char err[160];
	size_t len;
	const char *body;

	type_kinds(type, &known, &failed, &succeeded);
	if (!known && strlen(type) <= SAGA_DEF_WORD_MAX) {
		/* registered through another orchestrator since this one read them? */
		int64_t now = monotime_ms();

		if (!reloaded && now - E.reloaded_at >= RELOAD_EVERY_MS) {
			struct inmsg *held = malloc(sizeof(*held) + strlen(type) + 1);

			if (!held)
				abort();
			*held = m;
			strcpy((char *)(held + 1), type);
			E.reloaded_at = now;
			saga_registry_reload(unknown_reloaded, held);
			return;
		}
	}
	if (!known) {
		inmsg_error(m, 404, "unknown_type", "unknown event type");
		return;
	}
	/* docs/protocol.md: the failures carry a reason; without it the event is malformed
	 * whatever the saga's state, so it is refused before the state is read */
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
	else if ((failed || json_object_object_get_ex(obj, "reason", NULL)) &&
		 jsonx_get_str(obj, "reason", 200, &reason) != 0)
		bad = "reason";
	if (bad) {
		inmsg_error(m, 400, strcmp(bad, "body") ? "invalid_field" : "invalid_json",
			    "%s is missing or invalid", bad);
		json_object_put(obj);
		return;
	}
	if (succeeded && json_object_object_get_ex(obj, "output", &output) && output &&
	    saga_output_check(output, err, sizeof(err)) != 0) {
		inmsg_error(m, 400, "invalid_field", "%s", err);
		json_object_put(obj);
		return;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		abort();
	t->trigger = SAGA_ON_EVENT;
	t->m = m;
	t->done = event_done;
	snprintf(t->type, sizeof(t->type), "%s", type);
	snprintf(t->event_id, sizeof(t->event_id), "%s", event_id);
	snprintf(t->saga_id, sizeof(t->saga_id), "%s", saga_id);
	if (output && !(t->output = jsonx_canonical(output)))
		abort();
	json_object_put(obj);
	if (!transition_plan(t))
		abort(); /* known: some definition has the type */
	transition_send(t);
}

static void unknown_reloaded(void *arg, int rc)
{
	struct inmsg *held = arg;

	event_handle(*held, (const char *)(held + 1), true);
	free(held);
}

void saga_handle_event(struct inmsg m, const char *type)
{
	event_handle(m, type, false);
}

void saga_post_event(struct evhttp_request *req, void *svc, const char *tail)
{
	saga_handle_event(inmsg_http(req), tail);
}

/* Step deadlines: sagas past theirs compensate (StepTimeout). */
static const char overdue_sql[] =
	"SELECT saga_id, state, compensation, definition_name, definition_version"
	"  FROM saga_instances WHERE deadline_at <= now()"
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
	transition_free(t);
	if (--sweeps_open == 0) {
		E.sweeping = false;
		/* a backlog of overdue sagas drains at once, not a batch a tick */
		if (sweep_full && sweep_applied > 0)
			deadline_cb(-1, 0, NULL);
	}
}

/* Its definition and position, read as (name, version, state, compensation). */
static bool saga_read(struct transition *t, const char *name, const char *version,
		      const char *state, const char *compensation)
{
	t->def = saga_registry_get(name, atoi(version));
	return t->def && saga_machine_pos(t->def, state, compensation, &t->from) == 0;
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
		t->trigger = SAGA_ON_DEADLINE;
		t->done = deadline_done;
		snprintf(t->saga_id, sizeof(t->saga_id), "%s", PQgetvalue(res, i, 0));
		if (!saga_read(t, PQgetvalue(res, i, 3), PQgetvalue(res, i, 4), PQgetvalue(res, i, 1),
			       db_val(res, i, 2)) ||
		    !transition_plan(t)) {
			/* a definition another orchestrator registered: read at the next sweep */
			if (!t->def)
				saga_registry_reload(NULL, NULL);
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
	transition_free(t);
}

static void ext_later(evutil_socket_t fd, short what, void *arg)
{
	ext_done(arg, SAGA_OUT_IGNORED);
}

void saga_transition_apply(const char *saga_id, const struct saga_def *d, struct saga_pos from,
			   enum saga_trigger trigger, const char *reason, saga_apply_cb done,
			   void *arg)
{
	struct transition *t = calloc(1, sizeof(*t));

	if (!t)
		abort();
	t->trigger = trigger;
	t->def = d;
	t->from = from;
	t->done = ext_done;
	t->ext_done = done;
	t->ext_arg = arg;
	snprintf(t->saga_id, sizeof(t->saga_id), "%s", saga_id);
	if (reason && !(t->reason = strdup(reason)))
		abort();
	if (!transition_plan(t)) {
		/* never from inside this call */
		if (event_base_once(E.service->base, -1, EV_TIMEOUT, ext_later, t, NULL) != 0)
			abort();
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
	E.reloaded_at = monotime_ms() - RELOAD_EVERY_MS;
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
	memset(known_sagas, 0, sizeof(known_sagas));
}
