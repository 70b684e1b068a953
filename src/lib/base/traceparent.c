/* traceparent: see traceparent.h. */
#include "traceparent.h"

#include <stdio.h>
#include <string.h>

#include "uuid.h"

static bool lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool trace_id_valid(const char *s, size_t n)
{
	return n == 32 && lower_hex(s, 32) && strspn(s, "0") < 32;
}

bool traceparent_parse(const char *tp, char trace[TRACE_ID_LEN])
{
	if (!tp || strlen(tp) != 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' ||
	    !lower_hex(tp, 2) || !trace_id_valid(tp + 3, 32) || !lower_hex(tp + 36, 16) ||
	    !lower_hex(tp + 53, 2))
		return false;
	memcpy(trace, tp + 3, 32);
	trace[32] = '\0';
	return true;
}

bool traceparent_build(const char *trace, char out[TRACEPARENT_LEN])
{
	char span[TRACE_ID_LEN];

	if (!trace || !trace_id_valid(trace, strlen(trace)))
		return false;
	/* a v4 UUID's hex digits: random but for the version nibble, never all zero */
	trace_id_new(span);
	snprintf(out, TRACEPARENT_LEN, "00-%s-%.16s-01", trace, span);
	return true;
}

void trace_id_new(char out[TRACE_ID_LEN])
{
	char u[UUID_STR_LEN];

	uuid_new(u);
	snprintf(out, TRACE_ID_LEN, "%.8s%.4s%.4s%.4s%.12s", u, u + 9, u + 14, u + 19, u + 24);
}
