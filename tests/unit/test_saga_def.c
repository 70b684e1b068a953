/*
 * saga_def: every rule of a definition with its exact message, the checks
 * of a start request's input and of a succeeded event's output, and the
 * definitions shipped in src/orchestrator/definitions.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "saga_def.h"
#include "suites.h"

/*
 * The document the rules are tried on: three steps, the third carrying an
 * input field and an earlier step's output (Inventory.slot).
 */
static const char base_doc[] =
	"{\"name\": \"ship\", \"version\": 1,"
	" \"input\": {\"customerId\": {\"type\": \"id\"},"
	"            \"qty\": {\"type\": \"integer\", \"min\": 1, \"max\": 1000},"
	"            \"note\": {\"type\": \"string\", \"maxLength\": 10}},"
	" \"steps\": ["
	"  {\"name\": \"Payment\", \"participant\": \"payment\", \"command\": \"PayCommand\","
	"   \"fields\": [\"customerId\"], \"succeeded\": \"PaymentSucceeded\","
	"   \"failed\": \"PaymentFailed\", \"compensation\": \"RefundPaymentCommand\","
	"   \"compensated\": \"PaymentRefunded\"},"
	"  {\"name\": \"Inventory\", \"participant\": \"inventory\","
	"   \"command\": \"ReserveInventoryCommand\", \"fields\": [\"qty\", \"Payment.receipt\"],"
	"   \"succeeded\": \"InventoryReserved\", \"failed\": \"InventoryReservationFailed\","
	"   \"compensation\": \"ReleaseInventoryCommand\", \"compensated\": \"InventoryReleased\"},"
	"  {\"name\": \"Shipping\", \"participant\": \"shipping\", \"command\": \"ShipOrderCommand\","
	"   \"fields\": [\"note\", \"Inventory.slot\"], \"succeeded\": \"OrderShipped\","
	"   \"failed\": \"ShippingFailed\", \"compensation\": \"CancelShipmentCommand\","
	"   \"compensated\": \"ShipmentCancelled\", \"deadlineMs\": 5000}]}";

static struct json_object *parse(const char *s)
{
	char err[128];
	struct json_object *v;

	if (strcmp(s, "null") == 0)
		return NULL; /* json-c's null; jsonx_parse refuses it at the top */
	v = jsonx_parse(s, strlen(s), err, sizeof(err));
	ck_assert_msg(v != NULL, "%s: %s", s, err);
	return v;
}

/*
 * Sets (value JSON text) or deletes (value NULL) the member at path in doc:
 * "steps[1].command", "input.qty.min", "steps[2].fields[0]".
 */
static void set_path(struct json_object *doc, const char *path, const char *value)
{
	char buf[256], *save = NULL, *tok;
	struct json_object *at = doc;
	char *last = NULL;
	int last_idx = -1;

	snprintf(buf, sizeof(buf), "%s", path);
	for (tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
		char *br = strchr(tok, '[');
		int idx = br ? atoi(br + 1) : -1;

		if (br)
			*br = '\0';
		if (last) {
			ck_assert(json_object_object_get_ex(at, last, &at));
			if (last_idx >= 0)
				at = json_object_array_get_idx(at, (size_t)last_idx);
		}
		last = tok;
		last_idx = idx;
	}
	if (last_idx >= 0) {
		ck_assert(json_object_object_get_ex(at, last, &at));
		ck_assert_ptr_nonnull(value);
		ck_assert_int_eq(json_object_array_put_idx(at, (size_t)last_idx, parse(value)), 0);
	} else if (value) {
		ck_assert_int_eq(json_object_object_add(at, last, parse(value)), 0);
	} else {
		json_object_object_del(at, last);
	}
}

/* base_doc with one change, compiled: the message, or "" when valid. */
static const char *compile_changed(const char *path, const char *value, char *err, size_t len)
{
	struct json_object *doc = parse(base_doc);
	struct saga_def *d;

	set_path(doc, path, value);
	d = saga_def_compile(doc, err, len);
	json_object_put(doc);
	if (d)
		err[0] = '\0';
	saga_def_free(d);
	return err;
}

struct rule_case {
	const char *path;
	const char *value; /* NULL: deleted */
	const char *message; /* "": valid */
};

#define L64 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define U64 "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

