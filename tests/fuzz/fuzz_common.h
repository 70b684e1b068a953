/*
 * fuzz_common: what the libFuzzer targets share. Each target is one .c file
 * with LLVMFuzzerTestOneInput; a property that fails calls fuzz_fail, which
 * aborts, so libFuzzer saves the input as a crash.
 */
#ifndef PGSAGA_FUZZ_COMMON_H
#define PGSAGA_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define fuzz_fail(...)                                                         \
	do {                                                                   \
		fprintf(stderr, "property failed at %s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		abort();                                                       \
	} while (0)

#define fuzz_check(cond, ...)                                                  \
	do {                                                                   \
		if (!(cond))                                                   \
			fuzz_fail(__VA_ARGS__);                                \
	} while (0)

#endif
