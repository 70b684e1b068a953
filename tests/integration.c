/*
 * Integration tests: the three real services on a throwaway PostgreSQL
 * cluster, over real sockets. One test per guarantee; each names the
 * mechanism it proves, and fails when that mechanism is taken out.
 */
#include <check.h>
#include <json-c/json.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "jsonx.h"
#include "uuid.h"

#define WAIT_MS 20000

static struct saga_env env;

static void setup(void)
{
	env_create(&env);
}

static void destroy_extra_clusters(void);

static void teardown(void)
{
	env_destroy(&env);
	destroy_extra_clusters();
}

static void seed_stock(const char *item, int n)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO inventory.stock (item_id, available) VALUES ('%s', %d)", item, n);
	free(env_sql(&env, sql, 0, NULL));
}

/* --- HTTP helpers ------------------------------------------------------- */

static char auth_header[128];

static const char *const *internal_headers(void)
{
	static const char *h[2];

	snprintf(auth_header, sizeof(auth_header), "Authorization: Bearer %s", env.token);
	h[0] = auth_header;
	h[1] = NULL;
	return h;
}

static bool wait_state(const char *saga, const char *state)
{
	char sql[300];

	snprintf(sql, sizeof(sql),
		 "SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%.36s'", saga);
	return env_wait_sql(&env, sql, state, WAIT_MS);
}



static int post_internal(enum svc s, const char *path, const char *body, struct http_resp *r)
{
	ck_assert_int_eq(http_do(env.port[s], "POST", path, internal_headers(), body, (size_t)-1, r),
			 0);
	return r->status;
}

/* Runs n copies of one request at once, from n threads. */
struct par {
	int port;
	const char *method, *path, *body;
	const char *headers[3];
	struct http_resp resp;
	int rc;
};

static void *par_run(void *arg)
{
	struct par *p = arg;

	p->rc = http_do(p->port, p->method, p->path, p->headers, p->body, (size_t)-1, &p->resp);
	return NULL;
}

static void run_parallel(struct par *ps, int n)
{
	pthread_t th[64];

	ck_assert_int_le(n, 64);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, par_run, &ps[i]), 0);
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(ps[i].rc, 0);
	}
}

/* --- the saga ----------------------------------------------------------- */

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
	/* opened by this first payment, already charged (migration 006) */
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

/*
 * Two first payments of one customer at once (handle_pay, migration 006):
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

/* --- idempotency at the entry --------------------------------------------- */

START_TEST(entry_idempotency_sequential)
{
	struct http_resp a, b, c, d;
	const char *body = "{\"customerId\":\"c-3\",\"itemId\":\"A001\",\"qty\":1,\"amount\":50}";
	/* the same JSON value: other key order, white space */
	const char *same = " { \"amount\" : 50, \"qty\":1, \"itemId\":\"A001\",\n"
			   "\"customerId\":\"c-3\" } ";
	const char *other = "{\"customerId\":\"c-3\",\"itemId\":\"A001\",\"qty\":2,\"amount\":50}";

	env_start_all(&env);
	seed_stock("A001", 5);
	ck_assert_int_eq(env_post_order(&env, "order-42", body, &a), 201);
	ck_assert_int_eq(env_post_order(&env, "order-42", same, &b), 201);
	struct json_object *oa = parse_body(&a), *ob = parse_body(&b), *v;
	ck_assert_str_eq(jstr(oa, "sagaId"), jstr(ob, "sagaId"));
	ck_assert_str_eq(jstr(ob, "state"), "PendingPayment");
	ck_assert(json_object_object_get_ex(oa, "duplicated", &v) && !json_object_get_boolean(v));
	ck_assert(json_object_object_get_ex(ob, "duplicated", &v) && json_object_get_boolean(v));
	char *replayed = http_header(&b, "Idempotent-Replayed");
	char *loc_a = http_header(&a, "Location"), *loc_b = http_header(&b, "Location");
	ck_assert_ptr_nonnull(replayed);
	ck_assert_str_eq(replayed, "true");
	ck_assert_ptr_null(http_header(&a, "Idempotent-Replayed"));
	ck_assert_str_eq(loc_a, loc_b);
	free(replayed);
	free(loc_a);
	free(loc_b);

	/* the state replayed is the first answer's, even once the saga moved on */
	ck_assert(wait_state(jstr(oa, "sagaId"), "Completed"));
	ck_assert_int_eq(env_post_order(&env, "order-42", body, &d), 201);
	struct json_object *od = parse_body(&d);
	ck_assert_str_eq(jstr(od, "state"), "PendingPayment");
	json_object_put(od);
	http_resp_free(&d);

	ck_assert_int_eq(env_post_order(&env, "order-42", other, &c), 422);
	struct json_object *oc = parse_body(&c), *err;
	ck_assert(json_object_object_get_ex(oc, "error", &err));
	ck_assert_str_eq(jstr(err, "code"), "idempotency_key_reused");
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 1);
	/* byte for byte (SPEC §6): with its quotes it is another key, whose
	 * first use makes a new saga, with whatever body */
	ck_assert_int_eq(env_post_order(&env, "\"order-42\"", other, &d), 201);
	od = parse_body(&d);
	ck_assert_str_ne(jstr(od, "sagaId"), jstr(oa, "sagaId"));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 2);
	json_object_put(od);
	http_resp_free(&d);
	json_object_put(oa);
	json_object_put(ob);
	json_object_put(oc);
	http_resp_free(&a);
	http_resp_free(&b);
	http_resp_free(&c);
}
END_TEST

/*
 * SPEC §6: a key is 1-255 visible ASCII characters, '"' included, counted
 * as sent; two Idempotency-Key lines mean "k1, k2" in HTTP, which is no key
 * the client meant, even when both lines are equal.
 */
START_TEST(idempotency_key_as_sent)
{
	const char *body = "{\"customerId\":\"c-k\",\"itemId\":\"A001\",\"qty\":1,\"amount\":50}";
	static const char *const twice[][3] = {
		{ "Idempotency-Key: k1", "Idempotency-Key: k2", NULL },
		{ "Idempotency-Key: k1", "idempotency-key: k1", NULL },
	};
	char key[300];
	struct http_resp r;

	env_start_all(&env);
	seed_stock("A001", 5);
	ck_assert_int_eq(env_post_order(&env, "\"\"", body, &r), 201);
	http_resp_free(&r);
	ck_assert_int_eq(env_post_order(&env, "\"a\"b\"", body, &r), 201);
	http_resp_free(&r);
	/* 255 characters between quotes: 257 */
	memset(key, 'k', sizeof(key));
	key[0] = '"';
	key[256] = '"';
	key[257] = '\0';
	ck_assert_int_eq(env_post_order(&env, key, body, &r), 400);
	ck_assert_ptr_nonnull(strstr(r.body, "\"idempotency_key_invalid\""));
	http_resp_free(&r);
	for (size_t i = 0; i < sizeof(twice) / sizeof(twice[0]); i++) {
		ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/orders", twice[i], body,
					 (size_t)-1, &r),
				 0);
		ck_assert_int_eq(r.status, 400);
		ck_assert_ptr_nonnull(strstr(r.body, "\"idempotency_key_invalid\""));
		http_resp_free(&r);
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 2);
}
END_TEST

START_TEST(entry_idempotency_concurrent)
{
	struct par ps[20];
	const char *body = "{\"customerId\":\"c-4\",\"itemId\":\"A001\",\"qty\":1,\"amount\":10}";
	int fresh = 0;
	char saga[UUID_STR_LEN] = "";

	env_start_all(&env);
	seed_stock("A001", 50);
	memset(ps, 0, sizeof(ps));
	for (int i = 0; i < 20; i++) {
		ps[i] = (struct par){ .port = env.port[SVC_ORCH], .method = "POST",
				      .path = "/orders", .body = body,
				      .headers = { "Idempotency-Key: same-moment", NULL } };
	}
	run_parallel(ps, 20);
	for (int i = 0; i < 20; i++) {
		ck_assert_int_eq(ps[i].resp.status, 201);
		struct json_object *o = parse_body(&ps[i].resp), *v;
		if (!saga[0])
			snprintf(saga, sizeof(saga), "%s", jstr(o, "sagaId"));
		ck_assert_str_eq(jstr(o, "sagaId"), saga);
		ck_assert(json_object_object_get_ex(o, "duplicated", &v));
		fresh += !json_object_get_boolean(v);
		json_object_put(o);
		http_resp_free(&ps[i].resp);
	}
	ck_assert_int_eq(fresh, 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 1);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), 1);
}
END_TEST

/* --- idempotency at the receiver ---------------------------------------- */

START_TEST(receiver_idempotency)
{
	char cmd[UUID_STR_LEN], saga[UUID_STR_LEN], body[256];
	struct http_resp r;
	struct par ps[10];
	int fresh = 0;

	env_start(&env, SVC_PAY, NULL);
	uuid_new(cmd);
	uuid_new(saga);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"c-5\",\"amount\":300}",
		 cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/PayCommand", body, &r), 200);
	ck_assert_ptr_nonnull(strstr(r.body, "\"duplicated\":false"));
	http_resp_free(&r);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/PayCommand", body, &r), 200);
	ck_assert_ptr_nonnull(strstr(r.body, "\"duplicated\":true"));
	http_resp_free(&r);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM payment.payments WHERE saga_id = '%s'", saga),
			 1);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM payment.outbox_messages"
				" WHERE payload->>'sagaId' = '%s'", saga), 1);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-5"), 1000000 - 300);

	/* ten copies of a new command at the same moment: one effect */
	uuid_new(cmd);
	uuid_new(saga);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"c-5\",\"amount\":300}",
		 cmd, saga);
	internal_headers();
	for (int i = 0; i < 10; i++)
		ps[i] = (struct par){ .port = env.port[SVC_PAY], .method = "POST",
				      .path = "/commands/PayCommand", .body = body,
				      .headers = { auth_header, NULL } };
	run_parallel(ps, 10);
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(ps[i].resp.status, 200);
		fresh += strstr(ps[i].resp.body, "\"duplicated\":false") != NULL;
		http_resp_free(&ps[i].resp);
	}
	ck_assert_int_eq(fresh, 1);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM payment.outbox_messages"
				" WHERE payload->>'sagaId' = '%s'", saga), 1);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
				"c-5"), 1000000 - 600);
}
END_TEST

