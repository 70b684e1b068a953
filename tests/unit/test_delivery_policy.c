/* The outbox's delivery policy, every branch, with a fake clock and jitter. */
#include <check.h>

#include "delivery_policy.h"
#include "suites.h"

static const struct delivery_policy policy = { .max_attempts = 5, .base_ms = 100, .cap_ms = 1000 };
static int draws;

/* Pinned jitter: half the ceiling. Counts the draws. */
static double half(void)
{
	draws++;
	return 0.5;
}

static struct delivery_decision decide(enum delivery_outcome o, int attempts, int64_t wait_ms)
{
	draws = 0;
	return delivery_policy_decide(&policy, o, attempts, wait_ms, 10000, half);
}

START_TEST(http_statuses_classified)
{
	ck_assert_int_eq(delivery_policy_http(200), DELIVERY_OK);
	ck_assert_int_eq(delivery_policy_http(204), DELIVERY_OK);
	ck_assert_int_eq(delivery_policy_http(299), DELIVERY_OK);
	/* no answer: a timeout or a connection error */
	ck_assert_int_eq(delivery_policy_http(0), DELIVERY_RETRYABLE);
	ck_assert_int_eq(delivery_policy_http(500), DELIVERY_RETRYABLE);
	ck_assert_int_eq(delivery_policy_http(503), DELIVERY_RETRYABLE);
	ck_assert_int_eq(delivery_policy_http(408), DELIVERY_RETRYABLE);
	ck_assert_int_eq(delivery_policy_http(429), DELIVERY_RETRYABLE);
	ck_assert_int_eq(delivery_policy_http(400), DELIVERY_REFUSED);
	ck_assert_int_eq(delivery_policy_http(401), DELIVERY_REFUSED);
	ck_assert_int_eq(delivery_policy_http(404), DELIVERY_REFUSED);
	ck_assert_int_eq(delivery_policy_http(409), DELIVERY_REFUSED);
	ck_assert_int_eq(delivery_policy_http(302), DELIVERY_REFUSED);
	ck_assert_int_eq(delivery_policy_http(100), DELIVERY_REFUSED);
}
END_TEST

/* Only the peer's own trouble counts against its circuit. */
START_TEST(breaker_counts_only_retryable)
{
	ck_assert(delivery_policy_breaker_ok(DELIVERY_OK));
	ck_assert(delivery_policy_breaker_ok(DELIVERY_REFUSED));
	ck_assert(!delivery_policy_breaker_ok(DELIVERY_RETRYABLE));
	ck_assert(!delivery_policy_breaker_ok(delivery_policy_http(0)));
	ck_assert(delivery_policy_breaker_ok(delivery_policy_http(404)));
}
END_TEST

START_TEST(ok_is_done)
{
	struct delivery_decision d = decide(DELIVERY_OK, 3, -1);

	ck_assert_int_eq(d.next, DELIVERY_DONE);
	ck_assert_int_eq(d.reason, DELIVERY_DELIVERED);
	ck_assert_int_eq(d.delay_ms, 0);
	ck_assert_int_eq(draws, 0);
}
END_TEST

/* Backoff with full jitter: attempt n waits r * min(cap, base * 2^(n-1)). */
START_TEST(retryable_backs_off)
{
	struct delivery_decision d = decide(DELIVERY_RETRYABLE, 0, -1);

	ck_assert_int_eq(d.next, DELIVERY_RETRY);
	ck_assert_int_eq(d.reason, DELIVERY_BACKOFF);
	ck_assert_int_eq(d.attempts, 1);
	ck_assert_int_eq(d.delay_ms, 50);
	ck_assert_int_eq(d.at_ms, 10050);
	ck_assert_int_eq(draws, 1);
	d = decide(DELIVERY_RETRYABLE, 2, -1); /* third attempt: ceiling 400 */
	ck_assert_int_eq(d.delay_ms, 200);
	d = decide(DELIVERY_RETRYABLE, 3, -1); /* fourth: 800 */
	ck_assert_int_eq(d.delay_ms, 400);
	ck_assert_str_eq(delivery_reason_name(d.reason), "backoff");
}
END_TEST

