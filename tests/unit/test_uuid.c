#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

START_TEST(test_v7_layout)
{
	char u[UUID_STR_LEN];

	/* 2026-11-30T12:00:00.123Z = 1796040000123 ms = 0x01a2_2c53_827b */
	uuid_new_v7_at(u, 1796040000123ULL);
	ck_assert(uuid_valid(u));
	ck_assert_int_eq(strncmp(u, "01a22c53-827b-7", 15), 0);
	ck_assert_ptr_nonnull(strchr("89ab", u[19]));
	ck_assert_uint_eq(strspn(u, "0123456789abcdef-"), 36);
}
END_TEST

/* Ids sort in the order they were made: same ms, later ms, clock stepping back. */
START_TEST(test_v7_ordered)
{
	char prev[UUID_STR_LEN], u[UUID_STR_LEN];
	uint64_t ms = 1796040000000ULL;

	uuid_new_v7_at(prev, ms);
	for (int i = 0; i < 10000; i++) {
		/* mostly the same millisecond, sometimes forward, sometimes back */
		if (i % 97 == 0)
			ms += 1;
		if (i % 501 == 0)
			ms -= 5;
		uuid_new_v7_at(u, ms);
		ck_assert_msg(strcmp(prev, u) < 0, "%s then %s", prev, u);
		memcpy(prev, u, sizeof(u));
	}
	uuid_new_v7(u);
	ck_assert(uuid_valid(u));
	ck_assert_int_eq(u[14], '7');
}
END_TEST

START_TEST(test_v7_differs)
{
	char a[UUID_STR_LEN], b[UUID_STR_LEN];

	uuid_new_v7(a);
	uuid_new_v7(b);
	ck_assert_str_ne(a, b);
	ck_assert_int_lt(strcmp(a, b), 0);
}
END_TEST

/* A child must not hand out the random bytes its parent had pooled. */
START_TEST(test_fork_does_not_repeat)
{
	char parent[UUID_STR_LEN], child[UUID_STR_LEN] = "", first[UUID_STR_LEN];
	int fds[2], status;
	pid_t pid;

	uuid_new(first); /* the pool now holds bytes for the next ids */
	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char u[UUID_STR_LEN];

		uuid_new(u);
		_exit(write(fds[1], u, sizeof(u)) == (ssize_t)sizeof(u) ? 0 : 1);
	}
	uuid_new(parent);
	ck_assert_int_eq(read(fds[0], child, sizeof(child)), (ssize_t)sizeof(child));
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(fds[0]);
	close(fds[1]);
	ck_assert(uuid_valid(child));
	ck_assert_str_ne(parent, child);
	ck_assert_str_ne(first, child);
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
	tcase_add_test(tc, test_v7_layout);
	tcase_add_test(tc, test_v7_ordered);
	tcase_add_test(tc, test_v7_differs);
	tcase_add_test(tc, test_fork_does_not_repeat);
	suite_add_tcase(s, tc);
	return s;
}
