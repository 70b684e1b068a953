/* clock: see clock.h. */
#include "clock.h"

#include <errno.h>
#include <time.h>

int64_t clock_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int64_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}