/* --- the outbox ----------------------------------------------------------- */

/* Polls a series until it is at least min; false after WAIT_MS. */
static bool wait_metric(enum svc s, const char *series, double min)
{
	for (int waited = 0; waited < WAIT_MS; waited += 50) {
		if (env_metric(&env, s, series) >= min)
			return true;
		usleep(50 * 1000);
	}
	return false;
}

/*
 * Payment unreachable for the orchestrator, after the orchestrator started:
 * over HTTP payment is just not running; over AMQP its queue is deleted as
 * well, so each publish comes back (basic.return) and is a failed attempt.
 * Starting payment declares its queue again.
 */
static void payment_unreachable(void)
{
	if (!harness_amqp())
		return;
	/* every service declares every queue when it connects: let them first */
	for (int s = 0; s < SVC_COUNT; s++)
		if (env.pid[s])
			ck_assert(wait_metric(s, "saga_broker_up", 1));
	harness_broker_delete_queue("pgsaga.payment");
}


START_TEST(outbox_redelivery)
{
	char sagas[5][UUID_STR_LEN];
	const char *const failing[] = { "FAULT_FAIL_RATE=1", NULL };
	struct http_resp r;

	/*
	 * payment stopped: commands wait in the outbox, attempts counted (the
	 * circuit breaker, which would stop counting, is kept out of the way)
	 */
	const char *const no_breaker[] = { "BREAKER_FAILURES=100000", NULL };

	env_start(&env, SVC_ORCH, no_breaker);
	env_start(&env, SVC_INV, NULL);
	payment_unreachable();
	seed_stock("A001", 10);
	for (int i = 0; i < 5; i++)
		env_new_order(&env, "c-6", "A001", 1, 100, sagas[i]);
	ck_assert(env_wait_sql(&env,
			       "SELECT count(*) FROM orchestrator.outbox_messages"
			       " WHERE type = 'PayCommand' AND attempt_count >= 2"
			       " AND processed_at IS NULL AND last_error IS NOT NULL",
			       "5", WAIT_MS));
	/* payment up but failing every command with 500 */
	env_start(&env, SVC_PAY, failing);
	long long before = env_sql_ll(&env, "SELECT sum(attempt_count) FROM"
					    " orchestrator.outbox_messages", 0, NULL);
	char want[32];
	snprintf(want, sizeof(want), "t");
	char sql[200];
	snprintf(sql, sizeof(sql),
		 "SELECT sum(attempt_count) > %lld FROM orchestrator.outbox_messages"
		 " WHERE last_error LIKE '%%HTTP 500%%'", before);
	if (harness_amqp()) /* the broker took them; payment puts them back for later */
		ck_assert(wait_metric(SVC_PAY, "saga_amqp_deliveries_total{outcome=\"requeued\"}",
				      10));
	else
		ck_assert(env_wait_sql(&env, sql, want, WAIT_MS));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), 0);
	/* faults off at run time: everything completes */
	ck_assert_int_eq(post_internal(SVC_PAY, "/admin/faults",
				       "{\"failRate\":0,\"delayMs\":0,\"dropResponseRate\":0}", &r),
			 200);
	http_resp_free(&r);
	for (int i = 0; i < 5; i++)
		ck_assert(wait_state(sagas[i], "Completed"));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), 5);
	/*
	 * Every command ends up marked delivered. Not necessarily by the time
	 * the saga is Completed: the receiver sends its event before it answers
	 * the command, so the mark may come a moment after the transition.
	 */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
				     " WHERE processed_at IS NULL", "0", WAIT_MS));
}
END_TEST

/* A dropped answer after the commit: redelivered, deduplicated, one charge. */
START_TEST(lost_response_is_deduplicated)
{
	char saga[UUID_STR_LEN];
	const char *const dropping[] = { "FAULT_DROP_RESPONSE_RATE=0.7", NULL };

	env_start(&env, SVC_ORCH, NULL);
	env_start(&env, SVC_PAY, dropping);
	env_start(&env, SVC_INV, dropping);
	seed_stock("A001", 10);
	for (int i = 0; i < 4; i++) {
		env_new_order(&env, "c-7", "A001", 1, 100, saga);
		ck_assert(wait_state(saga, "Completed"));
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), 4);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT balance FROM payment.accounts", 0, NULL),
			 1000000 - 400);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT available FROM inventory.stock", 0, NULL), 6);
}
END_TEST

/*
 * Exhausted attempts and non-retryable answers make dead letters, visible in
 * dead_letters; retry_dead_letters() from psql puts them back and they go.
 */
START_TEST(dead_letters_and_retry)
{
	char saga[UUID_STR_LEN], cmd[UUID_STR_LEN], body[200];
	const char *const give_up[] = { "RETRY_MAX_ATTEMPTS=2", "BREAKER_FAILURES=100", NULL };
	struct http_resp r;

	env_start(&env, SVC_ORCH, give_up); /* payment down: two attempts, then dead */
	env_start(&env, SVC_INV, NULL);
	payment_unreachable();
	seed_stock("A001", 5);
	env_new_order(&env, "c-16", "A001", 1, 10, saga);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.dead_letters", "1",
			       WAIT_MS));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT attempt_count FROM orchestrator.dead_letters",
				    0, NULL),
			 2);
	char *err = env_sql(&env, "SELECT last_error FROM orchestrator.dead_letters", 0, NULL);
	ck_assert_ptr_nonnull(err);
	free(err);
	env_start(&env, SVC_PAY, NULL);
	usleep(300 * 1000);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT version FROM orchestrator.saga_instances WHERE saga_id = '%s'",
				saga), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT orchestrator.retry_dead_letters()", 0, NULL), 1);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.dead_letters", 0,
				    NULL),
			 0);

	/* a 404 is not retried: payment's event for a saga nobody knows */
	uuid_new(cmd);
	uuid_new(saga);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"c-16\",\"amount\":1}",
		 cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/PayCommand", body, &r), 200);
	http_resp_free(&r);
	if (harness_amqp()) {
		/* the broker took it; the orchestrator rejects it into pgsaga.dead */
		ck_assert(wait_metric(SVC_ORCH,
				      "saga_amqp_deliveries_total{outcome=\"rejected\"}", 1));
		return;
	}
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM payment.dead_letters", "1", WAIT_MS));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT attempt_count FROM payment.dead_letters", 0,
				    NULL),
			 1);
	err = env_sql(&env, "SELECT last_error FROM payment.dead_letters", 0, NULL);
	ck_assert_ptr_nonnull(strstr(err, "404"));
	free(err);
}
END_TEST

/*
 * A peer that keeps failing is not hammered: after BREAKER_FAILURES failures
 * in a row its circuit opens and nothing more is sent while it is open, and
 * the refusals are not counted as attempts.
 */
START_TEST(circuit_breaker_stops_hammering)
{
	char saga[UUID_STR_LEN];
	const char *const breaker[] = { "BREAKER_FAILURES=3", "BREAKER_OPEN_MS=60000", NULL };
	const char *const failing[] = { "FAULT_FAIL_RATE=1", NULL };
	/* over AMQP: the failures are the broker's returns, counted by the sender */
	enum svc counter = harness_amqp() ? SVC_ORCH : SVC_PAY;
	const char *series = harness_amqp()
				     ? "saga_amqp_publishes_total{outcome=\"failed\"}"
				     : "saga_http_requests_total{route=\"/commands/{type}\",status=\"500\"}";

	if (!harness_amqp())
		env_start(&env, SVC_PAY, failing);
	env_start(&env, SVC_ORCH, breaker);
	payment_unreachable();
	for (int i = 0; i < 10; i++)
		env_new_order(&env, "c-17", "A001", 1, 10, saga);
	ck_assert(env_wait_sql(&env, "SELECT count(*) = 10 FROM orchestrator.outbox_messages"
				     " WHERE last_error LIKE '%circuit open%'", "t", WAIT_MS));
	/* requests already in flight when it opened still count: 3 or a few more */
	int sent = (int)env_metric(&env, counter, series);
	ck_assert_int_ge(sent, 3);
	ck_assert_int_lt(sent, 10);
	usleep(1000 * 1000);
	ck_assert_int_eq((int)env_metric(&env, counter, series), sent); /* nothing while open */
	ck_assert_int_eq(env_sql_ll(&env, "SELECT sum(attempt_count) FROM"
					  " orchestrator.outbox_messages", 0, NULL),
			 sent);
	char gauge[160];

	if (harness_amqp())
		snprintf(gauge, sizeof(gauge),
			 "saga_peer_circuit_state{peer=\"payment\",instance=\"amqp://%s\"}",
			 strrchr(harness_amqp_url(), '@') + 1);
	else
		snprintf(gauge, sizeof(gauge),
			 "saga_peer_circuit_state{peer=\"payment\",instance=\"http://127.0.0.1:%d\"}",
			 env.port[SVC_PAY]);
	ck_assert_int_eq((int)env_metric(&env, SVC_ORCH, gauge), 1); /* open */
}
END_TEST

/*
 * A peer's Retry-After is when the retry comes, not up to a sweep later: the
 * outbox arms the wake once the failure mark has committed, so it never
 * fires before the row is due (next_attempt_at is now() of the mark's
 * transaction). A peer answering "503, Retry-After: 0" is then retried as
 * soon as each mark commits, many times a second; a wake armed at the
 * failure itself came before the mark's transaction began, found the row
 * not yet due, and left the retry to the 1 s sweep. Counting attempts tells
 * the two apart by an order of magnitude, not by a stopwatch.
 */
struct busy_peer {
	int fd;
	int attempts; /* atomic */
	pthread_t th;
};

