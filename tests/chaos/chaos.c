/*
 * chaos: many sagas of both shipped definitions while the system is broken on
 * purpose (issue #3, item 10), then the invariants of docs/protocol.md
 * checked to the unit.
 *
 * For CHAOS_SECONDS, client threads start CHAOS_SAGAS sagas (evenly paced)
 * over a few items with limited stock, from customers whose credit
 * (PAYMENT_DEFAULT_CREDIT) covers only part of what they order. Two in three
 * are orders (POST /orders: payment, inventory); one in three is
 * order-with-shipping (POST /sagas/order-with-shipping: then shipping, the
 * participant made of SQL, sql/shipping/shipping.sql run by saga-participant),
 * one in eight of those to the address "nowhere", which shipping refuses, so
 * the saga compensates. Meanwhile:
 *  - the orchestrator, payment, inventory and shipping are SIGKILLed at
 *    random and restarted (CHAOS_KILLS in all, each at least once when there
 *    are four or more);
 *  - payment, inventory and shipping answer 500 (FAULT_FAIL_RATE) and commit
 *    then drop the response (FAULT_DROP_RESPONSE_RATE);
 *  - PostgreSQL is stopped and started again once, half way through;
 *  - under SAGA_TEST_TRANSPORT=amqp, the RabbitMQ node is SIGKILLed and
 *    started again once, a quarter of the way through (nothing may then
 *    land in pgsaga.dead).
 * A short STEP_TIMEOUT_MS makes sagas stuck behind a dead service
 * compensate, so timeouts race with late answers.
 *
 * A client whose POST gets no answer (killed orchestrator), a 503
 * (database down) or a 429 (admission control: a deployment under faults
 * finishes less, so it takes fewer starts) sends the same request again
 * with the same Idempotency-Key until it gets its 201: that is what the key
 * is for, and a refused key must then be taken as new.
 *
 * Then the faults stop, and within CHAOS_CONVERGE_S every saga must be
 * terminal and every outbox row (shipping's too) delivered, none dead;
 * exactly one saga per key must exist; each saga's history must hold one
 * row per version; every check of sql/audit.sql, run as saga_auditor, must
 * return no row; and each order-with-shipping saga must have one shipment
 * with status shipped when Completed, none when Failed or Compensated.
 *
 * Knobs (environment): CHAOS_SAGAS (500), CHAOS_KILLS (10), CHAOS_SECONDS
 * (30), CHAOS_CONVERGE_S (60), CHAOS_THREADS (8), CHAOS_SEED (time).
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "broker.h"
#include "clock.h"
#include "harness.h"
#include "jsonx.h"
#include "metrics_reader.h"
#include "uuid.h"

#define N_ITEMS 6
#define N_CUSTOMERS 25
#define MAX_THREADS 64
#define ORDER_GIVE_UP_MS 120000

static struct saga_env env;

struct knobs {
	long sagas, kills, seconds, converge_s, threads;
	unsigned long seed;
};
static struct knobs K;

static long knob(const char *name, long def, long min, long max)
{
	const char *v = getenv(name);
	char *end;
	long n;

	if (!v || !*v)
		return def;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || *end || n < min || n > max) {
		fprintf(stderr, "chaos: %s=%s is not a number in [%ld, %ld]\n", name, v, min, max);
		exit(2);
	}
	return n;
}

/* xorshift64*: cheap, seedable, one state per thread */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

static long rnd_in(uint64_t *s, long lo, long hi)
{
	return lo + (long)(rnd(s) % (uint64_t)(hi - lo + 1));
}

/* --- the services' settings ------------------------------------------------ */

static char credit_env[64], shipping_url_env[64], definitions_env[PATH_MAX + 32];

