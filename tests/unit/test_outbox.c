/* outbox_marks_sql: the variant of a write statement that carries delivery marks. */
#include <stdlib.h>
#include <string.h>

#include "outbox.h"
#include "suites.h"

static void expect(const char *sql, int param, const char *want)
{
	char *got = outbox_marks_sql(sql, param);

	ck_assert_ptr_nonnull(got);
	ck_assert_str_eq(got, want);
	free(got);
}

START_TEST(test_select_gets_the_cte_in_front)
{
	expect("SELECT * FROM handle_pay($1, $2)", 3,
	       "WITH ack AS (UPDATE outbox_messages SET processed_at = now(), last_error = NULL"
	       " WHERE message_id = ANY ($3::uuid[]) AND processed_at IS NULL)"
	       " SELECT * FROM handle_pay($1, $2)");
	expect("  select 1", 15,
	       "WITH ack AS (UPDATE outbox_messages SET processed_at = now(), last_error = NULL"
	       " WHERE message_id = ANY ($15::uuid[]) AND processed_at IS NULL) select 1");
}
END_TEST

START_TEST(test_with_is_spliced)
{
	/* one WITH: the mark is the first of the statement's CTEs */
	expect("WITH rec AS (INSERT INTO t VALUES ($1) RETURNING *) SELECT * FROM rec", 2,
	       "WITH ack AS (UPDATE outbox_messages SET processed_at = now(), last_error = NULL"
	       " WHERE message_id = ANY ($2::uuid[]) AND processed_at IS NULL),"
	       " rec AS (INSERT INTO t VALUES ($1) RETURNING *) SELECT * FROM rec");
	expect("with\n a AS (SELECT 1) SELECT * FROM a", 1,
	       "WITH ack AS (UPDATE outbox_messages SET processed_at = now(), last_error = NULL"
	       " WHERE message_id = ANY ($1::uuid[]) AND processed_at IS NULL),"
	       " a AS (SELECT 1) SELECT * FROM a");
}
END_TEST

START_TEST(test_others_carry_no_marks)
{
	ck_assert_ptr_null(outbox_marks_sql("UPDATE t SET x = 1", 1));
	ck_assert_ptr_null(outbox_marks_sql("WITH RECURSIVE r AS (SELECT 1) SELECT * FROM r", 1));
	ck_assert_ptr_null(outbox_marks_sql("SELECTx", 1));
	ck_assert_ptr_null(outbox_marks_sql("WITHOUT", 1));
	ck_assert_ptr_null(outbox_marks_sql("", 1));
	/* never the asynchronous commit of outbox_ack: the marks commit with the caller */
	char *v = outbox_marks_sql("SELECT 1", 1);
	ck_assert_ptr_nonnull(v);
	ck_assert_ptr_null(strstr(v, "synchronous_commit"));
	ck_assert_ptr_null(strstr(v, "outbox_ack"));
	free(v);
}
END_TEST

Suite *outbox_suite(void)
{
	Suite *s = suite_create("outbox");
	TCase *tc = tcase_create("marks_sql");

	tcase_add_test(tc, test_select_gets_the_cte_in_front);
	tcase_add_test(tc, test_with_is_spliced);
	tcase_add_test(tc, test_others_carry_no_marks);
	suite_add_tcase(s, tc);
	return s;
}