static void *busy_peer_run(void *arg)
{
	static const char answer[] = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\n"
				     "Content-Length: 0\r\nConnection: close\r\n\r\n";
	struct busy_peer *p = arg;
	int c;

	while ((c = accept(p->fd, NULL, NULL)) >= 0) {
		char buf[16384];
		size_t got = 0;
		ssize_t n;
		char *end = NULL;

		while (!end && got < sizeof(buf) - 1 &&
		       (n = recv(c, buf + got, sizeof(buf) - 1 - got, 0)) > 0) {
			got += (size_t)n;
			buf[got] = '\0';
			end = strstr(buf, "\r\n\r\n");
		}
		if (end) {
			__atomic_add_fetch(&p->attempts, 1, __ATOMIC_SEQ_CST);
			/* the body is left unread: the answer and the close end the exchange */
			(void)!send(c, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
		}
		close(c);
	}
	return NULL;
}

START_TEST(retry_after_is_when_the_retry_comes)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	struct busy_peer p = { .fd = socket(AF_INET, SOCK_STREAM, 0) };
	char url[64], saga[UUID_STR_LEN];
	int first = 0, later;

	if (harness_amqp())
		return; /* Retry-After is an HTTP peer's */
	ck_assert_int_eq(bind(p.fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(p.fd, (struct sockaddr *)&a, &l), 0);
	ck_assert_int_eq(listen(p.fd, 64), 0);
	ck_assert_int_eq(pthread_create(&p.th, NULL, busy_peer_run, &p), 0);
	snprintf(url, sizeof(url), "PAYMENT_URL=http://127.0.0.1:%d", ntohs(a.sin_port));
	const char *const extra[] = { url, "BREAKER_FAILURES=1000000",
				      "RETRY_MAX_ATTEMPTS=1000000", NULL };

	env_start(&env, SVC_ORCH, extra);
	env_start(&env, SVC_INV, NULL);
	seed_stock("A001", 10);
	env_new_order(&env, "c-ra", "A001", 1, 100, saga);
	for (int waited = 0; waited < WAIT_MS && first == 0; waited += 50) {
		usleep(50 * 1000);
		first = __atomic_load_n(&p.attempts, __ATOMIC_SEQ_CST);
	}
	ck_assert_int_gt(first, 0);
	usleep(4000 * 1000);
	later = __atomic_load_n(&p.attempts, __ATOMIC_SEQ_CST);
	shutdown(p.fd, SHUT_RDWR);
	pthread_join(p.th, NULL);
	close(p.fd);
	/* retried as each mark commits: about a thousand here; by the sweep: 4 to 8 */
	ck_assert_msg(later - first >= 50, "%d retries in 4 s after Retry-After: 0",
		      later - first);
}
END_TEST

/* --- events --------------------------------------------------------------- */

static char *event_body(const char *event_id, const char *saga)
{
	char *b = malloc(160);

	/* a reason too: the failures need one, the others ignore it */
	snprintf(b, 160, "{\"eventId\":\"%.36s\",\"sagaId\":\"%.36s\",\"reason\":\"test\"}",
		 event_id, saga);
	return b;
}

/* Posts event type for saga with event_id; checks the status and, if
 * want_body is not NULL, that the answer contains it. */
static void post_event(const char *type, const char *event_id, const char *saga, int want,
		       const char *want_body)
{
	char path[96], *body = event_body(event_id, saga);
	struct http_resp r;

	snprintf(path, sizeof(path), "/events/%s", type);
	ck_assert_int_eq(post_internal(SVC_ORCH, path, body, &r), want);
	if (want_body)
		ck_assert_msg(strstr(r.body, want_body) != NULL, "%s: %s", type, r.body);
	http_resp_free(&r);
	free(body);
}

START_TEST(duplicate_and_out_of_order_events)
{
	char saga[UUID_STR_LEN], ev[UUID_STR_LEN];

	env_start_all(&env);
	seed_stock("A001", 10);
	env_new_order(&env, "c-8", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));

	/* the real PaymentSucceeded again: recognised by its id */
	char *pid = env_sqlf(&env, "SELECT message_id FROM orchestrator.saga_history"
			    " WHERE saga_id = '%s' AND cause = 'PaymentSucceeded'", saga);
	post_event("PaymentSucceeded", pid, saga, 200, "\"duplicated\":true");
	free(pid);

	/* a new id that does not fit the state: ignored, nothing changes */
	uuid_new(ev);
	post_event("PaymentFailed", ev, saga, 200, "\"ignored\":true");
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT version FROM orchestrator.saga_instances WHERE saga_id = '%s'",
				saga), 3);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.saga_history WHERE saga_id = '%s'",
				saga), 3);

	/* a failure without its reason is malformed, also for a finished saga */
	char body[160];
	struct http_resp r;

	uuid_new(ev);
	snprintf(body, sizeof(body), "{\"eventId\":\"%s\",\"sagaId\":\"%s\"}", ev, saga);
	ck_assert_int_eq(post_internal(SVC_ORCH, "/events/PaymentFailed", body, &r), 400);
	ck_assert_msg(strstr(r.body, "\"invalid_field\"") && strstr(r.body, "reason"), "%s", r.body);
	http_resp_free(&r);

	/* out of order: inventory's answer before payment's */
	env_stop(&env, SVC_PAY, SIGTERM);
	env_new_order(&env, "c-8", "A001", 1, 100, saga);
	uuid_new(ev);
	post_event("InventoryReserved", ev, saga, 200, "\"ignored\":true");
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT version FROM orchestrator.saga_instances WHERE saga_id = '%s'",
				saga), 1);

	/* an event for a saga that does not exist is an error for its sender */
	uuid_new(ev);
	uuid_new(saga);
	post_event("PaymentSucceeded", ev, saga, 404, NULL);
	post_event("NoSuchEvent", ev, saga, 404, NULL);
}
END_TEST

/*
 * Posts two events with new ids for each of n sagas, all at once (path_a
 * for the first of each pair, path_b for the second); every answer is 200.
 */
static void post_event_pairs(char (*sagas)[UUID_STR_LEN], int n, const char *path_a,
			     const char *path_b)
{
	char ids[64][UUID_STR_LEN];
	char *bodies[64];
	struct par ps[64];

	ck_assert_int_le(2 * n, 64);
	internal_headers();
	for (int i = 0; i < 2 * n; i++) {
		uuid_new(ids[i]);
		bodies[i] = event_body(ids[i], sagas[i / 2]);
		ps[i] = (struct par){ .port = env.port[SVC_ORCH], .method = "POST",
				      .path = i % 2 ? path_b : path_a, .body = bodies[i],
				      .headers = { auth_header, NULL } };
	}
	run_parallel(ps, 2 * n);
	for (int i = 0; i < 2 * n; i++) {
		ck_assert_msg(ps[i].resp.status == 200, "status %d: %s", ps[i].resp.status,
			      ps[i].resp.body);
		http_resp_free(&ps[i].resp);
		free(bodies[i]);
	}
}

/*
 * Conflicting events for one saga at the same moment (success and failure
 * of the payment, with different ids): the version guard lets exactly one
 * transition through; the other answers 200 ignored after re-reading.
 */
START_TEST(conflicting_events_one_transition)
{
	enum { N = 12 };
	char sagas[N][UUID_STR_LEN];

	env_start(&env, SVC_ORCH, NULL); /* payment down: sagas stay PendingPayment */
	for (int i = 0; i < N; i++)
		env_new_order(&env, "c-9", "A001", 1, 100, sagas[i]);
	post_event_pairs(sagas, N, "/events/PaymentSucceeded", "/events/PaymentFailed");
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(env_sql_llf(&env, "SELECT version FROM orchestrator.saga_instances"
					" WHERE saga_id = '%s'", sagas[i]), 2);
		ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_history"
					" WHERE saga_id = '%s'", sagas[i]), 2);
	}

	/*
	 * The same in a state that loops onto itself: two answers to a release
	 * for a saga waiting for its release (Compensating -> Compensating).
	 * The state alone cannot tell them apart; the version does.
	 */
	free(env_sql(&env, "UPDATE orchestrator.saga_instances SET state = 'Compensating',"
			   " compensation = 'release', deadline_at = NULL", 0, NULL));
	post_event_pairs(sagas, N, "/events/InventoryReleased", "/events/InventoryReleased");
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(env_sql_llf(&env, "SELECT version FROM orchestrator.saga_instances"
					" WHERE saga_id = '%s'", sagas[i]), 3);
		ck_assert_int_eq(env_sql_llf(&env,
					"SELECT count(*) FROM orchestrator.outbox_messages"
					" WHERE type = 'RefundPaymentCommand'"
					" AND payload->>'sagaId' = '%s'", sagas[i]), 1);
		ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_history"
					" WHERE saga_id = '%s'", sagas[i]), 3);
		ck_assert_int_eq(env_sql_llf(&env,
					"SELECT count(*) FROM orchestrator.processed_messages p"
					" JOIN orchestrator.saga_history h USING (message_id)"
					" WHERE h.saga_id = '%s'", sagas[i]), 2);
	}
}
END_TEST

/* --- compensation exactly once -------------------------------------------- */

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

/* --- step deadlines ------------------------------------------------------- */

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

/* More overdue sagas than one sweep takes: all of them compensate. */
START_TEST(deadline_backlog_drains)
{
	char saga[UUID_STR_LEN];
	const char *const fast[] = { "STEP_TIMEOUT_MS=400", NULL };

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

/* --- security ------------------------------------------------------------- */

START_TEST(role_isolation)
{
	ck_assert_str_eq(sql_state_as(env.url[SVC_PAY], "SELECT 1"), "00000");
	env_start_all(&env); /* creates the tables */
	ck_assert_str_eq(sql_state_as(env.url[SVC_PAY],
				      "SELECT * FROM orchestrator.saga_instances"), "42501");
	ck_assert_str_eq(sql_state_as(env.url[SVC_INV], "SELECT * FROM payment.accounts"),
			 "42501");
	ck_assert_str_eq(sql_state_as(env.url[SVC_ORCH],
				      "UPDATE inventory.stock SET available = 0"), "42501");
	ck_assert_str_eq(sql_state_as(env.url[SVC_PAY], "SELECT * FROM payment.accounts"),
			 "00000");
	ck_assert_str_eq(sql_state_as(env.auditor_url, "SELECT count(*) FROM payment.payments"),
			 "00000");
	ck_assert_str_ne(sql_state_as(env.auditor_url, "DELETE FROM payment.payments"), "00000");
}
END_TEST

START_TEST(internal_endpoints_need_token)
{
	struct http_resp r;
	const char *wrong[] = { "Authorization: Bearer nope", NULL };
	const char *body = "{}";

	env_start_all(&env);
	const int ports[] = { env.port[SVC_PAY], env.port[SVC_INV], env.port[SVC_ORCH] };
	const char *paths[] = { "/commands/PayCommand", "/commands/ReserveInventoryCommand",
				"/events/PaymentSucceeded" };
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(http_do(ports[i], "POST", paths[i], NULL, body, (size_t)-1, &r), 0);
		ck_assert_int_eq(r.status, 401);
		ck_assert_ptr_nonnull(strstr(r.body, "\"code\""));
		http_resp_free(&r);
		ck_assert_int_eq(http_do(ports[i], "POST", paths[i], wrong, body, (size_t)-1, &r), 0);
		ck_assert_int_eq(r.status, 401);
		http_resp_free(&r);
		ck_assert_int_eq(http_do(ports[i], "POST", paths[i], internal_headers(), body,
					 (size_t)-1, &r),
				 0);
		ck_assert_int_eq(r.status, 400); /* past the token: the body is checked */
		http_resp_free(&r);
	}
}
END_TEST

