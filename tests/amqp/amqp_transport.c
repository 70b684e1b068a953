/*
 * Tests of what only the AMQP transport has (docs/protocol.md,
 * "RabbitMQ"): the broker dying under load, a consumer dying between its
 * commit and its ack, poison messages, the broker's memory alarm, a queue
 * that never confirms (AMQP_CONFIRM_TIMEOUT_MS), and one
 * RabbitMQ user per service (least privilege). The guarantee tests every
 * transport must pass run from tests/integration/ under both
 * (integration-amqp); the destination queue deleted (returns, dead letter,
 * retry) is dead_letters_and_retry there (delivery.c).
 *
 * One throwaway RabbitMQ node for the run (support/broker.h), a fresh
 * database per test and empty queues (harness).
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

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "broker.h"
#include "clock.h"
#include "harness.h"
#include "jsonx.h"
#include "metrics_reader.h"
#include "uuid.h"

#define WAIT_MS 60000

static struct saga_env env;

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
}

static bool wait_metric(enum svc s, const char *series, double want)
{
	for (long long end = clock_ms() + WAIT_MS; clock_ms() < end; usleep(50 * 1000))
		if (metrics_read_series(env.port[s], series) == want)
			return true;
	return false;
}

static char *readyz(enum svc s)
{
	struct http_resp r;
	char *body;

	ck_assert_int_eq(http_do(env.port[s], "GET", "/readyz", NULL, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 200);
	body = strdup(r.body);
	http_resp_free(&r);
	return body;
}

static void all_connected(void)
{
	for (int s = 0; s < SVC_COUNT; s++)
		ck_assert(wait_metric(s, "saga_broker_up", 1));
}

/* Every saga terminal, and the invariants of docs/protocol.md to the unit. */
static void check_invariants(int n, long long stock0, long long credit0)
{
	char sql[200];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM orchestrator.saga_instances"
		 " WHERE state IN ('Completed', 'Failed', 'Compensated')");
	char want[16];
	snprintf(want, sizeof(want), "%d", n);
	ck_assert(env_wait_sql(&env, sql, want, WAIT_MS));
	/* one payment and one reservation per saga at most */
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) - count(DISTINCT saga_id)"
					  " FROM payment.payments", 0, NULL), 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) - count(DISTINCT saga_id)"
					  " FROM inventory.reservations", 0, NULL), 0);
	/* Completed <=> captured and reserved */
	ck_assert_int_eq(env_sql_ll(&env,
				    "SELECT count(*) FROM orchestrator.saga_instances s"
				    " WHERE (s.state = 'Completed') <> (EXISTS (SELECT 1 FROM"
				    " payment.payments p WHERE p.saga_id = s.saga_id AND"
				    " p.status = 'captured') AND EXISTS (SELECT 1 FROM"
				    " inventory.reservations r WHERE r.saga_id = s.saga_id AND"
				    " r.status = 'reserved'))", 0, NULL), 0);
	/* conservation */
	ck_assert_int_eq(env_sql_ll(&env, "SELECT (SELECT sum(available) FROM inventory.stock) +"
					  " coalesce((SELECT sum(qty) FROM inventory.reservations"
					  " WHERE status = 'reserved'), 0)", 0, NULL), stock0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT (SELECT sum(balance) FROM payment.accounts) +"
					  " coalesce((SELECT sum(amount) FROM payment.payments"
					  " WHERE status = 'captured'), 0)", 0, NULL), credit0);
}

/*
 * A message is the outbox row (docs/protocol.md, "RabbitMQ"): message_id, type, app_id, routed
 * by the destination's name through exchange pgsaga, the body the payload.
 */
