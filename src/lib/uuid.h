/* uuid: random (version 4) UUIDs and validation of their canonical text. */
#ifndef PGSAGA_UUID_H
#define PGSAGA_UUID_H

#include <stdbool.h>

#define UUID_STR_LEN 37 /* 36 characters and the terminating NUL */

/* Writes a new lowercase hyphenated v4 UUID into out (getrandom(2)). */
void uuid_new(char out[UUID_STR_LEN]);

/*
 * True when s is exactly a canonical hyphenated UUID, 8-4-4-4-12 hex digits
 * of either case, and nothing else.
 */
bool uuid_valid(const char *s);

#endif