/* Every (re)start of a service gets the same settings. */
static const char *orch_extra[] = {
	"STEP_TIMEOUT_MS=3000", "RETRY_BASE_MS=50", "RETRY_CAP_MS=1000",
	"RETRY_MAX_ATTEMPTS=1000", "LEASE_MS=2000", "HTTP_TIMEOUT_MS=2000",
	"BREAKER_OPEN_MS=500", shipping_url_env, definitions_env, NULL,
};
static const char *pay_extra[] = {
	"RETRY_BASE_MS=50", "RETRY_CAP_MS=1000", "RETRY_MAX_ATTEMPTS=1000", "LEASE_MS=2000",
	"HTTP_TIMEOUT_MS=2000", "BREAKER_OPEN_MS=500", "FAULT_FAIL_RATE=0.15",
	"FAULT_DROP_RESPONSE_RATE=0.15", credit_env, NULL,
};
static const char *const inv_extra[] = {
	"RETRY_BASE_MS=50", "RETRY_CAP_MS=1000", "RETRY_MAX_ATTEMPTS=1000", "LEASE_MS=2000",
	"HTTP_TIMEOUT_MS=2000", "BREAKER_OPEN_MS=500", "FAULT_FAIL_RATE=0.15",
	"FAULT_DROP_RESPONSE_RATE=0.15", NULL,
};

/* shipping: saga-participant running sql/shipping/shipping.sql, faulty as the others */
static const char *const ship_extra[] = {
	"PARTICIPANT_COMMANDS=ShipOrderCommand=ship_order(OrderShipped|ShippingFailed)"
	"/CancelShipmentCommand=cancel_shipment(ShipmentCancelled)",
	"RETRY_BASE_MS=50", "RETRY_CAP_MS=1000", "RETRY_MAX_ATTEMPTS=1000", "LEASE_MS=2000",
	"HTTP_TIMEOUT_MS=2000", "BREAKER_OPEN_MS=500", "FAULT_FAIL_RATE=0.15",
	"FAULT_DROP_RESPONSE_RATE=0.15", NULL,
};

/*
 * The victims of kills: the three services and shipping, which is no
 * enum svc (a participant, started by env_start_participant).
 */
#define SHIPPING SVC_COUNT
#define N_VICTIMS (SVC_COUNT + 1)

static int shipping_port;

static const char *const *extra_of(int s)
{
	return s == SVC_ORCH  ? (const char *const *)orch_extra
	       : s == SVC_PAY ? (const char *const *)pay_extra
	       : s == SVC_INV ? inv_extra
			      : ship_extra;
}

static const char *const svc_names[N_VICTIMS] = { "orchestrator", "payment", "inventory",
						  "shipping" };

static int port_of(int s)
{
	return s == SHIPPING ? shipping_port : env.port[s];
}

static void start_victim(int s)
{
	if (s == SHIPPING)
		env_start_participant(&env, "shipping", shipping_port, ship_extra);
	else
		env_start(&env, (enum svc)s, extra_of(s));
}

static int stop_victim(int s, int sig)
{
	return s == SHIPPING ? env_stop_participant(&env, "shipping", sig)
			     : env_stop(&env, (enum svc)s, sig);
}

static pid_t pid_of(int s)
{
	return s == SHIPPING ? env_participant_pid(&env, "shipping") : env.pid[s];
}

/* --- clients ----------------------------------------------------------------- */

struct order {
	char key[UUID_STR_LEN];
	char body[200];
	const char *path;           /* POST /orders or /sagas/order-with-shipping */
	char saga_id[UUID_STR_LEN]; /* from the 201 */
	int tries;
	bool replayed;              /* the 201 carried Idempotent-Replayed */
	int status;                 /* last status, 201 on success */
	char error[160];            /* why it failed, "" when it did not */
};

static struct order *orders;
static int64_t t_start;
static atomic_long retries_503, retries_429, retries_conn, replays, orders_done;