static const struct rule_case rule_cases[] = {
	/* name */
	{ "name", NULL, "name: required" },
	{ "name", "\"Ship\"", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "\"1ship\"", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "\"_ship\"", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "\"\"", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "\"sh ip\"", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "\"" L64 "\"", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "7", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "null", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "\"a" L64 "\"", "name: must be 1-63 characters of [a-z0-9_-], starting with a letter" },
	{ "name", "\"s-h_1p9\"", "" },
	{ "name", "\"x\"", "" },
	/* version */
	{ "version", NULL, "version: required" },
	{ "version", "0", "version: must be an integer from 1 to 2147483647" },
	{ "version", "-1", "version: must be an integer from 1 to 2147483647" },
	{ "version", "2147483648", "version: must be an integer from 1 to 2147483647" },
	{ "version", "1.0", "version: must be an integer from 1 to 2147483647" },
	{ "version", "\"1\"", "version: must be an integer from 1 to 2147483647" },
	{ "version", "2147483647", "" },
	/* input */
	{ "input", NULL, "input: required" },
	{ "input", "[]", "input: must be an object" },
	{ "input", "null", "input: must be an object" },
	{ "input.a b", "{\"type\": \"id\"}", "input.a b: field names must be 1-64 characters of [A-Za-z0-9_]" },
	{ "input.a-b", "{\"type\": \"id\"}", "input.a-b: field names must be 1-64 characters of [A-Za-z0-9_]" },
	{ "input.a" U64, "{\"type\": \"id\"}",
	  "input.a" U64 ": field names must be 1-64 characters of [A-Za-z0-9_]" },
	{ "input." U64, "{\"type\": \"id\"}", "" },
	{ "input.Under_score9", "{\"type\": \"id\"}", "" },
	{ "input.qty", "\"integer\"", "input.qty: must be an object with a type" },
	{ "input.qty", "{}", "input.qty.type: required" },
	{ "input.qty.type", "\"float\"", "input.qty.type: must be id, integer or string" },
	{ "input.qty.type", "\"Integer\"", "input.qty.type: must be id, integer or string" },
	{ "input.qty.type", "1", "input.qty.type: must be id, integer or string" },
	{ "input.qty.type", "\"integer\\u0000x\"", "input.qty.type: must be id, integer or string" },
	{ "input.qty.min", NULL, "input.qty.min: required" },
	{ "input.qty.max", NULL, "input.qty.max: required" },
	{ "input.qty.min", "1.0", "input.qty.min: must be a 64-bit integer" },
	{ "input.qty.min", "\"1\"", "input.qty.min: must be a 64-bit integer" },
	{ "input.qty.min", "-9223372036854775809", "input.qty.min: must be a 64-bit integer" },
	{ "input.qty.max", "9223372036854775808", "input.qty.max: must be a 64-bit integer" },
	{ "input.qty.max", "18446744073709551616", "input.qty.max: must be a 64-bit integer" },
	{ "input.qty.max", "1e3", "input.qty.max: must be a 64-bit integer" },
	{ "input.qty.min", "1001", "input.qty: min must be <= max" },
	{ "input.qty.max", "0", "input.qty: min must be <= max" },
	{ "input.qty.max", "1", "" },
	{ "input.qty.min", "-9223372036854775808", "" },
	{ "input.qty.max", "9223372036854775807", "" },
	{ "input.note.maxLength", NULL, "input.note.maxLength: required" },
	{ "input.note.maxLength", "0", "input.note.maxLength: must be an integer from 1 to 1024" },
	{ "input.note.maxLength", "1025", "input.note.maxLength: must be an integer from 1 to 1024" },
	{ "input.note.maxLength", "\"10\"", "input.note.maxLength: must be an integer from 1 to 1024" },
	{ "input.note.maxLength", "1024", "" },
	{ "input.note.maxLength", "1", "" },
	/* the type's other keys are not its: ignored */
	{ "input.customerId.max", "\"anything\"", "" },
	/* steps */
	{ "steps", NULL, "steps: required" },
	{ "steps", "{}", "steps: must be an array" },
	{ "steps", "[]", "steps: 1 to 16 steps" },
	{ "steps[1]", "\"Inventory\"", "steps[1]: must be an object" },
	{ "steps[1]", "[]", "steps[1]: must be an object" },
	{ "steps[1].name", NULL, "steps[1].name: required" },
	{ "steps[1].name", "\"Inv entory\"", "steps[1].name: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].name", "\"Inv_entory\"", "steps[1].name: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].name", "\"\"", "steps[1].name: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].name", "\"A" U64 "\"", "steps[1].name: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[2].name", "\"" U64 "\"", "" },
	/* renaming a step breaks the Step.key fields that name it */
	{ "steps[1].name", "\"Stock\"",
	  "steps[2].fields[1]: Inventory.slot names a step that does not come before this one" },
	{ "steps[1].name", "\"Payment\"", "steps[1].name: step name Payment is used twice" },
	{ "steps[2].name", "\"Inventory\"", "steps[2].name: step name Inventory is used twice" },
	{ "steps[1].participant", NULL, "steps[1].participant: required" },
	{ "steps[1].participant", "\"Inventory\"",
	  "steps[1].participant: must be 1-63 characters of [a-z0-9_-]" },
	{ "steps[1].participant", "\"" L64 "\"",
	  "steps[1].participant: must be 1-63 characters of [a-z0-9_-]" },
	{ "steps[1].participant", "\"in.ventory\"",
	  "steps[1].participant: must be 1-63 characters of [a-z0-9_-]" },
	{ "steps[1].participant", "\"stock-2_b\"", "" },
	{ "steps[1].participant", "\"payment\"", "" }, /* two steps may go to one participant */
	{ "steps[1].command", "\"Reserve-Inventory\"",
	  "steps[1].command: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].command", "\"ReserveInventoryCommand!\"",
	  "steps[1].command: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].command", "5", "steps[1].command: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].succeeded", "\"Inventory Reserved\"",
	  "steps[1].succeeded: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].failed", "\"\"", "steps[1].failed: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].compensation", "\"Release_Inventory\"",
	  "steps[1].compensation: must be 1-64 characters of [A-Za-z0-9]" },
	{ "steps[1].compensated", "[]", "steps[1].compensated: must be 1-64 characters of [A-Za-z0-9]" },
	/* event types: distinct across the whole definition */
	{ "steps[2].succeeded", "\"PaymentSucceeded\"",
	  "steps[2].succeeded: event type PaymentSucceeded is used twice" },
	{ "steps[2].failed", "\"OrderShipped\"", "steps[2].failed: event type OrderShipped is used twice" },
	{ "steps[2].compensated", "\"InventoryReservationFailed\"",
	  "steps[2].compensated: event type InventoryReservationFailed is used twice" },
	{ "steps[0].compensated", "\"PaymentSucceeded\"",
	  "steps[0].compensated: event type PaymentSucceeded is used twice" },
	/* commands are not event types: one may be used by two steps */
	{ "steps[2].compensation", "\"RefundPaymentCommand\"", "" },
	{ "steps[2].command", "\"OrderShippedCommand\"", "" },
	/* fields */
	{ "steps[0].fields", NULL, "" },
	{ "steps[0].fields", "[]", "" },
	{ "steps[1].fields", "\"qty\"", "steps[1].fields: must be an array" },
	{ "steps[1].fields[0]", "5", "steps[1].fields[0]: must be a string" },
	{ "steps[1].fields[0]", "\"nope\"", "steps[1].fields[0]: nope is not an input field" },
	{ "steps[1].fields[0]", "\"\"",
	  "steps[1].fields[0]: must be an input field's name or Step.key (a step's name, a dot, an "
	  "output key)" },
	{ "steps[1].fields[0]", "\"q ty\"",
	  "steps[1].fields[0]: must be an input field's name or Step.key (a step's name, a dot, an "
	  "output key)" },
	{ "steps[1].fields[1]", "\"Payment.\"",
	  "steps[1].fields[1]: must be an input field's name or Step.key (a step's name, a dot, an "
	  "output key)" },
	{ "steps[1].fields[1]", "\".receipt\"",
	  "steps[1].fields[1]: must be an input field's name or Step.key (a step's name, a dot, an "
	  "output key)" },
	{ "steps[1].fields[1]", "\"Pay_ment.receipt\"",
	  "steps[1].fields[1]: must be an input field's name or Step.key (a step's name, a dot, an "
	  "output key)" },
	{ "steps[1].fields[1]", "\"Payment.receipt.id\"",
	  "steps[1].fields[1]: must be an input field's name or Step.key (a step's name, a dot, an "
	  "output key)" },
	{ "steps[1].fields[1]", "\"Payment.re-ceipt\"",
	  "steps[1].fields[1]: must be an input field's name or Step.key (a step's name, a dot, an "
	  "output key)" },
	{ "steps[2].fields[0]", "\"Shipping.trackingId\"",
	  "steps[2].fields[0]: Shipping.trackingId names a step that does not come before this one" },
	{ "steps[1].fields[1]", "\"Shipping.trackingId\"",
	  "steps[1].fields[1]: Shipping.trackingId names a step that does not come before this one" },
	{ "steps[1].fields[1]", "\"Nowhere.x\"",
	  "steps[1].fields[1]: Nowhere.x names a step that does not come before this one" },
	{ "steps[1].fields[1]", "\"qty\"", "steps[1].fields[1]: carries qty twice" },
	{ "steps[1].fields[1]", "\"Payment.qty\"", "steps[1].fields[1]: carries qty twice" },
	{ "steps[2].fields[1]", "\"Payment.note\"", "steps[2].fields[1]: carries note twice" },
	{ "steps[0].fields[0]", "\"commandId\"",
	  "steps[0].fields[0]: commandId is carried by every command, not by fields" },
	{ "steps[1].fields[1]", "\"Payment.sagaId\"",
	  "steps[1].fields[1]: sagaId is carried by every command, not by fields" },
	{ "steps[2].fields[1]", "\"Payment.receipt\"", "" }, /* any earlier step, not only the last */
	/* deadlineMs */
	{ "steps[2].deadlineMs", NULL, "" },
	{ "steps[2].deadlineMs", "0", "steps[2].deadlineMs: must be an integer from 1 to 2147483647" },
	{ "steps[2].deadlineMs", "2147483648",
	  "steps[2].deadlineMs: must be an integer from 1 to 2147483647" },
	{ "steps[2].deadlineMs", "1.5", "steps[2].deadlineMs: must be an integer from 1 to 2147483647" },
	{ "steps[2].deadlineMs", "\"5000\"",
	  "steps[2].deadlineMs: must be an integer from 1 to 2147483647" },
	{ "steps[2].deadlineMs", "null", "steps[2].deadlineMs: must be an integer from 1 to 2147483647" },
	{ "steps[2].deadlineMs", "2147483647", "" },
	{ "steps[2].deadlineMs", "1", "" },
	/* unknown keys are ignored, at every level */
	{ "description", "\"ships orders\"", "" },
	{ "steps[1].note", "{\"anything\": [1, 2]}", "" },
	{ "input.qty.doc", "\"how many\"", "" },
};

