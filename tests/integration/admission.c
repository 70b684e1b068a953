/*
 * Admission control (src/orchestrator/admission.h) at a limit set by hand,
 * ADMISSION_MAX_INFLIGHT=1, with the one saga in flight held there on
 * purpose: payment fails every command until its faults are turned off.
 *
 * - a start beyond the limit is refused with 429 overloaded and
 *   Retry-After, and stores nothing: the same request is accepted as new
 *   once the saga in flight ended;
 * - a replay of the accepted key is answered as always (201 duplicated),
 *   not refused;
 * - the same once the door (the connection the replay reads run on) is
 *   killed: the read goes to the pool, never a 503;
 * - the work of the saga in flight (its events, its compensation) is never
 *   refused.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "metrics_reader.h"
#include "suites.h"
#include "uuid.h"

static const char *const limit_one[] = { "ADMISSION_MAX_INFLIGHT=1", NULL };
static const char *const failing[] = { "FAULT_FAIL_RATE=1", NULL };

/* A start beyond the limit: 429 overloaded with Retry-After of whole seconds >= 1. */
static void assert_refused(const char *key, const char *body)
{
	struct http_resp r;

	ck_assert_int_eq(env_post_order(&env, key, body, &r), 429);
	struct json_object *o = parse_body(&r);
	ck_assert_str_eq(jstr(jget(o, "error"), "code"), "overloaded");
	ck_assert_ptr_nonnull(jstr(jget(o, "error"), "message"));
	char *retry = http_header(&r, "Retry-After");
	ck_assert_ptr_nonnull(retry);
	ck_assert_msg(strspn(retry, "0123456789") == strlen(retry) && atoi(retry) >= 1,
		      "Retry-After: %s", retry);
	free(retry);
	json_object_put(o);
	http_resp_free(&r);
}

START_TEST(refused_start_stores_nothing)
{
	const char *first = "{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	const char *second = "{\"customerId\":\"c-2\",\"itemId\":\"A001\",\"qty\":1,\"amount\":200}";
	struct http_resp a, b;
	struct json_object *v;

	env_start(&env, SVC_ORCH, limit_one);
	env_start(&env, SVC_INV, NULL);
	env_start(&env, SVC_PAY, failing);
	seed_stock("A001", 10);

	ck_assert_int_eq(env_post_order(&env, "adm-1", first, &a), 201);
	struct json_object *oa = parse_body(&a);
	char saga[UUID_STR_LEN];
	snprintf(saga, sizeof(saga), "%s", jstr(oa, "sagaId"));

	/* the second start: refused, and nothing of it stored */
	assert_refused("adm-2", second);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.idempotency_records"
					  " WHERE key = 'adm-2'", 0, NULL), 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances",
				    0, NULL), 1);

	/* the first key again, at the limit: the first answer, marked as a replay */
	ck_assert_int_eq(env_post_order(&env, "adm-1", first, &b), 201);
	struct json_object *ob = parse_body(&b);
	ck_assert_str_eq(jstr(ob, "sagaId"), saga);
	ck_assert_str_eq(jstr(ob, "state"), "PendingPayment");
	ck_assert(json_object_object_get_ex(ob, "duplicated", &v) && json_object_get_boolean(v));
	char *replayed = http_header(&b, "Idempotent-Replayed");
	ck_assert_ptr_nonnull(replayed);
	ck_assert_str_eq(replayed, "true");
	free(replayed);
	json_object_put(ob);
	http_resp_free(&b);
	/* ... and with another body: reused, as always */
	ck_assert_int_eq(env_post_order(&env, "adm-1", second, &b), 422);
	http_resp_free(&b);

	/* the door killed: only it has run the replay read */
	ck_assert_int_eq(env_sql_ll(&env,
				    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
				    " WHERE usename = 'saga_orchestrator'"
				    "   AND query LIKE '%WITH ORDINALITY AS e(v, i)%'",
				    0, NULL),
			 1);
	assert_refused("adm-2", second);
	ck_assert_int_eq(env_post_order(&env, "adm-1", first, &b), 201);
	ob = parse_body(&b);
	ck_assert_str_eq(jstr(ob, "sagaId"), saga);
	json_object_put(ob);
	http_resp_free(&b);

	ck_assert(metrics_read_series(env.port[SVC_ORCH], "saga_admission_refused_total") >= 1);
	/* each 429 timed too (not the replay, nor the 422) */
	ck_assert(metrics_read_series(env.port[SVC_ORCH], "saga_admission_refusal_seconds_count") ==
		  metrics_read_series(env.port[SVC_ORCH], "saga_admission_refused_total"));
	ck_assert(metrics_read_series(env.port[SVC_ORCH], "saga_inflight") == 1);
	ck_assert(metrics_read_series(env.port[SVC_ORCH], "saga_admission_limit") == 1);

	/* the saga in flight ends: the refused request is accepted, as new */
	faults_off(SVC_PAY);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_int_eq(env_post_order(&env, "adm-2", second, &b), 201);
	ob = parse_body(&b);
	ck_assert(json_object_object_get_ex(ob, "duplicated", &v) && !json_object_get_boolean(v));
	ck_assert_str_ne(jstr(ob, "sagaId"), saga);
	json_object_put(ob);
	http_resp_free(&b);
	json_object_put(oa);
	http_resp_free(&a);
}
END_TEST