/* Places one order, again and again with the same key until it is accepted. */
static void place(struct order *o)
{
	char kh[64];
	const char *h[2] = { kh, NULL };
	int64_t give_up = clock_ms() + ORDER_GIVE_UP_MS;

	snprintf(kh, sizeof(kh), "Idempotency-Key: %s", o->key);
	for (;;) {
		struct http_resp r;
		int rc = http_do(env.port[SVC_ORCH], "POST", o->path, h, o->body, (size_t)-1, &r);

		o->tries++;
		o->status = rc == 0 ? r.status : 0;
		if (rc == 0 && r.status == 201) {
			char err[128];
			struct json_object *j = jsonx_parse(r.body, r.body_len, err, sizeof(err)), *v;
			char *replayed = http_header(&r, "Idempotent-Replayed");

			if (j && json_object_object_get_ex(j, "sagaId", &v))
				snprintf(o->saga_id, sizeof(o->saga_id), "%s", json_object_get_string(v));
			else
				snprintf(o->error, sizeof(o->error), "201 without a sagaId: %.100s", r.body);
			if (replayed) {
				o->replayed = true;
				atomic_fetch_add(&replays, 1);
				if (!j || !json_object_object_get_ex(j, "duplicated", &v) ||
				    !json_object_get_boolean(v))
					snprintf(o->error, sizeof(o->error),
						 "replay without duplicated:true: %.100s", r.body);
			}
			free(replayed);
			json_object_put(j);
			http_resp_free(&r);
			atomic_fetch_add(&orders_done, 1);
			return;
		}
		/* 503: the database is down; no answer: the orchestrator is */
		if (rc != 0 || r.status == 0)
			atomic_fetch_add(&retries_conn, 1);
		else if (r.status == 503)
			atomic_fetch_add(&retries_503, 1);
		else if (r.status == 429) {
			char *after = http_header(&r, "Retry-After");
			long wait_s = after ? atol(after) : 0;

			atomic_fetch_add(&retries_429, 1);
			free(after);
			if (wait_s < 1) {
				snprintf(o->error, sizeof(o->error), "429 without Retry-After: %.100s",
					 r.body);
				http_resp_free(&r);
				atomic_fetch_add(&orders_done, 1);
				return;
			}
			/* as told, but within the test's patience */
			sleep_ms(wait_s > 2 ? 2000 : wait_s * 1000);
		} else {
			snprintf(o->error, sizeof(o->error), "POST %s: %d %.100s", o->path, r.status,
				 r.body);
			http_resp_free(&r);
			atomic_fetch_add(&orders_done, 1);
			return;
		}
		http_resp_free(&r);
		if (clock_ms() > give_up) {
			snprintf(o->error, sizeof(o->error), "no 201 after %d tries in %d s", o->tries,
				 ORDER_GIVE_UP_MS / 1000);
			atomic_fetch_add(&orders_done, 1);
			return;
		}
		sleep_ms(50 + (o->tries > 10 ? 200 : 10 * o->tries));
	}
}

/*
 * Every tenth order is sent once more after its 201, as a client that lost
 * the answer would: the same saga must come back, marked duplicated.
 */
static void place_again(struct order *o)
{
	struct order again = *o;

	again.saga_id[0] = '\0';
	again.error[0] = '\0';
	place(&again);
	atomic_fetch_sub(&orders_done, 1);
	if (again.error[0])
		snprintf(o->error, sizeof(o->error), "sent again: %s", again.error);
	else if (strcmp(again.saga_id, o->saga_id) != 0)
		snprintf(o->error, sizeof(o->error), "sent again: saga %s, first %s", again.saga_id,
			 o->saga_id);
	else if (again.tries == 1 && !again.replayed)
		snprintf(o->error, sizeof(o->error), "sent again: not marked as a replay");
}

struct client {
	int index;
	pthread_t th;
};

static void *client_run(void *arg)
{
	struct client *c = arg;
	/* order i is due at t_start + i * spacing: the load spans the fault period */
	double spacing = (double)K.seconds * 1000.0 / (double)K.sagas;

	for (long i = c->index; i < K.sagas; i += K.threads) {
		int64_t due = t_start + (int64_t)((double)i * spacing);
		int64_t wait = due - clock_ms();

		if (wait > 0)
			sleep_ms(wait);
		place(&orders[i]);
		if (i % 10 == 0 && !orders[i].error[0])
			place_again(&orders[i]);
	}
	return NULL;
}