START_TEST(def_rules)
{
	const struct rule_case *rc = &rule_cases[_i];
	char err[256];

	ck_assert_msg(strcmp(compile_changed(rc->path, rc->value, err, sizeof(err)), rc->message) == 0,
		      "%s = %s: got \"%s\", want \"%s\"", rc->path, rc->value ? rc->value : "(deleted)",
		      err, rc->message);
}
END_TEST

/* Every key of a step is required but fields and deadlineMs. */
START_TEST(def_step_keys_required)
{
	static const char *const keys[] = { "name", "participant", "command", "succeeded",
					    "failed", "compensation", "compensated" };
	char path[64], want[96], err[256];

	for (size_t s = 0; s < 3; s++)
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			snprintf(path, sizeof(path), "steps[%zu].%s", s, keys[k]);
			snprintf(want, sizeof(want), "%s: required", path);
			ck_assert_str_eq(compile_changed(path, NULL, err, sizeof(err)), want);
			/* and a value of the wrong type names the pattern */
			ck_assert_ptr_nonnull(strstr(compile_changed(path, "{}", err, sizeof(err)),
						     "must be 1-6"));
		}
}
END_TEST

static const char *compile_text(const char *text, char *err, size_t len)
{
	struct saga_def *d = saga_def_parse(text, strlen(text), err, len);

	if (d)
		err[0] = '\0';
	saga_def_free(d);
	return err;
}

