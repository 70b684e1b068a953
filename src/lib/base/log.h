/*
 * log: one JSON object per line on stderr.
 *
 *   {"ts":"2026-11-29T10:54:02.123Z","level":"info","service":"payment",
 *    "msg":"...", "sagaId":"...", "messageId":"...", "peer":"..."}
 *
 * The level check happens in the macro, so a disabled level costs one
 * comparison and its arguments are never evaluated.
 */
#ifndef PGSAGA_LOG_H
#define PGSAGA_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

extern enum log_level log_min_level;

/* Service name written in every line; the string must outlive the process. */
void log_set_service(const char *service);

/* Parses "debug", "info", "warn", "error"; returns 0 on success, -1 else. */
__attribute__((warn_unused_result)) int log_parse_level(const char *s, enum log_level *out);

/*
 * Context fields: each may be NULL, then it is left out. They are printed
 * JSON-escaped; msg is formatted with printf rules and then escaped.
 */
struct log_ctx {
	const char *saga_id;
	const char *message_id;
	const char *peer;
	const char *trace_id;
};

void log_write(enum log_level level, const struct log_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define LOG_AT(lvl, ctx, ...)                                                  \
	do {                                                                   \
		if ((lvl) >= log_min_level)                                    \
			log_write((lvl), (ctx), __VA_ARGS__);                  \
	} while (0)

#define log_debug(...) LOG_AT(LOG_DEBUG, NULL, __VA_ARGS__)
#define log_info(...) LOG_AT(LOG_INFO, NULL, __VA_ARGS__)
#define log_warn(...) LOG_AT(LOG_WARN, NULL, __VA_ARGS__)
#define log_error(...) LOG_AT(LOG_ERROR, NULL, __VA_ARGS__)

#endif
