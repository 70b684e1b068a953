/*
 * Sagas defined as data (src/orchestrator/saga_registry.h, saga_engine.h):
 * a definition registered from SAGA_DEFINITIONS_DIR runs on the real
 * payment and inventory services, in another order than the order saga's
 * (stock first, then payment), through POST /sagas/{name} and GET
 * /sagas/{id}:
 *
 * - it completes, with its input kept and its history in its own states;
 * - a failure at its second step undoes the first, in reverse;
 * - a deadline at its last step (its own deadlineMs) undoes both;
 * - a step whose field is an output its earlier step's event did not carry
 *   fails without being sent, and the earlier step is undone;
 * - the start is idempotent like POST /orders, one key across definitions;
 *   bad input, an unknown name and an event of another definition are
 *   refused and change nothing;
 * - POST /sagas/order is POST /orders;
 * - a bad file in SAGA_DEFINITIONS_DIR stops the start, naming the file;
 * - a saga keeps its version across a restart that registers another.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "stock_first.h"
#include "suites.h"
#include "uuid.h"

/* Stock first, then the payment, Charge with a deadline of its own (printf's %d). */
static const char stock_first[] = STOCK_FIRST(" \"deadlineMs\": %d,");

/* Version 2 of it: the same steps, the charge first. */
static const char stock_first_v2[] =
	"{\"name\": \"stock-first\", \"version\": 2,\n"
	" \"input\": {\"customerId\": {\"type\": \"id\"}, \"itemId\": {\"type\": \"id\"},\n"
	"           \"qty\": {\"type\": \"integer\", \"min\": 1, \"max\": 10},\n"
	"           \"amount\": {\"type\": \"integer\", \"min\": 1, \"max\": 100000000},\n"
	"           \"note\": {\"type\": \"string\", \"maxLength\": 20}},\n"
	" \"steps\": [\n"
	"  {\"name\": \"Charge\", \"participant\": \"payment\",\n"
	"   \"command\": \"PayCommand\", \"fields\": [\"customerId\", \"amount\"],\n"
	"   \"succeeded\": \"PaymentSucceeded\", \"failed\": \"PaymentFailed\",\n"
	"   \"compensation\": \"RefundPaymentCommand\", \"compensated\": \"PaymentRefunded\"},\n"
	"  {\"name\": \"Stock\", \"participant\": \"inventory\",\n"
	"   \"command\": \"ReserveInventoryCommand\", \"fields\": [\"itemId\", \"qty\"],\n"
	"   \"succeeded\": \"InventoryReserved\", \"failed\": \"InventoryReservationFailed\",\n"
	"   \"compensation\": \"ReleaseInventoryCommand\", \"compensated\": \"InventoryReleased\"}]}\n";

/* Stock first, then a charge that needs Stock.slot, which inventory's event never carries. */
static const char needs_slot[] =
	"{\"name\": \"needs-slot\", \"version\": 1,\n"
	" \"input\": {\"customerId\": {\"type\": \"id\"}, \"itemId\": {\"type\": \"id\"},\n"
	"           \"qty\": {\"type\": \"integer\", \"min\": 1, \"max\": 10},\n"
	"           \"amount\": {\"type\": \"integer\", \"min\": 1, \"max\": 100000000}},\n"
	" \"steps\": [\n"
	"  {\"name\": \"Stock\", \"participant\": \"inventory\",\n"
	"   \"command\": \"ReserveInventoryCommand\", \"fields\": [\"itemId\", \"qty\"],\n"
	"   \"succeeded\": \"InventoryReserved\", \"failed\": \"InventoryReservationFailed\",\n"
	"   \"compensation\": \"ReleaseInventoryCommand\", \"compensated\": \"InventoryReleased\"},\n"
	"  {\"name\": \"Charge\", \"participant\": \"payment\",\n"
	"   \"command\": \"PayCommand\", \"fields\": [\"customerId\", \"amount\", \"Stock.slot\"],\n"
	"   \"succeeded\": \"PaymentSucceeded\", \"failed\": \"PaymentFailed\",\n"
	"   \"compensation\": \"RefundPaymentCommand\", \"compensated\": \"PaymentRefunded\"}]}\n";

static char defs_dir[256];

