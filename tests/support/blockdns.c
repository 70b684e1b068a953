/*
 * blockdns: an LD_PRELOAD library for the integration test that proves peer
 * names are never resolved with a blocking getaddrinfo() on an event loop.
 * getaddrinfo() for "localhost" marks the file $BLOCKDNS_MARK and then never
 * returns, as a resolver that does not answer would; every other name goes
 * to the real one (libpq and the listening socket use addresses).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

	if (node && strcmp(node, "localhost") == 0) {
		const char *mark = getenv("BLOCKDNS_MARK");

		if (mark) {
			int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

			if (fd >= 0)
				close(fd);
		}
		for (;;)
			pause();
	}
	*(void **)&real = dlsym(RTLD_NEXT, "getaddrinfo");
	return real(node, service, hints, res);
}
