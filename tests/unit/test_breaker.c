/* The circuit breaker, driven by a fake clock. */
#include <check.h>

#include "breaker.h"
#include "suites.h"

START_TEST(breaker_opens_after_threshold)
{
	struct breaker b;

	breaker_init(&b, 3, 1000);
	for (int i = 0; i < 2; i++) {
		ck_assert(breaker_allow(&b, 0));
		breaker_report(&b, false, 0);
	}
	ck_assert_int_eq(b.state, BREAKER_CLOSED);
	ck_assert(breaker_allow(&b, 0));
	breaker_report(&b, false, 10);
	ck_assert_int_eq(b.state, BREAKER_OPEN);
	ck_assert(!breaker_allow(&b, 500));
	ck_assert_int_eq(breaker_retry_at(&b, 500), 1010);
}
END_TEST

START_TEST(breaker_success_resets_count)
{
	struct breaker b;

	breaker_init(&b, 2, 1000);
	breaker_report(&b, false, 0);
	breaker_report(&b, true, 0);
	breaker_report(&b, false, 0);
	ck_assert_int_eq(b.state, BREAKER_CLOSED);
}
END_TEST

/* Half-open lets exactly one probe through; its outcome decides. */
START_TEST(breaker_half_open_single_probe)
{
	struct breaker b;

	breaker_init(&b, 1, 100);
	breaker_report(&b, false, 0);
	ck_assert(!breaker_allow(&b, 99));
	ck_assert(breaker_allow(&b, 100));
	ck_assert_int_eq(b.state, BREAKER_HALF_OPEN);
	ck_assert(!breaker_allow(&b, 101));
	breaker_report(&b, false, 150);
	ck_assert_int_eq(b.state, BREAKER_OPEN);
	ck_assert(!breaker_allow(&b, 200));
	ck_assert(breaker_allow(&b, 250));
	breaker_report(&b, true, 260);
	ck_assert_int_eq(b.state, BREAKER_CLOSED);
	ck_assert(breaker_allow(&b, 261));
	ck_assert(breaker_allow(&b, 261));
}
END_TEST

/* The names the admin API shows, an open breaker past its wait included. */
START_TEST(breaker_state_names)
{
	struct breaker b;

	breaker_init(&b, 2, 1000);
	ck_assert_str_eq(breaker_state_name(&b, 0), "closed");
	breaker_report(&b, false, 10);
	ck_assert_str_eq(breaker_state_name(&b, 10), "closed");
	breaker_report(&b, false, 20);
	ck_assert_str_eq(breaker_state_name(&b, 20), "open");
	ck_assert_str_eq(breaker_state_name(&b, 1019), "open");
	ck_assert_str_eq(breaker_state_name(&b, 1020), "half_open"); /* the next one probes */
	ck_assert(breaker_allow(&b, 1020));
	ck_assert_str_eq(breaker_state_name(&b, 1020), "half_open");
	breaker_report(&b, true, 1030);
	ck_assert_str_eq(breaker_state_name(&b, 1030), "closed");
}
END_TEST

Suite *breaker_suite(void)
{
	Suite *s = suite_create("breaker");
	TCase *tc = tcase_create("states");

	tcase_add_test(tc, breaker_opens_after_threshold);
	tcase_add_test(tc, breaker_success_resets_count);
	tcase_add_test(tc, breaker_half_open_single_probe);
	tcase_add_test(tc, breaker_state_names);
	suite_add_tcase(s, tc);
	return s;
}
