/*
 * The request headers the services parse themselves: Idempotency-Key
 * (httpd_idempotency_key) and traceparent (traceparent_parse), each checked
 * against an independent reading of its definition (docs/protocol.md; W3C Trace
 * Context). The input is the header value, NUL-terminated at its length
 * (evhttp hands handlers C strings; an embedded NUL ends the value).
 */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz_common.h"
#include "httpd.h"
#include "traceparent.h"

/*
 * docs/protocol.md: 1..255 visible ASCII characters, compared byte for byte (quotes
 * are part of the key).
 */
static bool ref_key(const char *h, char *out)
{
	size_t n = strlen(h);

	if (n < 1 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isgraph((unsigned char)h[i]) || (unsigned char)h[i] > 0x7e)
			return false;
	memcpy(out, h, n + 1);
	return true;
}

static bool lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* The W3C format is 2-32-16-2 lowercase hex, trace id not all zero. */
static bool ref_trace(const char *tp, char out[33])
{
	static const char zeros[33] = "00000000000000000000000000000000";

	if (strlen(tp) != 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-')
		return false;
	if (!lower_hex(tp, 2) || !lower_hex(tp + 3, 32) || !lower_hex(tp + 36, 16) ||
	    !lower_hex(tp + 53, 2) || memcmp(tp + 3, zeros, 32) == 0)
		return false;
	memcpy(out, tp + 3, 32);
	out[32] = '\0';
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *h = malloc(size + 1);
	char key[256], want_key[256], trace[33], want_trace[33];

	if (!h)
		return 0;
	memcpy(h, data, size);
	h[size] = '\0';

	bool got = httpd_idempotency_key(h, key, sizeof(key));
	bool want = ref_key(h, want_key);

	fuzz_check(got == want, "Idempotency-Key \"%s\": %d, expected %d", h, got, want);
	if (got)
		fuzz_check(strcmp(key, want_key) == 0, "key \"%s\" read as \"%s\"", want_key, key);
	/* a short output buffer is refused, never overrun */
	char *small = malloc(8);
	if (small) {
		if (httpd_idempotency_key(h, small, 8))
			fuzz_check(strlen(small) < 8, "overlong key in an 8-byte buffer");
		free(small);
	}

	got = traceparent_parse(h, trace);
	want = ref_trace(h, want_trace);
	fuzz_check(got == want, "traceparent \"%s\": %d, expected %d", h, got, want);
	if (got)
		fuzz_check(strcmp(trace, want_trace) == 0, "trace id %s read as %s", want_trace, trace);
	free(h);
	return 0;
}