/* A sample of bad input: JSON errors, 4xx, and nothing written. */
START_TEST(bad_input_changes_nothing)
{
	struct http_resp r;
	static const struct {
		const char *key, *body;
		int status;
		const char *code;
	} cases[] = {
		{ NULL, "{}", 400, "idempotency_key_missing" },
		{ "", "{}", 400, "idempotency_key_invalid" },
		{ "has space", "{}", 400, "idempotency_key_invalid" },
		{ "k", "{", 400, "invalid_json" },
		{ "k", "{\"customerId\":\"c\",} ", 400, "invalid_json" },
		{ "k", "[1]", 400, "invalid_json" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":0,\"amount\":1}", 400,
		  "invalid_field" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":1,\"amount\":-5}", 400,
		  "invalid_field" },
		{ "k", "{\"customerId\":\"c'; DROP TABLE x;--\",\"itemId\":\"A\",\"qty\":1,"
		       "\"amount\":5}", 400, "invalid_field" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":1,\"amount\":1e3}", 400,
		  "invalid_field" },
		{ "k", "{\"customerId\":\"c\",\"itemId\":\"A\",\"qty\":\"1\",\"amount\":5}", 400,
		  "invalid_field" },
	};

	env_start_all(&env);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		env_post_order(&env, cases[i].key, cases[i].body, &r);
		ck_assert_msg(r.status == cases[i].status, "case %zu: %d %s", i, r.status, r.body);
		struct json_object *o = parse_body(&r), *err;
		ck_assert(json_object_object_get_ex(o, "error", &err));
		ck_assert_str_eq(jstr(err, "code"), cases[i].code);
		json_object_put(o);
		http_resp_free(&r);
	}
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/orders/not-a-uuid", NULL, NULL, 0,
				 &r),
			 0);
	ck_assert_int_eq(r.status, 400);
	ck_assert_ptr_nonnull(strstr(r.body, "invalid_id"));
	http_resp_free(&r);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET",
				 "/orders/6F9619FF-8B86-D011-B42D-00C04FC964FF", NULL, NULL, 0, &r),
			 0);
	ck_assert_int_eq(r.status, 404);
	http_resp_free(&r);

	/* 65 KiB body: refused from its Content-Length */
	size_t big = 65 * 1024;
	char *huge = malloc(big + 1);
	memset(huge, ' ', big);
	huge[big] = '\0';
	const char *h[] = { "Idempotency-Key: big", NULL };
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/orders", h, huge, big, &r), 0);
	ck_assert_int_eq(r.status, 413);
	http_resp_free(&r);
	free(huge);

	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					  " UNION ALL SELECT count(*) FROM orchestrator.idempotency_records"
					  " ORDER BY 1 DESC LIMIT 1",
				    0, NULL),
			 0);
	/* still alive */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/healthz", NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
}
END_TEST

/* --- faults of the environment ----------------------------------------- */

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The database goes away: services stay up, answer 503 with Retry-After at
 * once (no request hangs), and come back by themselves.
 */
START_TEST(database_outage)
{
	char saga[UUID_STR_LEN];
	struct http_resp r;
	const char *body = "{\"customerId\":\"c-12\",\"itemId\":\"A001\",\"qty\":1,\"amount\":10}";

	env_start_all(&env);
	seed_stock("A001", 10);
	env_new_order(&env, "c-12", "A001", 1, 10, saga);
	ck_assert(wait_state(saga, "Completed"));

	harness_cluster_pause();
	for (int s = 0; s < SVC_COUNT; s++) {
		long long t0 = mono_ms();
		int status = 0;

		/* the pool notices the closed connections as the server goes */
		while (mono_ms() - t0 < 5000) {
			ck_assert_int_eq(http_do(env.port[s], "GET", "/readyz", NULL, NULL, 0, &r),
					 0);
			status = r.status;
			http_resp_free(&r);
			if (status == 503)
				break;
			usleep(20 * 1000);
		}
		ck_assert_int_eq(status, 503);
		ck_assert_int_eq(http_do(env.port[s], "GET", "/healthz", NULL, NULL, 0, &r), 0);
		ck_assert_int_eq(r.status, 200);
		http_resp_free(&r);
	}
	long long t0 = mono_ms();
	ck_assert_int_eq(env_post_order(&env, "during-outage", body, &r), 503);
	ck_assert_int_lt(mono_ms() - t0, 5000);
	char *retry = http_header(&r, "Retry-After");
	ck_assert_ptr_nonnull(retry);
	free(retry);
	ck_assert_ptr_nonnull(strstr(r.body, "database_unavailable"));
	http_resp_free(&r);

	harness_cluster_resume();
	for (int s = 0; s < SVC_COUNT; s++) {
		long long start = mono_ms();
		int status = 0;

		while (status != 200 && mono_ms() - start < WAIT_MS) {
			ck_assert_int_eq(http_do(env.port[s], "GET", "/readyz", NULL, NULL, 0, &r),
					 0);
			status = r.status;
			http_resp_free(&r);
			usleep(50 * 1000);
		}
		ck_assert_int_eq(status, 200);
	}
	/* the same key again, now that the database is back */
	ck_assert_int_eq(env_post_order(&env, "during-outage", body, &r), 201);
	struct json_object *o = parse_body(&r);
	ck_assert(wait_state(jstr(o, "sagaId"), "Completed"));
	json_object_put(o);
	http_resp_free(&r);

	/* what the server said as it went ("FATAL: terminating connection")
	 * was logged as JSON, not written raw between the log lines */
	for (int s = 0; s < SVC_COUNT; s++) {
		char path[700], line[4096];

		env_log_path(&env, s, path, sizeof(path));
		FILE *f = fopen(path, "r");
		ck_assert_msg(f != NULL, "%s", path);
		while (fgets(line, sizeof(line), f)) {
			ck_assert_msg(line[0] == '{', "%s: not a JSON log line: %s", path, line);
		}
		fclose(f);
	}
}
END_TEST

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/*
 * Two instances of every service on one database: their dispatchers share
 * the outboxes (SKIP LOCKED), peers are lists tried in turn, and one
 * payment instance killed halfway is skipped. Each saga has its effects once.
 */
START_TEST(several_instances)
{
	enum { N = 30 };
	struct saga_env b = env;
	char pay[128], inv[128], orch[128], sagas[N][UUID_STR_LEN];

	b.admin = NULL;
	snprintf(b.dbname, sizeof(b.dbname), "%.50s_b", env.dbname);
	for (int s = 0; s < SVC_COUNT; s++)
		b.port[s] = free_port();
	snprintf(pay, sizeof(pay), "PAYMENT_URL=http://127.0.0.1:%d,http://127.0.0.1:%d",
		 env.port[SVC_PAY], b.port[SVC_PAY]);
	snprintf(inv, sizeof(inv), "INVENTORY_URL=http://127.0.0.1:%d,http://127.0.0.1:%d",
		 env.port[SVC_INV], b.port[SVC_INV]);
	snprintf(orch, sizeof(orch), "ORCHESTRATOR_URL=http://127.0.0.1:%d,http://127.0.0.1:%d",
		 env.port[SVC_ORCH], b.port[SVC_ORCH]);
	/* a short lease: rows the killed instance had claimed come back soon */
	const char *const peers[] = { pay, inv, orch, "BREAKER_FAILURES=2", "LEASE_MS=1000", NULL };

	for (int s = 0; s < SVC_COUNT; s++) {
		env_start(&env, s, peers);
		env_start(&b, s, peers);
	}
	seed_stock("A001", 1000);
	for (int i = 0; i < N; i++) {
		env_new_order(i % 2 ? &b : &env, "c-13", "A001", 1, 10, sagas[i]);
		if (i == N / 2)
			env_stop(&b, SVC_PAY, SIGKILL);
	}
	for (int i = 0; i < N; i++)
		ck_assert(wait_state(sagas[i], "Completed"));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), N);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT balance FROM payment.accounts", 0, NULL),
			 1000000 - 10 * N);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT available FROM inventory.stock", 0, NULL),
			 1000 - N);
	for (int s = 0; s < SVC_COUNT; s++)
		if (b.pid[s])
			env_stop(&b, s, SIGTERM);
	env_destroy(&b);
}
END_TEST

/* --- operability ---------------------------------------------------------- */

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
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
		char *log = read_file(path);
		int n = lines_with_trace(log, trace);

		/* orchestrator: accepted + 2 transitions; the others: their command */
		ck_assert_msg(n >= (s == SVC_ORCH ? 3 : 1), "%s: %d lines with the trace", names[s],
			      n);
		free(log);
	}
}
END_TEST