/* A step JSON for the step-count cases: step i of a generated definition. */
static void append_step(char *buf, size_t len, int i)
{
	size_t n = strlen(buf);

	snprintf(buf + n, len - n,
		 "%s{\"name\":\"S%d\",\"participant\":\"p\",\"command\":\"C\",\"succeeded\":\"Ok%d\","
		 "\"failed\":\"No%d\",\"compensation\":\"U\",\"compensated\":\"Undone%d\"}",
		 i ? "," : "", i, i, i, i);
}

START_TEST(def_document_level)
{
	char err[256], buf[8192];

	ck_assert_str_eq(compile_text("[]", err, sizeof(err)), "definition: must be a JSON object");
	ck_assert_str_eq(compile_text("\"order\"", err, sizeof(err)),
			 "definition: must be a JSON object");
	ck_assert(strncmp(compile_text("{\"name\": \"x\",}", err, sizeof(err)),
			  "definition: not valid JSON (", 28) == 0);
	ck_assert(strncmp(compile_text("", err, sizeof(err)), "definition: not valid JSON (", 28) == 0);
	/* the first fault in document order: name before version */
	ck_assert_str_eq(compile_text("{\"version\": 0, \"name\": \"X\"}", err, sizeof(err)),
			 "name: must be 1-63 characters of [a-z0-9_-], starting with a letter");
	ck_assert_str_eq(compile_text("{\"name\": \"x\", \"version\": 1}", err, sizeof(err)),
			 "input: required");
	/* input {} is fine; 1 and 16 steps are, 17 are not */
	for (int n = 1; n <= 17; n++) {
		snprintf(buf, sizeof(buf), "{\"name\":\"x\",\"version\":1,\"input\":{},\"steps\":[");
		for (int i = 0; i < n; i++)
			append_step(buf, sizeof(buf), i);
		strcat(buf, "]}");
		ck_assert_str_eq(compile_text(buf, err, sizeof(err)),
				 n <= 16 ? "" : "steps: 1 to 16 steps");
	}
	/* a small err buffer gets the message cut, never overrun */
	char small[8];
	ck_assert_ptr_null(saga_def_parse("[]", 2, small, sizeof(small)));
	ck_assert_str_eq(small, "definit");
	ck_assert_ptr_null(saga_def_parse("[]", 2, NULL, 0));
}
END_TEST

