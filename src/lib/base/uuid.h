/*
 * uuid: random (version 4) and time-ordered (version 7) UUIDs, and
 * validation of their canonical text.
 *
 * Version 7 is for ids that become primary keys: the first 48 bits are the
 * Unix time in milliseconds, so rows inserted one after the other land on
 * the right-most page of their index instead of on a random one (fewer
 * pages touched, and after a checkpoint one full-page image for many
 * inserts instead of one each). They reveal when they were made, to the
 * millisecond; after the time come 12 bits that start random and count up
 * within a millisecond, then 62 random bits. Version 4 is for ids that
 * must say nothing (trace and span ids).
 */
#ifndef PGSAGA_UUID_H
#define PGSAGA_UUID_H

#include <stdbool.h>
#include <stdint.h>

#define UUID_STR_LEN 37 /* 36 characters and the terminating NUL */

/* Writes a new lowercase hyphenated v4 UUID into out. */
void uuid_new(char out[UUID_STR_LEN]);

/*
 * Writes a new lowercase hyphenated v7 UUID into out: the current Unix time
 * in ms (CLOCK_REALTIME), then random bits. Within one process successive
 * ids never go backwards, even when the clock does or within a millisecond
 * (RFC 9562 method 3: the 12 bits after the time count up).
 */
void uuid_new_v7(char out[UUID_STR_LEN]);

/* The same for a given time in ms since the epoch (unit tests). */
void uuid_new_v7_at(char out[UUID_STR_LEN], uint64_t unix_ms);

/*
 * True when s is exactly a canonical hyphenated UUID, 8-4-4-4-12 hex digits
 * of either case, and nothing else.
 */
bool uuid_valid(const char *s);

#endif
