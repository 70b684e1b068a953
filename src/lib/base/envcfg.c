#include "envcfg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Whole string, base 10, no white space: strtoll alone would take " 12x". */
static int parse_int(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (*s == '\0' || !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9')))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* Decimal only: strtod would also take "nan", "inf" and hex floats. */
static int parse_rate(const char *s, double *out)
{
	char *end;
	double v;

	if (*s == '\0' || strspn(s, "0123456789.eE+-") != strlen(s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !(v >= 0.0 && v <= 1.0))
		return -1;
	*out = v;
	return 0;
}

/*
 * A secret is named but its value never quoted, so a token pasted into the
 * wrong variable does not end up in a log.
 */
static const char *shown(const struct envcfg_var *v, const char *val)
{
	return v->secret ? "(secret)" : val;
}

static int load_one(const struct envcfg_var *v, char *err, size_t errlen)
{
	const char *val = getenv(v->name);
	bool required = v->def == NULL || v->secret;
	int64_t n;
	double r;

	if (required && (val == NULL || *val == '\0')) {
		set_err(err, errlen, "%s: required%s, not set", v->name,
			v->secret ? " (secret)" : "");
		return -1;
	}
	if (val == NULL)
		val = v->def;
	switch (v->type) {
	case ENVCFG_STRING:
		*(const char **)v->target = val;
		return 0;
	case ENVCFG_INT:
		if (parse_int(val, &n) < 0) {
			set_err(err, errlen, "%s: not an integer: '%s'", v->name, shown(v, val));
			return -1;
		}
		if (n < v->min || n > v->max) {
			set_err(err, errlen, "%s: %s out of range [%lld, %lld]", v->name,
				shown(v, val), (long long)v->min, (long long)v->max);
			return -1;
		}
		*(int64_t *)v->target = n;
		return 0;
	case ENVCFG_RATE:
		if (parse_rate(val, &r) < 0) {
			set_err(err, errlen, "%s: not a rate in [0, 1]: '%s'", v->name,
				shown(v, val));
			return -1;
		}
		*(double *)v->target = r;
		return 0;
	}
	set_err(err, errlen, "%s: unknown type", v->name);
	return -1;
}

int envcfg_load(const struct envcfg_var *vars, size_t n, char *err, size_t errlen)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (load_one(&vars[i], err, errlen) < 0)
			return -1;
	return 0;
}

void envcfg_help(FILE *out, const char *prog, const char *about, const struct envcfg_var *vars,
		 size_t n)
{
	size_t i;

	fprintf(out, "usage: %s\n\n", prog);
	if (about && *about)
		fprintf(out, "%s\n\n", about);
	fprintf(out, "Settings, from the environment:\n");
	for (i = 0; i < n; i++) {
		const struct envcfg_var *v = &vars[i];

		fprintf(out, "  %-26s %s ", v->name, v->help ? v->help : "");
		if (v->secret)
			fprintf(out, "(required, secret)");
		else if (!v->def)
			fprintf(out, "(required)");
		else
			fprintf(out, "(default: '%s')", v->def);
		if (v->type == ENVCFG_INT)
			fprintf(out, " [%lld..%lld]", (long long)v->min, (long long)v->max);
		else if (v->type == ENVCFG_RATE)
			fprintf(out, " [0..1]");
		fputc('\n', out);
	}
}

/* Copies s[0..n) into host; -1 when it does not fit. */
static int copy_host(char *host, size_t hostlen, const char *s, size_t n)
{
	if (n + 1 > hostlen)
		return -1;
	memcpy(host, s, n);
	host[n] = '\0';
	return 0;
}

int envcfg_parse_addr(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon, *close;
	int64_t p;

	if (!s || hostlen == 0)
		return -1;
	if (s[0] == '[') {
		close = strchr(s, ']');
		if (!close || close == s + 1 || close[1] != ':')
			return -1;
		colon = close + 1;
		if (copy_host(host, hostlen, s + 1, (size_t)(close - s - 1)) < 0)
			return -1;
	} else {
		colon = strrchr(s, ':');
		/* A second colon means a bare IPv6 address: ambiguous, so refused. */
		if (!colon || memchr(s, ':', (size_t)(colon - s)) || strchr(s, '['))
			return -1;
		if (colon == s) {
			if (copy_host(host, hostlen, "127.0.0.1", 9) < 0)
				return -1;
		} else if (copy_host(host, hostlen, s, (size_t)(colon - s)) < 0) {
			return -1;
		}
	}
	if (strpbrk(host, " \t\r\n]"))
		return -1;
	/* Digits only: parse_int alone would let "+80" and "-0" through. */
	if (colon[1] == '\0' || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    parse_int(colon + 1, &p) < 0 || p > 65535)
		return -1;
	*port = (int)p;
	return 0;
}
