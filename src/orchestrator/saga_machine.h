/*
 * saga_machine: the state machine of any saga definition (saga_def.h),
 * computed from it, and whether a saga may move to another version of its
 * definition. Pure: no I/O, so the unit tests walk every shape (1 to 16
 * steps, each way of ending). saga_engine.c runs it; the bodies of the
 * commands it sends are built from the fields the definition names, in SQL
 * (saga_step) but for a saga's first (saga_first_body).
 *
 * A saga is at one position: a step running (state Pending<Step>), one
 * step's undo awaited (state Compensating, its `compensation` column the
 * step's name), or finished (Completed, Failed, Compensated). For a saga
 * at step k of n:
 *
 *   Pending<k>   --succeeded(k)--> Pending<k+1>   send command k+1 (deadline)
 *   Pending<n-1> --succeeded-->    Completed
 *   Pending<0>   --failed(0)-->    Failed          nothing was done
 *   Pending<k>   --failed(k)-->    Compensating    undo k-1 (the step failed:
 *                                                  only those before it)
 *   Pending<k>   --deadline-->     Compensating    undo k (it may have run)
 *   Pending<k>   --cancel-->       Compensating    undo k, as a deadline
 *   Compensating(j) --compensated(j)--> Compensating(j-1)  undo j-1
 *   Compensating(0) --compensated(0)--> Compensated
 *
 * Undo goes in reverse order, one step at a time, and each step is undone
 * once: only the awaited step's compensated event moves a compensating
 * saga, and it moves it past that step. Every transition is a history row,
 * each answered undo included (Compensating -> Compensating, the last
 * -> Compensated). A compensation is sent even when its command may not
 * have run: the participant then voids it and declines the late command.
 *
 * Anything else is ignored, with a reason (the order saga's answers):
 *   saga_finished        the saga is Completed, Failed or Compensated
 *   saga_compensating    it is compensating and this is not the awaited undo
 *                        (a second cancel, a deadline, a late answer)
 *   unexpected_in_state  it runs another step (a late or early answer)
 *   unknown_type         the definition has no such event type
 *   unknown_state        pos is not a position of the definition (a bug)
 */
#ifndef PGSAGA_SAGA_MACHINE_H
#define PGSAGA_SAGA_MACHINE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "saga_def.h"

enum saga_phase {
	SAGA_RUNNING,      /* step runs: Pending<Step> */
	SAGA_UNDOING,      /* step's undo awaited: Compensating */
	SAGA_DONE_COMPLETED,
	SAGA_DONE_FAILED,
	SAGA_DONE_COMPENSATED,
};

struct saga_pos {
	enum saga_phase phase;
	int step; /* SAGA_RUNNING, SAGA_UNDOING: the step's index; else -1 */
};

/* What happened to the saga. */
enum saga_trigger {
	SAGA_ON_EVENT,    /* an event of the definition (its type is given) */
	SAGA_ON_DEADLINE, /* the running step's deadline passed (cause StepTimeout) */
	SAGA_ON_CANCEL,   /* an operator cancelled it (cause Cancelled) */
};

enum saga_action {
	SAGA_SEND_NONE,
	SAGA_SEND_COMMAND,      /* step's command, to its participant */
	SAGA_SEND_COMPENSATION, /* step's compensation, to its participant */
};

/*
 * One transition, and the history row it writes. The strings are borrowed
 * from the definition or static.
 */
struct saga_move {
	struct saga_pos to;
	enum saga_action action;
	int action_step;         /* the step whose message to send; -1 with SEND_NONE */
	const char *message;     /* its type (PayCommand, RefundPaymentCommand), or NULL */
	const char *participant; /* where it goes, or NULL */
	bool deadline;           /* a step starts running: its deadline starts too */
	int64_t deadline_ms;     /* that step's deadlineMs; 0: STEP_TIMEOUT_MS */
	const char *from_state;  /* NULL for the creation row */
	const char *to_state;
	const char *compensation; /* the `compensation` column after: a step's name, or NULL */
	const char *cause;        /* the event type, StepTimeout, Cancelled, OrderPlaced or SagaStarted */
};

/*
 * What trigger does to a saga of definition d at position from; type is
 * the event's type for SAGA_ON_EVENT (else ignored). Returns true and
 * fills move, or false and sets *why to the reason it is ignored (static).
 */
bool saga_machine_next(const struct saga_def *d, struct saga_pos from, enum saga_trigger trigger,
		       const char *type, struct saga_move *move, const char **why);

/*
 * A new saga: its creation row (from_state NULL, cause OrderPlaced for the
 * definition named order, else SagaStarted) and its first command.
 */
struct saga_move saga_machine_start(const struct saga_def *d);

/*
 * The one position in which an event of type acts (its step running for
 * succeeded and failed, its step's undo awaited for compensated), which
 * lets the orchestrator send its decision with the read, in one round
 * trip. False when d has no such event type.
 */
bool saga_machine_expected(const struct saga_def *d, const char *type, struct saga_pos *pos);

/* The names of a position as the database keeps them: state and compensation (NULL: none). */
const char *saga_machine_state(const struct saga_def *d, struct saga_pos pos);
const char *saga_machine_compensation(const struct saga_def *d, struct saga_pos pos);

/* The position of a saga row (state, compensation); -1 when d has no such one. */
__attribute__((warn_unused_result)) int saga_machine_pos(const struct saga_def *d,
							 const char *state,
							 const char *compensation,
							 struct saga_pos *pos);

/*
 * Whether a saga of definition a at pos, with this input, may move to
 * definition b (another version of it). Returns NULL when it may, else the
 * first refusal that applies, in this order:
 *   moved          it is finished (the caller adds: unknown, or changed meanwhile)
 *   compensating   it is compensating: it never moves
 *   steps_differ   a step it has begun (up to and including the current
 *                  one) is not the same in b: name, participant, command,
 *                  compensation and event types, at the same place
 *   input_invalid  its input is not valid for b (saga_input_check)
 * The saga keeps its position: the same step index and state name in b.
 */
const char *saga_migrate_check(const struct saga_def *a, const struct saga_def *b,
			       struct saga_pos pos, struct json_object *input);

#endif
