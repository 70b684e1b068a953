/* traceparent: reading a W3C traceparent, and the one sent on to the next hop. */
#include <check.h>
#include <string.h>

#include "suites.h"
#include "traceparent.h"

#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"

START_TEST(parse_forms)
{
	char id[TRACE_ID_LEN];

	ck_assert(traceparent_parse("00-" TRACE "-00f067aa0ba902b7-01", id));
	ck_assert_str_eq(id, TRACE);
	ck_assert(!traceparent_parse(NULL, id));
	ck_assert(!traceparent_parse("", id));
	ck_assert(!traceparent_parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01", id));
	ck_assert(!traceparent_parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", id));
	ck_assert(!traceparent_parse("00-" TRACE "-00f067aa0ba902b7-0", id));
	ck_assert(!traceparent_parse("00-" TRACE "-00f067aa0ba902b7-01x", id));
	ck_assert(!traceparent_parse("00_" TRACE "-00f067aa0ba902b7-01", id));
	ck_assert(!traceparent_parse("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", id));
	ck_assert(!traceparent_parse("00-" TRACE "-00f067aa0ba902bG-01", id));
	ck_assert(!traceparent_parse("0g-" TRACE "-00f067aa0ba902b7-01", id));
}
END_TEST

START_TEST(build_next_hop)
{
	char a[TRACEPARENT_LEN], b[TRACEPARENT_LEN], id[TRACE_ID_LEN];

	ck_assert(traceparent_build(TRACE, a));
	ck_assert_uint_eq(strlen(a), TRACEPARENT_LEN - 1);
	ck_assert(strncmp(a, "00-" TRACE "-", 36) == 0);
	ck_assert_str_eq(a + 52, "-01");
	/* what is sent is read back as the same trace */
	ck_assert(traceparent_parse(a, id));
	ck_assert_str_eq(id, TRACE);
	/* each hop its own parent id */
	ck_assert(traceparent_build(TRACE, b));
	ck_assert(strcmp(a + 36, b + 36) != 0);
}
END_TEST

START_TEST(build_refuses_what_parse_refuses)
{
	char out[TRACEPARENT_LEN];

	ck_assert(!traceparent_build(NULL, out));
	ck_assert(!traceparent_build("", out));
	ck_assert(!traceparent_build("4bf92f3577b34da6a3ce929d0e0e473", out));
	ck_assert(!traceparent_build(TRACE "0", out));
	ck_assert(!traceparent_build("4BF92F3577B34DA6A3CE929D0E0E4736", out));
	ck_assert(!traceparent_build("00000000000000000000000000000000", out));
}
END_TEST

START_TEST(new_trace_ids)
{
	char a[TRACE_ID_LEN], b[TRACE_ID_LEN], tp[TRACEPARENT_LEN], back[TRACE_ID_LEN];

	trace_id_new(a);
	trace_id_new(b);
	ck_assert_uint_eq(strlen(a), TRACE_ID_LEN - 1);
	ck_assert_str_ne(a, b);
	ck_assert(traceparent_build(a, tp));
	ck_assert(traceparent_parse(tp, back));
	ck_assert_str_eq(back, a);
}
END_TEST

Suite *traceparent_suite(void)
{
	Suite *s = suite_create("traceparent");
	TCase *tc = tcase_create("forms");

	tcase_add_test(tc, parse_forms);
	tcase_add_test(tc, build_next_hop);
	tcase_add_test(tc, build_refuses_what_parse_refuses);
	tcase_add_test(tc, new_trace_ids);
	suite_add_tcase(s, tc);
	return s;
}