START_TEST(message_is_the_outbox_row)
{
	char saga[UUID_STR_LEN];
	struct broker_got got;

	env_start(&env, SVC_ORCH, NULL);
	ck_assert(wait_metric(SVC_ORCH, "saga_broker_up", 1));
	harness_broker_tap("tap", "payment");
	env_new_order(&env, "p-1", "P1", 1, 42, saga);
	for (long long end = clock_ms() + WAIT_MS;
	     broker_queue_depth(harness_amqp_url(), "tap") < 1 && clock_ms() < end;)
		usleep(20 * 1000);
	ck_assert_int_eq(broker_get(harness_amqp_url(), "tap", &got), 1);
	char *id = env_sql(&env, "SELECT message_id FROM orchestrator.outbox_messages", 0, NULL);
	char *payload = env_sql(&env, "SELECT payload::text FROM orchestrator.outbox_messages", 0,
				NULL);
	ck_assert_ptr_nonnull(got.message_id);
	ck_assert_ptr_nonnull(got.type);
	ck_assert_ptr_nonnull(got.app_id);
	ck_assert_str_eq(got.message_id, id);
	ck_assert_str_eq(got.type, "PayCommand");
	ck_assert_str_eq(got.app_id, "orchestrator");
	ck_assert_str_eq(got.exchange, "pgsaga");
	ck_assert_str_eq(got.routing_key, "payment");
	char err[128];
	struct json_object *a = jsonx_parse(got.body, got.body_len, err, sizeof(err));
	struct json_object *b = jsonx_parse(payload, strlen(payload), err, sizeof(err));
	ck_assert(a && b && json_object_equal(a, b));
	json_object_put(a);
	json_object_put(b);
	free(id);
	free(payload);
	broker_got_free(&got);
	/* and the row is marked delivered once the broker confirmed it */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
				     " WHERE processed_at IS NOT NULL", "1", WAIT_MS));
}
END_TEST

/*
 * The broker SIGKILLed while sagas are in flight and started again: orders
 * keep being accepted meanwhile (rows wait in the outbox), /readyz stays 200
 * and says "broker":"down", and afterwards every saga ends with one effect
 * each, without restarting any service.
 */
START_TEST(broker_killed_and_restarted)
{
	enum { N = 40 };
	char saga[UUID_STR_LEN];
	pid_t pids[SVC_COUNT];
	long long credit0;

	env_start_all(&env);
	free(env_sqlf(&env, "INSERT INTO inventory.stock VALUES ('K1', %d)", N));
	all_connected();
	for (int s = 0; s < SVC_COUNT; s++)
		pids[s] = env.pid[s];
	for (int i = 0; i < N / 2; i++)
		env_new_order(&env, "k-1", "K1", 1, 100, saga);
	broker_sync(harness_broker());
	broker_kill(harness_broker());
	ck_assert(wait_metric(SVC_ORCH, "saga_broker_up", 0));
	char *r = readyz(SVC_ORCH);
	ck_assert_ptr_nonnull(strstr(r, "\"broker\":\"down\""));
	free(r);
	for (int i = N / 2; i < N; i++) /* accepted while the broker is gone */
		env_new_order(&env, "k-1", "K1", 1, 100, saga);
	long long t0 = clock_ms();
	broker_restart(harness_broker());
	long long t1 = clock_ms();
	credit0 = 1000000;
	check_invariants(N, N, credit0);
	fprintf(stderr, "amqp: broker restart took %lld ms; all %d sagas terminal %lld ms after"
			" it accepted connections again\n", t1 - t0, N, clock_ms() - t1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					  " WHERE state = 'Completed'", 0, NULL), N);
	for (int s = 0; s < SVC_COUNT; s++) {
		ck_assert_int_eq(env.pid[s], pids[s]);
		ck_assert_int_eq(waitpid(env.pid[s], NULL, WNOHANG), 0); /* still running */
	}
	r = readyz(SVC_PAY);
	ck_assert_ptr_nonnull(strstr(r, "\"broker\":\"up\""));
	free(r);
	/* every row delivered: marked once a write or the mark window takes it */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
				     " WHERE processed_at IS NULL", "0", WAIT_MS));
}
END_TEST

/*
 * Payment commits a command and dies before acknowledging it: the broker
 * delivers it again to the restarted payment, whose inbox recognises it.
 * FAULT_DROP_RESPONSE_RATE=1 over AMQP means "commit, then never ack".
 */