/* A key that is not a field name is shown JSON-escaped and cut short. */
START_TEST(def_input_key_escaped)
{
	char err[256];

	ck_assert_str_eq(compile_text("{\"name\":\"x\",\"version\":1,\"input\":{\"a\\\"b\\n\":{}}}",
				      err, sizeof(err)),
			 "input.a\\\"b\\n: field names must be 1-64 characters of [A-Za-z0-9_]");
	ck_assert_str_eq(compile_text("{\"name\":\"x\",\"version\":1,\"input\":{\"" L64 L64 "\":{}}}",
				      err, sizeof(err)),
			 "input." L64 "aaaaaaaaaaaa...: field names must be 1-64 characters of "
			 "[A-Za-z0-9_]");
}
END_TEST

START_TEST(def_compiled)
{
	char err[256];
	struct saga_def *d = saga_def_parse(base_doc, strlen(base_doc), err, sizeof(err));

	ck_assert_msg(d != NULL, "%s", err);
	ck_assert_str_eq(d->name, "ship");
	ck_assert_int_eq(d->version, 1);
	ck_assert_uint_eq(d->n_input, 3);
	ck_assert_str_eq(d->input[0].name, "customerId");
	ck_assert_int_eq(d->input[0].type, SAGA_INPUT_ID);
	ck_assert_str_eq(d->input[1].name, "qty");
	ck_assert_int_eq(d->input[1].type, SAGA_INPUT_INTEGER);
	ck_assert_int_eq(d->input[1].min, 1);
	ck_assert_int_eq(d->input[1].max, 1000);
	ck_assert_int_eq(d->input[2].type, SAGA_INPUT_STRING);
	ck_assert_uint_eq(d->input[2].max_length, 10);
	ck_assert_uint_eq(d->n_steps, 3);
	ck_assert_str_eq(d->steps[1].pending, "PendingInventory");
	ck_assert_str_eq(d->steps[1].participant, "inventory");
	ck_assert_uint_eq(d->steps[1].n_fields, 2);
	ck_assert_str_eq(d->steps[1].fields[0].name, "qty");
	ck_assert_int_eq(d->steps[1].fields[0].step, -1);
	ck_assert_str_eq(d->steps[1].fields[1].name, "receipt");
	ck_assert_str_eq(d->steps[1].fields[1].ref, "Payment.receipt");
	ck_assert_int_eq(d->steps[1].fields[1].step, 0);
	ck_assert_int_eq(d->steps[2].fields[1].step, 1);
	ck_assert_int_eq(d->steps[0].deadline_ms, 0);
	ck_assert_int_eq(d->steps[2].deadline_ms, 5000);
	ck_assert_int_eq(saga_def_step(d, "Shipping"), 2);
	ck_assert_int_eq(saga_def_step(d, "shipping"), -1);
	saga_def_free(d);

	/* the full 64-bit range */
	struct json_object *doc = parse(base_doc);

	set_path(doc, "input.qty.min", "-9223372036854775808");
	set_path(doc, "input.qty.max", "9223372036854775807");
	d = saga_def_compile(doc, err, sizeof(err));
	ck_assert_msg(d != NULL, "%s", err);
	ck_assert(d->input[1].min == INT64_MIN);
	ck_assert(d->input[1].max == INT64_MAX);
	saga_def_free(d);
	json_object_put(doc);
	saga_def_free(NULL);
}
END_TEST

