/*
 * delivery_policy: what becomes of an outbox row after one delivery attempt.
 *
 * Pure: no I/O, the time and the random number come from the caller, so a
 * unit test walks every branch with a fake clock and a pinned jitter.
 *
 *   outcome        attempts left   next
 *   OK             -               done (marked processed)
 *   RETRYABLE      yes             retry after the peer's Retry-After (capped)
 *                                  or an exponential backoff with full jitter
 *   RETRYABLE      no              dead letter (attempts exhausted)
 *   REFUSED        -               dead letter (it never will succeed)
 *   NOT_ATTEMPTED  -               retry when the circuit lets a probe
 *                                  through; not counted as an attempt
 *
 * The peer's circuit breaker counts the same outcomes: a RETRYABLE one is a
 * failure of the peer, OK and REFUSED show it answering sensibly, and
 * NOT_ATTEMPTED never reached it.
 */
#ifndef PGSAGA_DELIVERY_POLICY_H
#define PGSAGA_DELIVERY_POLICY_H

#include <stdbool.h>
#include <stdint.h>

enum delivery_outcome {
	DELIVERY_OK,            /* a 2xx; a broker's confirm */
	DELIVERY_RETRYABLE,     /* 5xx, 408, 429, a timeout, a connection error, a nack */
	DELIVERY_REFUSED,       /* any other answer (a 4xx), an unknown destination */
	DELIVERY_NOT_ATTEMPTED, /* an open circuit held it back */
};

/* The outcome of an HTTP answer; status 0 is none (timeout, connection error). */
enum delivery_outcome delivery_policy_http(int status);

/* Does this outcome count against the peer's circuit (breaker_report(ok))? */
bool delivery_policy_breaker_ok(enum delivery_outcome o);

/* The RETRY_* settings. */
struct delivery_policy {
	int max_attempts;        /* the attempt with this number failing makes a dead letter */
	int64_t base_ms, cap_ms; /* backoff; cap_ms also caps a peer's Retry-After */
};

enum delivery_next { DELIVERY_DONE, DELIVERY_RETRY, DELIVERY_DEAD };

enum delivery_reason {
	DELIVERY_DELIVERED,
	DELIVERY_BACKOFF,      /* retry: the computed backoff */
	DELIVERY_PEER_ASKED,   /* retry: the peer's Retry-After */
	DELIVERY_CIRCUIT_OPEN, /* retry: when the circuit lets a probe through */
	DELIVERY_REFUSAL,      /* dead: refused for good */
	DELIVERY_EXHAUSTED,    /* dead: the last allowed attempt failed */
};

struct delivery_decision {
	enum delivery_next next;
	enum delivery_reason reason;
	int attempts;     /* to add to the row's attempt count: 1, or 0 when not attempted */
	int64_t delay_ms; /* RETRY: from now; else 0 */
	int64_t at_ms;    /* RETRY: now_ms + delay_ms; else now_ms */
};

/*
 * After an attempt (the row's attempts-th earlier ones failed) ended with o.
 * wait_ms: RETRYABLE: the delay the peer asked for, or -1; NOT_ATTEMPTED:
 * when the circuit lets a probe through, relative. random() gives a uniform
 * double in [0, 1) (backoff_random in production) and is called only when a
 * backoff is computed.
 */
struct delivery_decision delivery_policy_decide(const struct delivery_policy *p,
						enum delivery_outcome o, int attempts,
						int64_t wait_ms, int64_t now_ms,
						double (*random)(void));

/* "delivered", "backoff", "retry_after", "circuit_open", "refused", "attempts_exhausted" */
const char *delivery_reason_name(enum delivery_reason r);

#endif