START_TEST(consumer_killed_before_ack)
{
	char saga[UUID_STR_LEN];
	const char *const no_ack[] = { "FAULT_DROP_RESPONSE_RATE=1", "LEASE_MS=1000",
				       "RETRY_BASE_MS=600000", "RETRY_CAP_MS=600000", NULL };

	env_start(&env, SVC_ORCH, NULL);
	env_start(&env, SVC_INV, NULL);
	env_start(&env, SVC_PAY, no_ack);
	free(env_sql(&env, "INSERT INTO inventory.stock VALUES ('C1', 5)", 0, NULL));
	env_new_order(&env, "c-1", "C1", 1, 250, saga);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM payment.payments", "1", WAIT_MS));
	/* committed; its delivery is held unacknowledged */
	ck_assert(wait_metric(SVC_PAY, "saga_amqp_deliveries_total{outcome=\"acked\"}", 0));
	env_stop(&env, SVC_PAY, SIGKILL);
	env_start(&env, SVC_PAY, (const char *const[]){ "LEASE_MS=1000", NULL });
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%s'", saga);
	ck_assert(env_wait_sql(&env, sql, "Completed", WAIT_MS));
	ck_assert(wait_metric(SVC_PAY, "saga_inbox_duplicates_total", 1));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments", 0, NULL), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT balance FROM payment.accounts", 0, NULL),
			 1000000 - 250);
}
END_TEST

/*
 * Messages that can never succeed, published by hand into pgsaga.payment:
 * rejected without requeue into pgsaga.dead, counted, kept as payment's own
 * dead letters (retried from there, refused again), and nothing else
 * changes.
 */
START_TEST(poison_messages_go_to_dead_letter_queue)
{
	struct broker_msg bad_json = { "poison-1", "PayCommand", "someone", "{not json", (size_t)-1 };
	struct broker_msg bad_type = { "poison-2", "ExplodeCommand", "someone", "{}", (size_t)-1 };
	struct broker_msg bad_field = { "poison-3", "PayCommand", "someone",
					"{\"commandId\":\"x\",\"sagaId\":\"y\"}", (size_t)-1 };
	struct broker_msg *poison[] = { &bad_json, &bad_type, &bad_field };
	char err[160];
	struct broker_got got;
	int seen = 0;

	env_start(&env, SVC_PAY, NULL);
	ck_assert(wait_metric(SVC_PAY, "saga_broker_up", 1));
	for (size_t i = 0; i < 3; i++)
		ck_assert_msg(broker_publish(harness_amqp_url(), "pgsaga", "payment", poison[i], err,
					     sizeof(err)) == 0,
			      "%s", err);
	ck_assert(wait_metric(SVC_PAY, "saga_amqp_deliveries_total{outcome=\"rejected\"}", 3));
	for (long long end = clock_ms() + WAIT_MS;
	     broker_queue_depth(harness_amqp_url(), "pgsaga.dead") < 3 && clock_ms() < end;)
		usleep(50 * 1000);
	ck_assert_int_eq(broker_queue_depth(harness_amqp_url(), "pgsaga.dead"), 3);
	while (broker_get(harness_amqp_url(), "pgsaga.dead", &got) == 1) {
		ck_assert_ptr_nonnull(got.message_id);
		ck_assert_ptr_nonnull(strstr("poison-1 poison-2 poison-3", got.message_id));
		ck_assert_str_eq(got.routing_key, "payment");
		broker_got_free(&got);
		seen++;
	}
	ck_assert_int_eq(seen, 3);
	ck_assert_int_eq(metrics_read_series(env.port[SVC_PAY],
					     "saga_amqp_deliveries_total{outcome=\"acked\"}"),
			 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT (SELECT count(*) FROM payment.payments) +"
					  " (SELECT count(*) FROM payment.processed_messages) +"
					  " (SELECT count(*) FROM payment.accounts)", 0, NULL), 0);
	ck_assert_int_eq(broker_queue_depth(harness_amqp_url(), "pgsaga.payment"), 0);

	/* kept where operators look: dead letters of payment, addressed to itself */
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.dead_letters"
					  " WHERE destination = 'payment' AND kind = 'command'"
					  "   AND last_error LIKE 'refused by payment: 4%'", 0, NULL), 3);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.dead_letters"
					  " WHERE payload = to_jsonb('{not json'::text)", 0, NULL), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.outbox_messages", 0, NULL), 3);

	/* retried, it goes to payment's queue again, is refused again and is
	 * the same dead letter, one attempt on */
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.dead_letters d"
					  " WHERE type = 'ExplodeCommand'"
					  "   AND payment.retry_dead_letter(d.message_id)", 0, NULL), 1);
	for (long long end = clock_ms() + WAIT_MS;
	     broker_queue_depth(harness_amqp_url(), "pgsaga.dead") < 1 && clock_ms() < end;)
		usleep(50 * 1000);
	ck_assert_int_eq(broker_queue_depth(harness_amqp_url(), "pgsaga.dead"), 1);
	ck_assert(wait_metric(SVC_PAY, "saga_amqp_deliveries_total{outcome=\"rejected\"}", 4));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.dead_letters"
					  " WHERE type = 'ExplodeCommand' AND attempt_count = 1", 0, NULL), 1);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.outbox_messages"
					  " WHERE dead_at IS NULL OR processed_at IS NOT NULL", 0, NULL), 0);
}
END_TEST

