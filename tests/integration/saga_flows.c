/*
 * The saga itself: an order runs through payment and inventory to
 * Completed, Failed or Compensated, each effect exactly once; a refund is
 * never paid twice; a step past its deadline compensates; and the trace of
 * the order follows it through every service's log.
 */
#include <check.h>
#include <json-c/json.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "jsonx.h"
#include "suites.h"
#include "uuid.h"

/* One statement on c, which must succeed; its first value compared with want. */
static void pq_expect(PGconn *c, const char *sql, const char *want)
{
	PGresult *res = PQexec(c, sql);

	ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK || PQresultStatus(res) == PGRES_COMMAND_OK,
		      "%s: %s", sql, PQerrorMessage(c));
	if (want)
		ck_assert_str_eq(PQgetvalue(res, 0, 0), want);
	PQclear(res);
}

/* Lines of a JSON log whose traceId is trace. */
static int lines_with_trace(const char *log, const char *trace)
{
	int n = 0;
	char *copy = strdup(log), *save = NULL;

	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char err[64];
		struct json_object *o = jsonx_parse(line, strlen(line), err, sizeof(err)), *v;

		ck_assert_msg(o != NULL, "log line is not JSON: %s", line);
		if (json_object_object_get_ex(o, "traceId", &v) &&
		    strcmp(json_object_get_string(v), trace) == 0)
			n++;
		json_object_put(o);
	}
	free(copy);
	return n;
}

START_TEST(happy_path)
{
	char saga[UUID_STR_LEN], path[64];
	struct http_resp r;

	env_start_all(&env);
	seed_stock("A001", 5);
	env_new_order(&env, "c-1", "A001", 2, 1200, saga);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM payment.payments WHERE saga_id = '%s'"
				" AND status = 'captured' AND amount = 1200", saga), 1);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM inventory.reservations WHERE saga_id = '%s'"
				" AND status = 'reserved' AND qty = 2", saga), 1);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT available FROM inventory.stock WHERE item_id = '%s'",
				"A001"), 3);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-1"), 1000000 - 1200);
	/* opened by this first payment, already charged (handle_pay) */
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT starting_balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-1"), 1000000);

	snprintf(path, sizeof(path), "/orders/%s", saga);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", path, NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	struct json_object *o = parse_body(&r), *h, *v;
	ck_assert_str_eq(jstr(o, "state"), "Completed");
	ck_assert(json_object_object_get_ex(o, "version", &v));
	ck_assert_int_eq(json_object_get_int(v), 3);
	ck_assert(json_object_object_get_ex(o, "qty", &v) && json_object_is_type(v, json_type_int));
	ck_assert(json_object_object_get_ex(o, "history", &h));
	ck_assert_int_eq(json_object_array_length(h), 3);
	struct json_object *first = json_object_array_get_idx(h, 0);
	ck_assert(json_object_object_get_ex(first, "fromState", &v) && v == NULL);
	ck_assert_str_eq(jstr(first, "toState"), "PendingPayment");
	ck_assert_str_eq(jstr(first, "cause"), "OrderPlaced");
	ck_assert_str_eq(jstr(json_object_array_get_idx(h, 2), "cause"), "InventoryReserved");
	ck_assert(strlen(jstr(o, "createdAt")) > 20 && jstr(o, "createdAt")[10] == 'T');
	json_object_put(o);
	http_resp_free(&r);
}
END_TEST

START_TEST(decline_fails)
{
	char saga[UUID_STR_LEN];

	env_start_all(&env);
	seed_stock("A001", 5);
	env_new_order(&env, "poor", "A001", 1, 1000001, saga); /* default credit is 1000000 */
	ck_assert(wait_state(saga, "Failed"));
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM payment.payments WHERE saga_id = '%s'"
				" AND status = 'declined'", saga), 1);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM inventory.reservations WHERE saga_id = '%s'",
				saga), 0);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"poor"), 1000000);
}
END_TEST

/*
 * Two first payments of one customer at once (handle_pay):
 * the second's charge finds no account (the first's is not committed), its
 * insert waits for the first's and then finds the account there, so it must
 * charge once more, with a snapshot that sees it, instead of declining.
 */
