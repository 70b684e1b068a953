/*
 * groupkill: payment is SIGKILLed while a group commit (db_query_grouped,
 * src/lib/pg/db.c) holding several PayCommands is in flight, and every saga of
 * the group must still be charged exactly once.
 *
 * How the group is made to form and stay in flight, without sleeps:
 *  - payment runs with DB_WRITERS=1: one pool connection runs its writes,
 *    so writes that arrive while it is busy can only wait, and go out
 *    together, as one pipeline and one transaction, when it is free again
 *    (with 2 writers they could split between two transactions, or one of
 *    them run alone: nothing to count on);
 *  - the test's own connection B locks the account of customer gk-y and
 *    one order of gk-y is placed: its PayCommand takes the writer and waits
 *    for B's lock;
 *  - connection A locks the account of gk-x, and orders of gk-w and gk-x
 *    are placed: their PayCommands wait in payment's queue
 *    (saga_db_pool_waiting) behind the writer;
 *  - B rolls back: gk-y's payment commits, the writer is free, and the
 *    waiting PayCommands go out on it as one group. A group runs its
 *    statements ordered by customer, so gk-w's run (their charges hold
 *    gk-w's account row) and the first of gk-x's waits for A's lock. The
 *    test sees it in pg_stat_activity (one payment backend waiting for A)
 *    and in payment's gauges: nothing waits in the queue any more, and the
 *    pool runs at least N_GROUP statements (saga_db_pool_in_use counts
 *    statements, one per member of a group) on its only writer; were each
 *    PayCommand sent alone, N_GROUP - 1 would still wait in the queue. And
 *    gk-w's charges ran but did not commit: gk-w's row is locked, and no
 *    payment of the group is visible.
 * Then payment is SIGKILLed and A rolls back.
 *
 * What happens to the group depends on when PostgreSQL learns that its
 * client is gone. By default a backend waiting for a lock does not look at
 * its socket: when the lock is released it reads the rest of the pipeline,
 * already in its receive buffer, down to the Sync, and commits the whole
 * group for a client that no longer exists (the answers are lost, as when
 * a response is dropped). With client_connection_check_interval set, the
 * backend notices the closed socket while it waits and dies: the group,
 * gk-w's charges included, rolls back. The test runs both ways (two cases)
 * and asserts each outcome: all of the group committed in the first, none
 * of it in the second, never a part.
 *
 * Then payment starts again, the orchestrator (HTTP) or the broker (AMQP,
 * the deliveries were never acknowledged) delivers the PayCommands again,
 * and every saga must end Completed, charged once: one captured payment per
 * saga, the account down by the sum of the amounts, each PayCommand once
 * in payment's inbox, the stock down by the sum of the quantities, no dead
 * letter.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker.h"
#include "harness.h"
#include "metrics_reader.h"

#define N_W 2     /* gk-w's orders: in the group before gk-x's, they run */
#define N_X 4     /* gk-x's orders: the first waits for the test's lock */
#define N_GROUP (N_W + N_X)
#define N_SAGAS (N_GROUP + 1) /* and gk-y's, which holds the writer meanwhile */
#define WAIT_MS 20000
#define BALANCE 1000000L
#define STOCK 100L

static struct saga_env env;

/*
 * The orchestrator waits for payment's answers as long as the test holds
 * the locks (no second delivery of a PayCommand before the kill: the group
 * holds each once), and retries quickly once payment is back (the harness's
 * RETRY_BASE_MS). DB_WRITERS=1: see the top of the file. LEASE_MS: the
 * events of a group that commits after the kill are sent by payment's
 * outbox once the dead handler's claim on them lapses.
 */
static const char *const orch_extra[] = { "HTTP_TIMEOUT_MS=60000", NULL };
static const char *const pay_extra[] = { "DB_WRITERS=1", "HTTP_TIMEOUT_MS=60000", "LEASE_MS=1000",
					 NULL };

