/*
 * envcfg: settings from the environment, described by a table so that one
 * table drives both parsing and --help.
 */
#ifndef PGSAGA_ENVCFG_H
#define PGSAGA_ENVCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum envcfg_type {
	ENVCFG_STRING, /* const char ** target; points into environ or at default */
	ENVCFG_INT,    /* int64_t * target */
	ENVCFG_RATE,   /* double * target, 0..1 */
};

struct envcfg_var {
	const char *name;     /* e.g. "RETRY_BASE_MS" */
	enum envcfg_type type;
	void *target;
	const char *def;      /* default as text; NULL means required */
	int64_t min, max;     /* bounds for ENVCFG_INT */
	const char *help;     /* one line */
	bool secret;          /* required non-empty; never printed */
	/*
	 * The value may come from a file instead: NAME_FILE names it, and its
	 * content, one trailing newline removed, is the value (secrets mounted
	 * as files). Setting both is an error. The value is never printed, and
	 * a URL default is shown with its password as ***.
	 */
	bool from_file;
};

/*
 * Reads every variable of the table (n entries) from getenv(). An unset
 * variable takes its default; a required one that is unset or empty, or a
 * value that does not parse or is out of bounds, is an error: the first one
 * is described in err and -1 is returned. For a from_file variable, a
 * non-empty NAME_FILE is read instead (both NAME and NAME_FILE non-empty, or
 * a file that cannot be read, is an error naming them). Values read from
 * files stay allocated until envcfg_release().
 */
__attribute__((warn_unused_result)) int envcfg_load(const struct envcfg_var *vars, size_t n,
						    char *err, size_t errlen);

/* Frees the values read from NAME_FILE files (targets pointing at them dangle). */
void envcfg_release(void);

/*
 * Copies a connection string into out with every password replaced by ***:
 * the userinfo password of each "scheme://user:password@" (a comma-separated
 * list of URLs included) and every "password=" value (libpq's key=value form
 * and URI query). Truncates to fit outlen. Returns out.
 */
char *envcfg_redact(const char *in, char *out, size_t outlen);

/* Prints "usage" and the table: name, default, help. */
void envcfg_help(FILE *out, const char *prog, const char *about, const struct envcfg_var *vars,
		 size_t n);

/*
 * Splits "host:port" (host may be empty, meaning 127.0.0.1, or [v6]).
 * Returns 0 and fills host (NUL-terminated) and port, or -1.
 */
__attribute__((warn_unused_result)) int envcfg_parse_addr(const char *s, char *host,
							  size_t hostlen, int *port);

#endif