START_TEST(first_payments_of_a_customer_race)
{
	static const char pay[] = "SELECT result FROM payment.handle_pay(gen_random_uuid(),"
				  " gen_random_uuid(), 'c-race', %d, 1000, NULL, 0)";
	char sql[200];

	env_start(&env, SVC_PAY, NULL); /* migrates; stopped so nothing is sent */
	env_stop(&env, SVC_PAY, SIGTERM);
	PGconn *a = PQconnectdb(env.admin_url), *b = PQconnectdb(env.admin_url);
	ck_assert_int_eq(PQstatus(a), CONNECTION_OK);
	ck_assert_int_eq(PQstatus(b), CONNECTION_OK);
	pq_expect(a, "SET pgsaga.writer = service", NULL); /* a charge, not a top-up */
	pq_expect(b, "SET pgsaga.writer = service", NULL);
	pq_expect(a, "BEGIN", NULL);
	snprintf(sql, sizeof(sql), pay, 300);
	pq_expect(a, sql, "PaymentSucceeded");
	snprintf(sql, sizeof(sql), pay, 500);
	ck_assert_int_eq(PQsendQuery(b, sql), 1);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM pg_stat_activity"
				     " WHERE wait_event_type = 'Lock' AND query LIKE '%handle_pay%'",
			       "1", 10000));
	pq_expect(a, "COMMIT", NULL);
	PGresult *res = PQgetResult(b);
	ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
	ck_assert_str_eq(PQgetvalue(res, 0, 0), "PaymentSucceeded");
	PQclear(res);
	ck_assert_ptr_null(PQgetResult(b));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT balance * 10000000 + starting_balance"
					  " FROM payment.accounts WHERE customer_id = 'c-race'", 0, NULL),
			 200LL * 10000000 + 1000);
	PQfinish(a);
	PQfinish(b);
}
END_TEST

START_TEST(out_of_stock_compensates)
{
	char saga[UUID_STR_LEN];

	env_start_all(&env);
	seed_stock("B001", 0);
	env_new_order(&env, "c-2", "B001", 1, 700, saga);
	ck_assert(wait_state(saga, "Compensated"));
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM payment.payments WHERE saga_id = '%s'"
				" AND status = 'refunded'", saga), 1);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-2"), 1000000);
	char *states = env_sqlf(&env, "SELECT string_agg(to_state, ',' ORDER BY version)"
			       " FROM orchestrator.saga_history WHERE saga_id = '%s'", saga);
	ck_assert_str_eq(states, "PendingPayment,PendingInventory,Compensating,Compensated");
	free(states);
	/* an unknown item compensates the same way */
	env_new_order(&env, "c-2", "NOPE", 1, 700, saga);
	ck_assert(wait_state(saga, "Compensated"));
	char *reason = env_sqlf(&env,
				"SELECT reason FROM inventory.reservations WHERE saga_id = '%s'",
			       saga);
	ck_assert_str_eq(reason, "unknown_item");
	free(reason);
}
END_TEST

START_TEST(step_timeout_compensates)
{
	char saga[UUID_STR_LEN];
	const char *const fast[] = { "STEP_TIMEOUT_MS=300", NULL };
	const char *const slow[] = { "FAULT_DELAY_MS=1500", NULL };

	env_start(&env, SVC_ORCH, fast);
	env_start(&env, SVC_PAY, slow); /* pays, but after the deadline */
	env_start(&env, SVC_INV, NULL);
	seed_stock("A001", 10);
	env_new_order(&env, "c-11", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Compensated"));
	char *causes = env_sqlf(&env, "SELECT string_agg(cause, ',' ORDER BY version)"
			       " FROM orchestrator.saga_history WHERE saga_id = '%s'", saga);
	ck_assert_str_eq(causes, "OrderPlaced,StepTimeout,PaymentRefunded");
	free(causes);
	/* whichever of pay and refund came first, nothing stays charged */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM payment.payments"
				     " WHERE status IN ('refunded', 'voided')", "1", WAIT_MS));
	ck_assert(env_wait_sql(&env, "SELECT balance FROM payment.accounts", "1000000", WAIT_MS) ||
		  env_sql_ll(&env, "SELECT count(*) FROM payment.accounts", 0, NULL) == 0);
}
END_TEST

