/*
 * Bodies of the internal messages (docs/protocol.md, "Messages") as command.c and the
 * orchestrator's POST /events read them: jsonx_parse, then the UUID ids,
 * the type's own fields and the optional reason string.
 *
 * Properties: an accepted UUID field is a canonical UUID (checked against
 * an independent reference here), an accepted reason is a string of at
 * most 200 bytes without an embedded NUL, ints stay in their bounds.
 */
#include <string.h>

#include "fuzz_common.h"
#include "jsonx.h"
#include "uuid.h"

static bool ref_uuid(const char *s)
{
	static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";

	if (strlen(s) != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		if (shape[i] == '-') {
			if (s[i] != '-')
				return false;
		} else if (!strchr("0123456789abcdefABCDEF", s[i]) || s[i] == '\0') {
			return false;
		}
	}
	return true;
}

static void check_uuid(struct json_object *obj, const char *key)
{
	const char *s;

	if (jsonx_get_uuid(obj, key, &s) != 0)
		return;
	fuzz_check(ref_uuid(s), "%s: bad UUID accepted: %s", key, s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[128];
	char *buf = malloc(size + 1);
	const char *s;
	int64_t v;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	struct json_object *obj = jsonx_parse(buf, size, err, sizeof(err));

	if (obj && json_object_is_type(obj, json_type_object)) {
		/* commands */
		check_uuid(obj, "commandId");
		check_uuid(obj, "sagaId");
		if (jsonx_get_id(obj, "customerId", &s) == 0)
			fuzz_check(strlen(s) >= 1 && strlen(s) <= 64, "customerId length");
		if (jsonx_get_int(obj, "amount", 1, 1000000000000LL, &v) == 0)
			fuzz_check(v >= 1 && v <= 1000000000000LL, "amount %lld", (long long)v);
		if (jsonx_get_id(obj, "itemId", &s) == 0)
			fuzz_check(strlen(s) >= 1 && strlen(s) <= 64, "itemId length");
		if (jsonx_get_int(obj, "qty", 1, 1000, &v) == 0)
			fuzz_check(v >= 1 && v <= 1000, "qty %lld", (long long)v);
		/* events */
		check_uuid(obj, "eventId");
		if (json_object_object_get_ex(obj, "reason", NULL) &&
		    jsonx_get_str(obj, "reason", 200, &s) == 0)
			fuzz_check(strlen(s) <= 200, "reason of %zu bytes accepted", strlen(s));
		/* extreme bounds must not trip UB in the range check */
		(void)jsonx_get_int(obj, "amount", INT64_MIN, INT64_MAX, &v);
		(void)jsonx_get_int(obj, "qty", INT64_MAX, INT64_MIN, &v);
	}
	json_object_put(obj);
	free(buf);
	return 0;
}
