/* saga_machine: see saga_machine.h. */
#include "saga_machine.h"

#include <stdlib.h>
#include <string.h>

/* Which of a step's events a type is. */
enum step_event { EV_NONE, EV_SUCCEEDED, EV_FAILED, EV_COMPENSATED };

/* Event types are distinct within a definition (saga_def), so a type is one step's. */
static enum step_event find_event(const struct saga_def *d, const char *type, int *step)
{
	for (size_t i = 0; type && i < d->n_steps; i++) {
		const struct saga_step_def *s = &d->steps[i];
		const char *const names[] = { s->succeeded, s->failed, s->compensated };
		static const enum step_event kinds[] = { EV_SUCCEEDED, EV_FAILED, EV_COMPENSATED };

		for (size_t e = 0; e < 3; e++) {
			if (strcmp(type, names[e]) == 0) {
				*step = (int)i;
				return kinds[e];
			}
		}
	}
	*step = -1;
	return EV_NONE;
}

const char *saga_machine_state(const struct saga_def *d, struct saga_pos pos)
{
	switch (pos.phase) {
	case SAGA_RUNNING:
		return d->steps[pos.step].pending;
	case SAGA_UNDOING:
		return "Compensating";
	case SAGA_DONE_COMPLETED:
		return "Completed";
	case SAGA_DONE_FAILED:
		return "Failed";
	case SAGA_DONE_COMPENSATED:
		return "Compensated";
	}
	return "?";
}

/*
 * The order saga's `compensation` column keeps the names 1.0 wrote, which
 * 1.0 orchestrators read during a rolling upgrade (docs/upgrading.md);
 * every other definition names the step.
 */
static const char *const order_undo[][2] = { { "Payment", "refund" }, { "Inventory", "release" } };

static bool is_order(const struct saga_def *d)
{
	return strcmp(d->name, "order") == 0;
}

const char *saga_machine_compensation(const struct saga_def *d, struct saga_pos pos)
{
	if (pos.phase != SAGA_UNDOING)
		return NULL;
	for (size_t i = 0; is_order(d) && i < sizeof(order_undo) / sizeof(order_undo[0]); i++)
		if (strcmp(d->steps[pos.step].name, order_undo[i][0]) == 0)
			return order_undo[i][1];
	return d->steps[pos.step].name;
}

/* The step a `compensation` column names: the order saga's own names too. */
static int undo_step(const struct saga_def *d, const char *compensation)
{
	for (size_t i = 0; is_order(d) && i < sizeof(order_undo) / sizeof(order_undo[0]); i++)
		if (strcmp(compensation, order_undo[i][1]) == 0)
			return saga_def_step(d, order_undo[i][0]);
	return saga_def_step(d, compensation);
}

int saga_machine_pos(const struct saga_def *d, const char *state, const char *compensation,
		     struct saga_pos *pos)
{
	static const struct {
		const char *name;
		enum saga_phase phase;
	} done[] = { { "Completed", SAGA_DONE_COMPLETED },
		     { "Failed", SAGA_DONE_FAILED },
		     { "Compensated", SAGA_DONE_COMPENSATED } };

	if (!state)
		return -1;
	if (strcmp(state, "Compensating") == 0) {
		pos->phase = SAGA_UNDOING;
		pos->step = compensation ? undo_step(d, compensation) : -1;
		return pos->step >= 0 ? 0 : -1;
	}
	if (compensation)
		return -1;
	for (size_t i = 0; i < sizeof(done) / sizeof(done[0]); i++) {
		if (strcmp(state, done[i].name) == 0) {
			pos->phase = done[i].phase;
			pos->step = -1;
			return 0;
		}
	}
	for (size_t i = 0; i < d->n_steps; i++) {
		if (strcmp(state, d->steps[i].pending) == 0) {
			pos->phase = SAGA_RUNNING;
			pos->step = (int)i;
			return 0;
		}
	}
	return -1;
}

/* Fills m for a transition from the state named `from` to `to` sending step k's message. */
static void make_move(const struct saga_def *d, const char *from, struct saga_pos to,
		      enum saga_action action, int k, const char *cause, struct saga_move *m)
{
	memset(m, 0, sizeof(*m));
	m->to = to;
	m->action = action;
	m->action_step = action == SAGA_SEND_NONE ? -1 : k;
	if (action != SAGA_SEND_NONE) {
		m->message = action == SAGA_SEND_COMMAND ? d->steps[k].command
							 : d->steps[k].compensation;
		m->participant = d->steps[k].participant;
	}
	/* a step's deadline runs while its command is out, not while it is undone */
	m->deadline = to.phase == SAGA_RUNNING;
	m->deadline_ms = m->deadline ? d->steps[to.step].deadline_ms : 0;
	m->from_state = from;
	m->to_state = saga_machine_state(d, to);
	m->compensation = saga_machine_compensation(d, to);
	m->cause = cause;
}

