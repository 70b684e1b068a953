/*
 * saga_engine: moves each saga through saga_fsm's table. What moves it:
 * the events payment and inventory send back (POST /events/{type}, or the
 * broker), a step's deadline passing (StepTimeout, found by a sweep on a
 * timer), and an operator's cancellation (admin_sagas.c). Each transition is
 * one call of saga_apply (sql/orchestrator), guarded by the saga's state and
 * version, that records the message in the inbox, writes the history row
 * and the next command's outbox row in one transaction; the command is then
 * sent at once.
 */
#ifndef PGSAGA_SAGA_ENGINE_H
#define PGSAGA_SAGA_ENGINE_H

#include <stdint.h>

#include "saga_fsm.h"

struct admission;
struct db_error;
struct evhttp_request;
struct inmsg;
struct metric_family;
struct service;

/*
 * Binds the engine to service (one per process) and starts the deadline
 * sweep; step_timeout_ms is every step's deadline; adm is told of every
 * saga that ends (borrowed). saga_engine_close undoes it.
 */
void saga_engine_open(struct service *service, struct admission *adm, int64_t step_timeout_ms);
void saga_engine_close(void);

/* saga_transitions_total{from,to}; orders.c counts a saga's creation in it. */
struct metric_family *saga_transitions_metric(void);

/* An event, over HTTP or from the broker (service_spec.consume). */
void saga_handle_event(struct inmsg m, const char *type);
/* POST /events/{type} (httpd_route handler). */
void saga_post_event(struct evhttp_request *req, void *svc, const char *tail);

/* What a transition came to. */
enum saga_outcome {
	SAGA_OUT_APPLIED,
	SAGA_OUT_DUPLICATE,
	SAGA_OUT_IGNORED, /* the saga was no longer in the state given */
	SAGA_OUT_NOT_FOUND,
	SAGA_OUT_DB_ERROR,
};

/*
 * Applies the step ev decides for saga_id in from/undo (as the caller read
 * them), with no message, and the reason recorded when not NULL (copied).
 * done follows once, never from inside this call; err is set for
 * SAGA_OUT_DB_ERROR only.
 */
typedef void (*saga_apply_cb)(void *arg, enum saga_outcome o, const struct db_error *err);
void saga_transition_apply(const char *saga_id, enum saga_state from, enum saga_undo undo,
			   enum saga_event ev, const char *reason, saga_apply_cb done, void *arg);

#endif