static void make_orders(uint64_t *seed, long *credit, long *stock)
{
	long per_customer = (K.sagas + N_CUSTOMERS - 1) / N_CUSTOMERS;
	long per_item = (K.sagas + N_ITEMS - 1) / N_ITEMS;

	/* Credit for about 60% of what a customer orders (amounts 100..1000,
	 * 550 on average), stock for about 60% of an item's orders (qty 1..3):
	 * some payments decline and some reservations fail. */
	*credit = per_customer * 550 * 6 / 10;
	*stock = per_item * 2 * 6 / 10;
	if (*stock < 2)
		*stock = 2;
	orders = calloc((size_t)K.sagas, sizeof(*orders));
	ck_assert_ptr_nonnull(orders);
	for (long i = 0; i < K.sagas; i++) {
		long customer = rnd_in(seed, 0, N_CUSTOMERS - 1), item = rnd_in(seed, 0, N_ITEMS - 1);
		long qty = rnd_in(seed, 1, 3), amount = rnd_in(seed, 100, 1000);
		int n;

		uuid_new(orders[i].key);
		/* a third ship what they order, one in eight of those to nowhere */
		if (i % 3 != 2) {
			orders[i].path = "/orders";
			n = snprintf(orders[i].body, sizeof(orders[i].body),
				     "{\"customerId\":\"cust-%02ld\",\"itemId\":\"item-%ld\","
				     "\"qty\":%ld,\"amount\":%ld}",
				     customer, item, qty, amount);
		} else {
			orders[i].path = "/sagas/order-with-shipping";
			n = snprintf(orders[i].body, sizeof(orders[i].body),
				     "{\"customerId\":\"cust-%02ld\",\"itemId\":\"item-%ld\","
				     "\"qty\":%ld,\"amount\":%ld,\"address\":\"%s\"}",
				     customer, item, qty, amount,
				     rnd_in(seed, 0, 7) == 0 ? "nowhere" : "12 Harbour Road, Leith");
		}
		ck_assert_int_lt(n, (int)sizeof(orders[i].body));
	}
}

/* --- faults ----------------------------------------------------------------- */

struct chaos_stats {
	int kills[N_VICTIMS];
	long db_down_ms;
	long broker_down_ms; /* amqp: SIGKILL to accepting connections again */
	double inbox_dups; /* from /metrics, scraped before each kill and at the end */
};

static void scrape_dups(struct chaos_stats *st, int s)
{
	double v = metrics_read_sum(port_of(s), "saga_inbox_duplicates_total");

	if (v > 0)
		st->inbox_dups += v;
}

static void kill_and_restart(struct chaos_stats *st, int s, int down_ms)
{
	int status;

	scrape_dups(st, s);
	status = stop_victim(s, SIGKILL);
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		      "%s had exited by itself before the kill (status 0x%x)", svc_names[s], status);
	st->kills[s]++;
	sleep_ms(down_ms);
	start_victim(s);
}

/* The kill schedule: each service once per round of four, rounds shuffled. */
static int victim(uint64_t *seed, int k)
{
	static int round[N_VICTIMS];

	if (k % N_VICTIMS == 0) {
		for (int i = 0; i < N_VICTIMS; i++)
			round[i] = i;
		for (int i = N_VICTIMS - 1; i > 0; i--) {
			int j = (int)rnd_in(seed, 0, i);
			int t = round[i];

			round[i] = round[j];
			round[j] = t;
		}
	}
	return round[k % N_VICTIMS];
}

static void set_faults(int s, const char *body)
{
	char auth[128];
	const char *h[2] = { auth, NULL };
	struct http_resp r;

	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", env.token);
	ck_assert_int_eq(http_do(port_of(s), "POST", "/admin/faults", h, body, (size_t)-1, &r), 0);
	ck_assert_msg(r.status == 200, "/admin/faults on %s: %d %s", svc_names[s], r.status, r.body);
	http_resp_free(&r);
}

/* --- checks ------------------------------------------------------------------ */

static const char unsettled_sql[] =
	"SELECT (SELECT count(*) FROM orchestrator.saga_instances"
	"         WHERE state NOT IN ('Completed', 'Failed', 'Compensated'))"
	"     + (SELECT count(*) FROM orchestrator.outbox_messages"
	"         WHERE processed_at IS NULL AND dead_at IS NULL)"
	"     + (SELECT count(*) FROM payment.outbox_messages"
	"         WHERE processed_at IS NULL AND dead_at IS NULL)"
	"     + (SELECT count(*) FROM inventory.outbox_messages"
	"         WHERE processed_at IS NULL AND dead_at IS NULL)"
	"     + (SELECT count(*) FROM shipping.outbox_messages"
	"         WHERE processed_at IS NULL AND dead_at IS NULL)";


static char *sql_text(const char *sql)
{
	char *v = env_sql(&env, sql, 0, NULL);

	return v ? v : strdup("");
}

