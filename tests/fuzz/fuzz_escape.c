/*
 * jsonx_escape, the one escaper behind every error message and log line
 * (both quote request input back). The first byte picks the output buffer's
 * size (1..256).
 *
 * Properties: the output is NUL-terminated within the buffer and at most
 * the input is consumed; when the input is valid UTF-8 without NUL bytes
 * (exactly when its full escape, quoted, is accepted by jsonx_parse), the
 * cut-short output, quoted, is valid JSON too and decodes to exactly the
 * consumed prefix: no escape or UTF-8 sequence is ever split.
 */
#include <string.h>

#include "fuzz_common.h"
#include "jsonx.h"

/* "\"" + escape(src) + "\"" parsed, or NULL; *used gets what was consumed. */
static struct json_object *escape_parse(const char *src, size_t srclen, size_t dstlen,
					size_t *used)
{
	char err[128];
	char *dst = malloc(dstlen + 2);
	size_t outlen = 0;
	struct json_object *v;

	if (!dst)
		abort();
	*used = jsonx_escape(dst + 1, dstlen, src, srclen, &outlen);
	fuzz_check(*used <= srclen, "consumed %zu of %zu", *used, srclen);
	fuzz_check(outlen < dstlen && dst[1 + outlen] == '\0', "output not terminated");
	dst[0] = '"';
	dst[1 + outlen] = '"';
	v = jsonx_parse(dst, outlen + 2, err, sizeof(err));
	free(dst);
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t used, all;

	if (size < 1)
		return 0;
	const char *src = (const char *)data + 1;
	size_t srclen = size - 1;
	struct json_object *part = escape_parse(src, srclen, (size_t)data[0] + 1, &used);
	struct json_object *whole = escape_parse(src, srclen, srclen * 6 + 1, &all);

	fuzz_check(all == srclen, "a big enough buffer took %zu of %zu bytes", all, srclen);
	if (whole) {
		fuzz_check((size_t)json_object_get_string_len(whole) == srclen &&
				   memcmp(json_object_get_string(whole), src, srclen) == 0,
			   "round trip changed the text");
		fuzz_check(part != NULL, "cut-short escape of valid UTF-8 is not JSON");
		fuzz_check((size_t)json_object_get_string_len(part) == used &&
				   memcmp(json_object_get_string(part), src, used) == 0,
			   "cut-short round trip is not the consumed prefix");
	}
	json_object_put(part);
	json_object_put(whole);
	return 0;
}