/* Runs scripts/pg-cluster VERB DIR [PORT]; returns its exit status. */
static int pg_cluster(const char *verb, const char *dir, int port)
{
	char script[1024], port_s[16];
	pid_t pid;
	int st;

	snprintf(script, sizeof(script), "%s/scripts/pg-cluster", getenv("SAGA_SOURCE_DIR"));
	snprintf(port_s, sizeof(port_s), "%d", port);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		setenv("PGSAGA_FAST", "1", 1);
		execl(script, script, verb, dir, port ? port_s : (char *)NULL, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char extra_dirs[2][64];

static void destroy_extra_clusters(void)
{
	for (int i = 0; i < 2; i++)
		if (extra_dirs[i][0]) {
			pg_cluster("destroy", extra_dirs[i], 0);
			rmdir(extra_dirs[i]);
			extra_dirs[i][0] = '\0';
		}
}

/*
 * Each service needs only its own DATABASE_URL: orchestrator, payment and
 * inventory on three separate PostgreSQL servers run the saga.
 */
START_TEST(database_per_service)
{
	struct saga_env split = env;
	int ports[2];
	char saga[UUID_STR_LEN], admin[2][160];

	split.admin = NULL;
	for (int i = 0; i < 2; i++) {
		snprintf(extra_dirs[i], sizeof(extra_dirs[i]), "/tmp/pgsaga-split-XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(extra_dirs[i]));
		ports[i] = free_port();
		ck_assert_int_eq(pg_cluster("start", extra_dirs[i], ports[i]), 0);
		snprintf(admin[i], sizeof(admin[i]), "host=127.0.0.1 port=%d dbname=postgres user=postgres",
			 ports[i]);
		pid_t pid = fork();
		if (pid == 0) {
			char script[1024];

			snprintf(script, sizeof(script), "%s/sql/bootstrap.sql", getenv("SAGA_SOURCE_DIR"));
			execlp("psql", "psql", "-q", "-v", "ON_ERROR_STOP=1", "-f", script, admin[i],
			       (char *)NULL);
			_exit(127);
		}
		int st;
		waitpid(pid, &st, 0);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	snprintf(split.url[SVC_PAY], sizeof(split.url[SVC_PAY]),
		 "host=127.0.0.1 port=%d dbname=postgres user=saga_payment", ports[0]);
	snprintf(split.url[SVC_INV], sizeof(split.url[SVC_INV]),
		 "host=127.0.0.1 port=%d dbname=postgres user=saga_inventory", ports[1]);
	for (int s = 0; s < SVC_COUNT; s++)
		env_start(&split, s, NULL);
	for (int s = 0; s < SVC_COUNT; s++)
		env.pid[s] = split.pid[s]; /* so the fixture stops them */

	PGconn *inv = PQconnectdb(admin[1]), *pay = PQconnectdb(admin[0]);
	ck_assert_int_eq(PQstatus(inv), CONNECTION_OK);
	ck_assert_int_eq(PQstatus(pay), CONNECTION_OK);
	PQclear(PQexec(inv, "INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 3)"));
	env_new_order(&env, "c-15", "A001", 1, 25, saga);
	ck_assert(wait_state(saga, "Completed"));
	PGresult *res = PQexec(pay, "SELECT count(*) FROM payment.payments WHERE status = 'captured'");
	ck_assert_str_eq(PQgetvalue(res, 0, 0), "1");
	PQclear(res);
	res = PQexec(inv, "SELECT available FROM inventory.stock");
	ck_assert_str_eq(PQgetvalue(res, 0, 0), "2");
	PQclear(res);
	/* and nothing of theirs is in the orchestrator's database */
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM pg_namespace"
					  " WHERE nspname IN ('payment', 'inventory')"
					  " AND EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace ="
					  " pg_namespace.oid)",
				    0, NULL),
			 0);
	PQfinish(inv);
	PQfinish(pay);
	for (int s = 0; s < SVC_COUNT; s++) {
		env_stop(&env, s, SIGTERM);
		split.pid[s] = 0;
	}
	destroy_extra_clusters();
}
END_TEST

START_TEST(graceful_shutdown_exits_zero)
{
	env_start_all(&env);
	for (int s = 0; s < SVC_COUNT; s++) {
		int st = env_stop(&env, s, SIGTERM);

		ck_assert(WIFEXITED(st));
		ck_assert_int_eq(WEXITSTATUS(st), 0);
	}
}
END_TEST

/* Whether schema's outbox row for saga is marked processed. */
static bool marked(const char *schema, const char *saga)
{
	return env_sql_llf(&env,
			   "SELECT count(*) FROM %s.outbox_messages"
			   " WHERE payload->>'sagaId' = '%s' AND processed_at IS NOT NULL",
			   schema, saga) > 0;
}

#define OK_TO(peer) "saga_outbox_delivery_attempts_total{peer=\"" peer "\",outcome=\"ok\"}"

/*
 * A service that stops writes the delivery marks still waiting for their
 * window before it exits. The window (and the lease, so nothing is
 * delivered twice) is an hour here: no mark goes out on its own while the
 * test looks.
 */
START_TEST(marks_written_at_shutdown)
{
	static const char *const quiet[] = { "MARK_WINDOW_MS=3600000", "LEASE_MS=3600000", NULL };
	char saga[UUID_STR_LEN];
	int status;

	for (int s = 0; s < SVC_COUNT; s++)
		env_start(&env, (enum svc)s, quiet);
	seed_stock("M1", 100);
	env_new_order(&env, "c-1", "M1", 1, 10, saga);
	ck_assert(wait_state(saga, "Completed"));
	/* delivered, so marked or waiting to be */
	ck_assert(wait_metric(SVC_PAY, OK_TO("orchestrator"), 1));
	ck_assert(wait_metric(SVC_INV, OK_TO("orchestrator"), 1));
	ck_assert(!marked("payment", saga));
	status = env_stop(&env, SVC_PAY, SIGTERM);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert(marked("payment", saga));
	ck_assert(!marked("inventory", saga)); /* still running, still waiting */
}
END_TEST

/* --- what outside checks found (issue 8) -------------------------------- */

/* Runs argv (a NULL-terminated list) and returns its exit status, or -1. */
static int run_prog(const char *const argv[])
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_RDONLY);

		if (fd >= 0)
			dup2(fd, 0);
		execvp(argv[0], (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* psql as an operator types it: the superuser, one command per -c. */
static int psql_c(const char *cmd)
{
	const char *const argv[] = { "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", env.admin_url,
				     "-c", cmd, NULL };

	return run_prog(argv);
}

static void order_expect(const char *customer, const char *item, int qty, long amount,
			 const char *state)
{
	char saga[UUID_STR_LEN];

	env_new_order(&env, customer, item, qty, amount, saga);
	ck_assert_msg(wait_state(saga, state), "saga %s (%s %s x%d, %ld) did not reach %s", saga,
		      customer, item, qty, amount, state);
}

/*
 * A service connected as another role than its schema's owner (the
 * superuser URL pasted into its DATABASE_URL) refuses to migrate: the
 * tables would belong to that role, and the service's own role could never
 * start again. Nothing is created; the right role then starts.
 */
START_TEST(migrations_only_as_the_schema_owner)
{
	char bin[600], url[600], listen[64];

	snprintf(bin, sizeof(bin), "%s/src/inventory/saga-inventory", getenv("SAGA_BUILD_DIR"));
	snprintf(url, sizeof(url), "DATABASE_URL=%s", env.admin_url);
	snprintf(listen, sizeof(listen), "LISTEN_ADDR=127.0.0.1:%d", free_port());
	/* timeout: a service that did start would otherwise run forever (124) */
	const char *const argv[] = { "env", url, listen, "INTERNAL_TOKEN=t", "timeout", "30", bin,
				     NULL };

	ck_assert_int_eq(run_prog(argv), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM pg_class c JOIN pg_namespace n"
					  " ON n.oid = c.relnamespace WHERE n.nspname = 'inventory'",
				    0, NULL),
			 0);
	env_start(&env, SVC_INV, NULL);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM pg_tables WHERE schemaname ="
					  " 'inventory' AND tableowner <> 'saga_inventory'",
				    0, NULL),
			 0);
}
END_TEST

/*
 * SPEC §4: operators open accounts and add items with the spec's columns
 * alone, top up and restock with an UPDATE, and the audit stays true. The
 * account insert broke once (starting_balance NOT NULL, no default) while
 * every test passed: this one works the way an operator does, through psql.
 */
START_TEST(operator_accounts_and_stock_by_psql)
{
	char audit[600];

	env_start_all(&env);
	ck_assert_int_eq(psql_c("INSERT INTO payment.accounts (customer_id, balance) "
				"VALUES ('c-op', 5000)"), 0);
	ck_assert_int_eq(psql_c("INSERT INTO inventory.stock (item_id, available) "
				"VALUES ('I-OP', 3)"), 0);
	order_expect("c-op", "I-OP", 1, 2000, "Completed");
	order_expect("c-op", "I-OP", 1, 2000, "Completed");
	order_expect("c-op", "I-OP", 1, 2000, "Failed"); /* 1000 left */
	ck_assert_int_eq(psql_c("UPDATE payment.accounts SET balance = balance + 4000 "
				"WHERE customer_id = 'c-op'"), 0);
	ck_assert_int_eq(psql_c("UPDATE inventory.stock SET available = available + 2 "
				"WHERE item_id = 'I-OP'"), 0);
	order_expect("c-op", "I-OP", 3, 2000, "Completed");
	order_expect("c-op", "I-OP", 1, 500, "Compensated"); /* no stock left */

	ck_assert_int_eq(env_sql_ll(&env, "SELECT balance FROM payment.accounts"
					  " WHERE customer_id = 'c-op'", 0, NULL), 3000);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT starting_balance FROM payment.accounts"
					  " WHERE customer_id = 'c-op'", 0, NULL), 9000);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT available FROM inventory.stock"
					  " WHERE item_id = 'I-OP'", 0, NULL), 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT starting_stock FROM inventory.stock"
					  " WHERE item_id = 'I-OP'", 0, NULL), 5);
	snprintf(audit, sizeof(audit), "%s/scripts/audit", getenv("SAGA_SOURCE_DIR"));
	const char *const argv[] = { audit, env.auditor_url, NULL };
	ck_assert_int_eq(run_prog(argv), 0);
	/* saga_history has no foreign key (migration 006): the audit catches a
	 * history row without its saga */
	ck_assert_int_eq(psql_c("INSERT INTO orchestrator.saga_history"
				" (saga_id, version, to_state, cause)"
				" VALUES (gen_random_uuid(), 1, 'PendingPayment', 'OrderPlaced')"), 0);
	ck_assert_int_ne(run_prog(argv), 0);
}
END_TEST

/*
 * Sends raw bytes on one connection and reads until the server closes it
 * (or 10 s pass). Returns how many responses came back; the first one's
 * status is in *status, and all the server sent, status lines and headers
 * included, in *text (caller frees).
 */