/*
 * The broker's memory alarm: it blocks publishing connections
 * (connection.blocked). Orders are still accepted, nothing is published
 * while blocked (saga_amqp_blocked shows it), and everything goes once the
 * alarm clears; nothing lost, nothing twice.
 */
START_TEST(memory_alarm_pauses_publishing)
{
	enum { N = 10 };
	char saga[UUID_STR_LEN];
	struct broker *b = harness_broker();

	env_start_all(&env);
	free(env_sqlf(&env, "INSERT INTO inventory.stock VALUES ('M1', %d)", N));
	all_connected();
	env_new_order(&env, "m-1", "M1", 1, 10, saga); /* the path works */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.saga_instances"
				     " WHERE state = 'Completed'", "1", WAIT_MS));
	ck_assert_int_eq(broker_ctl(b, NULL, 0, "set_vm_memory_high_watermark", "absolute", "1",
				    NULL),
			 0);
	/* the broker blocks a connection when it next publishes */
	for (int i = 1; i < N; i++)
		env_new_order(&env, "m-1", "M1", 1, 10, saga);
	ck_assert(wait_metric(SVC_ORCH, "saga_amqp_blocked", 1));
	usleep(1000 * 1000);
	/* a row is processed only on its confirm: at most the one that hit the
	 * alarm went through */
	ck_assert_int_ge(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
					  " WHERE type = 'PayCommand' AND processed_at IS NULL",
				    0, NULL),
			 N - 2);
	ck_assert_int_eq(broker_ctl(b, NULL, 0, "set_vm_memory_high_watermark", "0.4", NULL), 0);
	ck_assert(wait_metric(SVC_ORCH, "saga_amqp_blocked", 0));
	check_invariants(N, N, 1000000);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					  " WHERE state = 'Completed'", 0, NULL), N);
}
END_TEST

/*
 * A queue that takes publishes and never confirms them: a quorum queue
 * without a majority does that for as long as it lasts; here the queue's
 * Raft server is suspended by hand (sys:suspend), on a broker that keeps
 * answering heartbeats. The orchestrator's publish fails after
 * AMQP_CONFIRM_TIMEOUT_MS with the reason in last_error and is tried again;
 * once the queue is back the saga completes, payment charged once (the
 * late first copies meet the inbox). Without the timeout the row waited as
 * long as the queue did, and the unconfirmed window filled up for every
 * destination.
 */
#define PAYMENT_RA "whereis('%2F_pgsaga.payment')"

