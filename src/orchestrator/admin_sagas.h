/*
 * admin_sagas: the orchestrator's own part of the admin API (docs/protocol.md, "admin API"):
 *   GET  /admin/api/sagas               a page of sagas of any definition (or
 *                                       of one: definition=NAME), counts per state
 *   GET  /admin/api/sagas/{id}          a saga, its definition, input, outputs,
 *                                       history and messages from all three
 *                                       services, payment, reservation
 *   POST /admin/api/sagas/{id}/cancel   compensate a saga that has not finished
 * Cancelling applies the Cancelled transition (saga_machine) through the same
 * guarded transition as events and deadlines (saga_engine.h), with the reason
 * recorded in saga_cancellations in the same transaction.
 */
#ifndef PGSAGA_ADMIN_SAGAS_H
#define PGSAGA_ADMIN_SAGAS_H

struct admin_spec;

/* The orchestrator's admin_spec (routes above, combining the peers). */
extern const struct admin_spec admin_sagas_spec;

#endif