static int raw_exchange(const char *bytes, size_t len, int *status, char **text)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)env.port[SVC_ORCH]) };
	struct timeval tv = { 10, 0 };
	size_t cap = 1 << 16, got = 0;
	char *buf = calloc(1, cap + 1);
	int fd = socket(AF_INET, SOCK_STREAM, 0), n = 0;
	bool closed = false;

	ck_assert_ptr_nonnull(buf);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(send(fd, bytes, len, MSG_NOSIGNAL), (ssize_t)len);
	while (got < cap) {
		ssize_t r = recv(fd, buf + got, cap - got, 0);

		if (r == 0)
			closed = true;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	ck_assert_msg(closed, "the connection was kept open after: %.*s", (int)len, bytes);
	*status = 0;
	if (got > 12 && strncmp(buf, "HTTP/1.", 7) == 0)
		*status = atoi(buf + 9);
	for (char *p = buf; (p = strstr(p, "HTTP/1.")) != NULL; p++) {
		int code = 0, end = 0;

		/* a status line, not the words in a message */
		if (sscanf(p, "HTTP/1.%*1[01] %3d %n", &code, &end) == 1 && end == 13)
			n++;
	}
	*text = buf;
	return n;
}

/*
 * SPEC §6: framing a proxy could read another way is refused with 400 and
 * the connection closed. Each front request carries a POST /orders as its
 * body: a proxy that frames it one way sees one request, while a server
 * that reads no body (an unknown Transfer-Encoding, "Content-Length :")
 * would run the POST as the next request (request smuggling).
 */
START_TEST(ambiguous_framing_refused)
{
	static const char order[] =
		"{\"customerId\":\"c-fr\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	static const struct {
		const char *front;    /* request line and the headers that say where the body ends */
		bool chunked;         /* the body sent as one chunk */
		const char *code;     /* in the answer; NULL: evhttp's own bare 400 */
	} cases[] = {
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\nContent-Length: 58\r\n", false,
		  "\"ambiguous_framing\"" },
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\nContent-Length: 058\r\n", false,
		  "\"ambiguous_framing\"" },
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\ncontent-length: 7\r\n", false,
		  "\"ambiguous_framing\"" },
		/* evhttp refuses a Transfer-Encoding with a Content-Length itself */
		{ "POST /orders HTTP/1.1\r\nContent-Length: 58\r\nTransfer-Encoding: identity\r\n",
		  false, NULL },
		{ "POST /orders HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n", true,
		  NULL },
		/* Transfer-Encodings evhttp does not take for chunked read no body */
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n", false,
		  "\"ambiguous_framing\"" },
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: identity\r\n", false,
		  "\"ambiguous_framing\"" },
		/* evhttp reads chunks; a proxy may refuse gzip or decode it */
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n", true,
		  "\"ambiguous_framing\"" },
		/* two of them: evhttp's own 400 */
		{ "GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
		  "Transfer-Encoding: chunked\r\n", true, NULL },
		/* a proxy may ignore Transfer-Encoding in HTTP/1.0 */
		{ "GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n", true,
		  "\"ambiguous_framing\"" },
		/* no Content-Length to evhttp, one to a lenient proxy */
		{ "GET /healthz HTTP/1.1\r\nContent-Length : 142\r\n", false, "\"invalid_header\"" },
		/* not 1*DIGIT: evhttp's strtoll takes it, a proxy may not */
		{ "GET /healthz HTTP/1.1\r\nContent-Length: +142\r\n", false,
		  "\"ambiguous_framing\"" },
	};
	char req[1024], smuggled[256], body_sent[300];
	int status;
	char *text;

	ck_assert_int_eq(strlen(order), 58);
	env_start_all(&env);
	seed_stock("A001", 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(smuggled, sizeof(smuggled),
			 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: smuggled-%02zu\r\n"
			 "Content-Length: 58\r\n\r\n%s",
			 i, order);
		ck_assert_int_eq(strlen(smuggled), 142);
		if (cases[i].chunked)
			snprintf(body_sent, sizeof(body_sent), "%zx\r\n%s\r\n0\r\n\r\n",
				 strlen(smuggled), smuggled);
		else
			snprintf(body_sent, sizeof(body_sent), "%s", smuggled);
		snprintf(req, sizeof(req), "%sHost: x\r\nIdempotency-Key: front-%zu\r\n\r\n%s",
			 cases[i].front, i, body_sent);
		ck_assert_msg(raw_exchange(req, strlen(req), &status, &text) == 1,
			      "framing %zu: more than one answer: %s", i, text);
		ck_assert_msg(status == 400, "framing %zu: %s", i, text);
		ck_assert_msg(strstr(text, "\r\nConnection: close\r\n") != NULL, "framing %zu: %s", i,
			      text);
		ck_assert_msg(!cases[i].code || strstr(text, cases[i].code) != NULL,
			      "framing %zu: %s", i, text);
		free(text);
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.idempotency_records",
				    0, NULL),
			 0);
	/* one Content-Length alone is fine, so is chunked in any case, and the
	 * connection lives on */
	snprintf(req, sizeof(req),
		 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: frame-ok\r\n"
		 "Content-Length: %zu\r\n\r\n%s"
		 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: frame-ok-2\r\n"
		 "Transfer-Encoding:  Chunked \r\n\r\n%zx\r\n%s\r\n0\r\n\r\n"
		 "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		 strlen(order), order, strlen(order), order);
	ck_assert_int_eq(raw_exchange(req, strlen(req), &status, &text), 3);
	ck_assert_int_eq(status, 201);
	free(text);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL),
			 2);
}
END_TEST

/*
 * SPEC §6: a NUL or another control byte in a header is a 400, and an
 * Idempotency-Key is never cut short: "ab<NUL>cd" once was stored as "ab",
 * so two different keys became one.
 */
START_TEST(control_bytes_in_headers_refused)
{
	static const char order[] =
		"{\"customerId\":\"c-nul\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	static const char *const values[] = { "Idempotency-Key: ab\0cd", "Idempotency-Key: ab\x01" "cd",
					      "Idempotency-Key: ab\x7f" "cd", "X-Note: a\0b" };
	static const size_t lens[] = { 22, 22, 22, 11 };
	char req[1024];
	struct http_resp r;
	int status;
	char *body;

	env_start_all(&env);
	seed_stock("A001", 5);
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		int n = snprintf(req, sizeof(req), "POST /orders HTTP/1.1\r\nHost: x\r\n%s",
				 i == 3 ? "Idempotency-Key: nul-3\r\n" : "");
		memcpy(req + n, values[i], lens[i]);
		n += (int)lens[i];
		n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\nContent-Length: %zu\r\n\r\n%s",
			      strlen(order), order);
		ck_assert_int_eq(raw_exchange(req, (size_t)n, &status, &body), 1);
		ck_assert_msg(status == 400, "header %zu: status %d %s", i, status, body);
		ck_assert_msg(strstr(body, "\"invalid_header\"") != NULL, "header %zu: %s", i, body);
		free(body);
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.idempotency_records",
				    0, NULL), 0);
	/* the key the NUL would have collapsed to is still a new key */
	ck_assert_int_eq(env_post_order(&env, "ab", order, &r), 201);
	http_resp_free(&r);
}
END_TEST

/*
 * RFC 9110: a 405 lists the path's methods in Allow and the message names
 * the method; HEAD is served wherever GET is, with GET's headers and no
 * body; a CONNECT is answered and its connection closed (evhttp would keep
 * it open for a tunnel, and the client wait); a 401 names its scheme; 422
 * has its own reason phrase.
 */
START_TEST(methods_answered_as_rfc_9110)
{
	static const struct {
		const char *req;
		int status;
		const char *want[2]; /* in the answer's text */
	} cases[] = {
		{ "PUT /orders HTTP/1.1", 405, { "\r\nAllow: POST\r\n", "method PUT not allowed" } },
		{ "DELETE /orders/00000000-0000-0000-0000-000000000000 HTTP/1.1", 405,
		  { "\r\nAllow: GET, HEAD\r\n", "method DELETE not allowed" } },
		{ "OPTIONS /healthz HTTP/1.1", 405,
		  { "\r\nAllow: GET, HEAD\r\n", "method OPTIONS not allowed" } },
		{ "HEAD /healthz HTTP/1.1", 200, { "\r\nContent-Length: 18\r\n", NULL } },
		{ "HEAD /orders/00000000-0000-0000-0000-000000000000 HTTP/1.1", 404,
		  { "\r\nContent-Length: ", NULL } },
		{ "CONNECT /orders HTTP/1.1", 404, { "\r\nContent-Length: ", "\"not_found\"" } },
		{ "POST /events/PaymentFailed HTTP/1.1", 401,
		  { "\r\nWWW-Authenticate: Bearer\r\n", NULL } },
	};
	const char *order = "{\"customerId\":\"c-m\",\"itemId\":\"A001\",\"qty\":1,\"amount\":1}";
	const char *other = "{\"customerId\":\"c-m\",\"itemId\":\"A001\",\"qty\":2,\"amount\":1}";
	char req[512];
	int status;
	char *text;
	struct http_resp r;

	env_start_all(&env);
	seed_stock("A001", 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(req, sizeof(req), "%s\r\nHost: x\r\nConnection: close\r\n\r\n",
			 cases[i].req);
		ck_assert_int_eq(raw_exchange(req, strlen(req), &status, &text), 1);
		ck_assert_msg(status == cases[i].status, "%s: %s", cases[i].req, text);
		for (int j = 0; j < 2; j++)
			ck_assert_msg(!cases[i].want[j] || strstr(text, cases[i].want[j]),
				      "%s: %s", cases[i].req, text);
		/* a HEAD's answer ends with its headers */
		if (strncmp(cases[i].req, "HEAD ", 5) == 0)
			ck_assert_msg(strcmp(strstr(text, "\r\n\r\n"), "\r\n\r\n") == 0,
				      "%s: a body: %s", cases[i].req, text);
		free(text);
	}
	/* the key again with another body */
	ck_assert_int_eq(env_post_order(&env, "m-1", order, &r), 201);
	http_resp_free(&r);
	snprintf(req, sizeof(req),
		 "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: m-1\r\n"
		 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(other), other);
	ck_assert_int_eq(raw_exchange(req, strlen(req), &status, &text), 1);
	ck_assert_msg(strncmp(text, "HTTP/1.1 422 Unprocessable Content\r\n", 36) == 0, "%s", text);
	free(text);
}
END_TEST

