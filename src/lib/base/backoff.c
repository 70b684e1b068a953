#include "backoff.h"

#include <stdbool.h>
#include <sys/random.h>
#include <time.h>

/* 2^63: a double at or above it does not fit an int64. */
#define INT64_LIMIT_D 9223372036854775808.0

/* min(cap, base * 2^(attempt-1)) without ever computing an overflowing product. */
static int64_t ceiling_ms(int64_t base_ms, int64_t cap_ms, int attempt)
{
	int shift = attempt > 1 ? attempt - 1 : 0;

	if (base_ms <= 0 || cap_ms <= 0)
		return 0;
	/*
	 * base << shift > cap exactly when base > cap >> shift, and a shift
	 * of 63 or more would reach past any positive int64 anyway.
	 */
	if (shift >= 63 || base_ms > (cap_ms >> shift))
		return cap_ms;
	return base_ms << shift;
}

int64_t backoff_delay_ms(int64_t base_ms, int64_t cap_ms, int attempt, double r)
{
	int64_t ceiling = ceiling_ms(base_ms, cap_ms, attempt);
	double d;

	/* Written so that a NaN r lands here too. */
	if (!(r > 0.0) || ceiling == 0)
		return 0;
	if (r >= 1.0)
		return ceiling;
	d = r * (double)ceiling;
	/* (double)ceiling may round up to 2^63; converting that is undefined. */
	if (d >= INT64_LIMIT_D || (int64_t)d > ceiling)
		return ceiling;
	return (int64_t)d;
}

static __thread uint64_t rng_state;
static __thread bool rng_seeded;

static void rng_seed(void)
{
	struct timespec ts;

	if (getrandom(&rng_state, sizeof(rng_state), GRND_NONBLOCK) != sizeof(rng_state)) {
		/* Jitter only spreads retries out; a weak seed is good enough. */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		rng_state = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
			    (uint64_t)(uintptr_t)&rng_state;
	}
	rng_seeded = true;
}

/* splitmix64: any state, even 0, gives a full-period, well-mixed sequence. */
static uint64_t rng_next(void)
{
	uint64_t z;

	if (!rng_seeded)
		rng_seed();
	z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

double backoff_random(void)
{
	/* The top 53 bits make every double in [0, 1) a multiple of 2^-53. */
	return (double)(rng_next() >> 11) * 0x1.0p-53;
}
