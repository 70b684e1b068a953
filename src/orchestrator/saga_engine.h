/*
 * saga_engine: moves each saga, of any definition, through the state
 * machine its definition makes (saga_machine.h). What moves it: the events
 * participants send back (POST /events/{type}, or the broker), a step's
 * deadline passing (StepTimeout, found by a sweep on a timer), and an
 * operator's cancellation (admin_sagas.c). Each transition is one call of
 * saga_step (sql/orchestrator/010_saga_step.sql), guarded by the saga's
 * definition, state and version, that records the message in the inbox, writes the history row
 * and the next command's outbox row in one transaction; the command is then
 * sent at once.
 *
 * An event names its saga but not the saga's definition, which only the
 * saga's row says. So that one round trip still does, the engine sends the
 * plan (typed parameters) of the saga's definition when it knows it (it
 * started the saga or moved it before), else of the first definition
 * loaded in which the event's type acts (at one position:
 * saga_machine_expected); saga_step applies it only to a saga of that
 * definition, and otherwise answers no_plan with the saga's, which the
 * engine plans again by. A saga whose definition version is not loaded
 * here (registered through another orchestrator) makes the engine read
 * the registry again and try once more.
 */
#ifndef PGSAGA_SAGA_ENGINE_H
#define PGSAGA_SAGA_ENGINE_H

#include <stdint.h>

#include "saga_machine.h"

struct admission;
struct db_error;
struct evhttp_request;
struct inmsg;
struct metric_family;
struct service;

/*
 * Binds the engine to service (one per process) and starts the deadline
 * sweep; step_timeout_ms is the deadline of every step that does not set
 * its own; adm is told of every saga that ends (borrowed).
 * saga_engine_close undoes it.
 */
void saga_engine_open(struct service *service, struct admission *adm, int64_t step_timeout_ms);
void saga_engine_close(void);

/* A saga of d was created (orders.c): its events will carry d's plan only. */
void saga_engine_started(const char *saga_id, const struct saga_def *d);

/* saga_transitions_total{from,to}; orders.c counts a saga's creation in it. */
struct metric_family *saga_transitions_metric(void);

/* An event, over HTTP or from the broker (service_spec.consume). */
void saga_handle_event(struct inmsg m, const char *type);
/* POST /events/{type} (httpd_route handler). */
void saga_post_event(struct evhttp_request *req, void *svc, const char *tail);

/* The deadline of a step that starts running: its deadlineMs, else STEP_TIMEOUT_MS. */
int64_t saga_step_deadline_ms(const struct saga_def *d, int step);

/*
 * The body of a saga's first command: commandId, sagaId and the first step's
 * fields from input (checked by saga_input_check: a first step's fields are
 * all input fields). Later commands' bodies are built by saga_step (SQL),
 * which has the steps' outputs. Malloc'd JSON text.
 */
char *saga_first_body(const struct saga_def *d, struct json_object *input, const char *cmd_id,
		      const char *saga_id);

/* What a transition came to. */
enum saga_outcome {
	SAGA_OUT_APPLIED,
	SAGA_OUT_DUPLICATE,
	SAGA_OUT_IGNORED, /* the saga was no longer where the caller read it */
	SAGA_OUT_NOT_FOUND,
	SAGA_OUT_DB_ERROR,
};

/*
 * Applies trigger (a deadline or a cancellation) to saga_id of definition
 * d, read at position from, with no message, and the cancellation's reason
 * recorded when not NULL (copied). done follows once, never from inside
 * this call; err is set for SAGA_OUT_DB_ERROR only.
 */
typedef void (*saga_apply_cb)(void *arg, enum saga_outcome o, const struct db_error *err);
void saga_transition_apply(const char *saga_id, const struct saga_def *d, struct saga_pos from,
			   enum saga_trigger trigger, const char *reason, saga_apply_cb done,
			   void *arg);

#endif