/* ---- input ---- */

static const char *input_bad(const struct saga_def *d, const char *input)
{
	struct json_object *v = parse(input);
	const char *bad = "?";
	int rc = saga_input_check(d, v, &bad);

	json_object_put(v);
	if (rc == 0) {
		ck_assert_ptr_null(bad);
		return "";
	}
	return bad ? bad : "(not an object)";
}

START_TEST(def_input_check)
{
	char err[256];
	struct saga_def *d = saga_def_parse(base_doc, strlen(base_doc), err, sizeof(err));

	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(input_bad(d, "{\"customerId\":\"c1\",\"qty\":5,\"note\":\"hi\"}"), "");
	/* unknown fields are ignored */
	ck_assert_str_eq(input_bad(d, "{\"customerId\":\"c1\",\"qty\":5,\"note\":\"\",\"x\":[]}"), "");
	ck_assert_str_eq(input_bad(d, "[]"), "(not an object)");
	ck_assert_str_eq(input_bad(d, "\"x\""), "(not an object)");
	/* every field required; the first invalid one in the definition's order */
	ck_assert_str_eq(input_bad(d, "{}"), "customerId");
	ck_assert_str_eq(input_bad(d, "{\"note\":7,\"qty\":0,\"customerId\":\"c1\"}"), "qty");
	ck_assert_str_eq(input_bad(d, "{\"customerId\":\"c1\",\"qty\":5}"), "note");
	/* id: jsonx_get_id */
	static const char *const bad_ids[] = { "\"\"", "\"a b\"", "\"" L64 "a\"", "5", "null",
					       "\"a\\u0000\"", "\"é\"" };
	char buf[256];

	for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"customerId\":%s,\"qty\":5,\"note\":\"\"}", bad_ids[i]);
		ck_assert_msg(strcmp(input_bad(d, buf), "customerId") == 0, "%s", bad_ids[i]);
	}
	ck_assert_str_eq(input_bad(d, "{\"customerId\":\"" L64 "\",\"qty\":5,\"note\":\"\"}"), "");
	/* integer: jsonx_get_int within min..max */
	static const char *const bad_ints[] = { "0", "1001", "1.0", "5e0", "\"5\"", "true",
						"-1", "99999999999999999999" };

	for (size_t i = 0; i < sizeof(bad_ints) / sizeof(bad_ints[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"customerId\":\"c\",\"qty\":%s,\"note\":\"\"}", bad_ints[i]);
		ck_assert_msg(strcmp(input_bad(d, buf), "qty") == 0, "%s", bad_ints[i]);
	}
	ck_assert_str_eq(input_bad(d, "{\"customerId\":\"c\",\"qty\":1000,\"note\":\"\"}"), "");
	ck_assert_str_eq(input_bad(d, "{\"customerId\":\"c\",\"qty\":1,\"note\":\"\"}"), "");
	/* string: at most maxLength (10) Unicode characters, no control character */
	static const struct {
		const char *json;
		bool ok;
	} strs[] = {
		{ "\"0123456789\"", true },
		{ "\"0123456789a\"", false },
		{ "\"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\"", true },
		{ "\"ééééééééééé\"", false },
		{ "\"😀😀😀😀😀😀😀😀😀😀\"", true }, /* 40 bytes, 10 characters */
		{ "\"😀😀😀😀😀😀😀😀😀😀😀\"", false },
		{ "\"a\\tb\"", false },
		{ "\"a\\u0001\"", false },
		{ "\"a\\u001f\"", false },
		{ "\"a\\u007f\"", false },
		{ "\"a\\u0085\"", false },
		{ "\"a\\u009f\"", false },
		{ "\"a\\u00a0\"", true },
		{ "\"a\\u0000\"", false },
		{ "\"\\\"quoted\\\" \"", true },
		{ "12", false },
		{ "null", false },
	};

	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"customerId\":\"c\",\"qty\":1,\"note\":%s}", strs[i].json);
		ck_assert_msg(strcmp(input_bad(d, buf), strs[i].ok ? "" : "note") == 0, "%s",
			      strs[i].json);
	}
	saga_def_free(d);
}
END_TEST

