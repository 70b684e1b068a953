/*
 * Exactly once, at both ends: the same order under one Idempotency-Key is
 * one saga (in sequence and at the same moment; the key taken byte for
 * byte; bodies compared as JSON values, numbers as written), the same
 * command is one effect at its receiver, and an event that comes twice,
 * late, out of order or in conflict with another moves a saga at most once.
 */
#include <check.h>
#include <json-c/json.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "suites.h"
#include "uuid.h"

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
	const char *auth = internal_auth();
	for (int i = 0; i < 2 * n; i++) {
		uuid_new(ids[i]);
		bodies[i] = event_body(ids[i], sagas[i / 2]);
		ps[i] = (struct par){ .port = env.port[SVC_ORCH], .method = "POST",
				      .path = i % 2 ? path_b : path_a, .body = bodies[i],
				      .headers = { auth, NULL } };
	}
	run_parallel(ps, 2 * n);
	for (int i = 0; i < 2 * n; i++) {
		ck_assert_msg(ps[i].resp.status == 200, "status %d: %s", ps[i].resp.status,
			      ps[i].resp.body);
		http_resp_free(&ps[i].resp);
		free(bodies[i]);
	}
}

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
	/* byte for byte (docs/protocol.md): with its quotes it is another key, whose
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
 * docs/protocol.md: a key is 1-255 visible ASCII characters, '"' included, counted
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
	const char *auth = internal_auth();
	for (int i = 0; i < 10; i++)
		ps[i] = (struct par){ .port = env.port[SVC_PAY], .method = "POST",
				      .path = "/commands/PayCommand", .body = body,
				      .headers = { auth, NULL } };
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

Suite *idempotency_suite(void)
{
	Suite *s = suite_create("idempotency");
	TCase *idem = fixture_tcase("idempotency");

	tcase_add_test(idem, entry_idempotency_sequential);
	tcase_add_test(idem, entry_idempotency_concurrent);
	tcase_add_test(idem, idempotency_key_as_sent);
	tcase_add_test(idem, idempotency_compares_numbers_as_written);
	tcase_add_test(idem, receiver_idempotency);
	tcase_add_test(idem, duplicate_and_out_of_order_events);
	tcase_add_test(idem, conflicting_events_one_transition);
	suite_add_tcase(s, idem);
	return s;
}
