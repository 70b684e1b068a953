/*
 * Delivery marks ride on the service's next write transaction (outbox.h,
 * outbox_query): a mark is written by the statement that runs next on the
 * service's pool, in that statement's transaction, and comes back to wait
 * when that statement fails. The services run with MARK_WINDOW_MS (and
 * LEASE_MS) at an hour, so no mark is written on its own, and no row is
 * delivered a second time, while a test looks: every mark a test sees
 * written rode on a handler's statement (or, at shutdown, went out with
 * the drain).
 *
 * "Rode on that transaction" is read from the rows themselves: a row's
 * xmin is the transaction that wrote its current version, so the marked
 * outbox row and the row the handler inserted share it.
 *
 * Runs over HTTP (marks) and AMQP (marks-amqp): the marks are the
 * outbox's whatever the transport.
 */
#include <check.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "jsonx.h"
#include "uuid.h"

#define WAIT_MS 60000

static struct saga_env env;

/* No mark goes alone, and no row is delivered again by its lease running out. */
static const char *const quiet[] = { "MARK_RIDE=1", "MARK_WINDOW_MS=3600000", "LEASE_MS=3600000",
				     NULL };

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void start_quiet(void)
{
	for (int s = 0; s < SVC_COUNT; s++)
		env_start(&env, (enum svc)s, quiet);
	free(env_sql(&env, "INSERT INTO inventory.stock VALUES ('M1', 100)", 0, NULL));
}

/* Posts an order (customer c-1, item M1); returns its saga id in out. */
static void place_order(char out[UUID_STR_LEN])
{
	struct http_resp r;
	char key[UUID_STR_LEN], kh[300], err[128];
	const char *h[2] = { kh, NULL };
	const char body[] = "{\"customerId\":\"c-1\",\"itemId\":\"M1\",\"qty\":1,\"amount\":10}";

	uuid_new(key);
	snprintf(kh, sizeof(kh), "Idempotency-Key: %s", key);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/orders", h, body, (size_t)-1, &r),
			 0);
	ck_assert_int_eq(r.status, 201);
	struct json_object *o = jsonx_parse(r.body, r.body_len, err, sizeof(err)), *v;

	ck_assert_ptr_nonnull(o);
	ck_assert(json_object_object_get_ex(o, "sagaId", &v));
	snprintf(out, UUID_STR_LEN, "%s", json_object_get_string(v));
	json_object_put(o);
	http_resp_free(&r);
}

static bool wait_metric(enum svc s, const char *series, double want)
{
	for (long long end = now_ms() + WAIT_MS; now_ms() < end; usleep(50 * 1000))
		if (env_metric(&env, s, series) == want)
			return true;
	return false;
}

#define OK_TO(peer) "saga_outbox_delivery_attempts_total{peer=\"" peer "\",outcome=\"ok\"}"

/* n sagas Completed, and every message of theirs delivered (so marked, or waiting to be). */
static void all_delivered(int n)
{
	char want[16];

	snprintf(want, sizeof(want), "%d", n);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.saga_instances"
				     " WHERE state = 'Completed'", want, WAIT_MS));
	ck_assert(wait_metric(SVC_ORCH, OK_TO("payment"), n));
	ck_assert(wait_metric(SVC_ORCH, OK_TO("inventory"), n));
	ck_assert(wait_metric(SVC_PAY, OK_TO("orchestrator"), n));
	ck_assert(wait_metric(SVC_INV, OK_TO("orchestrator"), n));
}

/* Whether schema's outbox row for saga is marked processed. */
static bool marked(const char *schema, const char *saga)
{
	return env_sql_llf(&env,
			   "SELECT count(*) FROM %s.outbox_messages"
			   " WHERE payload->>'sagaId' = '%s' AND processed_at IS NOT NULL",
			   schema, saga) > 0;
}

/*
 * The first saga's marks, waiting after it, ride on the second saga's
 * statements: payment's PaymentSucceeded on the next handle_pay,
 * inventory's InventoryReserved on the next handle_reserve, and each of the
 * orchestrator's commands on one of its own later creates or transitions.
 */