START_TEST(accepted_work_is_never_refused)
{
	char saga[UUID_STR_LEN], event_id[UUID_STR_LEN], body[256];
	const char *order = "{\"customerId\":\"c-3\",\"itemId\":\"B404\",\"qty\":1,\"amount\":100}";
	struct http_resp r;

	env_start(&env, SVC_ORCH, limit_one);
	env_start(&env, SVC_INV, NULL); /* B404 has no stock: the reservation fails */
	env_start(&env, SVC_PAY, failing);
	env_new_order(&env, "c-3", "B404", 1, 100, saga);
	assert_refused("adm-3", order); /* at the limit */

	/* an event for the saga in flight: applied, not refused */
	uuid_new(event_id);
	snprintf(body, sizeof(body), "{\"eventId\":\"%s\",\"sagaId\":\"%s\"}", event_id, saga);
	ck_assert_int_eq(post_internal(SVC_ORCH, "/events/PaymentSucceeded", body, &r), 200);
	ck_assert_msg(strstr(r.body, "\"duplicated\":false") != NULL, "%s", r.body);
	http_resp_free(&r);

	/* inventory rejects: the saga compensates, its refund waiting on payment */
	ck_assert(wait_state(saga, "Compensating"));
	assert_refused("adm-3", order); /* still in flight */
	faults_off(SVC_PAY);
	ck_assert(wait_state(saga, "Compensated"));

	/* every event the peers sent the orchestrator went through at its first try */
	if (!harness_amqp())
		ck_assert(env_wait_sql(&env,
				       "SELECT count(*) FILTER (WHERE processed_at IS NULL"
				       "                          OR last_error IS NOT NULL)"
				       "  FROM (SELECT processed_at, last_error FROM payment.outbox_messages"
				       "         WHERE destination = 'orchestrator'"
				       "        UNION ALL"
				       "        SELECT processed_at, last_error FROM inventory.outbox_messages"
				       "         WHERE destination = 'orchestrator') e",
				       "0", WAIT_MS));
	ck_assert(metrics_read_series(env.port[SVC_ORCH], "saga_admission_refused_total") >= 2);
	/* the saga ended: the start is taken now */
	ck_assert_int_eq(env_post_order(&env, "adm-3", order, &r), 201);
	http_resp_free(&r);
}
END_TEST

Suite *admission_suite(void)
{
	Suite *s = suite_create("admission");
	TCase *tc = fixture_tcase("admission");

	tcase_add_test(tc, refused_start_stores_nothing);
	tcase_add_test(tc, accepted_work_is_never_refused);
	suite_add_tcase(s, tc);
	return s;
}