/* The group's sagas: gk-w's and gk-x's. */
#define IN_GROUP " s.customer_id IN ('gk-w', 'gk-x')"

/* A blocking connection of the test's own, as superuser. */
static PGconn *connect_admin(void)
{
	PGconn *c = PQconnectdb(env.admin_url);

	ck_assert_msg(PQstatus(c) == CONNECTION_OK, "connect: %s", PQerrorMessage(c));
	return c;
}

/* BEGIN, then the customer's account row locked until the caller ends it. */
static PGconn *lock_account(const char *customer)
{
	PGconn *c = connect_admin();
	const char *p[1] = { customer };

	sql_exec_ok(c, "BEGIN", 0, NULL);
	sql_exec_ok(c, "SELECT balance FROM payment.accounts WHERE customer_id = $1 FOR UPDATE", 1, p);
	return c;
}

/* Payment backends waiting for a lock that the backend pid holds. */
static long long waiting_for(int pid)
{
	return env_sql_llf(&env, "SELECT count(*) FROM pg_stat_activity"
				 " WHERE usename = 'saga_payment' AND wait_event_type = 'Lock'"
				 " AND %d = ANY (pg_blocking_pids(pid))",
			   pid);
}

/* Polls ok() every 20 ms; fails the test, naming what, after WAIT_MS. */
static void wait_for(const char *what, bool (*ok)(void))
{
	for (int tries = WAIT_MS / 20; !ok(); tries--) {
		ck_assert_msg(tries > 0, "never: %s", what);
		usleep(20000);
	}
}

static int lock_a_pid, lock_b_pid;
static double seen_waiting, seen_in_use;
static long long seen_lock_waiters;

static bool y_waits(void)
{
	return waiting_for(lock_b_pid) == 1;
}

static bool group_queued(void)
{
	return metrics_read_series(env.port[SVC_PAY], "saga_db_pool_waiting") >= N_GROUP;
}

/* The group is out: one backend waits for A, nothing in the queue, N_GROUP run. */
static bool group_in_flight(void)
{
	seen_lock_waiters = waiting_for(lock_a_pid);
	seen_waiting = metrics_read_series(env.port[SVC_PAY], "saga_db_pool_waiting");
	seen_in_use = metrics_read_series(env.port[SVC_PAY], "saga_db_pool_in_use");
	return seen_lock_waiters == 1 && seen_waiting == 0 && seen_in_use >= N_GROUP;
}

static bool payment_backends_gone(void)
{
	return env_sql_llf(&env, "SELECT count(*) FROM pg_stat_activity"
				 " WHERE usename = 'saga_payment'") == 0;
}

/* The group's sagas with a payments row; with an inbox row for their PayCommand. */
static long long group_payments(void)
{
	return env_sql_llf(&env, "SELECT count(*) FROM payment.payments p"
				 " JOIN orchestrator.saga_instances s USING (saga_id) WHERE" IN_GROUP);
}

static long long group_inbox(void)
{
	return env_sql_llf(&env, "SELECT count(*) FROM payment.processed_messages i"
				 " JOIN orchestrator.outbox_messages o ON o.message_id = i.message_id"
				 " JOIN orchestrator.saga_instances s"
				 "   ON s.saga_id = (o.payload->>'sagaId')::uuid"
				 " WHERE o.type = 'PayCommand' AND" IN_GROUP);
}

static long long balance_of(const char *customer)
{
	return env_sql_llf(&env, "SELECT balance FROM payment.accounts WHERE customer_id = '%s'",
			   customer);
}

/* What the group's orders add up to, for the checks at the end. */
struct totals {
	long amount_w, amount_x, qty;
};

/*
 * Starts the services and the accounts, and puts the group in flight
 * (see the top of the file). Returns A, the connection whose lock on
 * gk-x's account the group's first gk-x statement waits for.
 */