/* Writes text into the file name of the test's definitions directory, defs_dir. */
static void defs_write(const char *name, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(defs_dir, sizeof(defs_dir), "%s/defs-%s", harness_cluster_dir(), env.dbname);
	ck_assert_msg(mkdir(defs_dir, 0755) == 0 || errno == EEXIST, "%s", defs_dir);
	snprintf(path, sizeof(path), "%s/%s", defs_dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

#define ADMIN_BEARER "Authorization: Bearer sagas-as-data-admin"

/*
 * The orchestrator with stock-first registered (Charge's deadline
 * deadline_ms) and its admin API open, and the others.
 */
static void start_with_definition(int deadline_ms, const char *const *payment_extra)
{
	char text[sizeof(stock_first) + 16], dir[300];

	snprintf(text, sizeof(text), stock_first, deadline_ms);
	defs_write("stock-first.json", text);
	snprintf(dir, sizeof(dir), "SAGA_DEFINITIONS_DIR=%s", defs_dir);
	const char *const extra[] = { dir, "ADMIN_TOKEN=sagas-as-data-admin", NULL };

	env_start(&env, SVC_ORCH, extra);
	env_start(&env, SVC_INV, NULL);
	env_start(&env, SVC_PAY, payment_extra);
	seed_stock("A001", 10);
}

/* POST /sagas/{name}; the status, r filled. */
static int post_saga(const char *name, const char *key, const char *body, struct http_resp *r)
{
	char path[128], kh[300];
	const char *headers[] = { "Content-Type: application/json", key ? kh : NULL, NULL };

	snprintf(path, sizeof(path), "/sagas/%s", name);
	snprintf(kh, sizeof(kh), "Idempotency-Key: %s", key ? key : "");
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", path, headers, body, (size_t)-1, r),
			 0);
	return r->status;
}

/* Starts a saga of the definition name under a fresh key: 201, its id into saga. */
static void start_saga(const char *name, const char *body, char saga[UUID_STR_LEN])
{
	struct http_resp r;
	char key[UUID_STR_LEN];

	uuid_new_v7(key);
	ck_assert_int_eq(post_saga(name, key, body, &r), 201);
	struct json_object *o = parse_body(&r);
	snprintf(saga, UUID_STR_LEN, "%s", jstr(o, "sagaId"));
	json_object_put(o);
	http_resp_free(&r);
}

/* GET /sagas/{id}, parsed. */
static struct json_object *get_saga(const char *saga)
{
	struct http_resp r;
	char path[64];

	snprintf(path, sizeof(path), "/sagas/%s", saga);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", path, NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	struct json_object *o = parse_body(&r);
	http_resp_free(&r);
	return o;
}

/* The version of the definition a saga runs, as GET /sagas/{id} says. */
static int definition_version(const char *saga)
{
	struct json_object *o = get_saga(saga);
	int v = json_object_get_int(jget(jget(o, "definition"), "version"));

	json_object_put(o);
	return v;
}

/* The saga's history as "from>to:cause|..." (creation: ">to:cause"). */
static char *history_of(const char *saga)
{
	return env_sqlf(&env,
			"SELECT string_agg(coalesce(from_state, '') || '>' || to_state || ':' || cause,"
			" '|' ORDER BY version) FROM orchestrator.saga_history WHERE saga_id = '%s'",
			saga);
}

static const char body_ok[] =
	"{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":2,\"amount\":500,\"note\":\"gift\","
	"\"extra\":true}";

START_TEST(defined_saga_completes)
{
	char saga[UUID_STR_LEN];
	struct http_resp r;
	char *h;

	start_with_definition(60000, NULL);
	ck_assert_int_eq(post_saga("stock-first", "sf-1", body_ok, &r), 201);
	struct json_object *o = parse_body(&r);
	char *loc = http_header(&r, "Location");

	snprintf(saga, sizeof(saga), "%s", jstr(o, "sagaId"));
	ck_assert_str_eq(jstr(o, "state"), "PendingStock");
	ck_assert_str_eq(jstr(jget(o, "definition"), "name"), "stock-first");
	ck_assert_int_eq(json_object_get_int(jget(jget(o, "definition"), "version")), 1);
	ck_assert(!json_object_get_boolean(jget(o, "duplicated")));
	ck_assert_ptr_nonnull(loc);
	ck_assert_str_eq(loc + strlen("/sagas/"), saga);
	free(loc);
	json_object_put(o);
	http_resp_free(&r);

	ck_assert(wait_state(saga, "Completed"));
	h = history_of(saga);
	ck_assert_str_eq(h, ">PendingStock:SagaStarted|PendingStock>PendingCharge:InventoryReserved"
			    "|PendingCharge>Completed:PaymentSucceeded");
	free(h);
	/* the effects the steps asked for, with the input's values */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT qty FROM inventory.reservations WHERE saga_id"
					   " = '%s' AND status = 'reserved'", saga), 2);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT amount FROM payment.payments WHERE saga_id"
					   " = '%s' AND status = 'captured'", saga), 500);

	o = get_saga(saga);
	ck_assert_str_eq(jstr(o, "sagaId"), saga);
	ck_assert_str_eq(jstr(o, "state"), "Completed");
	ck_assert_str_eq(jstr(jget(o, "definition"), "name"), "stock-first");
	ck_assert_str_eq(jstr(jget(o, "input"), "note"), "gift");
	ck_assert_int_eq(json_object_get_int(jget(jget(o, "input"), "qty")), 2);
	/* undeclared fields are not kept */
	ck_assert(!json_object_object_get_ex(jget(o, "input"), "extra", NULL));
	ck_assert_int_eq(json_object_object_length(jget(o, "outputs")), 0);
	ck_assert_int_eq(json_object_array_length(jget(o, "history")), 3);
	ck_assert_int_eq(json_object_get_int(jget(o, "version")), 3);
	json_object_put(o);
	/* another definition's saga leaves the order saga's columns empty */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					   " WHERE saga_id = '%s' AND customer_id IS NULL"
					   " AND definition_name = 'stock-first'", saga), 1);
}
END_TEST