/* ---- output ---- */

static const char *output_err(const char *json, char *err, size_t len)
{
	struct json_object *v = parse(json);
	int rc = saga_output_check(v, err, len);

	json_object_put(v);
	if (rc == 0)
		err[0] = '\0';
	return err;
}

START_TEST(def_output_check)
{
	char err[256], buf[8192], *p;
	const char *value_rule = "must be a string of at most 1024 characters or an integer";
	char want[128];

	ck_assert_str_eq(output_err("{}", err, sizeof(err)), "");
	ck_assert_str_eq(output_err("{\"trackingId\":\"T-1\",\"n\":-5,\"line\":\"a\\nb\"}", err,
				    sizeof(err)),
			 "");
	ck_assert_str_eq(output_err("[]", err, sizeof(err)), "output: must be an object");
	ck_assert_str_eq(output_err("\"x\"", err, sizeof(err)), "output: must be an object");
	/* 32 keys, not 33 */
	for (int n = 32; n <= 33; n++) {
		strcpy(buf, "{");
		for (int i = 0; i < n; i++)
			sprintf(buf + strlen(buf), "%s\"k%d\":%d", i ? "," : "", i, i);
		strcat(buf, "}");
		ck_assert_str_eq(output_err(buf, err, sizeof(err)),
				 n == 32 ? "" : "output: at most 32 keys");
	}
	ck_assert_str_eq(output_err("{\"a-b\":1}", err, sizeof(err)),
			 "output.a-b: keys must be 1-64 characters of [A-Za-z0-9_]");
	ck_assert_str_eq(output_err("{\"\":1}", err, sizeof(err)),
			 "output.: keys must be 1-64 characters of [A-Za-z0-9_]");
	ck_assert_str_eq(output_err("{\"a" L64 "\":1}", err, sizeof(err)),
			 "output.a" L64 ": keys must be 1-64 characters of [A-Za-z0-9_]");
	static const char *const bad_values[] = { "1.5", "1e2", "true", "null", "{}", "[]",
						  "\"a\\u0000b\"", "99999999999999999999" };

	snprintf(want, sizeof(want), "output.v: %s", value_rule);
	for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"ok\":1,\"v\":%s}", bad_values[i]);
		ck_assert_msg(strcmp(output_err(buf, err, sizeof(err)), want) == 0, "%s: %s",
			      bad_values[i], err);
	}
	/* 1024 characters, counted as characters: 1024 two-byte ones are fine */
	for (int n = 1024; n <= 1025; n++)
		for (int wide = 0; wide <= 1; wide++) {
			strcpy(buf, "{\"v\":\"");
			p = buf + strlen(buf);
			for (int i = 0; i < n; i++)
				p += sprintf(p, "%s", wide ? "é" : "a");
			strcpy(p, "\"}");
			ck_assert_str_eq(output_err(buf, err, sizeof(err)), n == 1024 ? "" : want);
		}
}
END_TEST