static PGconn *group_in_flight_on_lock(struct totals *t)
{
	PGconn *a, *b;

	env_start(&env, SVC_INV, NULL);
	env_start(&env, SVC_PAY, pay_extra);
	env_start(&env, SVC_ORCH, orch_extra);
	/* as an operator does: accounts with enough on them, the stock */
	free(env_sqlf(&env, "INSERT INTO payment.accounts (customer_id, balance) VALUES"
			    " ('gk-w', %ld), ('gk-x', %ld), ('gk-y', %ld)",
		      BALANCE, BALANCE, BALANCE));
	free(env_sqlf(&env, "INSERT INTO inventory.stock (item_id, available)"
			    " VALUES ('gk-item', %ld)", STOCK));

	/* gk-y's PayCommand takes the only writer and waits for B */
	b = lock_account("gk-y");
	lock_b_pid = PQbackendPID(b);
	env_new_order(&env, "gk-y", "gk-item", 1, 100, NULL);
	wait_for("gk-y's payment waits for the test's lock", y_waits);

	/* gk-w's and gk-x's PayCommands queue behind it */
	a = lock_account("gk-x");
	lock_a_pid = PQbackendPID(a);
	for (long i = 1; i <= N_GROUP; i++) {
		long amount = 100 * i + 7;

		env_new_order(&env, i <= N_W ? "gk-w" : "gk-x", "gk-item", i, amount, NULL);
		*(i <= N_W ? &t->amount_w : &t->amount_x) += amount;
		t->qty += i;
	}
	wait_for("payment holds the group's PayCommands in its queue", group_queued);

	/* the writer is free: the waiting PayCommands go out as one group */
	sql_exec_ok(b, "ROLLBACK", 0, NULL);
	PQfinish(b);
	for (int tries = WAIT_MS / 20; !group_in_flight(); tries--) {
		ck_assert_msg(tries > 0,
			      "no group of the %d PayCommands in flight: %lld payment backends wait "
			      "for the test's lock, %.0f statements wait in the pool, %.0f run",
			      N_GROUP, seen_lock_waiters, seen_waiting, seen_in_use);
		usleep(20000);
	}
	/* gk-w's charges ran in it (they hold gk-w's row) and did not commit */
	ck_assert_str_eq(sql_state_as(env.admin_url, "SELECT 1 FROM payment.accounts"
						     " WHERE customer_id = 'gk-w' FOR UPDATE NOWAIT"),
			 "55P03");
	ck_assert_int_eq(group_payments(), 0);
	ck_assert_int_eq(balance_of("gk-w"), BALANCE);
	return a;
}

/* Every saga Completed, charged once, reserved once; nothing undelivered or dead. */
static void check_each_saga_charged_once(const struct totals *t)
{
	char want[16];

	snprintf(want, sizeof(want), "%d", N_SAGAS);
	ck_assert_msg(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					 " WHERE state IN ('Completed', 'Failed', 'Compensated')",
				   want, WAIT_MS),
		      "the sagas did not all end");
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					   " WHERE state = 'Completed'"),
			 N_SAGAS);
	/* one payments row per saga, captured, for its amount */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM payment.payments"), N_SAGAS);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM payment.payments p"
					   " JOIN orchestrator.saga_instances s USING (saga_id)"
					   " WHERE p.status = 'captured' AND p.amount = s.amount"
					   " AND p.customer_id = s.customer_id"),
			 N_SAGAS);
	ck_assert_int_eq(balance_of("gk-w"), BALANCE - t->amount_w);
	ck_assert_int_eq(balance_of("gk-x"), BALANCE - t->amount_x);
	ck_assert_int_eq(balance_of("gk-y"), BALANCE - 100);
	/* each saga had one PayCommand, and payment's inbox holds it once */
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(DISTINCT payload->>'sagaId')"
					   " * 1000 + count(*) FROM orchestrator.outbox_messages"
					   " WHERE type = 'PayCommand'"),
			 N_SAGAS * 1000 + N_SAGAS);
	ck_assert_int_eq(group_inbox(), N_GROUP);
	ck_assert_int_eq(env_sql_llf(&env, "SELECT available FROM inventory.stock"
					   " WHERE item_id = 'gk-item'"),
			 STOCK - t->qty - 1);
	/* every message delivered, none dead */
	ck_assert_msg(env_wait_sql(&env,
				   "SELECT (SELECT count(*) FROM orchestrator.outbox_messages"
				   "         WHERE processed_at IS NULL AND dead_at IS NULL)"
				   "     + (SELECT count(*) FROM payment.outbox_messages"
				   "         WHERE processed_at IS NULL AND dead_at IS NULL)"
				   "     + (SELECT count(*) FROM inventory.outbox_messages"
				   "         WHERE processed_at IS NULL AND dead_at IS NULL)",
				   "0", WAIT_MS),
		      "messages still undelivered");
	ck_assert_int_eq(env_sql_llf(&env, "SELECT (SELECT count(*) FROM orchestrator.outbox_messages"
					   "         WHERE dead_at IS NOT NULL)"
					   "     + (SELECT count(*) FROM payment.outbox_messages"
					   "         WHERE dead_at IS NOT NULL)"
					   "     + (SELECT count(*) FROM inventory.outbox_messages"
					   "         WHERE dead_at IS NOT NULL)"),
			 0);
	if (harness_amqp())
		ck_assert_int_eq(broker_queue_depth(harness_amqp_url(), "pgsaga.dead"), 0);
}

