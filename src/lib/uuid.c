#include "uuid.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static void random_bytes(uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			/*
			 * Ids are primary keys and idempotency handles: a
			 * predictable or repeated one is worse than stopping.
			 */
			perror("getrandom");
			abort();
		}
		p += got;
		n -= (size_t)got;
	}
}

void uuid_new(char out[UUID_STR_LEN])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t b[16];
	size_t i, o = 0;

	random_bytes(b, sizeof(b));
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* variant 10xx (RFC 4122) */
	for (i = 0; i < sizeof(b); i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[b[i] >> 4];
		out[o++] = hex[b[i] & 0xf];
	}
	out[o] = '\0';
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool uuid_valid(const char *s)
{
	size_t i;

	if (!s)
		return false;
	for (i = 0; i < UUID_STR_LEN - 1; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;

		/* The NUL of a short string fails both tests, so no strlen first. */
		if (dash ? s[i] != '-' : !is_hex(s[i]))
			return false;
	}
	return s[i] == '\0';
}
