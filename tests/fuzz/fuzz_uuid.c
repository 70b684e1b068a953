/*
 * uuid_valid, the check behind GET /orders/{id} and every id in a message,
 * against an independent reference. The input is NUL-terminated at its
 * length; an embedded NUL ends the string early, as it would in a path.
 */
#include <stdbool.h>
#include <string.h>

#include "fuzz_common.h"
#include "uuid.h"

static bool ref_uuid(const char *s)
{
	size_t n = strlen(s);

	if (n != 36)
		return false;
	for (size_t i = 0; i < n; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		char c = s[i];
		bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
			   (c >= 'A' && c <= 'F');

		if (dash ? c != '-' : !hex)
			return false;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/*
	 * An exact-size heap copy: ASan then catches any read past the
	 * terminating NUL, which a path buffer would not forgive either.
	 */
	char *s = malloc(size + 1);

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	bool got = uuid_valid(s), want = ref_uuid(s);

	fuzz_check(got == want, "uuid_valid(\"%s\") = %d, expected %d", s, got, want);
	free(s);
	return 0;
}