/* ---- the shipped definitions ---- */

char *saga_test_definition(const char *file)
{
	const char *src = getenv("SAGA_SOURCE_DIR");
	char path[1024], *text;
	FILE *f;
	long len;

	ck_assert_msg(src != NULL, "SAGA_SOURCE_DIR is not set (run through meson test)");
	snprintf(path, sizeof(path), "%s/src/orchestrator/definitions/%s", src, file);
	f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "%s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	rewind(f);
	text = malloc((size_t)len + 1);
	ck_assert_ptr_nonnull(text);
	ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
	text[len] = '\0';
	fclose(f);
	return text;
}

static struct saga_def *load(const char *file)
{
	char err[256], *text = saga_test_definition(file);
	struct saga_def *d = saga_def_parse(text, strlen(text), err, sizeof(err));

	ck_assert_msg(d != NULL, "%s: %s", file, err);
	free(text);
	return d;
}

START_TEST(def_order_file)
{
	struct saga_def *d = load("order.json");

	ck_assert_str_eq(d->name, "order");
	ck_assert_int_eq(d->version, 1);
	ck_assert_uint_eq(d->n_input, 4);
	ck_assert_str_eq(d->input[0].name, "customerId");
	ck_assert_str_eq(d->input[1].name, "itemId");
	ck_assert_str_eq(d->input[2].name, "qty");
	ck_assert_int_eq(d->input[2].min, 1);
	ck_assert_int_eq(d->input[2].max, 1000);
	ck_assert_str_eq(d->input[3].name, "amount");
	ck_assert_int_eq(d->input[3].max, 1000000000000LL);
	ck_assert_uint_eq(d->n_steps, 2);
	ck_assert_str_eq(d->steps[0].pending, "PendingPayment");
	ck_assert_str_eq(d->steps[0].command, "PayCommand");
	ck_assert_str_eq(d->steps[0].participant, "payment");
	ck_assert_str_eq(d->steps[0].compensation, "RefundPaymentCommand");
	ck_assert_str_eq(d->steps[1].pending, "PendingInventory");
	ck_assert_str_eq(d->steps[1].command, "ReserveInventoryCommand");
	ck_assert_str_eq(d->steps[1].compensated, "InventoryReleased");
	ck_assert_str_eq(d->steps[1].fields[0].name, "itemId");
	ck_assert_str_eq(d->steps[1].fields[1].name, "qty");
	saga_def_free(d);
}
END_TEST

START_TEST(def_order_with_shipping_file)
{
	struct saga_def *d = load("order-with-shipping.json");

	ck_assert_str_eq(d->name, "order-with-shipping");
	ck_assert_uint_eq(d->n_steps, 3);
	ck_assert_str_eq(d->steps[0].name, "Payment");
	ck_assert_str_eq(d->steps[1].name, "Inventory");
	ck_assert_str_eq(d->steps[2].name, "Shipping");
	ck_assert_str_eq(d->steps[2].pending, "PendingShipping");
	ck_assert_str_eq(d->steps[2].participant, "shipping");
	ck_assert_str_eq(d->steps[2].command, "ShipOrderCommand");
	ck_assert_str_eq(d->steps[2].succeeded, "OrderShipped");
	ck_assert_str_eq(d->steps[2].failed, "ShippingFailed");
	ck_assert_str_eq(d->steps[2].compensation, "CancelShipmentCommand");
	ck_assert_str_eq(d->steps[2].compensated, "ShipmentCancelled");
	saga_def_free(d);
}
END_TEST

Suite *saga_def_suite(void)
{
	Suite *s = suite_create("saga_def");
	TCase *tc = tcase_create("definitions");

	tcase_add_loop_test(tc, def_rules, 0, (int)(sizeof(rule_cases) / sizeof(rule_cases[0])));
	tcase_add_test(tc, def_step_keys_required);
	tcase_add_test(tc, def_document_level);
	tcase_add_test(tc, def_input_key_escaped);
	tcase_add_test(tc, def_compiled);
	tcase_add_test(tc, def_input_check);
	tcase_add_test(tc, def_output_check);
	tcase_add_test(tc, def_order_file);
	tcase_add_test(tc, def_order_with_shipping_file);
	suite_add_tcase(s, tc);
	return s;
}