static void group_dies_with_payment(bool check_client)
{
	struct totals t = { 0 };
	PGconn *a;
	int status;

	if (check_client)
		/* this database's payment role only: its backends look at their
		 * socket every 100 ms, so they notice a dead client while they wait */
		free(env_sqlf(&env, "ALTER ROLE saga_payment IN DATABASE %s"
				    " SET client_connection_check_interval = '100ms'",
			      env.dbname));
	a = group_in_flight_on_lock(&t);

	status = env_stop(&env, SVC_PAY, SIGKILL);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	if (check_client)
		/* the backend notices while it still waits for A's lock */
		wait_for("payment's backends end while A holds its lock", payment_backends_gone);
	sql_exec_ok(a, "ROLLBACK", 0, NULL);
	PQfinish(a);
	/* whatever the backends do with the group, once they are gone it is settled */
	wait_for("payment's backends end", payment_backends_gone);
	{
		long long paid = group_payments(), inbox = group_inbox();

		printf("groupkill (%s, %s): after the kill, %lld of the group's %d payments "
		       "committed, %lld of its inbox rows\n",
		       harness_transport(), check_client ? "client check" : "default", paid,
		       N_GROUP, inbox);
		fflush(stdout);
		/* one transaction: all of it or nothing, never a part */
		ck_assert_int_eq(inbox, paid);
		ck_assert_int_eq(paid, check_client ? 0 : N_GROUP);
		ck_assert_int_eq(balance_of("gk-w"), check_client ? BALANCE : BALANCE - t.amount_w);
	}

	/* back: every PayCommand is delivered again, each saga charged once */
	env_start(&env, SVC_PAY, pay_extra);
	check_each_saga_charged_once(&t);
	for (int s = 0; s < SVC_COUNT; s++) {
		status = env_stop(&env, (enum svc)s, SIGTERM);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "service %d did not exit cleanly on SIGTERM (status 0x%x)", s, status);
	}
}

START_TEST(group_in_flight_commits_whole_after_kill)
{
	group_dies_with_payment(false);
}
END_TEST

START_TEST(group_in_flight_rolls_back_with_client_check)
{
	group_dies_with_payment(true);
}
END_TEST

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
}

int main(void)
{
	Suite *s = suite_create("groupkill");
	TCase *tc = tcase_create("groupkill");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, group_in_flight_commits_whole_after_kill);
	tcase_add_test(tc, group_in_flight_rolls_back_with_client_check);
	suite_add_tcase(s, tc);
	return harness_run(s);
}
