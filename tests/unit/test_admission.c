/* Admission control's decisions (src/orchestrator/admission.h), on a fake clock. */
#include <check.h>

#include "admission.h"
#include "suites.h"

START_TEST(fixed_limit_counts_exactly)
{
	struct admission a;

	admission_init(&a, 3, 120000, 0);
	ck_assert_int_eq(admission_limit(&a), 3);
	for (int i = 0; i < 3; i++)
		ck_assert(admission_try(&a, 0));
	ck_assert(!admission_try(&a, 0));
	ck_assert_int_eq(a.refused, 1);
	/* a replay or a failed insert gives its reservation back */
	admission_settle(&a, false);
	ck_assert_int_eq(admission_inflight(&a), 2);
	ck_assert(admission_try(&a, 1));
	admission_settle(&a, true);
	admission_settle(&a, true);
	admission_settle(&a, true);
	ck_assert_int_eq(admission_inflight(&a), 3);
	ck_assert(!admission_try(&a, 2));
	/* a saga ends only when its terminal transition committed */
	admission_end_begin(&a);
	admission_end_done(&a, false);
	ck_assert(!admission_try(&a, 3));
	admission_end_begin(&a);
	admission_end_done(&a, true);
	ck_assert_int_eq(admission_inflight(&a), 2);
	ck_assert(admission_try(&a, 4));
}
END_TEST

START_TEST(zero_turns_it_off)
{
	struct admission a;

	admission_init(&a, 0, 120000, 0);
	for (int i = 0; i < 100000; i++)
		ck_assert(admission_try(&a, i));
	ck_assert_int_eq(admission_limit(&a), 0);
	ck_assert_int_eq(admission_inflight(&a), 100000);
	ck_assert_int_eq(a.refused, 0);
}
END_TEST

START_TEST(count_from_database_when_quiet)
{
	struct admission a;

	admission_init(&a, 5, 120000, 0);
	/* at start: the database holds 5 in flight (another instance, or before a restart) */
	admission_count_sent(&a, 0);
	admission_refreshed(&a, 5, 5, 0, true);
	ck_assert_int_eq(admission_inflight(&a), 5);
	ck_assert(!admission_try(&a, 10));
	/* two ended elsewhere */
	admission_count_sent(&a, 200);
	admission_refreshed(&a, 205, 3, 0, false);
	ck_assert(admission_try(&a, 210));
	ck_assert(admission_try(&a, 210));
	ck_assert(!admission_try(&a, 210));
}
END_TEST

START_TEST(count_explained_by_local_changes_is_ignored)
{
	struct admission a;

	admission_init(&a, 4, 120000, 0);
	for (int i = 0; i < 3; i++) {
		ck_assert(admission_try(&a, 0));
		admission_settle(&a, true);
	}
	/* one start on its way while the count runs: the count may or may not see it */
	ck_assert(admission_try(&a, 0));
	admission_count_sent(&a, 0);
	admission_settle(&a, true); /* it committed before the snapshot... */
	admission_refreshed(&a, 5, 4, 0, true);
	ck_assert_int_eq(admission_inflight(&a), 4); /* ...and is not counted twice */
	/* a count that differs by more than what was on its way replaces the figure */
	admission_count_sent(&a, 200);
	admission_refreshed(&a, 205, 10, 0, false);
	ck_assert_int_eq(admission_inflight(&a), 10);
	/* a count answered after an end: the end counts as after the snapshot */
	admission_count_sent(&a, 400);
	admission_end_begin(&a);
	admission_end_done(&a, true);
	admission_refreshed(&a, 405, 20, 0, false);
	ck_assert_int_eq(admission_inflight(&a), 19);
}
END_TEST

/*
 * A simulated deployment that finishes min(per_slot * L, cap) sagas a
 * second with L in flight, offered more than it finishes: the limit is what
 * the deployment actually does.
 */
struct sim {
	struct admission a;
	int64_t now, created, inflight;
	double owed;
};