START_TEST(no_double_compensation)
{
	char saga[UUID_STR_LEN], cmd[UUID_STR_LEN], body[200];
	struct http_resp r;

	env_start_all(&env);
	seed_stock("B001", 0);
	env_new_order(&env, "c-10", "B001", 1, 999, saga);
	ck_assert(wait_state(saga, "Compensated"));
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-10"), 1000000);
	/* another refund for the same saga, under a new command id */
	uuid_new(cmd);
	snprintf(body, sizeof(body), "{\"commandId\":\"%s\",\"sagaId\":\"%s\"}", cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/RefundPaymentCommand", body, &r), 200);
	http_resp_free(&r);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/RefundPaymentCommand", body, &r), 200);
	ck_assert_ptr_nonnull(strstr(r.body, "\"duplicated\":true"));
	http_resp_free(&r);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-10"), 1000000);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM payment.payments WHERE saga_id = '%s'", saga),
			 1);
	char *st = env_sqlf(&env, "SELECT status FROM payment.payments WHERE saga_id = '%s'", saga);
	ck_assert_str_eq(st, "refunded");
	free(st);
	ck_assert(wait_state(saga, "Compensated"));

	/* a refund before its payment voids it; the late payment is declined */
	uuid_new(saga);
	uuid_new(cmd);
	snprintf(body, sizeof(body), "{\"commandId\":\"%s\",\"sagaId\":\"%s\"}", cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/RefundPaymentCommand", body, &r), 200);
	http_resp_free(&r);
	uuid_new(cmd);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"c-10\",\"amount\":5}",
		 cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/PayCommand", body, &r), 200);
	http_resp_free(&r);
	st = env_sqlf(&env, "SELECT status FROM payment.payments WHERE saga_id = '%s'", saga);
	ck_assert_str_eq(st, "voided");
	free(st);
	char *reason = env_sqlf(&env, "SELECT payload->>'reason' FROM payment.outbox_messages"
			       " WHERE type = 'PaymentFailed' AND payload->>'sagaId' = '%s'", saga);
	ck_assert_str_eq(reason, "voided");
	free(reason);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-10"), 1000000);
}
END_TEST

/* More overdue sagas than one sweep takes: all of them compensate. */
START_TEST(deadline_backlog_drains)
{
	char saga[UUID_STR_LEN];
	/* admission off: nothing finishes while payment is down, so the
	 * default limit would refuse the backlog this test builds on purpose */
	const char *const fast[] = { "STEP_TIMEOUT_MS=400", "ADMISSION_MAX_INFLIGHT=0", NULL };

	env_start(&env, SVC_ORCH, fast); /* payment down: every saga times out */
	for (int i = 0; i < 250; i++)
		env_new_order(&env, "c-18", "A001", 1, 10, saga);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.saga_instances"
				     " WHERE state = 'Compensating' AND compensation = 'refund'",
			       "250", WAIT_MS));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_history"
					  " WHERE cause = 'StepTimeout'", 0, NULL),
			 250);
}
END_TEST

/* The W3C trace of POST /orders reaches every service's log. */
START_TEST(trace_follows_the_saga)
{
	static const char *const names[] = { "orchestrator", "payment", "inventory" };
	const char *const info[] = { "LOG_LEVEL=info", NULL };
	const char *trace = "4bf92f3577b34da6a3ce929d0e0e4736";
	const char *h[] = { "Idempotency-Key: traced",
			    "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			    NULL };
	struct http_resp r;
	char path[512];

	for (int s = 0; s < SVC_COUNT; s++)
		env_start(&env, s, info);
	seed_stock("A001", 5);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/orders", h,
				 "{\"customerId\":\"c-14\",\"itemId\":\"A001\",\"qty\":1,"
				 "\"amount\":10}",
				 (size_t)-1, &r),
			 0);
	ck_assert_int_eq(r.status, 201);
	struct json_object *o = parse_body(&r);
	ck_assert(wait_state(jstr(o, "sagaId"), "Completed"));
	json_object_put(o);
	http_resp_free(&r);
	for (int s = 0; s < SVC_COUNT; s++)
		env_stop(&env, s, SIGTERM); /* flushes nothing: one write per line */
	for (int s = 0; s < SVC_COUNT; s++) {
		snprintf(path, sizeof(path), "%s/%s-%s.log", harness_cluster_dir(), env.dbname,
			 names[s]);
		char *log = file_read(path);
		int n = lines_with_trace(log, trace);

		/* orchestrator: accepted + 2 transitions; the others: their command */
		ck_assert_msg(n >= (s == SVC_ORCH ? 3 : 1), "%s: %d lines with the trace", names[s],
			      n);
		free(log);
	}
}
END_TEST

Suite *saga_flows_suite(void)
{
	Suite *s = suite_create("saga_flows");
	TCase *saga = fixture_tcase("saga");
	TCase *ops = fixture_tcase("operability");

	tcase_add_test(saga, happy_path);
	tcase_add_test(saga, decline_fails);
	tcase_add_test(saga, first_payments_of_a_customer_race);
	tcase_add_test(saga, out_of_stock_compensates);
	tcase_add_test(saga, step_timeout_compensates);
	tcase_add_test(saga, no_double_compensation);
	tcase_add_test(saga, deadline_backlog_drains);
	tcase_add_test(ops, trace_follows_the_saga);
	suite_add_tcase(s, saga);
	suite_add_tcase(s, ops);
	return s;
}
