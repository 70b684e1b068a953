#include <string.h>

#include "suites.h"
#include "uuid.h"

START_TEST(test_new_is_v4)
{
	int i;

	for (i = 0; i < 200; i++) {
		char u[UUID_STR_LEN];

		uuid_new(u);
		ck_assert_uint_eq(strlen(u), 36);
		ck_assert(uuid_valid(u));
		ck_assert_int_eq(u[14], '4');
		ck_assert_ptr_nonnull(strchr("89ab", u[19]));
		/* Lowercase only. */
		ck_assert_uint_eq(strspn(u, "0123456789abcdef-"), 36);
	}
}
END_TEST

START_TEST(test_new_differs)
{
	char a[UUID_STR_LEN], b[UUID_STR_LEN];

	uuid_new(a);
	uuid_new(b);
	ck_assert_str_ne(a, b);
}
END_TEST

START_TEST(test_valid_accepts)
{
	ck_assert(uuid_valid("123e4567-e89b-12d3-a456-426614174000"));
	ck_assert(uuid_valid("123E4567-E89B-12D3-A456-426614174000"));
	ck_assert(uuid_valid("00000000-0000-0000-0000-000000000000"));
	ck_assert(uuid_valid("FFFFFFFF-ffff-FfFf-fFfF-ffffffffffff"));
}
END_TEST

START_TEST(test_valid_rejects)
{
	static const char *const bad[] = {
		"",
		"123e4567-e89b-12d3-a456-42661417400",   /* 35 */
		"123e4567-e89b-12d3-a456-4266141740000", /* 37 */
		"123e4567-e89b-12d3-a456-426614174000\n",
		" 123e4567-e89b-12d3-a456-426614174000",
		"123e4567e89b12d3a456426614174000",
		"123e4567-e89b-12d3-a456_426614174000",
		"123e456-7e89b-12d3-a456-426614174000",
		"123e4567-e89b-12d3-a456-42661417400g",
		"{123e4567-e89b-12d3-a456-426614174000}",
		"123e4567-e89b-12d3-a456-4266141740-0",
		"--------------------------------0000",
		"g23e4567-e89b-12d3-a456-426614174000",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!uuid_valid(bad[i]), "accepted '%s'", bad[i]);
	ck_assert(!uuid_valid(NULL));
}
END_TEST

Suite *uuid_suite(void)
{
	Suite *s = suite_create("uuid");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_new_is_v4);
	tcase_add_test(tc, test_new_differs);
	tcase_add_test(tc, test_valid_accepts);
	tcase_add_test(tc, test_valid_rejects);
	suite_add_tcase(s, tc);
	return s;
}
