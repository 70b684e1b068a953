/*
 * clock: the tests' one clock. Milliseconds on CLOCK_MONOTONIC, for
 * deadlines and for measuring how long something took (never for dates),
 * and a sleep that an interrupting signal does not cut short.
 */
#ifndef PGSAGA_TEST_CLOCK_H
#define PGSAGA_TEST_CLOCK_H

#include <stdint.h>

/* Milliseconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
int64_t clock_ms(void);

/* Sleeps ms milliseconds (nothing when ms <= 0), resuming after signals. */
void sleep_ms(int64_t ms);

#endif