/* Exactly one saga per key, and it is the one the client was told about. */
static void check_one_saga_per_order(void)
{
	size_t cap = (size_t)K.sagas * (UUID_STR_LEN + 1) + 4;
	char *arr = malloc(cap), *p = arr;
	const char *params[1];

	ck_assert_ptr_nonnull(arr);
	*p++ = '{';
	for (long i = 0; i < K.sagas; i++) {
		if (i)
			*p++ = ',';
		memcpy(p, orders[i].saga_id, 36);
		p += 36;
	}
	*p++ = '}';
	*p = '\0';
	params[0] = arr;
	long long known = env_sql_ll(&env,
				     "SELECT count(DISTINCT s.saga_id) FROM orchestrator.saga_instances s"
				     " WHERE s.saga_id = ANY ($1::uuid[])",
				     1, params);
	long long distinct = env_sql_ll(&env, "SELECT count(DISTINCT x) FROM unnest($1::uuid[]) x",
					1, params);
	free(arr);
	ck_assert_msg(distinct == K.sagas, "clients got %lld distinct saga ids for %ld orders",
		      distinct, K.sagas);
	ck_assert_msg(known == K.sagas, "%lld of the %ld sagas the clients were told about exist",
		      known, K.sagas);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.saga_instances"), K.sagas);
	ck_assert_int_eq(env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.idempotency_records"), K.sagas);
}

START_TEST(chaos_invariants_hold)
{
	uint64_t seed = K.seed ? K.seed : 1;
	long credit, stock;
	struct chaos_stats st = { 0 };
	struct client clients[MAX_THREADS];
	char sql[256];

	printf("chaos: seed %lu, %ld sagas, %ld kills, %ld s of faults, %ld client threads\n", K.seed,
	       K.sagas, K.kills, K.seconds, K.threads);
	fflush(stdout);
	make_orders(&seed, &credit, &stock);
	snprintf(credit_env, sizeof(credit_env), "PAYMENT_DEFAULT_CREDIT=%ld", credit);
	shipping_port = harness_free_port();
	snprintf(shipping_url_env, sizeof(shipping_url_env), "SHIPPING_URL=http://127.0.0.1:%d",
		 shipping_port);
	snprintf(definitions_env, sizeof(definitions_env),
		 "SAGA_DEFINITIONS_DIR=%s/src/orchestrator/definitions", getenv("SAGA_SOURCE_DIR"));
	start_victim(SVC_INV);
	start_victim(SVC_PAY);
	start_victim(SHIPPING);
	start_victim(SVC_ORCH);
	for (int i = 0; i < N_ITEMS; i++) {
		snprintf(sql, sizeof(sql),
			 "INSERT INTO inventory.stock (item_id, available) VALUES ('item-%d', %ld)", i,
			 stock);
		free(env_sql(&env, sql, 0, NULL));
	}

	/* --- the fault period --- */
	t_start = clock_ms();
	for (long t = 0; t < K.threads; t++) {
		clients[t].index = (int)t;
		ck_assert_int_eq(pthread_create(&clients[t].th, NULL, client_run, &clients[t]), 0);
	}
	int64_t period = K.seconds * 1000;
	long db_restart_at = K.kills / 2; /* before this kill */
	bool db_restarted = false;
	long broker_restart_at = harness_amqp() ? K.kills / 4 : -1;
	for (long k = 0; k < K.kills || !db_restarted; k++) {
		/* kills spread over the period, each at a random point of its slot */
		int64_t slot = period / (K.kills + 1);
		int64_t due = t_start + slot * (k + 1) + rnd_in(&seed, -slot / 3, slot / 3);
		int64_t wait = due - clock_ms();

		if (wait > 0)
			sleep_ms(wait);
		if (!db_restarted && k >= db_restart_at) {
			st.db_down_ms = harness_cluster_restart((int)rnd_in(&seed, 500, 2000));
			db_restarted = true;
			printf("chaos: %.1f s: PostgreSQL restarted (%ld ms without it)\n",
			       (double)(clock_ms() - t_start) / 1000.0, st.db_down_ms);
			fflush(stdout);
		}
		if (k == broker_restart_at) {
			int64_t t0;

			broker_sync(harness_broker());
			t0 = clock_ms();
			broker_kill(harness_broker());
			sleep_ms(rnd_in(&seed, 500, 2000));
			broker_restart(harness_broker());
			st.broker_down_ms = (long)(clock_ms() - t0);
			printf("chaos: %.1f s: RabbitMQ killed and restarted (%ld ms without it)\n",
			       (double)(clock_ms() - t_start) / 1000.0, st.broker_down_ms);
			fflush(stdout);
		}
		if (k >= K.kills)
			break;
		/*
		 * Half the kills are short; the others keep the service down
		 * past STEP_TIMEOUT_MS, so sagas waiting on it compensate while
		 * their command is still undelivered (voided rows, late answers).
		 */
		int down = k % 2 ? (int)rnd_in(&seed, 0, 1000) : (int)rnd_in(&seed, 3000, 5000);

		kill_and_restart(&st, victim(&seed, (int)k), down);
	}
	for (long t = 0; t < K.threads; t++)
		pthread_join(clients[t].th, NULL);
	int64_t t_faults_end = clock_ms();

	for (long i = 0; i < K.sagas; i++)
		ck_assert_msg(orders[i].error[0] == '\0', "order %ld (key %s): %s", i, orders[i].key,
			      orders[i].error);

	/* --- the faults stop: everything must settle --- */
	set_faults(SVC_PAY, "{\"failRate\":0,\"dropResponseRate\":0,\"delayMs\":0}");
	set_faults(SVC_INV, "{\"failRate\":0,\"dropResponseRate\":0,\"delayMs\":0}");
	set_faults(SHIPPING, "{\"failRate\":0,\"dropResponseRate\":0,\"delayMs\":0}");
	bool settled = env_wait_sql(&env, unsettled_sql, "0", (int)K.converge_s * 1000);
	double converge_s = (double)(clock_ms() - t_faults_end) / 1000.0;

	if (!settled) {
		char *left = sql_text(
			"SELECT string_agg(format('%s %s v%s since %s', saga_id, state, version, updated_at),"
			" E'\\n' ORDER BY updated_at) FROM (SELECT * FROM orchestrator.saga_instances"
			" WHERE state NOT IN ('Completed','Failed','Compensated') LIMIT 20) s");
		char *pend = sql_text(
			"SELECT string_agg(format('%s %s %s attempts=%s next=%s err=%s', sch, type,"
			" message_id, attempt_count, next_attempt_at, last_error), E'\\n') FROM ("
			" SELECT 'orchestrator' sch, * FROM orchestrator.outbox_messages"
			"  WHERE processed_at IS NULL AND dead_at IS NULL"
			" UNION ALL SELECT 'payment', * FROM payment.outbox_messages"
			"  WHERE processed_at IS NULL AND dead_at IS NULL"
			" UNION ALL SELECT 'inventory', * FROM inventory.outbox_messages"
			"  WHERE processed_at IS NULL AND dead_at IS NULL"
			" UNION ALL SELECT 'shipping', * FROM shipping.outbox_messages"
			"  WHERE processed_at IS NULL AND dead_at IS NULL LIMIT 20) o");
		ck_abort_msg("not settled %ld s after the faults stopped\nsagas in flight:\n%s\n"
			     "undelivered outbox rows:\n%s",
			     K.converge_s, left, pend);
	}

	/* --- what the clients were told, and the timelines --- */
	check_one_saga_per_order();
	ck_assert_int_eq(env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances s"
				" WHERE s.version <> (SELECT count(*) FROM orchestrator.saga_history h"
				"                     WHERE h.saga_id = s.saga_id)"
				"    OR s.state <> (SELECT h.to_state FROM orchestrator.saga_history h"
				"                   WHERE h.saga_id = s.saga_id AND h.version = s.version)"),
			 0);

	/* --- the audit, as saga_auditor --- */
	struct audit_check *checks;
	size_t nchecks = audit_load(&checks);
	struct audit_result *res = calloc(nchecks, sizeof(*res));
	char failures[8192];
	size_t fo = 0;
	long dead = -1, in_flight = -1;

	ck_assert_ptr_nonnull(res);
	audit_run(env.auditor_url, checks, nchecks, res);
	failures[0] = '\0';
	for (size_t i = 0; i < nchecks; i++) {
		if (strcmp(checks[i].id, "dead_letters") == 0)
			dead = res[i].rows;
		if (strcmp(checks[i].id, "in_flight") == 0)
			in_flight = res[i].rows;
		/* after convergence nothing may be in flight or dead: info becomes a check */
		if (res[i].rows == 0 || fo > sizeof(failures) - 256)
			continue;
		fo += (size_t)snprintf(failures + fo, sizeof(failures) - fo, "\n%s %s: %ld rows\n%s",
				       checks[i].id, checks[i].label, res[i].rows, res[i].sample);
	}

	/* --- the summary --- */
	long long completed = env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.saga_instances WHERE state = 'Completed'");
	long long failed = env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.saga_instances WHERE state = 'Failed'");
	long long compensated = env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.saga_instances WHERE state = 'Compensated'");
	long long timeouts = env_sql_llf(&env,
				"SELECT count(DISTINCT saga_id) FROM orchestrator.saga_history WHERE cause = 'StepTimeout'");
	long long voided = env_sql_llf(&env,
				"SELECT (SELECT count(*) FROM payment.payments WHERE status = 'voided')"
				  " + (SELECT count(*) FROM inventory.reservations WHERE status = 'voided')");
#define ALL_OUTBOX                                                                      \
	" FROM (SELECT attempt_count, processed_at FROM orchestrator.outbox_messages"        \
	" UNION ALL SELECT attempt_count, processed_at FROM payment.outbox_messages"        \
	" UNION ALL SELECT attempt_count, processed_at FROM inventory.outbox_messages"      \
	" UNION ALL SELECT attempt_count, processed_at FROM shipping.outbox_messages) o"
	long long delivered = env_sql_llf(&env,
				"SELECT count(*) FILTER (WHERE processed_at IS NOT NULL)" ALL_OUTBOX);
	long long failed_attempts = env_sql_llf(&env,
				"SELECT coalesce(sum(attempt_count), 0)" ALL_OUTBOX);
	long long rows_retried = env_sql_llf(&env,
				"SELECT count(*) FILTER (WHERE attempt_count > 0)" ALL_OUTBOX);
	for (int s = 0; s < N_VICTIMS; s++)
		scrape_dups(&st, s);
	/* shipping: its dead letters (the audit reads the three schemas), and its
	 * shipments against the sagas' endings */
	long long shipping_dead = env_sql_llf(&env,
				"SELECT count(*) FROM shipping.outbox_messages WHERE dead_at IS NOT NULL");
	char *ship_bad = sql_text(
		"SELECT string_agg(format('%s %s: %s shipped of %s rows', s.saga_id, s.state,"
		"  (SELECT count(*) FROM shipping.shipments h"
		"    WHERE h.saga_id = s.saga_id AND h.status = 'shipped'),"
		"  (SELECT count(*) FROM shipping.shipments h WHERE h.saga_id = s.saga_id)), E'\\n')"
		" FROM (SELECT * FROM orchestrator.saga_instances"
		"        WHERE definition_name = 'order-with-shipping') s"
		" WHERE (SELECT count(*) FROM shipping.shipments h"
		"         WHERE h.saga_id = s.saga_id AND h.status = 'shipped')"
		"       <> CASE WHEN s.state = 'Completed' THEN 1 ELSE 0 END");
	long long ship_sagas = env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.saga_instances"
				" WHERE definition_name = 'order-with-shipping'");
	long long ship_completed = env_sql_llf(&env,
				"SELECT count(*) FROM orchestrator.saga_instances"
				" WHERE definition_name = 'order-with-shipping' AND state = 'Completed'");
	long long ship_refused = env_sql_llf(&env,
				"SELECT count(*) FROM shipping.shipments WHERE status = 'refused'");
	long long ship_cancelled = env_sql_llf(&env,
				"SELECT count(*) FROM shipping.shipments WHERE status = 'cancelled'");
	long long ship_orders = 0;

	for (long i = 0; i < K.sagas; i++)
		ship_orders += orders[i].path[1] == 's';

	printf("chaos summary: %ld sagas (Completed %lld, Failed %lld, Compensated %lld; %lld hit a "
	       "step timeout, %lld voided rows); order-with-shipping %lld (Completed %lld; shipments "
	       "refused %lld, cancelled %lld); kills %d (orchestrator %d, payment %d, inventory %d, "
	       "shipping %d), "
	       "1 PostgreSQL restart (%.1f s down); POST /orders retried %ld times (%ld on 503, %ld "
	       "on 429, %ld on no answer), %ld replayed; %lld messages delivered, %lld delivery attempts failed "
	       "and were retried (%lld messages), inbox duplicates >= %.0f; converged in %.1f s; "
	       "dead letters %ld; audit %s\n",
	       K.sagas, completed, failed, compensated, timeouts, voided, ship_sagas, ship_completed,
	       ship_refused, ship_cancelled,
	       st.kills[0] + st.kills[1] + st.kills[2] + st.kills[SHIPPING], st.kills[SVC_ORCH],
	       st.kills[SVC_PAY], st.kills[SVC_INV], st.kills[SHIPPING],
	       (double)st.db_down_ms / 1000.0,
	       (long)(atomic_load(&retries_503) + atomic_load(&retries_429) +
		      atomic_load(&retries_conn)),
	       (long)atomic_load(&retries_503), (long)atomic_load(&retries_429),
	       (long)atomic_load(&retries_conn),
	       (long)atomic_load(&replays), delivered, failed_attempts, rows_retried, st.inbox_dups,
	       converge_s, dead + (long)shipping_dead, fo ? "FAILED" : "clean");
	fflush(stdout);

	ck_assert_msg(fo == 0, "audit (sql/audit.sql as saga_auditor) found:%s", failures);
	ck_assert_msg(ship_bad[0] == '\0',
		      "order-with-shipping sagas whose shipments do not match their ending "
		      "(Completed: one shipped; else none):\n%.2000s", ship_bad);
	free(ship_bad);
	ck_assert_int_eq(ship_sagas, ship_orders);
	/*
	 * No service died on its own, and each stops cleanly (in a sanitizer
	 * build, LeakSanitizer runs at this exit and fails its status).
	 */
	for (int s = 0; s < N_VICTIMS; s++) {
		int status = 0;

		ck_assert_msg(waitpid(pid_of(s), &status, WNOHANG) == 0,
			      "%s died during the test (status 0x%x): see its log", svc_names[s],
			      status);
		status = stop_victim(s, SIGTERM);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "%s did not exit cleanly on SIGTERM (status 0x%x)", svc_names[s], status);
	}
	ck_assert_int_eq(dead, 0);
	ck_assert_int_eq(shipping_dead, 0);
	ck_assert_int_eq(in_flight, 0);
	if (harness_amqp()) {
		printf("chaos: over amqp, RabbitMQ down %.1f s; pgsaga.dead holds %ld\n",
		       (double)st.broker_down_ms / 1000.0,
		       broker_queue_depth(harness_amqp_url(), "pgsaga.dead"));
		ck_assert_int_eq(broker_queue_depth(harness_amqp_url(), "pgsaga.dead"), 0);
	}
	ck_assert_int_eq(completed + failed + compensated, K.sagas);
	/* the scenario is only worth something if it exercised every ending */
	if (K.sagas >= 100)
		ck_assert_msg(completed > 0 && failed > 0 && compensated > 0,
			      "a final state never occurred: retune the stock and credit");
	ck_assert_int_ge(st.kills[0] + st.kills[1] + st.kills[2] + st.kills[SHIPPING], K.kills);
	audit_free(checks, nchecks);
	free(res);
	free(orders);
}
END_TEST

static void setup(void)
{
	env_create(&env);
	env_load_sql(&env, "sql/shipping/shipping.sql");
}

static void teardown(void)
{
	env_destroy(&env);
}

int main(void)
{
	Suite *s;
	TCase *tc;

	K.sagas = knob("CHAOS_SAGAS", 500, 1, 10000000);
	K.kills = knob("CHAOS_KILLS", 10, 0, 100000);
	K.seconds = knob("CHAOS_SECONDS", 30, 1, 86400);
	K.converge_s = knob("CHAOS_CONVERGE_S", 60, 1, 86400);
	K.threads = knob("CHAOS_THREADS", 8, 1, MAX_THREADS);
	K.seed = (unsigned long)knob("CHAOS_SEED", (long)time(NULL) ^ (long)getpid(), 1, LONG_MAX);

	s = suite_create("chaos");
	tc = tcase_create("chaos");
	tcase_add_checked_fixture(tc, setup, teardown);
	/* the fault period, convergence, and room for slow machines */
	tcase_set_timeout(tc, (double)(K.seconds * 3 + K.converge_s + 120 + K.sagas / 20));
	tcase_add_test(tc, chaos_invariants_hold);
	suite_add_tcase(s, tc);

	return harness_run(s);
}