START_TEST(marks_ride_on_the_next_write)
{
	char s1[UUID_STR_LEN], s2[UUID_STR_LEN];

	start_quiet();
	place_order(s1);
	all_delivered(1);
	/* payment and inventory have written nothing since: their marks wait */
	ck_assert(!marked("payment", s1));
	ck_assert(!marked("inventory", s1));

	place_order(s2);
	all_delivered(2);
	ck_assert_int_eq(env_sql_llf(&env,
				     "SELECT count(*) FROM payment.outbox_messages o, payment.payments p"
				     " WHERE o.payload->>'sagaId' = '%s' AND p.saga_id = '%s'"
				     "   AND o.xmin::text = p.xmin::text",
				     s1, s2),
			 1);
	ck_assert_int_eq(env_sql_llf(&env,
				     "SELECT count(*) FROM inventory.outbox_messages o,"
				     "      inventory.reservations r"
				     " WHERE o.payload->>'sagaId' = '%s' AND r.saga_id = '%s'"
				     "   AND o.xmin::text = r.xmin::text",
				     s1, s2),
			 1);
	/* PayCommand and ReserveInventoryCommand, each with a later history row */
	ck_assert_int_eq(env_sql_llf(&env,
				     "SELECT count(*) FROM orchestrator.outbox_messages o"
				     " WHERE o.payload->>'sagaId' = '%s' AND EXISTS ("
				     "   SELECT 1 FROM orchestrator.saga_history h"
				     "    WHERE h.xmin::text = o.xmin::text"
				     "      AND (h.saga_id = '%s' AND h.version > 1 OR h.saga_id = '%s'))",
				     s1, s1, s2),
			 2);
	/* and the second saga's own marks wait for the next statements */
	ck_assert(!marked("payment", s2));
	ck_assert(!marked("inventory", s2));
}
END_TEST

/* Payment's handle_pay blocked on a lock, with the marks in its statement. */
static void blocked_since(const char *after, char *pid, char *started)
{
	char sql[600];
	long long end = now_ms() + WAIT_MS;

	snprintf(sql, sizeof(sql),
		 "SELECT pid || ' ' || query_start FROM pg_stat_activity"
		 " WHERE datname = current_database() AND usename = 'saga_payment'"
		 "   AND wait_event_type = 'Lock' AND query LIKE 'WITH ack AS (%%handle_pay%%'"
		 "   AND query_start > '%s'::timestamptz",
		 after);
	for (;;) {
		char *v = env_sql(&env, sql, 0, NULL);

		if (v) {
			ck_assert_int_eq(sscanf(v, "%15s %63[^\n]", pid, started), 2);
			free(v);
			return;
		}
		ck_assert_msg(now_ms() < end, "no handle_pay with the marks blocked");
		usleep(20 * 1000);
	}
}

/*
 * The statement that carries the marks fails, first with an SQL error
 * (cancelled), then with its connection killed: both times the marks come
 * back, ride on the retry, and are written by the one that commits.
 */
START_TEST(marks_of_a_failed_write_come_back)
{
	char s1[UUID_STR_LEN], s2[UUID_STR_LEN], pid[16], at[64] = "-infinity";
	PGconn *lock = PQconnectdb(env.admin_url);

	ck_assert_int_eq(PQstatus(lock), CONNECTION_OK);
	start_quiet();
	place_order(s1);
	all_delivered(1);
	ck_assert(!marked("payment", s1));

	PQclear(PQexec(lock, "BEGIN"));
	PGresult *res = PQexec(lock, "LOCK TABLE payment.payments IN EXCLUSIVE MODE");

	ck_assert_int_eq(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	place_order(s2);

	blocked_since(at, pid, at);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT pg_cancel_backend(%s)::int", pid), 1);
	blocked_since(at, pid, at); /* the retry, with the marks again */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT pg_terminate_backend(%s)::int", pid), 1);
	blocked_since(at, pid, at); /* again, on another connection */
	ck_assert(!marked("payment", s1));

	res = PQexec(lock, "COMMIT");
	ck_assert_int_eq(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	PQfinish(lock);
	all_delivered(2);
	ck_assert_int_eq(env_sql_llf(&env,
				     "SELECT count(*) FROM payment.outbox_messages o, payment.payments p"
				     " WHERE o.payload->>'sagaId' = '%s' AND p.saga_id = '%s'"
				     "   AND o.xmin::text = p.xmin::text",
				     s1, s2),
			 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), 2);
}
END_TEST

/* A service that stops writes the marks still waiting before it exits. */
START_TEST(marks_written_at_shutdown)
{
	char s1[UUID_STR_LEN];
	int status;

	start_quiet();
	place_order(s1);
	all_delivered(1);
	ck_assert(!marked("payment", s1));
	status = env_stop(&env, SVC_PAY, SIGTERM);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert(marked("payment", s1));
	ck_assert(!marked("inventory", s1)); /* still running, still waiting */
}
END_TEST

static Suite *marks_suite(void)
{
	Suite *s = suite_create("marks");
	TCase *tc = tcase_create("marks");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 180);
	suite_add_tcase(s, tc);
	tcase_add_test(tc, marks_ride_on_the_next_write);
	tcase_add_test(tc, marks_of_a_failed_write_come_back);
	tcase_add_test(tc, marks_written_at_shutdown);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	harness_cluster_start();
	harness_broker_start();
	sr = srunner_create(marks_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	harness_broker_stop();
	harness_cluster_stop();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