static void sim_run(struct sim *s, double per_slot, double cap, int seconds)
{
	for (int step = 0; step < seconds * 1000 / ADMISSION_REFRESH_MS; step++) {
		for (int i = 0; i < 1000000 && admission_try(&s->a, s->now); i++) {
			admission_settle(&s->a, true);
			s->created++;
			s->inflight++;
		}
		double rate = per_slot * (double)s->inflight;

		s->owed += (rate < cap ? rate : cap) * ADMISSION_REFRESH_MS / 1000.0;
		while (s->owed >= 1 && s->inflight > 0) {
			admission_end_begin(&s->a);
			admission_end_done(&s->a, true);
			s->inflight--;
			s->owed -= 1;
		}
		admission_count_sent(&s->a, s->now);
		admission_refreshed(&s->a, s->now + 1, s->inflight, s->created, step == 0);
		s->now += ADMISSION_REFRESH_MS;
	}
}

START_TEST(adaptive_limit_finds_the_knee)
{
	struct sim s = { 0 };

	/* a saga takes 500 ms up to 100 sagas/s: the knee is at 50 in flight */
	admission_init(&s.a, -1, 120000, 0);
	ck_assert_int_eq(admission_limit(&s.a), ADMISSION_START_LIMIT);
	sim_run(&s, 2, 100, 120);
	ck_assert_msg(admission_limit(&s.a) >= 45 && admission_limit(&s.a) <= 100, "limit %lld",
		      (long long)admission_limit(&s.a));
	ck_assert(s.a.refused > 0);
	/* a faster deployment: the knee moves to 150 */
	sim_run(&s, 2, 300, 120);
	ck_assert_msg(admission_limit(&s.a) >= 130 && admission_limit(&s.a) <= 300, "limit %lld",
		      (long long)admission_limit(&s.a));
	/* a slower one: back to 25 */
	sim_run(&s, 2, 50, 120);
	ck_assert_msg(admission_limit(&s.a) >= 22 && admission_limit(&s.a) <= 60, "limit %lld",
		      (long long)admission_limit(&s.a));
}
END_TEST

START_TEST(deadline_caps_the_limit)
{
	struct sim s = { 0 };

	/*
	 * 1 s step deadline, 100 sagas/s at most, each taking 100 ms: the knee
	 * (10 in flight) is below the floor, and a quarter of the deadline at
	 * the rate reached holds no more than 25
	 */
	admission_init(&s.a, -1, 1000, 0);
	sim_run(&s, 10, 100, 60);
	ck_assert_int_le(admission_limit(&s.a), 25);
	ck_assert_int_ge(admission_limit(&s.a), ADMISSION_FLOOR);
}
END_TEST

START_TEST(limit_stays_without_demand)
{
	struct admission a;

	admission_init(&a, -1, 120000, 0);
	/* 5 in flight, well below the limit, for a minute: nothing to learn */
	for (int i = 0; i < 5; i++) {
		ck_assert(admission_try(&a, 0));
		admission_settle(&a, true);
	}
	for (int64_t t = 0; t < 60000; t += ADMISSION_REFRESH_MS) {
		admission_count_sent(&a, t);
		admission_refreshed(&a, t, 5, t / 10, t == 0);
	}
	ck_assert_int_eq(admission_limit(&a), ADMISSION_START_LIMIT);
}
END_TEST

START_TEST(retry_after_is_whole_seconds)
{
	struct admission a;

	admission_init(&a, 1, 120000, 0);
	ck_assert(admission_try(&a, 0));
	ck_assert(!admission_try(&a, 1));
	ck_assert_int_eq(admission_retry_after_s(&a), 1);
	/* far over the limit and nothing finishing: at most 30 s */
	admission_count_sent(&a, 0);
	admission_settle(&a, true);
	admission_refreshed(&a, 1, 100000, 0, true);
	ck_assert_int_eq(admission_retry_after_s(&a), 30);
}
END_TEST

Suite *admission_suite(void)
{
	Suite *s = suite_create("admission");
	TCase *tc = tcase_create("admission");

	tcase_add_test(tc, fixed_limit_counts_exactly);
	tcase_add_test(tc, zero_turns_it_off);
	tcase_add_test(tc, count_from_database_when_quiet);
	tcase_add_test(tc, count_explained_by_local_changes_is_ignored);
	tcase_add_test(tc, adaptive_limit_finds_the_knee);
	tcase_add_test(tc, deadline_caps_the_limit);
	tcase_add_test(tc, limit_stays_without_demand);
	tcase_add_test(tc, retry_after_is_whole_seconds);
	suite_add_tcase(s, tc);
	return s;
}
