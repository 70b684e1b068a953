#include <stdio.h>
#include <string.h>

#include "mq_nodes.h"
#include "suites.h"

START_TEST(test_one_url)
{
	struct mq_nodes ns;
	char err[200] = "";

	ck_assert_int_eq(mq_nodes_parse(&ns, "amqp://u:p@rabbit:5673/v", err, sizeof(err)), 0);
	ck_assert_uint_eq(ns.n, 1);
	ck_assert_str_eq(ns.ci[0].host, "rabbit");
	ck_assert_int_eq(ns.ci[0].port, 5673);
	ck_assert_str_eq(ns.ci[0].user, "u");
	ck_assert_str_eq(ns.ci[0].password, "p");
	ck_assert_str_eq(ns.ci[0].vhost, "v");
	ck_assert_str_eq(ns.name[0], "rabbit:5673");
	ck_assert_int_eq(mq_nodes_group_size(&ns), 1);
	ck_assert_uint_eq(mq_nodes_next(&ns, 0), 0);
	mq_nodes_free(&ns);
}
END_TEST

START_TEST(test_three_nodes_round)
{
	struct mq_nodes ns;
	char err[200] = "";

	ck_assert_int_eq(mq_nodes_parse(&ns,
					"amqp://g:g@10.77.0.1:5672/%2f, amqp://g:g@10.77.0.2:5672/%2f"
					",amqp://g:g@10.77.0.3/%2f",
					err, sizeof(err)),
			 0);
	ck_assert_uint_eq(ns.n, 3);
	ck_assert_str_eq(ns.name[0], "10.77.0.1:5672");
	ck_assert_str_eq(ns.name[1], "10.77.0.2:5672");
	ck_assert_str_eq(ns.name[2], "10.77.0.3:5672"); /* the default port */
	ck_assert_str_eq(ns.ci[2].vhost, "/");
	ck_assert_int_eq(mq_nodes_group_size(&ns), 3);
	ck_assert_uint_eq(mq_nodes_next(&ns, 0), 1);
	ck_assert_uint_eq(mq_nodes_next(&ns, 2), 0);
	mq_nodes_free(&ns);
}
END_TEST

START_TEST(test_group_size_capped)
{
	struct mq_nodes ns;
	char err[200] = "", urls[600] = "";

	for (int i = 1; i <= 7; i++) {
		char one[64];

		snprintf(one, sizeof(one), "%samqp://h%d:5672", i > 1 ? "," : "", i);
		strcat(urls, one);
	}
	ck_assert_int_eq(mq_nodes_parse(&ns, urls, err, sizeof(err)), 0);
	ck_assert_uint_eq(ns.n, 7);
	ck_assert_int_eq(mq_nodes_group_size(&ns), 5);
	mq_nodes_free(&ns);
}
END_TEST

START_TEST(test_password_with_a_comma)
{
	struct mq_nodes ns;
	char err[200] = "";

	ck_assert_int_eq(mq_nodes_parse(&ns, "amqp://u:a%2Cb@h1,amqp://u:a%2Cb@h2", err, sizeof(err)),
			 0);
	ck_assert_uint_eq(ns.n, 2);
	ck_assert_str_eq(ns.ci[1].password, "a,b");
	mq_nodes_free(&ns);
}
END_TEST

START_TEST(test_refused)
{
	static const char *const bad[] = {
		"",
		"amqp://h1,",                      /* an empty node */
		"amqp://h1,,amqp://h2",            /* an empty node */
		"amqp://h1,h2:5672",               /* each node is a URL */
		"http://h1",
		"amqp://h1/a,amqp://h2/b",         /* one cluster, one vhost */
		"amqp://h\"1:5672",                /* not a host name */
	};
	struct mq_nodes ns;
	char err[200];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_msg(mq_nodes_parse(&ns, bad[i], err, sizeof(err)) != 0, "%s", bad[i]);
		ck_assert_msg(strncmp(err, "AMQP_URL: ", 10) == 0, "%s: %s", bad[i], err);
		ck_assert_ptr_null(ns.buf);
	}
}
END_TEST

START_TEST(test_too_many)
{
	struct mq_nodes ns;
	char err[200] = "", urls[2000] = "";

	for (int i = 0; i <= MQ_NODES_MAX; i++)
		strcat(urls, i ? ",amqp://h" : "amqp://h");
	ck_assert_int_ne(mq_nodes_parse(&ns, urls, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(strstr(err, "more than"));
}
END_TEST

Suite *mq_nodes_suite(void)
{
	Suite *s = suite_create("mq_nodes");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_one_url);
	tcase_add_test(tc, test_three_nodes_round);
	tcase_add_test(tc, test_group_size_capped);
	tcase_add_test(tc, test_password_with_a_comma);
	tcase_add_test(tc, test_refused);
	tcase_add_test(tc, test_too_many);
	suite_add_tcase(s, tc);
	return s;
}