START_TEST(unconfirmed_publish_times_out)
{
	static const char *const orch_vars[] = { "AMQP_CONFIRM_TIMEOUT_MS=1000", NULL };
	char saga[UUID_STR_LEN], out[512];
	struct broker *b = harness_broker();

	env_start(&env, SVC_INV, NULL);
	env_start(&env, SVC_PAY, NULL);
	env_start(&env, SVC_ORCH, orch_vars);
	free(env_sqlf(&env, "INSERT INTO inventory.stock VALUES ('U1', 1)"));
	all_connected();
	ck_assert_msg(broker_ctl(b, out, sizeof(out), "eval", "sys:suspend(" PAYMENT_RA ").",
				 NULL) == 0,
		      "suspending pgsaga.payment: %s", out);
	env_new_order(&env, "u-1", "U1", 1, 10, saga);
	bool failed = env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
					 " WHERE type = 'PayCommand' AND attempt_count >= 2"
					 " AND last_error LIKE '%no confirm from%'", "1", WAIT_MS);
	char *why = env_sqlf(&env, "SELECT attempt_count || ' ' || coalesce(last_error, '')"
				   " FROM orchestrator.outbox_messages WHERE type = 'PayCommand'");
	ck_assert_msg(broker_ctl(b, out, sizeof(out), "eval", "sys:resume(" PAYMENT_RA ").",
				 NULL) == 0,
		      "resuming pgsaga.payment: %s", out);
	fprintf(stderr, "amqp: the PayCommand while its queue was suspended: %s\n", why);
	ck_assert_msg(failed, "no failed attempt for want of a confirm: %s", why);
	free(why);
	check_invariants(1, 1, 1000000);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					  " WHERE state = 'Completed'", 0, NULL), 1);
}
END_TEST

/*
 * A broker that goes silent without closing anything (a frozen node, a
 * partition): the services notice by the missed heartbeats, report it, and
 * come back when it does. SIGSTOP freezes the node's whole process group.
 */
START_TEST(silent_broker_is_noticed)
{
	char saga[UUID_STR_LEN];
	pid_t pgid;

	env_start(&env, SVC_ORCH, NULL);
	ck_assert(wait_metric(SVC_ORCH, "saga_broker_up", 1));
	pgid = broker_pgid(harness_broker());
	ck_assert_int_gt(pgid, 1);
	ck_assert_int_eq(kill(-pgid, SIGSTOP), 0);
	bool noticed = wait_metric(SVC_ORCH, "saga_broker_up", 0);
	ck_assert_int_eq(kill(-pgid, SIGCONT), 0);
	ck_assert_msg(noticed, "a frozen broker was not noticed within %d ms", WAIT_MS);
	ck_assert(wait_metric(SVC_ORCH, "saga_broker_up", 1));
	env_new_order(&env, "s-1", "S1", 1, 10, saga);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
				     " WHERE processed_at IS NOT NULL", "1", WAIT_MS));
}
END_TEST

/*
 * Least privilege on the broker (README.md, "Running across hosts"): one
 * RabbitMQ user per service with the README's set_permissions lines. The
 * saga completes with them; payment's user is refused (403 ACCESS_REFUSED)
 * on basic.consume of the orchestrator's queue, and may not declare it.
 */
static const char *const lp_user[SVC_COUNT] = { "pgsaga-orchestrator", "pgsaga-payment",
						"pgsaga-inventory" };
/* configure, write, read: the README's lines, word for word */
static const char *const lp_perm[SVC_COUNT][3] = {
	{ "^pgsaga(\\.dead|\\.orchestrator)?$", "^pgsaga(\\.dead|\\.orchestrator)?$",
	  "^pgsaga(\\.dead|\\.orchestrator)?$" },
	{ "^pgsaga(\\.payment)?$", "^pgsaga(\\.dead|\\.payment)?$", "^pgsaga(\\.payment)?$" },
	{ "^pgsaga(\\.inventory)?$", "^pgsaga(\\.dead|\\.inventory)?$", "^pgsaga(\\.inventory)?$" },
};

/* The reply code of the broker's channel.close after basic.consume of queue
 * as url's user, or 0 when the consume was accepted. */
