#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jsonx.h"

enum log_level log_min_level = LOG_INFO;

static const char *log_service = "pgsaga";

/*
 * Each value has a fixed budget, so a line always fits its buffer whatever
 * it holds, and no longer than PIPE_BUF: one write(2) of at most PIPE_BUF
 * bytes to a pipe is atomic, so lines from processes sharing stderr never
 * interleave.
 */
#define LOG_LINE_MAX 4096
#define LOG_MSG_MAX 2560  /* escaped msg, "..." included */
#define LOG_FIELD_MAX 200 /* escaped service or context value, "..." included */
#define LOG_FIXED_MAX 160 /* keys, punctuation, timestamp, level */

_Static_assert(LOG_FIXED_MAX + LOG_MSG_MAX + 5 * LOG_FIELD_MAX <= LOG_LINE_MAX,
	       "a log line must fit its buffer");
_Static_assert(LOG_LINE_MAX <= PIPE_BUF, "a log line must be written atomically");

static const char *const level_names[] = {
	[LOG_DEBUG] = "debug",
	[LOG_INFO] = "info",
	[LOG_WARN] = "warn",
	[LOG_ERROR] = "error",
};

void log_set_service(const char *service)
{
	log_service = service;
}

int log_parse_level(const char *s, enum log_level *out)
{
	size_t i;

	for (i = 0; s && i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

struct line {
	char buf[LOG_LINE_MAX];
	size_t len;
};

/* Raw text: only the short fixed pieces, which the budget always has room for. */
static void put_raw(struct line *l, const char *s)
{
	size_t n = strlen(s);

	if (n > sizeof(l->buf) - 1 - l->len)
		n = sizeof(l->buf) - 1 - l->len;
	memcpy(l->buf + l->len, s, n);
	l->len += n;
	l->buf[l->len] = '\0';
}

/* ,"key":"value" with value escaped and cut to max bytes, marked by "...". */
static void put_field(struct line *l, const char *key, const char *val, size_t max)
{
	size_t len = strlen(val), used, w;

	put_raw(l, ",\"");
	put_raw(l, key);
	put_raw(l, "\":\"");
	used = jsonx_escape(l->buf + l->len, max - 3, val, len, &w);
	l->len += w;
	if (used < len)
		put_raw(l, "...");
	put_raw(l, "\"");
}

static void put_time(struct line *l)
{
	struct timespec ts;
	struct tm tm;
	char stamp[64];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	put_raw(l, "{\"ts\":\"");
	put_raw(l, stamp);
	snprintf(stamp, sizeof(stamp), ".%03ldZ\"", ts.tv_nsec / 1000000);
	put_raw(l, stamp);
}

static void write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* nowhere left to report it */
		p += w;
		n -= (size_t)w;
	}
}

void log_write(enum log_level level, const struct log_ctx *ctx, const char *fmt, ...)
{
	/* Callers log and then look at errno; logging must not change it. */
	int saved_errno = errno;
	char msg[LOG_MSG_MAX];
	struct line l = { .len = 0 };
	va_list ap;
	int n;

	if (level < LOG_DEBUG || level > LOG_ERROR)
		level = LOG_ERROR;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		snprintf(msg, sizeof(msg), "(bad log format: %s)", fmt);

	put_time(&l);
	put_raw(&l, ",\"level\":\"");
	put_raw(&l, level_names[level]);
	put_raw(&l, "\"");
	put_field(&l, "service", log_service ? log_service : "", LOG_FIELD_MAX);
	put_field(&l, "msg", msg, LOG_MSG_MAX);
	if (ctx && ctx->saga_id)
		put_field(&l, "sagaId", ctx->saga_id, LOG_FIELD_MAX);
	if (ctx && ctx->message_id)
		put_field(&l, "messageId", ctx->message_id, LOG_FIELD_MAX);
	if (ctx && ctx->peer)
		put_field(&l, "peer", ctx->peer, LOG_FIELD_MAX);
	if (ctx && ctx->trace_id)
		put_field(&l, "traceId", ctx->trace_id, LOG_FIELD_MAX);
	put_raw(&l, "}\n");
	write_all(l.buf, l.len);
	errno = saved_errno;
}
