/*
 * admin_sagas: the orchestrator's own part of the admin API (SPEC §9):
 *   GET  /admin/api/sagas               a page of sagas, counts per state
 *   GET  /admin/api/sagas/{id}          a saga, its history and messages from
 *                                       all three services, payment, reservation
 *   POST /admin/api/sagas/{id}/cancel   compensate a saga that has not finished
 * Cancelling applies the Cancelled transition (saga_fsm) through the same
 * guarded saga_apply as events and deadlines (main.c), with the reason
 * recorded in saga_cancellations in the same transaction.
 */
#ifndef PGSAGA_ADMIN_SAGAS_H
#define PGSAGA_ADMIN_SAGAS_H

#include <stddef.h>

#include "saga_fsm.h"

struct app;
struct db_error;
struct admin_spec;

/* The orchestrator's admin_spec (routes above, combining the peers). */
extern const struct admin_spec admin_sagas_spec;

/* main.c: what a transition came to. */
enum saga_outcome {
	SAGA_OUT_APPLIED,
	SAGA_OUT_DUPLICATE,
	SAGA_OUT_IGNORED, /* the saga was no longer in the state given */
	SAGA_OUT_NOT_FOUND,
	SAGA_OUT_DB_ERROR,
};

/*
 * main.c: applies a step decided for saga_id in from/undo (as read), caused
 * by ev (no message), with the reason recorded when not NULL (copied).
 * done follows once; err is set for SAGA_OUT_DB_ERROR only.
 */
typedef void (*saga_apply_cb)(void *arg, enum saga_outcome o, const struct db_error *err);
void saga_transition_apply(const char *saga_id, enum saga_state from, enum saga_undo undo,
			   enum saga_event ev, const char *reason, saga_apply_cb done, void *arg);

/* main.c: the orchestrator's app (pool, outbox, settings). */
struct app *orchestrator_app(void);

#endif