static int consume_reply_code(const char *url, const char *queue)
{
	char copy[256];
	struct amqp_connection_info ci;
	struct timeval tv = { 10, 0 };
	amqp_connection_state_t c = amqp_new_connection();
	amqp_socket_t *sock = amqp_tcp_socket_new(c);
	amqp_rpc_reply_t r;
	int code = 0;

	snprintf(copy, sizeof(copy), "%s", url);
	ck_assert_int_eq(amqp_parse_url(copy, &ci), AMQP_STATUS_OK);
	ck_assert_int_eq(amqp_socket_open_noblock(sock, ci.host, ci.port, &tv), AMQP_STATUS_OK);
	amqp_set_rpc_timeout(c, &tv);
	ck_assert_int_eq(amqp_login(c, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user,
				    ci.password).reply_type,
			 AMQP_RESPONSE_NORMAL);
	amqp_channel_open(c, 1);
	ck_assert_int_eq(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
	amqp_basic_consume(c, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
			   amqp_empty_table);
	r = amqp_get_rpc_reply(c);
	if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
		code = ((amqp_channel_close_t *)r.reply.decoded)->reply_code;
	else
		ck_assert_int_eq(r.reply_type, AMQP_RESPONSE_NORMAL);
	amqp_connection_close(c, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(c);
	return code;
}

START_TEST(least_privilege_broker_users)
{
	char url[SVC_COUNT][160], arg[SVC_COUNT][192], saga[UUID_STR_LEN];
	int port = harness_broker()->port;

	for (int s = 0; s < SVC_COUNT; s++) {
		snprintf(url[s], sizeof(url[s]), "amqp://%s:pw-%d@127.0.0.1:%d/%%2f", lp_user[s], s,
			 port);
		snprintf(arg[s], sizeof(arg[s]), "AMQP_URL=amqp://%s:pw-%d@127.0.0.1:%d/%%2f",
			 lp_user[s], s, port);
		char pw[16];

		snprintf(pw, sizeof(pw), "pw-%d", s);
		ck_assert_int_eq(broker_ctl(harness_broker(), NULL, 0, "add_user", lp_user[s], pw,
					    NULL), 0);
		ck_assert_int_eq(broker_ctl(harness_broker(), NULL, 0, "set_permissions", "-p", "/",
					    lp_user[s], lp_perm[s][0], lp_perm[s][1], lp_perm[s][2],
					    NULL), 0);
	}
	/* payment first: it may not declare pgsaga.dead nor its peers' queues */
	env_start(&env, SVC_PAY, (const char *const[]){ arg[SVC_PAY], NULL });
	env_start(&env, SVC_INV, (const char *const[]){ arg[SVC_INV], NULL });
	env_start(&env, SVC_ORCH, (const char *const[]){ arg[SVC_ORCH], NULL });
	all_connected();
	ck_assert_int_eq(broker_queue_depth(harness_amqp_url(), "pgsaga.dead"), 0);

	free(env_sql(&env, "INSERT INTO inventory.stock VALUES ('LP1', 5)", 0, NULL));
	env_new_order(&env, "c-lp", "LP1", 1, 100, saga);
	ck_assert(env_wait_sql(&env, "SELECT state FROM orchestrator.saga_instances", "Completed",
			       WAIT_MS));

	ck_assert_int_eq(consume_reply_code(url[SVC_PAY], "pgsaga.orchestrator"),
			 AMQP_ACCESS_REFUSED);
	ck_assert_int_eq(consume_reply_code(url[SVC_PAY], "pgsaga.dead"), AMQP_ACCESS_REFUSED);
	ck_assert_int_eq(consume_reply_code(url[SVC_PAY], "pgsaga.payment"), 0);
}
END_TEST

static Suite *amqp_suite(void)
{
	Suite *s = suite_create("amqp");
	TCase *tc = tcase_create("amqp");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 180);
	suite_add_tcase(s, tc);
	tcase_add_test(tc, message_is_the_outbox_row);
	tcase_add_test(tc, poison_messages_go_to_dead_letter_queue);
	tcase_add_test(tc, consumer_killed_before_ack);
	tcase_add_test(tc, memory_alarm_pauses_publishing);
	tcase_add_test(tc, silent_broker_is_noticed);
	tcase_add_test(tc, unconfirmed_publish_times_out);
	tcase_add_test(tc, broker_killed_and_restarted);
	tcase_add_test(tc, least_privilege_broker_users);
	return s;
}

int main(void)
{
	setenv("SAGA_TEST_TRANSPORT", "amqp", 1);
	return harness_run(amqp_suite());
}
