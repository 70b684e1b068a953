#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "backoff.h"
#include "suites.h"

START_TEST(test_first_attempts_double)
{
	/* r just below 1 shows the ceiling: base, 2 base, 4 base ... */
	const double r = 0.999999;

	ck_assert_int_eq(backoff_delay_ms(200, 30000, 1, r), 199);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 2, r), 399);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 3, r), 799);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 1, 0.5), 100);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 4, 0.5), 800);
}
END_TEST

START_TEST(test_cap)
{
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 8, 0.5), 12800);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 9, 0.5), 15000);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 30, 0.5), 15000);
	/* A cap below the base wins too. */
	ck_assert_int_eq(backoff_delay_ms(500, 100, 1, 0.5), 50);
}
END_TEST

START_TEST(test_no_overflow)
{
	int attempts[] = { 62, 63, 64, 65, 1000, INT_MAX - 1, INT_MAX };
	size_t i;

	for (i = 0; i < sizeof(attempts) / sizeof(attempts[0]); i++) {
		ck_assert_int_eq(backoff_delay_ms(200, 30000, attempts[i], 0.5), 15000);
		ck_assert_int_eq(backoff_delay_ms(INT64_MAX, INT64_MAX, attempts[i], 0.0), 0);
		ck_assert_int_le(backoff_delay_ms(INT64_MAX, INT64_MAX, attempts[i], 0.9999999),
				 INT64_MAX);
		ck_assert_int_gt(backoff_delay_ms(INT64_MAX, INT64_MAX, attempts[i], 0.9999999),
				 INT64_MAX / 2);
	}
	ck_assert_int_eq(backoff_delay_ms(INT64_MAX / 2 + 1, INT64_MAX, 2, 0.5),
			 INT64_MAX / 2 + 1);
	/* The largest r below 1 against a ceiling that rounds up to 2^63 as a double. */
	ck_assert_int_lt(backoff_delay_ms(INT64_MAX, INT64_MAX, 1, nextafter(1.0, 0.0)),
			 INT64_MAX);
	ck_assert_int_gt(backoff_delay_ms(INT64_MAX, INT64_MAX, 1, nextafter(1.0, 0.0)),
			 INT64_MAX - 4096);
	ck_assert_int_lt(backoff_delay_ms(200, 30000, 1, nextafter(1.0, 0.0)), 200);
}
END_TEST

START_TEST(test_degenerate_inputs)
{
	ck_assert_int_eq(backoff_delay_ms(0, 30000, 3, 0.5), 0);
	ck_assert_int_eq(backoff_delay_ms(-5, 30000, 3, 0.5), 0);
	ck_assert_int_eq(backoff_delay_ms(INT64_MIN, 30000, INT_MAX, 0.5), 0);
	ck_assert_int_eq(backoff_delay_ms(200, 0, 3, 0.5), 0);
	ck_assert_int_eq(backoff_delay_ms(200, -1, 3, 0.5), 0);
	/* attempt 0 or below counts as the first. */
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 0, 0.5), 100);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, INT_MIN, 0.5), 100);
	/* r out of [0, 1) is clamped, NaN counts as 0. */
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 1, -0.5), 0);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 1, NAN), 0);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 1, 1.0), 200);
	ck_assert_int_eq(backoff_delay_ms(200, 30000, 1, INFINITY), 200);
}
END_TEST

START_TEST(test_random_range_and_spread)
{
	enum { N = 20000 };
	double sum = 0, lo = 1, hi = 0;
	int buckets[10] = { 0 };
	int i;

	for (i = 0; i < N; i++) {
		double r = backoff_random();

		ck_assert(r >= 0.0 && r < 1.0);
		sum += r;
		lo = r < lo ? r : lo;
		hi = r > hi ? r : hi;
		buckets[(int)(r * 10)]++;
	}
	ck_assert_double_gt(sum / N, 0.47);
	ck_assert_double_lt(sum / N, 0.53);
	ck_assert_double_lt(lo, 0.01);
	ck_assert_double_gt(hi, 0.99);
	/* Each tenth expects 2000; 1700 is far outside chance. */
	for (i = 0; i < 10; i++)
		ck_assert_int_gt(buckets[i], 1700);
}
END_TEST

Suite *backoff_suite(void)
{
	Suite *s = suite_create("backoff");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_first_attempts_double);
	tcase_add_test(tc, test_cap);
	tcase_add_test(tc, test_no_overflow);
	tcase_add_test(tc, test_degenerate_inputs);
	tcase_add_test(tc, test_random_range_and_spread);
	suite_add_tcase(s, tc);
	return s;
}
