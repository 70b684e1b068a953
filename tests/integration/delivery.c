/*
 * Delivery between the services, through the outboxes: what cannot be
 * delivered waits and is sent again, a lost answer is deduplicated, what
 * can never be delivered becomes a dead letter and can be retried, a
 * failing peer is not hammered (circuit breaker), its Retry-After is when
 * the retry comes, marks are written before a service exits, instances
 * share the outboxes, peer names resolve without blocking, and what is
 * done is purged after its retention.
 */
#include <arpa/inet.h>
#include <check.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "metrics_reader.h"
#include "suites.h"
#include "uuid.h"

/* Polls a series until it is at least min; false after WAIT_MS. */
static bool wait_metric(enum svc s, const char *series, double min)
{
	for (int waited = 0; waited < WAIT_MS; waited += 50) {
		if (metrics_read_series(env.port[s], series) >= min)
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

/* Whether schema's outbox row for saga is marked processed. */
static bool marked(const char *schema, const char *saga)
{
	return env_sql_llf(&env,
			   "SELECT count(*) FROM %s.outbox_messages"
			   " WHERE payload->>'sagaId' = '%s' AND processed_at IS NOT NULL",
			   schema, saga) > 0;
}

#define OK_TO(peer) "saga_outbox_delivery_attempts_total{peer=\"" peer "\",outcome=\"ok\"}"

START_TEST(outbox_redelivery)
{
	char sagas[5][UUID_STR_LEN];
	const char *const failing[] = { "FAULT_FAIL_RATE=1", NULL };

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
	faults_off(SVC_PAY);
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
	int sent = (int)metrics_read_series(env.port[counter], series);
	ck_assert_int_ge(sent, 3);
	ck_assert_int_lt(sent, 10);
	usleep(1000 * 1000);
	ck_assert_int_eq((int)metrics_read_series(env.port[counter], series), sent); /* nothing while open */
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
	ck_assert_int_eq((int)metrics_read_series(env.port[SVC_ORCH], gauge), 1); /* open */
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

/*
 * Peer names are resolved by libevent's asynchronous resolver, never by a
 * blocking getaddrinfo() on the loop. The services run with a getaddrinfo()
 * that never returns for "localhost" (tests/support/blockdns.c) and peers named
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

Suite *delivery_suite(void)
{
	Suite *s = suite_create("delivery");
	TCase *delivery = fixture_tcase("delivery");

	tcase_add_test(delivery, outbox_redelivery);
	tcase_add_test(delivery, lost_response_is_deduplicated);
	tcase_add_test(delivery, dead_letters_and_retry);
	tcase_add_test(delivery, circuit_breaker_stops_hammering);
	tcase_add_test(delivery, retry_after_is_when_the_retry_comes);
	tcase_add_test(delivery, graceful_shutdown_exits_zero);
	tcase_add_test(delivery, marks_written_at_shutdown);
	tcase_add_test(delivery, several_instances);
	tcase_add_test(delivery, peer_names_resolved_without_blocking);
	tcase_add_test(delivery, retention_purges_what_is_done);
	suite_add_tcase(s, delivery);
	return s;
}
