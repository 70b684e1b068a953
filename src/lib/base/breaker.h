/*
 * breaker: a circuit breaker per peer instance. Pure: the caller passes the
 * time, so tests drive it with a fake clock.
 *
 * closed --(failures in a row)--> open --(open_ms passed)--> half-open:
 * one probe at a time; its success closes, its failure opens again.
 */
#ifndef PGSAGA_BREAKER_H
#define PGSAGA_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

enum breaker_state { BREAKER_CLOSED = 0, BREAKER_OPEN, BREAKER_HALF_OPEN };

struct breaker {
	enum breaker_state state;
	int failures;        /* consecutive, while closed */
	int threshold;       /* failures that open it */
	int64_t open_ms;     /* how long it stays open */
	int64_t opened_at;   /* ms, when it last opened */
	bool probing;        /* half-open: a probe is out */
};

void breaker_init(struct breaker *b, int threshold, int64_t open_ms);

/*
 * May a request go now? In half-open state the first caller gets true and
 * becomes the probe; later callers get false until it reports.
 */
bool breaker_allow(struct breaker *b, int64_t now_ms);

/* Reports the outcome of a request that breaker_allow let through. */
void breaker_report(struct breaker *b, bool ok, int64_t now_ms);

/* When an open breaker lets the next probe through (now_ms if not open). */
int64_t breaker_retry_at(const struct breaker *b, int64_t now_ms);

/*
 * The state as the admin API shows it: "closed", "open", or "half_open"
 * (also for an open breaker whose wait is over: the next request probes).
 */
const char *breaker_state_name(const struct breaker *b, int64_t now_ms);

#endif
