/*
 * monotime: milliseconds on CLOCK_MONOTONIC, the clock every timeout,
 * deadline and breaker in the services counts on (never the wall clock,
 * which NTP may move).
 */
#ifndef PGSAGA_MONOTIME_H
#define PGSAGA_MONOTIME_H
#include <stdint.h>
#include <time.h>

static inline int64_t monotime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The same clock in microseconds, for durations measured in metrics. */
static inline int64_t monotime_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
#endif
