/*
 * steps: a generic participant's table of commands, read from
 * PARTICIPANT_COMMANDS. Pure parsing, no I/O.
 *
 * The text is one or more steps separated by commas, each
 *
 *   Command[key]=function(Succeeded|Failed)/Compensation=undo_function(Compensated)
 *
 * e.g. ShipOrderCommand=ship_order(OrderShipped|ShippingFailed)/
 * CancelShipmentCommand=cancel_shipment(ShipmentCancelled): the command
 * type, the SQL function that handles it and the two events that answer it;
 * then the compensation that undoes it, its function and the event that
 * answers it. [key] is optional: the command's field whose value names the
 * row its function contends for (an item's stock: [itemId]), by which the
 * commands committed together are ordered (db_query_grouped), so that two
 * such groups never wait for each other; a field is 1-64 of [A-Za-z0-9_].
 * Message types are 1-64 of [A-Za-z0-9]; functions are lower-case
 * SQL identifiers, 1-63 of [a-z0-9_] starting with a letter or _, found in the
 * participant's schema. Blanks around the punctuation are allowed. Every
 * message type appears once in the whole text.
 */
#ifndef PGSAGA_STEPS_H
#define PGSAGA_STEPS_H

#include <stddef.h>

#define STEPS_MAX 16
#define STEPS_TYPE_MAX 64
#define STEPS_FUNCTION_MAX 63
#define STEPS_FIELD_MAX 64

struct step {
	char command[STEPS_TYPE_MAX + 1], function[STEPS_FUNCTION_MAX + 1];
	char succeeded[STEPS_TYPE_MAX + 1], failed[STEPS_TYPE_MAX + 1];
	char compensation[STEPS_TYPE_MAX + 1], undo[STEPS_FUNCTION_MAX + 1];
	char compensated[STEPS_TYPE_MAX + 1];
	char key[STEPS_FIELD_MAX + 1]; /* the command's field [key], or "" */
};

struct steps {
	struct step step[STEPS_MAX];
	size_t n;
};

/*
 * Parses text into out. Returns 0, or -1 with err saying where and what was
 * expected ("at 17: expected '(' after the function name").
 */
__attribute__((warn_unused_result)) int steps_parse(const char *text, struct steps *out, char *err,
						    size_t errlen);

/* A participant's name: 1-58 of [a-z0-9_] starting with a letter (saga_NAME is a role). */
__attribute__((warn_unused_result)) int steps_name_valid(const char *name);

#endif
