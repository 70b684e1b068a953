/*
 * saga_def: a saga definition, compiled from its JSON document into the
 * struct the engine interprets (saga_machine.h), and the checks of what
 * crosses a saga's border: a start request's input and a succeeded event's
 * output. Pure: no I/O.
 *
 * The document (src/orchestrator/definitions/order.json is one):
 *
 *   {"name": "order", "version": 1,
 *    "input": {"qty": {"type": "integer", "min": 1, "max": 1000}, ...},
 *    "steps": [{"name": "Payment", "participant": "payment",
 *               "command": "PayCommand", "fields": ["customerId", "amount"],
 *               "succeeded": "PaymentSucceeded", "failed": "PaymentFailed",
 *               "compensation": "RefundPaymentCommand",
 *               "compensated": "PaymentRefunded", "deadlineMs": 30000}, ...]}
 *
 * Keys the format does not know are ignored, at every level (as unknown
 * fields are everywhere in pgsaga), so a definition may carry its own notes
 * ("description", ...); they are kept with the document, never interpreted.
 * Where a key is known, its value is checked even if it could be ignored.
 *
 * An invalid document gets one message, for the first fault in document
 * order (name, version, input, steps; within a step: name, participant,
 * command, fields, succeeded, failed, compensation, compensated,
 * deadlineMs): "<path>: <rule>", e.g.
 *   steps[1].command: must be 1-64 characters of [A-Za-z0-9]
 *   input.qty: min must be <= max
 * A user's text that appears in a message has been checked against a
 * pattern first, or is JSON-escaped and cut short, so the message is safe
 * to log and to put in a JSON string.
 */
#ifndef PGSAGA_SAGA_DEF_H
#define PGSAGA_SAGA_DEF_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAGA_DEF_MAX_STEPS 16
#define SAGA_DEF_NAME_MAX 63    /* the definition's and a participant's name */
#define SAGA_DEF_WORD_MAX 64    /* step names, message types, field and output keys */
#define SAGA_DEF_OUTPUT_KEYS 32 /* keys of one succeeded event's output */
#define SAGA_DEF_STRING_MAX 1024

enum saga_input_type { SAGA_INPUT_ID, SAGA_INPUT_INTEGER, SAGA_INPUT_STRING };

struct saga_input_field {
	char name[SAGA_DEF_WORD_MAX + 1];
	enum saga_input_type type;
	int64_t min, max;  /* integer: both bounds included */
	size_t max_length; /* string: in Unicode characters (code points) */
};

/* One value a command carries besides commandId and sagaId. */
struct saga_field_ref {
	char name[SAGA_DEF_WORD_MAX + 1]; /* carried under this name */
	int step;                         /* -1: the input field `name`; else the index of the
					     earlier step whose output key `name` it is */
	char ref[2 * SAGA_DEF_WORD_MAX + 2]; /* as the definition writes it ("Payment.receipt") */
};

struct saga_step_def {
	char name[SAGA_DEF_WORD_MAX + 1];
	char pending[sizeof("Pending") + SAGA_DEF_WORD_MAX]; /* its state: Pending<name> */
	char participant[SAGA_DEF_NAME_MAX + 1];
	char command[SAGA_DEF_WORD_MAX + 1];
	char succeeded[SAGA_DEF_WORD_MAX + 1];
	char failed[SAGA_DEF_WORD_MAX + 1];
	char compensation[SAGA_DEF_WORD_MAX + 1];
	char compensated[SAGA_DEF_WORD_MAX + 1];
	struct saga_field_ref *fields; /* in the definition's order */
	size_t n_fields;
	int64_t deadline_ms; /* 0: none given, the service's STEP_TIMEOUT_MS applies */
};

struct saga_def {
	char name[SAGA_DEF_NAME_MAX + 1];
	int32_t version;
	struct saga_input_field *input; /* in the document's order */
	size_t n_input;
	struct saga_step_def steps[SAGA_DEF_MAX_STEPS];
	size_t n_steps;
};

/*
 * Compiles a definition from JSON text. Returns a new definition (the
 * caller frees it with saga_def_free), or NULL with the message in err
 * (text that is not JSON: "definition: not valid JSON (<why>)").
 */
__attribute__((warn_unused_result)) struct saga_def *saga_def_parse(const char *text, size_t len,
								    char *err, size_t errlen);

/*
 * The same from a document jsonx_parse made (borrowed: nothing of it is
 * kept). jsonx_parse matters for the 64-bit bounds: only it tells
 * 9223372036854775807 from a larger integer that json-c clamps to it.
 */
__attribute__((warn_unused_result)) struct saga_def *
saga_def_compile(struct json_object *doc, char *err, size_t errlen);

void saga_def_free(struct saga_def *d);

/* True when s (len bytes) is a definition's name: [a-z][a-z0-9_-]{0,62}. */
bool saga_def_name_valid(const char *s, size_t len);

/* The index of the step named name, or -1. */
int saga_def_step(const struct saga_def *d, const char *name);

/*
 * Checks a start request's input against the definition, field by field in
 * the definition's order, with the readers POST /orders uses: an id is
 * jsonx_get_id's, an integer jsonx_get_int's within [min, max], a string
 * at most max_length Unicode characters with no control character (U+0000-
 * U+001F, U+007F-U+009F). Every declared field is required; others are
 * ignored. Returns 0 when valid; else -1 and *bad is the first invalid
 * field's name (borrowed from d), or NULL when input is not an object.
 */
__attribute__((warn_unused_result)) int saga_input_check(const struct saga_def *d,
							 struct json_object *input,
							 const char **bad);

/*
 * Checks the output a succeeded event carries: an object of at most 32
 * keys, each named like an input field, whose values are strings of at
 * most 1024 Unicode characters or integers (jsonx_get_int's: 64-bit, no
 * fraction). A string may hold any character but U+0000, which
 * PostgreSQL's jsonb cannot keep. Returns 0, or -1 with a message
 * ("output.<key>: <rule>") in err.
 */
__attribute__((warn_unused_result)) int saga_output_check(struct json_object *output, char *err,
							  size_t errlen);

#endif