/* The history of a saga whose charge failed: its stock released, in reverse. */
static const char undone_at_charge[] =
	">PendingStock:SagaStarted|PendingStock>PendingCharge:InventoryReserved"
	"|PendingCharge>Compensating:PaymentFailed|Compensating>Compensated:InventoryReleased";

START_TEST(defined_saga_failure_undoes_the_first_step)
{
	char saga[UUID_STR_LEN];
	char *h;

	start_with_definition(60000, NULL);
	/* more than the default credit (1000000): PaymentFailed */
	start_saga("stock-first", "{\"customerId\":\"poor\",\"itemId\":\"A001\",\"qty\":3,\"amount\":2000000,"
		   "\"note\":\"\"}", saga);
	ck_assert(wait_state(saga, "Compensated"));
	h = history_of(saga);
	ck_assert_str_eq(h, undone_at_charge);
	free(h);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM inventory.reservations WHERE"
					   " saga_id = '%s' AND status = 'released'", saga), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT available FROM inventory.stock"
					  " WHERE item_id = 'A001'", 0, NULL), 10);
}
END_TEST

START_TEST(defined_saga_missing_output_fails_its_step)
{
	char saga[UUID_STR_LEN];
	char *h;

	defs_write("needs-slot.json", needs_slot);
	start_with_definition(60000, NULL);
	start_saga("needs-slot", "{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":2,"
		   "\"amount\":500}", saga);
	ck_assert(wait_state(saga, "Compensated"));
	h = history_of(saga);
	ck_assert_str_eq(h, undone_at_charge);
	free(h);
	/* the event that moved it is on the first of its two rows, nothing on the failure */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_history WHERE"
					   " saga_id = '%s' AND message_id IS NULL", saga), 2);
	/* the charge was never sent; the reservation was released */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM payment.payments WHERE saga_id"
					   " = '%s'", saga), 0);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM inventory.reservations WHERE"
					   " saga_id = '%s' AND status = 'released'", saga), 1);
}
END_TEST

START_TEST(defined_saga_deadline_at_its_last_step)
{
	static const char *const slow[] = { "FAULT_DELAY_MS=3000", NULL };
	char saga[UUID_STR_LEN];
	char *h;

	/* Charge's own deadline, 300 ms, not STEP_TIMEOUT_MS (120 s) */
	start_with_definition(300, slow);
	start_saga("stock-first", body_ok, saga);
	ck_assert(wait_state(saga, "Compensated"));
	h = history_of(saga);
	ck_assert_str_eq(h, ">PendingStock:SagaStarted|PendingStock>PendingCharge:InventoryReserved"
			    "|PendingCharge>Compensating:StepTimeout"
			    "|Compensating>Compensating:PaymentRefunded"
			    "|Compensating>Compensated:InventoryReleased");
	free(h);
	/* the charge, if it ran, was refunded; the stock is back */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM payment.payments WHERE"
					   " saga_id = '%s' AND status = 'captured'", saga), 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT available FROM inventory.stock"
					  " WHERE item_id = 'A001'", 0, NULL), 10);
}
END_TEST