/*
 * A %00 in a query value decodes to a NUL, which cut the value short
 * unseen: "c-1%00zzz" filtered on c-1, "%00" on nothing. It is a 400 like
 * any undecodable value.
 */
START_TEST(nul_in_query_value_refused)
{
	static const char *const paths[] = {
		"/admin/api/sagas?customerId=%00",
		"/admin/api/sagas?customerId=c-n%00zzz",
		"/admin/api/sagas?limit=5&state=Completed%00x",
	};
	const char *const admin[] = { "ADMIN_TOKEN=atok-i-0123456789abcdef", NULL };
	const char *const bearer[] = { "Authorization: Bearer atok-i-0123456789abcdef", NULL };
	struct http_resp r;

	env_start(&env, SVC_ORCH, admin);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", paths[i], bearer, NULL, 0, &r),
				 0);
		ck_assert_msg(r.status == 400 && strstr(r.body, "\"invalid_field\""), "%s: %d %s",
			      paths[i], r.status, r.body);
		http_resp_free(&r);
	}
	/* "%2500" is the text "%00", no NUL */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/admin/api/sagas?customerId=%2500",
				 bearer, NULL, 0, &r),
			 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
}
END_TEST

/*
 * SPEC §6: a well-formed number that does not fit is invalid_field naming
 * the field, however many digits it has, at the entry and on the internal
 * endpoints alike.
 */
START_TEST(numbers_out_of_range_are_invalid_fields)
{
	static const struct {
		const char *qty, *amount, *field;
	} cases[] = {
		{ "9223372036854775808", "100", "qty" },
		{ "-9223372036854775809", "100", "qty" },
		{ "9223372036854775807", "100", "qty" },
		{ "1e400", "100", "qty" },
		{ "1", "1000000000000000000000000000000", "amount" },
		{ "1", "-1000000000000000000000000000000", "amount" },
		{ "1", "18446744073709551616", "amount" },
		{ "1", "-1e400", "amount" },
	};
	char body[300], cmd[UUID_STR_LEN], saga[UUID_STR_LEN];
	struct http_resp r;

	env_start_all(&env);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(body, sizeof(body),
			 "{\"customerId\":\"c-big\",\"itemId\":\"A001\",\"qty\":%s,\"amount\":%s}",
			 cases[i].qty, cases[i].amount);
		ck_assert_int_eq(env_post_order(&env, "big-number", body, &r), 400);
		ck_assert_msg(strstr(r.body, "\"invalid_field\"") && strstr(r.body, cases[i].field),
			      "case %zu: %s", i, r.body);
		http_resp_free(&r);
	}
	uuid_new(cmd);
	uuid_new(saga);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"c-big\","
		 "\"amount\":99999999999999999999999999}",
		 cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/PayCommand", body, &r), 400);
	ck_assert_msg(strstr(r.body, "\"invalid_field\"") && strstr(r.body, "amount"), "%s",
		      r.body);
	http_resp_free(&r);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT (SELECT count(*) FROM orchestrator.saga_instances)"
					  " + (SELECT count(*) FROM payment.payments)", 0, NULL), 0);
}
END_TEST

/*
 * A \u0000 in customerId or itemId is well-formed JSON with a bad value:
 * invalid_field naming the field, like any value off its pattern. In a key
 * it stays invalid JSON (json-c would cut the key there).
 */
START_TEST(nul_in_an_id_is_an_invalid_field)
{
	static const char *const cases[][2] = {
		{ "{\"customerId\":\"a\\u0000b\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}",
		  "customerId" },
		{ "{\"customerId\":\"c-nul\",\"itemId\":\"A001\\u0000\",\"qty\":1,\"amount\":100}",
		  "itemId" },
		{ "{\"customer\\u0000Id\":\"c-nul\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}",
		  "invalid_json" },
	};
	struct http_resp r;

	env_start(&env, SVC_ORCH, NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(env_post_order(&env, "nul-id", cases[i][0], &r), 400);
		ck_assert_msg(strstr(r.body, i < 2 ? "\"invalid_field\"" : "\"invalid_json\"") &&
				      strstr(r.body, cases[i][1]),
			      "case %zu: %s", i, r.body);
		http_resp_free(&r);
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL), 0);
}
END_TEST

/*
 * The same Idempotency-Key with a body that is not the same JSON value is
 * 422, and numbers are compared as written: unknown fields holding integers
 * beyond 64 bits (json-c clamps them to one bound) or decimals beyond a
 * double's precision that differ are different bodies. The same numbers
 * written with other zeros, keys in another order, are a replay.
 */
START_TEST(idempotency_compares_numbers_as_written)
{
	static const char *const x[][3] = {
		{ "12345678901234567890", "12345678901234567891", "12345678901234567890" },
		{ "123456789012345678901234", "123456789012345678901235", "123456789012345678901234" },
		{ "1.00000000000000001", "1.00000000000000002", "100000000000000001e-17" },
	};
	char key[32], body[300];
	struct http_resp r;

	env_start(&env, SVC_ORCH, NULL);
	for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++) {
		snprintf(key, sizeof(key), "as-written-%zu", i);
		for (int j = 0; j < 3; j++) {
			snprintf(body, sizeof(body),
				 j < 2 ? "{\"customerId\":\"c-aw\",\"itemId\":\"A001\",\"qty\":1,"
					 "\"amount\":100,\"x\":%s}"
				       : "{\"x\":%s,\"amount\":100,\"qty\":1,\"itemId\":\"A001\","
					 "\"customerId\":\"c-aw\"}",
				 x[i][j]);
			ck_assert_int_eq(env_post_order(&env, key, body, &r), j == 1 ? 422 : 201);
			ck_assert_msg(j != 1 || strstr(r.body, "\"idempotency_key_reused\""),
				      "%s: %s", x[i][1], r.body);
			ck_assert_msg(j != 2 || strstr(r.body, "\"duplicated\":true"), "%s: %s",
				      x[i][2], r.body);
			http_resp_free(&r);
		}
	}
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0,
				    NULL), 3);
}
END_TEST

/*
 * RFC 9112 §3.2: an HTTP/1.1 request without Host, or any request with two,
 * is 400; HTTP/1.0 may leave Host out. A request target with a space in it
 * is a malformed request line, 400, not a path that is not found.
 */
START_TEST(host_and_request_target_checked)
{
	static const struct {
		const char *req;
		int status;
		const char *code;
	} cases[] = {
		{ "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "\"invalid_host\"" },
		{ "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_host\"" },
		{ "GET /healthz HTTP/1.1\r\nHost: a\r\nhost: a\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_host\"" },
		{ "GET /healthz HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", 400, "\"invalid_host\"" },
		{ "GET /healthz x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_target\"" },
		{ "GET /nowhere x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 400,
		  "\"invalid_target\"" },
		{ "GET /healthz HTTP/1.0\r\n\r\n", 200, "\"status\"" },
		{ "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 200, "\"status\"" },
	};
	int status;
	char *text;

	env_start(&env, SVC_ORCH, NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(raw_exchange(cases[i].req, strlen(cases[i].req), &status, &text), 1);
		ck_assert_msg(status == cases[i].status && strstr(text, cases[i].code),
			      "case %zu: %s", i, text);
		free(text);
	}
}
END_TEST

/*
 * Peer names are resolved by libevent's asynchronous resolver, never by a
 * blocking getaddrinfo() on the loop. The services run with a getaddrinfo()
 * that never returns for "localhost" (tests/blockdns.c) and peers named
 * "localhost": a loop that called it would hang, and the saga with it.
 */
START_TEST(peer_names_resolved_without_blocking)
{
	char pre[700], asan[700], mark[600], urls[SVC_COUNT][80], saga[UUID_STR_LEN];
	const char *asan_env = getenv("ASAN_OPTIONS");
	struct http_resp r;

	snprintf(pre, sizeof(pre), "LD_PRELOAD=%s/tests/libblockdns.so", getenv("SAGA_BUILD_DIR"));
	/* the preloaded library comes before ASan's runtime: allowed here */
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0",
		 asan_env ? asan_env : "", asan_env && *asan_env ? ":" : "");
	snprintf(mark, sizeof(mark), "BLOCKDNS_MARK=%s/%s-getaddrinfo-called",
		 harness_cluster_dir(), env.dbname);
	snprintf(urls[SVC_ORCH], sizeof(urls[0]), "ORCHESTRATOR_URL=http://localhost:%d",
		 env.port[SVC_ORCH]);
	snprintf(urls[SVC_PAY], sizeof(urls[0]), "PAYMENT_URL=http://localhost:%d",
		 env.port[SVC_PAY]);
	snprintf(urls[SVC_INV], sizeof(urls[0]), "INVENTORY_URL=http://localhost:%d",
		 env.port[SVC_INV]);
	const char *const extra[] = { pre, asan, mark, urls[0], urls[1], urls[2], NULL };

	for (int s = 0; s < SVC_COUNT; s++)
		env_start(&env, (enum svc)s, extra);
	seed_stock("A001", 5);
	env_new_order(&env, "c-dns", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/healthz", NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	http_resp_free(&r);
	ck_assert_msg(access(strchr(mark, '=') + 1, F_OK) != 0,
		      "a service called the blocking getaddrinfo()");
}
END_TEST

/*
 * Retention: processed outbox rows and inbox rows older than RETENTION_S
 * are purged; dead letters and undelivered rows stay; and a late copy of a
 * purged message still changes nothing, held back by the services' own
 * unique keys (one payment and one reservation per saga).
 */
