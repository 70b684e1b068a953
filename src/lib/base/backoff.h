/*
 * backoff: exponential backoff with full jitter.
 *
 *   delay = uniform(0, min(cap, base * 2^(attempt-1)))
 *
 * Pure: the random number comes from the caller, so tests can pin it.
 */
#ifndef PGSAGA_BACKOFF_H
#define PGSAGA_BACKOFF_H

#include <stdint.h>

/*
 * attempt counts from 1 (the first failure). r is uniform in [0, 1).
 * Never overflows, whatever attempt is.
 */
int64_t backoff_delay_ms(int64_t base_ms, int64_t cap_ms, int attempt, double r);

/* A uniform double in [0, 1) from a fast thread-local generator. */
double backoff_random(void);

#endif
