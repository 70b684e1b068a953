/* embedded: files compiled into the binary by sql/embed.py --files. */
#ifndef PGSAGA_EMBEDDED_H
#define PGSAGA_EMBEDDED_H

#include <stddef.h>

/* One embedded file. */
struct embedded_file {
	const char *name; /* base name: "index.html" */
	const char *data; /* len bytes, NUL after them */
	size_t len;
	const char *etag; /* quoted entity tag, e.g. "\"0123456789abcdef\"" */
};

/* The operator console's files (console.c). */
extern const struct embedded_file console_files[];
extern const size_t console_files_count;

/* The compiled-in saga definitions: order.json (saga_registry.c). */
extern const struct embedded_file definitions_files[];
extern const size_t definitions_files_count;

#endif