START_TEST(retention_purges_what_is_done)
{
	static const char *const keep1[] = { "RETENTION_S=1", NULL };
	char saga[UUID_STR_LEN], cmd[UUID_STR_LEN], body[300];
	struct http_resp r;

	for (int s = 0; s < SVC_COUNT; s++)
		env_start(&env, (enum svc)s, keep1);
	seed_stock("A001", 5);
	env_new_order(&env, "c-ret", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));
	/* a dead letter (nobody serves "nowhere") and a row not yet due */
	free(env_sql(&env, "INSERT INTO payment.outbox_messages (message_id, kind, destination,"
			   " type, payload) VALUES (gen_random_uuid(), 'event', 'nowhere',"
			   " 'PaymentSucceeded', '{}')", 0, NULL));
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM payment.dead_letters", "1", WAIT_MS));
	free(env_sql(&env, "INSERT INTO payment.outbox_messages (message_id, kind, destination,"
			   " type, payload, next_attempt_at) VALUES (gen_random_uuid(), 'event',"
			   " 'orchestrator', 'PaymentSucceeded', '{}', now() + interval '1 day')",
		     0, NULL));
	char *pay_cmd = env_sqlf(&env, "SELECT message_id FROM payment.processed_messages LIMIT 1");
	ck_assert_ptr_nonnull(pay_cmd);
	ck_assert_int_gt(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.processed_messages",
				    0, NULL), 0);

	/* let the period pass, then restart: the first purge runs soon after */
	ck_assert(env_wait_sql(&env, "SELECT bool_and(processed_at < now() - interval '1 second')"
				     " FROM (SELECT processed_at FROM payment.outbox_messages"
				     " WHERE processed_at IS NOT NULL UNION ALL SELECT processed_at"
				     " FROM orchestrator.processed_messages) t", "t", WAIT_MS));
	for (int s = 0; s < SVC_COUNT; s++) {
		ck_assert(WIFEXITED(env_stop(&env, (enum svc)s, SIGTERM)));
		env_start(&env, (enum svc)s, keep1);
	}
	ck_assert(env_wait_sql(&env,
			       "SELECT (SELECT count(*) FROM orchestrator.outbox_messages"
			       "         WHERE processed_at IS NOT NULL)"
			       "     + (SELECT count(*) FROM payment.outbox_messages"
			       "         WHERE processed_at IS NOT NULL)"
			       "     + (SELECT count(*) FROM inventory.outbox_messages"
			       "         WHERE processed_at IS NOT NULL)"
			       "     + (SELECT count(*) FROM orchestrator.processed_messages)"
			       "     + (SELECT count(*) FROM payment.processed_messages)"
			       "     + (SELECT count(*) FROM inventory.processed_messages)",
			       "0", 30000));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.dead_letters", 0, NULL), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.outbox_backlog", 0, NULL),
			 1);

	/* a late copy of the purged PayCommand: the inbox forgot it, the payment did not */
	long long balance = env_sql_ll(&env, "SELECT balance FROM payment.accounts"
					     " WHERE customer_id = 'c-ret'", 0, NULL);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"customerId\":\"c-ret\",\"amount\":100}",
		 pay_cmd, saga);
	ck_assert_int_eq(post_internal(SVC_PAY, "/commands/PayCommand", body, &r), 200);
	http_resp_free(&r);
	uuid_new(cmd);
	snprintf(body, sizeof(body),
		 "{\"commandId\":\"%s\",\"sagaId\":\"%s\",\"itemId\":\"A001\",\"qty\":1}", cmd, saga);
	ck_assert_int_eq(post_internal(SVC_INV, "/commands/ReserveInventoryCommand", body, &r), 200);
	http_resp_free(&r);
	/* their answers reach the orchestrator and are ignored: the saga is done */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM payment.outbox_backlog", "1", WAIT_MS));
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM inventory.outbox_backlog", "0", WAIT_MS));
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM payment.payments"
					   " WHERE saga_id = '%s'", saga), 1);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM inventory.reservations"
					   " WHERE saga_id = '%s'", saga), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT balance FROM payment.accounts"
					  " WHERE customer_id = 'c-ret'", 0, NULL), balance);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT available FROM inventory.stock"
					  " WHERE item_id = 'A001'", 0, NULL), 4);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT version FROM orchestrator.saga_instances"
					   " WHERE saga_id = '%s'", saga), 3);
	free(pay_cmd);
}
END_TEST

/* The body is JSON in the one style of every answer: compact. */
static void assert_compact(const struct http_resp *r)
{
	char *c = jsonx_compact(r->body);

	ck_assert_msg(c != NULL, "not JSON: %s", r->body);
	ck_assert_msg(strcmp(c, r->body) == 0, "not compact: %s", r->body);
	free(c);
}

/*
 * One Date header, RFC 1123 in GMT and about now (httpd formats it once a
 * second instead of evhttp once a reply).
 */
static void assert_date(const struct http_resp *r)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	char *d = http_header(r, "Date"), wday[4], mon[4], gmt[4], again[64];
	const char *p = r->headers, *m;
	struct tm tm = { 0 };
	int n = 0;

	ck_assert_msg(d != NULL, "no Date header: %s", r->headers);
	for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		n += strncasecmp(p, "Date:", 5) == 0;
	ck_assert_int_eq(n, 1);
	ck_assert_msg(sscanf(d, "%3s, %d %3s %d %d:%d:%d %3s", wday, &tm.tm_mday, mon, &tm.tm_year,
			     &tm.tm_hour, &tm.tm_min, &tm.tm_sec, gmt) == 8 &&
			      strlen(mon) == 3 && (m = strstr(months, mon)) != NULL,
		      "bad Date: %s", d);
	tm.tm_mon = (int)(m - months) / 3;
	tm.tm_year -= 1900;
	time_t t = timegm(&tm);
	ck_assert_msg(labs((long)(t - time(NULL))) <= 300, "Date is not now: %s", d);
	/* the exact form, weekday included */
	strftime(again, sizeof(again), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&t));
	ck_assert_str_eq(d, again);
	free(d);
}

/*
 * One JSON style everywhere (compact): GET /orders/{id} came from
 * PostgreSQL's json_build_object ("sagaId" : …), and a replay from jsonb
 * ("sagaId": …). A replay is the first answer byte for byte but for
 * "duplicated".
 */
START_TEST(answers_are_compact_json)
{
	static const char order[] =
		"{\"customerId\":\"c-js\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	struct http_resp first, again, got;
	char path[64], *want;

	env_start_all(&env);
	seed_stock("A001", 5);
	ck_assert_int_eq(env_post_order(&env, "compact-1", order, &first), 201);
	assert_compact(&first);
	assert_date(&first);
	ck_assert_int_eq(env_post_order(&env, "compact-1", order, &again), 201);
	assert_compact(&again);
	want = strdup(first.body);
	ck_assert_ptr_nonnull(strstr(want, "\"duplicated\":false"));
	memcpy(strstr(want, "\"duplicated\":false") + 13, "true}", 6);
	ck_assert_str_eq(again.body, want);
	free(want);
	struct json_object *o = parse_body(&first);
	snprintf(path, sizeof(path), "/orders/%s", jstr(o, "sagaId"));
	ck_assert(wait_state(jstr(o, "sagaId"), "Completed"));
	json_object_put(o);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", path, NULL, NULL, 0, &got), 0);
	ck_assert_int_eq(got.status, 200);
	assert_compact(&got);
	http_resp_free(&got);
	/* errors too */
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", "/orders/x", NULL, NULL, 0, &got), 0);
	ck_assert_int_eq(got.status, 400);
	assert_compact(&got);
	assert_date(&got);
	http_resp_free(&got);
	http_resp_free(&first);
	http_resp_free(&again);
}
END_TEST

static Suite *integration_suite(void)
{
	Suite *s = suite_create("integration");
	TCase *saga = tcase_create("saga");
	TCase *idem = tcase_create("idempotency");
	TCase *delivery = tcase_create("delivery");
	TCase *sec = tcase_create("security");
	TCase *ops = tcase_create("operability");
	TCase *edges = tcase_create("edges");

	TCase *all[] = { saga, idem, delivery, sec, ops, edges };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		tcase_add_checked_fixture(all[i], setup, teardown);
		tcase_set_timeout(all[i], 120);
		suite_add_tcase(s, all[i]);
	}
	tcase_add_test(saga, happy_path);
	tcase_add_test(saga, decline_fails);
	tcase_add_test(saga, first_payments_of_a_customer_race);
	tcase_add_test(saga, out_of_stock_compensates);
	tcase_add_test(saga, step_timeout_compensates);
	tcase_add_test(saga, no_double_compensation);
	tcase_add_test(saga, deadline_backlog_drains);
	tcase_add_test(idem, entry_idempotency_sequential);
	tcase_add_test(idem, entry_idempotency_concurrent);
	tcase_add_test(idem, idempotency_key_as_sent);
	tcase_add_test(idem, receiver_idempotency);
	tcase_add_test(idem, duplicate_and_out_of_order_events);
	tcase_add_test(idem, conflicting_events_one_transition);
	tcase_add_test(delivery, outbox_redelivery);
	tcase_add_test(delivery, lost_response_is_deduplicated);
	tcase_add_test(delivery, dead_letters_and_retry);
	tcase_add_test(delivery, circuit_breaker_stops_hammering);
	tcase_add_test(delivery, retry_after_is_when_the_retry_comes);
	tcase_add_test(delivery, graceful_shutdown_exits_zero);
	tcase_add_test(delivery, marks_written_at_shutdown);
	tcase_add_test(delivery, database_outage);
	tcase_add_test(delivery, several_instances);
	tcase_add_test(sec, role_isolation);
	tcase_add_test(sec, internal_endpoints_need_token);
	tcase_add_test(sec, bad_input_changes_nothing);
	tcase_add_test(ops, trace_follows_the_saga);
	tcase_add_test(ops, database_per_service);
	tcase_add_test(edges, operator_accounts_and_stock_by_psql);
	tcase_add_test(edges, migrations_only_as_the_schema_owner);
	tcase_add_test(edges, ambiguous_framing_refused);
	tcase_add_test(edges, control_bytes_in_headers_refused);
	tcase_add_test(edges, methods_answered_as_rfc_9110);
	tcase_add_test(edges, nul_in_query_value_refused);
	tcase_add_test(edges, numbers_out_of_range_are_invalid_fields);
	tcase_add_test(edges, nul_in_an_id_is_an_invalid_field);
	tcase_add_test(edges, idempotency_compares_numbers_as_written);
	tcase_add_test(edges, host_and_request_target_checked);
	tcase_add_test(edges, peer_names_resolved_without_blocking);
	tcase_add_test(edges, retention_purges_what_is_done);
	tcase_add_test(edges, answers_are_compact_json);
	return s;
}

int main(void)
{
	return harness_run(integration_suite());
}