/* The answer's error code. */
static void assert_error(struct http_resp *r, int status, const char *code, const char *in_message)
{
	ck_assert_int_eq(r->status, status);
	struct json_object *o = parse_body(r);
	ck_assert_str_eq(jstr(jget(o, "error"), "code"), code);
	if (in_message)
		ck_assert_msg(strstr(jstr(jget(o, "error"), "message"), in_message),
			      "%s not in %s", in_message, jstr(jget(o, "error"), "message"));
	json_object_put(o);
	http_resp_free(r);
}

START_TEST(defined_saga_start_is_idempotent_and_checked)
{
	struct http_resp r, s;
	long long before;

	start_with_definition(60000, NULL);
	ck_assert_int_eq(post_saga("stock-first", "k-1", body_ok, &r), 201);
	/* the same key and body: the first answer, a replay */
	ck_assert_int_eq(post_saga("stock-first", "k-1", body_ok, &s), 201);
	struct json_object *a = parse_body(&r), *b = parse_body(&s);
	ck_assert_str_eq(jstr(a, "sagaId"), jstr(b, "sagaId"));
	ck_assert(json_object_get_boolean(jget(b, "duplicated")));
	ck_assert_str_eq(jstr(jget(b, "definition"), "name"), "stock-first");
	json_object_put(a);
	json_object_put(b);
	http_resp_free(&r);
	http_resp_free(&s);

	before = env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0, NULL);
	/* the same key for another body, or another definition: 422 */
	post_saga("stock-first", "k-1",
		  "{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":3,\"amount\":500,\"note\":\"\"}",
		  &r);
	assert_error(&r, 422, "idempotency_key_reused", NULL);
	env_post_order(&env, "k-1", "{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":2,"
				    "\"amount\":500}", &r);
	assert_error(&r, 422, "idempotency_key_reused", NULL);
	/* bad input names the field; an unknown name is 404 */
	post_saga("stock-first", "k-2",
		  "{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":11,\"amount\":500,\"note\":\"\"}",
		  &r);
	assert_error(&r, 400, "invalid_field", "qty");
	post_saga("stock-first", "k-3",
		  "{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1,\"amount\":500,"
		  "\"note\":\"a note far longer than twenty\"}", &r);
	assert_error(&r, 400, "invalid_field", "note");
	post_saga("stock-first", "k-4", "[1]", &r);
	assert_error(&r, 400, "invalid_json", NULL);
	post_saga("no-such-saga", "k-5", body_ok, &r);
	assert_error(&r, 404, "unknown_saga", NULL);
	post_saga("Bad%20Name", "k-6", body_ok, &r);
	assert_error(&r, 404, "unknown_saga", NULL);
	post_saga("stock-first", NULL, body_ok, &r);
	assert_error(&r, 400, "idempotency_key_missing", NULL);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances", 0, NULL),
			 before);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.idempotency_records"
					  " WHERE key <> 'k-1'", 0, NULL), 0);
}
END_TEST

START_TEST(sagas_order_is_post_orders)
{
	const char *order = "{\"customerId\":\"c-9\",\"itemId\":\"A001\",\"qty\":1,\"amount\":100}";
	struct http_resp r;
	char saga[UUID_STR_LEN];

	start_with_definition(60000, NULL);
	ck_assert_int_eq(post_saga("order", "o-1", order, &r), 201);
	struct json_object *o = parse_body(&r);
	snprintf(saga, sizeof(saga), "%s", jstr(o, "sagaId"));
	ck_assert_str_eq(jstr(o, "state"), "PendingPayment");
	ck_assert_str_eq(jstr(jget(o, "definition"), "name"), "order");
	json_object_put(o);
	http_resp_free(&r);
	/* the same request through POST /orders: a replay of it */
	ck_assert_int_eq(env_post_order(&env, "o-1", order, &r), 201);
	o = parse_body(&r);
	ck_assert_str_eq(jstr(o, "sagaId"), saga);
	ck_assert(json_object_get_boolean(jget(o, "duplicated")));
	ck_assert(!json_object_object_get_ex(o, "definition", NULL));
	json_object_put(o);
	http_resp_free(&r);
	ck_assert(wait_state(saga, "Completed"));
	/* the order saga keeps its columns, which operators query */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances WHERE"
					   " saga_id = '%s' AND customer_id = 'c-9' AND qty = 1"
					   " AND amount = 100 AND input IS NULL", saga), 1);
	o = get_saga(saga);
	ck_assert_str_eq(jstr(jget(o, "input"), "customerId"), "c-9");
	json_object_put(o);
}
END_TEST

