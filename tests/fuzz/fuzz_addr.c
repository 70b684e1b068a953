/*
 * envcfg_parse_addr, which splits LISTEN_ADDR. The first input byte picks
 * the host buffer's size (1..64) so short buffers are exercised too.
 *
 * Properties: on success host is NUL-terminated inside its buffer, has no
 * white space or ']', the port is 0..65535 and is the digits after the last
 * ':' of the input; on failure nothing is promised but no overflow.
 */
#include <string.h>

#include "envcfg.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t hostlen;
	int port = -1;

	if (size < 1)
		return 0;
	hostlen = (size_t)(data[0] % 64) + 1;
	char *s = malloc(size);
	char *host = malloc(hostlen); /* exact size: ASan sees any overflow */

	if (!s || !host) {
		free(s);
		free(host);
		return 0;
	}
	memcpy(s, data + 1, size - 1);
	s[size - 1] = '\0';
	if (envcfg_parse_addr(s, host, hostlen, &port) == 0) {
		fuzz_check(memchr(host, '\0', hostlen) != NULL, "host not terminated");
		fuzz_check(!strpbrk(host, " \t\r\n]"), "host with white space: %s", host);
		fuzz_check(port >= 0 && port <= 65535, "port %d", port);
		const char *colon = strrchr(s, ':');

		fuzz_check(colon && colon[1] != '\0', "accepted without a port: %s", s);
		fuzz_check(strspn(colon + 1, "0123456789") == strlen(colon + 1),
			   "port with non-digits accepted: %s", s);
	}
	free(host);
	free(s);
	return 0;
}
