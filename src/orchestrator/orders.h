/*
 * orders: the orchestrator's public API.
 *
 *   POST /orders        a new order saga, idempotent by its Idempotency-Key:
 *                       the idempotency record, the saga, its first history
 *                       row and its first command commit in one statement;
 *                       the same key and body again get the first answer back
 *   POST /sagas/{name}  the same for a saga of the latest version of the
 *                       definition name (saga_registry.h), its input checked
 *                       by the definition
 *   GET  /orders/{id}   the order saga and its history
 *   GET  /sagas/{id}    a saga of any definition, its input, outputs and history
 *
 * A start that admission control refuses (admission.h) is answered 429
 * overloaded with Retry-After and stores nothing, unless it replays a key
 * already accepted. Expired idempotency records are deleted in the
 * background, a batch a minute.
 */
#ifndef PGSAGA_ORDERS_H
#define PGSAGA_ORDERS_H

#include <stdint.h>

struct admission;
struct evhttp_request;
struct service;

/*
 * Binds the routes to service (one per process) and starts the purge;
 * step_timeout_ms is STEP_TIMEOUT_MS, idempotency_ttl_s how long
 * a key is remembered; adm decides the starts and counts the sagas in flight
 * (borrowed). orders_close undoes it.
 */
void orders_open(struct service *service, struct admission *adm, int64_t step_timeout_ms,
		 int64_t idempotency_ttl_s);
void orders_close(void);

/* The routes (httpd_route handlers). */
void orders_post(struct evhttp_request *req, void *svc, const char *tail);
void orders_get(struct evhttp_request *req, void *svc, const char *tail);
void sagas_post(struct evhttp_request *req, void *svc, const char *tail);
void sagas_get(struct evhttp_request *req, void *svc, const char *tail);

#endif
