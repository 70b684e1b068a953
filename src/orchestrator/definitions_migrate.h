/*
 * definitions_migrate: POST /admin/api/definitions/{name}/migrate, body
 * {"fromVersion": a, "toVersion": b, "sagaIds": [...] (optional)}: moves the
 * sagas of (name, a) that have not finished to (name, b), those of sagaIds
 * only when it is given. Answers 200 {"migrated": n, "refused": [{"sagaId",
 * "reason"}]}; 404 not_found when a or b was never registered; 400
 * invalid_json / invalid_field for a bad body.
 *
 * saga_migrate_check (saga_machine.h) decides whether each saga may move
 * (reasons compensating, steps_differ, input_invalid); the move is
 * saga_migrate() of sql/orchestrator/008_saga_migrate.sql, one transaction
 * per saga, guarded by the state and version read: a saga that changed
 * meanwhile, like one that is unknown or finished, is refused as moved.
 *
 * The sagas are read 500 at a time, and at most a few moves are out at
 * once, so a migration of many sagas bounds its memory and leaves the
 * database pool to the sagas' own work. A database error ends it with 503
 * or 500; what moved before stays moved, and the same request again moves
 * the rest.
 */
#ifndef PGSAGA_DEFINITIONS_MIGRATE_H
#define PGSAGA_DEFINITIONS_MIGRATE_H

struct evhttp_request;
struct service;

/* name: a well-formed definition name (borrowed for the call). Answers req once. */
void definitions_migrate(struct evhttp_request *req, struct service *svc, const char *name);

#endif