START_TEST(event_of_no_definition_is_404)
{
	struct http_resp r;
	char saga[UUID_STR_LEN], body[200], eid[UUID_STR_LEN];
	const char *headers[] = { internal_auth(), "Content-Type: application/json", NULL };

	start_with_definition(60000, NULL);
	env_new_order(&env, "c-1", "A001", 1, 100, saga);
	uuid_new_v7(eid);
	snprintf(body, sizeof(body), "{\"eventId\":\"%s\",\"sagaId\":\"%s\"}", eid, saga);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/events/ShipmentCancelled", headers,
				 body, (size_t)-1, &r), 0);
	assert_error(&r, 404, "unknown_type", NULL);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.processed_messages"
					   " WHERE message_id = '%s'", eid), 0);
}
END_TEST

/*
 * A saga keeps the version it started with, across a restart that
 * registers a new one; the sagas started after it take the new one.
 */
START_TEST(version_pinned_across_a_restart)
{
	static const char *const failing[] = { "FAULT_FAIL_RATE=1", NULL };
	char held[UUID_STR_LEN], fresh[UUID_STR_LEN], text[sizeof(stock_first_v2)], dir[300];
	char *h;
	struct http_resp r;

	/* the first saga waits at its payment, which fails until told otherwise */
	start_with_definition(60000, failing);
	start_saga("stock-first", body_ok, held);
	ck_assert(wait_state(held, "PendingCharge"));
	env_stop(&env, SVC_ORCH, SIGTERM);

	/* version 2: the charge first, then the stock */
	snprintf(text, sizeof(text), "%s", stock_first_v2);
	defs_write("stock-first-2.json", text);
	snprintf(dir, sizeof(dir), "SAGA_DEFINITIONS_DIR=%s", defs_dir);
	env_start(&env, SVC_ORCH, (const char *const[]){ dir, NULL });

	ck_assert_int_eq(post_saga("stock-first", "pin-2", body_ok, &r), 201);
	struct json_object *o = parse_body(&r);
	snprintf(fresh, sizeof(fresh), "%s", jstr(o, "sagaId"));
	ck_assert_int_eq(json_object_get_int(jget(jget(o, "definition"), "version")), 2);
	json_object_put(o);
	http_resp_free(&r);

	faults_off(SVC_PAY);
	ck_assert(wait_state(held, "Completed"));
	ck_assert(wait_state(fresh, "Completed"));
	ck_assert_int_eq(definition_version(held), 1);
	ck_assert_int_eq(definition_version(fresh), 2);
	/* each ran its own version's steps: the charge ended the first, began the second */
	h = history_of(held);
	ck_assert_str_eq(h, ">PendingStock:SagaStarted|PendingStock>PendingCharge:InventoryReserved"
			    "|PendingCharge>Completed:PaymentSucceeded");
	free(h);
	h = history_of(fresh);
	ck_assert_str_eq(h, ">PendingCharge:SagaStarted|PendingCharge>PendingStock:PaymentSucceeded"
			    "|PendingStock>Completed:InventoryReserved");
	free(h);
}
END_TEST

/*
 * A saga this orchestrator started, then migrated to another version: its
 * next event applies by the new one. The engine sends an event the plan of
 * the definition it knows the saga by (saga_engine.c), here the version
 * the saga left; saga_step answers no_plan naming the saga's own, and
 * the engine plans again by that.
 */
START_TEST(migrated_saga_moves_by_its_new_version)
{
	static const char *const failing[] = { "FAULT_FAIL_RATE=1", NULL };
	char saga[UUID_STR_LEN], text[sizeof(stock_first) + 16], body[160], *h;
	const char *const admin[] = { ADMIN_BEARER, NULL };
	struct http_resp r;

	start_with_definition(60000, failing);
	start_saga("stock-first", body_ok, saga);
	ck_assert(wait_state(saga, "PendingCharge"));

	/* version 3, the same steps, registered through the admin API (no restart) */
	snprintf(text, sizeof(text), stock_first, 60000);
	char *v = strstr(text, "\"version\": 1");

	ck_assert_ptr_nonnull(v);
	v[strlen("\"version\": ")] = '3';
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST", "/admin/api/definitions", admin, text,
				 (size_t)-1, &r),
			 0);
	ck_assert_msg(r.status == 201, "register: %d %s", r.status, r.body);
	http_resp_free(&r);
	snprintf(body, sizeof(body), "{\"fromVersion\":1,\"toVersion\":3,\"sagaIds\":[\"%s\"]}",
		 saga);
	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "POST",
				 "/admin/api/definitions/stock-first/migrate", admin, body, (size_t)-1,
				 &r),
			 0);
	ck_assert_msg(r.status == 200 && strstr(r.body, "\"migrated\":1"), "migrate: %d %s",
		      r.status, r.body);
	http_resp_free(&r);

	/* the payment goes through: its event finds the saga in version 3 */
	faults_off(SVC_PAY);
	ck_assert(wait_state(saga, "Completed"));
	ck_assert_int_eq(definition_version(saga), 3);
	h = history_of(saga);
	ck_assert_str_eq(h, ">PendingStock:SagaStarted|PendingStock>PendingCharge:InventoryReserved"
			    "|PendingCharge>PendingCharge:Migrated|PendingCharge>Completed:PaymentSucceeded");
	free(h);
}
END_TEST

