/*
 * command: a participant service around its command types, the one main of
 * saga-payment, saga-inventory and saga-participant. A command comes as
 * POST /commands/{Type} (token already checked by httpd) or as an AMQP
 * delivery (transport.h). First fault injection, then the body: commandId
 * and sagaId (UUIDs) plus the type's own fields; then one call of the
 * type's SQL function, which records the command in the inbox, does the
 * effect and writes the answering event to the outbox in one transaction,
 * claimed for the lease; the event is then sent at once (outbox_send). A function that raises SQLSTATE COMMAND_SQLSTATE_INVALID
 * refuses the command as malformed: 400 invalid_field, its message naming
 * the field, nothing committed (the generic participant's fields are read
 * in SQL).
 */
#ifndef PGSAGA_COMMAND_H
#define PGSAGA_COMMAND_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "transport.h"

struct service;
struct service_spec;

#define COMMAND_MAX_EXTRA 6

/* Raised by a command's SQL for a bad field: sql/participant/005_participant_functions.sql. */
#define COMMAND_SQLSTATE_INVALID "SG400"

struct command_type {
	const char *name; /* "PayCommand" */
	/*
	 * The statement: $1 commandId, $2 sagaId, $3.. the extra fields, then
	 * the trace id and the lease in ms. Returns one row: the event type
	 * (or 'duplicate'), the event's id and its payload.
	 */
	const char *sql;
	/*
	 * Statements are grouped (db_query_grouped, src/lib/pg/db.h), keyed by the
	 * first extra field, which names the row the handler locks (the
	 * customer's account, the item's stock), or by the saga id when there
	 * is none or by_saga is set.
	 */
	int nextra;
	/*
	 * Reads the type's own fields into extra[i] (texts, may point into
	 * obj or into buf[i]). Returns NULL, or the name of the bad field.
	 */
	const char *(*extract)(const struct command_type *type, struct json_object *obj,
			       const char *extra[COMMAND_MAX_EXTRA], char buf[COMMAND_MAX_EXTRA][32]);
	const void *arg; /* the type's own data, for extract (may be NULL) */
	bool by_saga;    /* group by the saga id even with extra fields */
	/*
	 * With by_saga: group by this field of the command's body instead (its
	 * value as text), when the command carries it; NULL or "": none.
	 */
	const char *key_field;
};

/*
 * Runs the participant: spec says what it is (name, settings, migrations,
 * admin part); its routes (POST /commands/{Type}), its broker consumer, its
 * peer (the orchestrator, ORCHESTRATOR_URL, where its events go) and fault
 * injection are these. ready, when set, runs once the service is set up
 * and before it serves (a non-zero return ends it with that status).
 * Returns the process's exit status.
 */
int command_main(struct service_spec *spec, const struct command_type *types, size_t ntypes,
		 int (*ready)(struct service *service), int argc, char **argv);

#endif
