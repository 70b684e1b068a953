/*
 * functions: at start, whether the participant's schema holds the functions
 * PARTICIPANT_COMMANDS names, with the signatures the generic handlers call
 * (sql/participant/005_participant_functions.sql):
 *
 *   command:      FUNCTION(jsonb, OUT reason text, OUT output jsonb)
 *   compensation: FUNCTION(jsonb) RETURNS void
 *
 * Then it has participant_compile write participant_call and
 * participant_undo again with a static call for each of them (planned once
 * per session instead of at every command).
 *
 * Blocking libpq: it runs before the event loop serves anything.
 */
#ifndef PGSAGA_FUNCTIONS_H
#define PGSAGA_FUNCTIONS_H

#include <stddef.h>

#include "steps.h"

/*
 * Connects with conninfo, looks each function up in pg_proc, and compiles
 * the calls. Returns 0 when all are there as they should be; -1 with err
 * naming the first that is missing or has another signature (and what it
 * has), or why the database could not be asked.
 */
__attribute__((warn_unused_result)) int functions_check(const char *conninfo, const char *schema,
							const struct steps *steps, char *err,
							size_t errlen);

#endif
