/*
 * admin_definitions: saga definitions in the orchestrator's admin API
 * (docs/protocol.md, "Saga definitions"):
 *   POST /admin/api/definitions                    register one: 201 new, 200 the same
 *                                                  again, 409 definition_exists, 400
 *                                                  invalid_definition ("path: rule")
 *   GET  /admin/api/definitions                    {"definitions": [{"name", "versions",
 *                                                  "latest"}]}, by name
 *   GET  /admin/api/definitions/{name}/{version}   one, as registered
 *   POST /admin/api/definitions/{name}/migrate     moves in-flight sagas to another
 *                                                  version (definitions_migrate.h)
 * Registering goes through saga_registry_register, the one rule for every
 * way a definition arrives. The reads ask orchestrator.saga_definitions, not
 * this process's registry, so what another orchestrator registered shows
 * too.
 */
#ifndef PGSAGA_ADMIN_DEFINITIONS_H
#define PGSAGA_ADMIN_DEFINITIONS_H

struct evhttp_request;

/* The handlers (httpd_fn), for the orchestrator's admin routes (admin_sagas.c). */
void admin_definitions_post(struct evhttp_request *req, void *svc, const char *tail);
void admin_definitions_list(struct evhttp_request *req, void *svc, const char *tail);
/* Under the prefix /admin/api/definitions/: tail is "{name}/{version}" or "{name}/migrate". */
void admin_definition_get(struct evhttp_request *req, void *svc, const char *tail);
void admin_definition_post(struct evhttp_request *req, void *svc, const char *tail);

#endif