struct saga_move saga_machine_start(const struct saga_def *d)
{
	struct saga_move m;
	struct saga_pos first = { SAGA_RUNNING, 0 };

	make_move(d, NULL, first, SAGA_SEND_COMMAND, 0,
		  is_order(d) ? "OrderPlaced" : "SagaStarted", &m);
	return m;
}

/* A running step ends badly: compensate from `last` down (nothing to undo: Failed). */
static void stop_running(const struct saga_def *d, struct saga_pos from, int last,
			 const char *cause, struct saga_move *m)
{
	struct saga_pos to = { SAGA_DONE_FAILED, -1 };

	if (last < 0) {
		make_move(d, saga_machine_state(d, from), to, SAGA_SEND_NONE, -1, cause, m);
		return;
	}
	to.phase = SAGA_UNDOING;
	to.step = last;
	make_move(d, saga_machine_state(d, from), to, SAGA_SEND_COMPENSATION, last, cause, m);
}

bool saga_machine_next(const struct saga_def *d, struct saga_pos from, enum saga_trigger trigger,
		       const char *type, struct saga_move *move, const char **why)
{
	int k = from.step, at = -1;
	enum step_event ev = trigger == SAGA_ON_EVENT ? find_event(d, type, &at) : EV_NONE;
	struct saga_pos to;

	if ((from.phase == SAGA_RUNNING || from.phase == SAGA_UNDOING) &&
	    (k < 0 || (size_t)k >= d->n_steps)) {
		*why = "unknown_state"; /* a position no saga of d can be at */
		return false;
	}
	if (trigger == SAGA_ON_EVENT && ev == EV_NONE) {
		*why = "unknown_type";
		return false;
	}
	switch (from.phase) {
	case SAGA_DONE_COMPLETED:
	case SAGA_DONE_FAILED:
	case SAGA_DONE_COMPENSATED:
		*why = "saga_finished";
		return false;
	case SAGA_UNDOING:
		if (ev != EV_COMPENSATED || at != k) {
			*why = "saga_compensating";
			return false;
		}
		to.phase = k > 0 ? SAGA_UNDOING : SAGA_DONE_COMPENSATED;
		to.step = k > 0 ? k - 1 : -1;
		make_move(d, "Compensating", to, k > 0 ? SAGA_SEND_COMPENSATION : SAGA_SEND_NONE,
			  k - 1, type, move);
		return true;
	case SAGA_RUNNING:
		break;
	}
	if (trigger != SAGA_ON_EVENT) {
		/* the step may have run: it is undone too, then those before it */
		stop_running(d, from, k, trigger == SAGA_ON_DEADLINE ? "StepTimeout" : "Cancelled",
			     move);
		return true;
	}
	if (at != k || ev == EV_COMPENSATED) {
		*why = "unexpected_in_state";
		return false;
	}
	if (ev == EV_FAILED) {
		/* the step did nothing: only those before it are undone */
		stop_running(d, from, k - 1, type, move);
		return true;
	}
	to.phase = (size_t)k + 1 < d->n_steps ? SAGA_RUNNING : SAGA_DONE_COMPLETED;
	to.step = to.phase == SAGA_RUNNING ? k + 1 : -1;
	make_move(d, saga_machine_state(d, from), to,
		  to.phase == SAGA_RUNNING ? SAGA_SEND_COMMAND : SAGA_SEND_NONE, k + 1, type, move);
	return true;
}

bool saga_machine_expected(const struct saga_def *d, const char *type, struct saga_pos *pos)
{
	int at;
	enum step_event ev = find_event(d, type, &at);

	if (ev == EV_NONE)
		return false;
	pos->phase = ev == EV_COMPENSATED ? SAGA_UNDOING : SAGA_RUNNING;
	pos->step = at;
	return true;
}

/* ---- migration ---- */

static bool same_step(const struct saga_step_def *x, const struct saga_step_def *y)
{
	return strcmp(x->name, y->name) == 0 && strcmp(x->participant, y->participant) == 0 &&
	       strcmp(x->command, y->command) == 0 &&
	       strcmp(x->compensation, y->compensation) == 0 &&
	       strcmp(x->succeeded, y->succeeded) == 0 && strcmp(x->failed, y->failed) == 0 &&
	       strcmp(x->compensated, y->compensated) == 0;
}

const char *saga_migrate_check(const struct saga_def *a, const struct saga_def *b,
			       struct saga_pos pos, struct json_object *input)
{
	const char *bad;

	if (pos.phase != SAGA_RUNNING && pos.phase != SAGA_UNDOING)
		return "moved";
	if (pos.phase == SAGA_UNDOING)
		return "compensating";
	if ((size_t)pos.step >= b->n_steps)
		return "steps_differ";
	for (int i = 0; i <= pos.step; i++)
		if (!same_step(&a->steps[i], &b->steps[i]))
			return "steps_differ";
	if (saga_input_check(b, input, &bad) != 0)
		return "input_invalid";
	return NULL;
}
