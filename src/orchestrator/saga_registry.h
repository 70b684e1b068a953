/*
 * saga_registry: the saga definitions this orchestrator runs (saga_def.h),
 * kept in orchestrator.saga_definitions and, compiled, in memory.
 *
 * A (name, version) never changes once registered, so the memory only
 * grows: a definition found here stays valid until saga_registry_close,
 * and another orchestrator's registrations are picked up by reading the
 * table again (saga_registry_reload), which adds what is new.
 *
 * Registering follows one rule wherever it comes from (the compiled-in
 * order saga, SAGA_DEFINITIONS_DIR at start, the admin API): a valid
 * definition is stored unless its (name, version) is stored already; then
 * it must be the same JSON value (keys in any order, 1.0 = 1), else it is
 * refused as a conflict and nothing changes.
 */
#ifndef PGSAGA_SAGA_REGISTRY_H
#define PGSAGA_SAGA_REGISTRY_H

#include <stddef.h>

#include "saga_def.h"

struct service;

/* The compiled-in order definition's name, which POST /orders starts. */
#define SAGA_ORDER "order"

/*
 * At start, before the event loop (blocking, on a connection of its own):
 * registers the compiled-in order definition, then each *.json file of dir
 * in name order (dir NULL or "": none), then loads every definition
 * registered. Returns 0, or -1 with err naming the file and what is wrong
 * with it (invalid, conflicting, unreadable) or the database's error.
 */
__attribute__((warn_unused_result)) int saga_registry_open(struct service *svc, const char *dir,
							    char *err, size_t errlen);
void saga_registry_close(void);

/* The definition (name, version) if loaded here, else NULL. */
const struct saga_def *saga_registry_get(const char *name, int version);
/* The highest version of name loaded here, or NULL. */
const struct saga_def *saga_registry_latest(const char *name);
/* The loaded definitions, in the order they were loaded: i < count. */
size_t saga_registry_count(void);
const struct saga_def *saga_registry_at(size_t i);
/* The definition's JSON as registered (canonical text), or NULL. */
const char *saga_registry_json(const struct saga_def *d);

/*
 * added(d, arg) is called for every definition loaded, those loaded already
 * (at once) and those added later (the orchestrator opens the destinations
 * of their participants). One watcher.
 */
void saga_registry_watch(void (*added)(const struct saga_def *d, void *arg), void *arg);

/*
 * Reads the table again and adds the definitions that are new. done(arg)
 * follows once, never from inside this call, with 0 or -1 (the database
 * could not be read); done may be NULL. Calls while a read is under way
 * wait for it.
 */
void saga_registry_reload(void (*done)(void *arg, int rc), void *arg);

/*
 * What the table says of a definition: the outcome of one registration
 * (saga_registry_register). REG_INVALID's message is the definition's
 * first fault ("steps[1].command: must be ...").
 */
enum saga_reg_outcome { REG_CREATED, REG_SAME, REG_CONFLICT, REG_INVALID, REG_DB_ERROR };

/*
 * Registers the definition in text (JSON) through the service's pool, then
 * loads it here. done follows once (from inside this call for
 * REG_INVALID, else never); msg
 * (REG_INVALID, REG_DB_ERROR) is valid during the call only; d is the
 * definition as loaded (REG_CREATED, REG_SAME), else NULL.
 */
typedef void (*saga_reg_cb)(void *arg, enum saga_reg_outcome o, const struct saga_def *d,
			    const char *msg);
void saga_registry_register(const char *text, size_t len, saga_reg_cb done, void *arg);

#endif
