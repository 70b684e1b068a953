#include "envcfg.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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
	return v->secret || v->from_file ? "(secret)" : val;
}

#define FILE_VALUE_MAX (64 * 1024)

/* Values read from NAME_FILE, kept for the targets that point at them. */
struct file_value {
	struct file_value *next;
	char text[];
};
static struct file_value *file_values;

void envcfg_release(void)
{
	while (file_values) {
		struct file_value *f = file_values;

		file_values = f->next;
		free(f);
	}
}

/*
 * The content of path, one trailing newline removed, or NULL with why in err
 * (naming fvar, the path, never the content).
 */
static const char *read_value_file(const char *fvar, const char *path, char *err,
				   size_t errlen)
{
	struct file_value *f = malloc(sizeof(*f) + FILE_VALUE_MAX + 2);
	size_t len = 0;
	ssize_t n;
	int fd;

	if (!f)
		abort();
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		set_err(err, errlen, "%s: cannot read '%s': %s", fvar, path, strerror(errno));
		free(f);
		return NULL;
	}
	while (len <= FILE_VALUE_MAX &&
	       (n = read(fd, f->text + len, FILE_VALUE_MAX + 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			set_err(err, errlen, "%s: cannot read '%s': %s", fvar, path,
				strerror(errno));
			close(fd);
			free(f);
			return NULL;
		}
		len += (size_t)n;
	}
	close(fd);
	if (len > FILE_VALUE_MAX) {
		set_err(err, errlen, "%s: '%s' is larger than %d bytes", fvar, path,
			FILE_VALUE_MAX);
		free(f);
		return NULL;
	}
	if (len > 0 && f->text[len - 1] == '\n')
		len--;
	f->text[len] = '\0';
	if (memchr(f->text, '\0', len)) {
		set_err(err, errlen, "%s: '%s' holds a NUL byte", fvar, path);
		free(f);
		return NULL;
	}
	f->next = file_values;
	file_values = f;
	return f->text;
}

static int load_one(const struct envcfg_var *v, char *err, size_t errlen)
{
	const char *val = getenv(v->name);
	bool required = v->def == NULL || v->secret;
	int64_t n;
	double r;

	if (v->from_file) {
		char fvar[128];
		const char *path;

		snprintf(fvar, sizeof(fvar), "%s_FILE", v->name);
		path = getenv(fvar);
		if (path && *path) {
			if (val && *val) {
				set_err(err, errlen, "%s and %s are both set: set one of them",
					v->name, fvar);
				return -1;
			}
			val = read_value_file(fvar, path, err, errlen);
			if (!val)
				return -1;
		}
	}
	if (required && (val == NULL || *val == '\0')) {
		set_err(err, errlen, "%s: required%s, not set%s%s%s", v->name,
			v->secret ? " (secret)" : "", v->from_file ? " (nor " : "",
			v->from_file ? v->name : "", v->from_file ? "_FILE)" : "");
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

	fprintf(out, "usage: %s [--help | --version]\n\n", prog);
	if (about && *about)
		fprintf(out, "%s\n\n", about);
	fprintf(out, "Settings, from the environment:\n");
	for (i = 0; i < n; i++) {
		const struct envcfg_var *v = &vars[i];

		char def[512];

		fprintf(out, "  %-26s %s ", v->name, v->help ? v->help : "");
		if (v->secret)
			fprintf(out, "(required, secret)");
		else if (!v->def)
			fprintf(out, "(required)");
		else
			fprintf(out, "(default: '%s')",
				v->from_file ? envcfg_redact(v->def, def, sizeof(def)) : v->def);
		if (v->from_file)
			fprintf(out, " (or %s_FILE: a file holding it)", v->name);
		if (v->type == ENVCFG_INT)
			fprintf(out, " [%lld..%lld]", (long long)v->min, (long long)v->max);
		else if (v->type == ENVCFG_RATE)
			fprintf(out, " [0..1]");
		fputc('\n', out);
	}
}

/* Appends n bytes of s to out[*at..outlen), truncating; keeps out terminated. */
static void put(char *out, size_t outlen, size_t *at, const char *s, size_t n)
{
	if (*at + 1 >= outlen)
		return;
	if (n > outlen - 1 - *at)
		n = outlen - 1 - *at;
	memcpy(out + *at, s, n);
	*at += n;
	out[*at] = '\0';
}

/* Whether "password=" starts at in[i]: at a key's start in key=value or a query. */
static bool password_key_at(const char *in, size_t i)
{
	return strncasecmp(in + i, "password=", 9) == 0 &&
	       (i == 0 || strchr(" \t?&", in[i - 1]) != NULL);
}

char *envcfg_redact(const char *in, char *out, size_t outlen)
{
	size_t at = 0, i = 0, len = strlen(in);

	if (outlen == 0)
		return out;
	out[0] = '\0';
	while (i < len) {
		if (strncmp(in + i, "://", 3) == 0) {
			/* userinfo: up to an '@' before the next '/', '?', ',' or end */
			size_t start = i + 3, end = start + strcspn(in + start, "/?,");
			const char *atsign = memchr(in + start, '@', end - start);
			const char *colon = atsign ? memchr(in + start, ':',
							    (size_t)(atsign - (in + start)))
						   : NULL;

			if (colon) {
				put(out, outlen, &at, in + i, (size_t)(colon + 1 - (in + i)));
				put(out, outlen, &at, "***", 3);
				i = (size_t)(atsign - in);
				continue;
			}
			put(out, outlen, &at, in + i, 3);
			i += 3;
			continue;
		}
		if (password_key_at(in, i)) {
			size_t v = i + 9;

			put(out, outlen, &at, in + i, 9);
			put(out, outlen, &at, "***", 3);
			if (in[v] == '\'') { /* libpq's quoted value, \' and \\ escaped */
				for (v++; in[v] && in[v] != '\''; v++)
					if (in[v] == '\\' && in[v + 1])
						v++;
				if (in[v] == '\'')
					v++;
			} else {
				v += strcspn(in + v, " \t&,");
			}
			i = v;
			continue;
		}
		put(out, outlen, &at, in + i, 1);
		i++;
	}
	return out;
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
