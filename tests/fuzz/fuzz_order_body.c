/*
 * The body of POST /orders as the orchestrator reads it: jsonx_parse, then
 * the field readers with the bounds of docs/protocol.md, then jsonx_canonical, whose
 * sha256 is what the Idempotency-Key record compares.
 *
 * Properties checked besides "no crash, no leak, no UB":
 *  - an accepted field really has the documented shape (id pattern, bounds,
 *    no NUL from a \u0000 escape);
 *  - the canonical text is itself accepted by jsonx_parse and is a fixed
 *    point (canonical(parse(canonical(v))) == canonical(v)): otherwise a
 *    client retrying with the same JSON value could get
 *    idempotency_key_reused;
 *  - a parse error always comes with a reason.
 */
#include <string.h>

#include "fuzz_common.h"
#include "jsonx.h"

static void check_id(struct json_object *obj, const char *key)
{
	const char *s;

	if (jsonx_get_id(obj, key, &s) != 0)
		return;
	size_t n = strlen(s);
	struct json_object *f = NULL;

	/* a \u0000 in the value would end s early: such an id is refused */
	fuzz_check(json_object_object_get_ex(obj, key, &f) &&
			   (size_t)json_object_get_string_len(f) == n,
		   "%s: id holding a NUL accepted", key);

	fuzz_check(n >= 1 && n <= 64, "%s: id of length %zu accepted", key, n);
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		fuzz_check((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
				   (c >= '0' && c <= '9') || c == '_' || c == '-',
			   "%s: id with byte 0x%02x accepted", key, (unsigned char)c);
	}
}

static void check_int(struct json_object *obj, const char *key, int64_t min, int64_t max)
{
	int64_t v = min - 1;

	if (jsonx_get_int(obj, key, min, max, &v) != 0)
		return;
	fuzz_check(v >= min && v <= max, "%s: %lld accepted outside [%lld, %lld]", key,
		   (long long)v, (long long)min, (long long)max);
	/* An accepted integer has a JSON integer type, never a double. */
	struct json_object *f = NULL;
	fuzz_check(json_object_object_get_ex(obj, key, &f) && json_object_is_type(f, json_type_int),
		   "%s: non-integer accepted", key);
}

static void check_canonical(struct json_object *v)
{
	char err[128];
	char *c1 = jsonx_canonical(v);

	fuzz_check(c1 != NULL, "jsonx_canonical failed");
	struct json_object *again = jsonx_parse(c1, strlen(c1), err, sizeof(err));

	fuzz_check(again != NULL, "canonical text refused (%s): %s", err, c1);
	char *c2 = jsonx_canonical(again);

	fuzz_check(c2 != NULL && strcmp(c1, c2) == 0, "canonical form not a fixed point:\n%s\n%s",
		   c1, c2 ? c2 : "(null)");
	free(c2);
	json_object_put(again);
	free(c1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[128];
	/* httpd_body hands handlers a NUL-terminated buffer: do the same. */
	char *buf = malloc(size + 1);

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	err[0] = '\0';
	struct json_object *obj = jsonx_parse(buf, size, err, sizeof(err));

	if (!obj) {
		fuzz_check(err[0] != '\0', "refused without a reason");
		free(buf);
		return 0;
	}
	if (json_object_is_type(obj, json_type_object)) {
		check_id(obj, "customerId");
		check_id(obj, "itemId");
		check_int(obj, "qty", 1, 1000);
		check_int(obj, "amount", 1, 1000000000000LL);
	}
	check_canonical(obj);
	json_object_put(obj);
	free(buf);
	return 0;
}