/*
 * Runs the orchestrator with file (text) in its definitions directory until
 * it exits (20 s at most); its exit status, its output in log.
 */
static int start_fails(const char *file, const char *text, char *log, size_t loglen)
{
	char bin[1024], logp[512], listen[64];
	long long waited = 0;
	int status = -1;
	pid_t pid;

	defs_write(file, text);
	snprintf(bin, sizeof(bin), "%s/src/orchestrator/saga-orchestrator", getenv("SAGA_BUILD_DIR"));
	snprintf(logp, sizeof(logp), "%s/start.log", defs_dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", env.port[SVC_ORCH]);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		FILE *f = freopen(logp, "w", stderr);

		(void)f;
		setenv("DATABASE_URL", env.url[SVC_ORCH], 1);
		setenv("LISTEN_ADDR", listen, 1);
		setenv("INTERNAL_TOKEN", env.token, 1);
		setenv("SAGA_DEFINITIONS_DIR", defs_dir, 1);
		execl(bin, bin, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (waited >= 20000) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			ck_abort_msg("the orchestrator started with %s in its definitions", file);
		}
		usleep(50 * 1000);
		waited += 50;
	}
	char *out = file_read(logp);
	snprintf(log, loglen, "%s", out ? out : "");
	free(out);
	return status;
}

START_TEST(bad_definition_file_stops_the_start)
{
	char log[4096], text[sizeof(stock_first) + 16], path[600];
	int status;

	status = start_fails("broken.json",
			     "{\"name\": \"broken\", \"version\": 1, \"input\": {},"
			     " \"steps\": [{\"name\": \"A\"}]}",
			     log, sizeof(log));
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	ck_assert_msg(strstr(log, "broken.json") && strstr(log, "steps[0].participant"), "%s", log);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_definitions"
					  " WHERE name = 'broken'", 0, NULL), 0);
	snprintf(path, sizeof(path), "%s/broken.json", defs_dir);
	ck_assert_int_eq(unlink(path), 0);

	/* registered once; the same (name, version) with another content: a conflict */
	start_with_definition(1000, NULL);
	env_stop(&env, SVC_ORCH, SIGTERM);
	snprintf(text, sizeof(text), stock_first, 2000);
	status = start_fails("stock-first.json", text, log, sizeof(log));
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	ck_assert_msg(strstr(log, "stock-first.json") && strstr(log, "another content"), "%s", log);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_definitions"
					  " WHERE name = 'stock-first' AND"
					  " definition->'steps'->1->>'deadlineMs' = '1000'", 0, NULL),
			 1);
}
END_TEST

Suite *sagas_as_data_suite(void)
{
	Suite *s = suite_create("sagas_as_data");
	TCase *tc = fixture_tcase("sagas_as_data");

	tcase_add_test(tc, defined_saga_completes);
	tcase_add_test(tc, defined_saga_failure_undoes_the_first_step);
	tcase_add_test(tc, defined_saga_deadline_at_its_last_step);
	tcase_add_test(tc, defined_saga_missing_output_fails_its_step);
	tcase_add_test(tc, defined_saga_start_is_idempotent_and_checked);
	tcase_add_test(tc, sagas_order_is_post_orders);
	tcase_add_test(tc, event_of_no_definition_is_404);
	tcase_add_test(tc, bad_definition_file_stops_the_start);
	tcase_add_test(tc, version_pinned_across_a_restart);
	tcase_add_test(tc, migrated_saga_moves_by_its_new_version);
	suite_add_tcase(s, tc);
	return s;
}