/* The peer's Retry-After replaces the backoff, capped; 0 is a valid wait. */
START_TEST(retry_after_replaces_backoff)
{
	struct delivery_decision d = decide(DELIVERY_RETRYABLE, 0, 300);

	ck_assert_int_eq(d.next, DELIVERY_RETRY);
	ck_assert_int_eq(d.reason, DELIVERY_PEER_ASKED);
	ck_assert_int_eq(d.delay_ms, 300);
	ck_assert_int_eq(d.at_ms, 10300);
	ck_assert_int_eq(draws, 0);
	d = decide(DELIVERY_RETRYABLE, 1, 86400000);
	ck_assert_int_eq(d.delay_ms, 1000);
	d = decide(DELIVERY_RETRYABLE, 1, 0);
	ck_assert_int_eq(d.reason, DELIVERY_PEER_ASKED);
	ck_assert_int_eq(d.delay_ms, 0);
	ck_assert_int_eq(d.at_ms, 10000);
	ck_assert_str_eq(delivery_reason_name(d.reason), "retry_after");
}
END_TEST

/* The attempt numbered max_attempts failing makes a dead letter, Retry-After or not. */
START_TEST(last_attempt_is_dead)
{
	struct delivery_decision d = decide(DELIVERY_RETRYABLE, 3, -1);

	ck_assert_int_eq(d.next, DELIVERY_RETRY);
	d = decide(DELIVERY_RETRYABLE, 4, -1);
	ck_assert_int_eq(d.next, DELIVERY_DEAD);
	ck_assert_int_eq(d.reason, DELIVERY_EXHAUSTED);
	ck_assert_int_eq(d.attempts, 1);
	ck_assert_int_eq(d.delay_ms, 0);
	ck_assert_int_eq(draws, 0);
	d = decide(DELIVERY_RETRYABLE, 40, 100);
	ck_assert_int_eq(d.next, DELIVERY_DEAD);
	ck_assert_str_eq(delivery_reason_name(d.reason), "attempts_exhausted");
}
END_TEST

/* A refusal is dead at once, whatever attempts remain or the peer asks. */
START_TEST(refused_is_dead_at_once)
{
	struct delivery_decision d = decide(DELIVERY_REFUSED, 0, 100);

	ck_assert_int_eq(d.next, DELIVERY_DEAD);
	ck_assert_int_eq(d.reason, DELIVERY_REFUSAL);
	ck_assert_int_eq(d.attempts, 1);
	ck_assert_int_eq(draws, 0);
	ck_assert_str_eq(delivery_reason_name(d.reason), "refused");
}
END_TEST

/* An open circuit: not an attempt, put off until it lets a probe through, never dead. */
START_TEST(circuit_open_is_not_an_attempt)
{
	struct delivery_decision d = decide(DELIVERY_NOT_ATTEMPTED, 4, 700);

	ck_assert_int_eq(d.next, DELIVERY_RETRY);
	ck_assert_int_eq(d.reason, DELIVERY_CIRCUIT_OPEN);
	ck_assert_int_eq(d.attempts, 0);
	ck_assert_int_eq(d.delay_ms, 700); /* not capped: the circuit's own wait */
	ck_assert_int_eq(d.at_ms, 10700);
	ck_assert_int_eq(draws, 0);
	d = decide(DELIVERY_NOT_ATTEMPTED, 100, 5000);
	ck_assert_int_eq(d.next, DELIVERY_RETRY);
	ck_assert_int_eq(d.delay_ms, 5000);
	d = decide(DELIVERY_NOT_ATTEMPTED, 0, -1);
	ck_assert_int_eq(d.delay_ms, 0);
	ck_assert_str_eq(delivery_reason_name(d.reason), "circuit_open");
}
END_TEST

/* A policy allowing one attempt dead-letters the first failure. */
START_TEST(single_attempt_policy)
{
	const struct delivery_policy once = { .max_attempts = 1, .base_ms = 100, .cap_ms = 1000 };
	struct delivery_decision d =
		delivery_policy_decide(&once, DELIVERY_RETRYABLE, 0, -1, 0, half);

	ck_assert_int_eq(d.next, DELIVERY_DEAD);
	ck_assert_int_eq(d.reason, DELIVERY_EXHAUSTED);
	ck_assert_str_eq(delivery_reason_name(DELIVERY_DELIVERED), "delivered");
}
END_TEST

Suite *delivery_policy_suite(void)
{
	Suite *s = suite_create("delivery_policy");
	TCase *tc = tcase_create("decide");

	tcase_add_test(tc, http_statuses_classified);
	tcase_add_test(tc, breaker_counts_only_retryable);
	tcase_add_test(tc, ok_is_done);
	tcase_add_test(tc, retryable_backs_off);
	tcase_add_test(tc, retry_after_replaces_backoff);
	tcase_add_test(tc, last_attempt_is_dead);
	tcase_add_test(tc, refused_is_dead_at_once);
	tcase_add_test(tc, circuit_open_is_not_an_attempt);
	tcase_add_test(tc, single_attempt_policy);
	suite_add_tcase(s, tc);
	return s;
}
