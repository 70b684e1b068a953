#include "uuid.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/*
 * Random bytes come from getrandom(2) a pool at a time rather than one
 * system call per id (a saga makes about six). A forked child must never
 * hand out its parent's remaining bytes: the pool is emptied in the child.
 */
#define POOL_SIZE 512
static uint8_t pool[POOL_SIZE];
static size_t pool_left;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_forget(void)
{
	memset(pool, 0, sizeof(pool));
	pool_left = 0;
}

static void pool_init(void)
{
	if (pthread_atfork(NULL, NULL, pool_forget) != 0) {
		perror("pthread_atfork");
		abort();
	}
}

static void fill(uint8_t *p, size_t n)
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

static void random_bytes(uint8_t *p, size_t n)
{
	pthread_once(&pool_once, pool_init);
	if (pool_left < n) {
		fill(pool, sizeof(pool));
		pool_left = sizeof(pool);
	}
	/* each byte is handed out once, then wiped */
	memcpy(p, pool + sizeof(pool) - pool_left, n);
	memset(pool + sizeof(pool) - pool_left, 0, n);
	pool_left -= n;
}

static void format(const uint8_t b[16], char out[UUID_STR_LEN])
{
	static const char hex[] = "0123456789abcdef";
	size_t i, o = 0;

	for (i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[b[i] >> 4];
		out[o++] = hex[b[i] & 0xf];
	}
	out[o] = '\0';
}

void uuid_new(char out[UUID_STR_LEN])
{
	uint8_t b[16];

	random_bytes(b, sizeof(b));
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* variant 10xx (RFC 4122) */
	format(b, out);
}

/* The last v7 id's time and counter: the next one is never smaller. */
static uint64_t last_ms;
static unsigned last_seq;

void uuid_new_v7_at(char out[UUID_STR_LEN], uint64_t ms)
{
	uint8_t b[16];
	unsigned seq;

	random_bytes(b + 6, 10);
	seq = (unsigned)(((b[6] & 0x0f) << 8) | b[7]) & 0x7ff; /* top bit spare */
	if (ms <= last_ms) {
		/* same millisecond, or the clock stepped back: count up */
		ms = last_ms;
		seq = last_seq + 1;
		if (seq > 0xfff) {
			ms++;
			seq &= 0x7ff;
		}
	}
	last_ms = ms;
	last_seq = seq;
	for (int i = 0; i < 6; i++)
		b[i] = (uint8_t)(ms >> (40 - 8 * i));
	b[6] = (uint8_t)(0x70 | (seq >> 8)); /* version 7 */
	b[7] = (uint8_t)seq;
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* variant 10xx */
	format(b, out);
}

void uuid_new_v7(char out[UUID_STR_LEN])
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	uuid_new_v7_at(out, (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
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
