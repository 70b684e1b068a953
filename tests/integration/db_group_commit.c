/*
 * src/lib/pg/db.c against a real PostgreSQL: grouped statements (group commit,
 * db_query_grouped) share one transaction when they wait together, route
 * each result to its own caller, and when one of them fails the others
 * still commit, alone, exactly once. And the pool's connections carry TCP
 * keepalives and a user timeout on their sockets unless DATABASE_URL says
 * otherwise (db_conn_params).
 */
#include <arpa/inet.h>
#include <check.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "db.h"
#include "harness.h"
#include "metrics.h"

static struct saga_env env;

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
	metrics_free_all();
}

/* One statement's outcome, as its callback saw it. */
struct outcome {
	bool done;
	enum db_status status;
	char sqlstate[6];
	char col[2][64]; /* first row, first two columns */
	int order;       /* 1 for the first statement to finish, ... */
};

static int pending, finished;
static struct event_base *base;

static void record(void *arg, PGresult *res, const struct db_error *err)
{
	struct outcome *o = arg;

	ck_assert(!o->done);
	o->done = true;
	o->order = ++finished;
	o->status = err->status;
	memcpy(o->sqlstate, err->sqlstate, sizeof(o->sqlstate));
	for (int c = 0; res && c < 2 && c < PQnfields(res) && PQntuples(res) > 0; c++)
		snprintf(o->col[c], sizeof(o->col[c]), "%s", PQgetvalue(res, 0, c));
	if (--pending == 0)
		event_base_loopbreak(base);
}

static void run_until_done(void)
{
	struct timeval limit = { 30, 0 };

	event_base_loopexit(base, &limit);
	event_base_dispatch(base);
	ck_assert_msg(pending == 0, "%d statements never finished", pending);
}

static const char nap_sql[] = "SELECT txid_current()::text, pg_sleep($1::float8), $2::text";

/* The pool's one connection is busy with this while the others queue. */
static const char sleep_sql[] = "SELECT pg_sleep(0.3)";
static const char echo_sql[] =
	"SELECT txid_current()::text, $1::text || ' ' || nextval('public.seq')";
static const char insert_sql[] =
	"INSERT INTO t (v) VALUES ($1::int) RETURNING txid_current()::text, v::text";

START_TEST(grouped_statements_commit_together)
{
	struct db_pool *pool;
	struct outcome busy = { 0 }, grouped[5] = { 0 }, plain = { 0 };
	char v[5][8];

	env_sql(&env, "CREATE SEQUENCE public.seq", 0, NULL);
	base = event_base_new();
	pool = db_pool_new(base, env.admin_url, "public", 1);
	db_query(pool, sleep_sql, 0, NULL, record, &busy);
	for (int i = 0; i < 5; i++) {
		const char *p[1] = { v[i] };
		char key[8];

		snprintf(v[i], sizeof(v[i]), "g%d", i);
		snprintf(key, sizeof(key), "k%d", (4 - i) / 2); /* k2 k1 k1 k0 k0 */
		db_query_grouped(pool, key, echo_sql, 1, p, record, &grouped[i]);
	}
	const char *p[1] = { "plain" };
	db_query(pool, echo_sql, 1, p, record, &plain);
	pending = 7;
	run_until_done();

	ck_assert_int_eq(busy.status, DB_OK);
	/* each caller gets its own row; by key, and in arrival order among equal keys */
	const char *want[5] = { "g0 5", "g1 3", "g2 4", "g3 1", "g4 2" };
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(grouped[i].status, DB_OK);
		ck_assert_str_eq(grouped[i].col[1], want[i]);
		ck_assert_str_eq(grouped[i].col[0], grouped[0].col[0]); /* one transaction */
	}
	ck_assert_int_eq(plain.status, DB_OK);
	ck_assert_str_eq(plain.col[1], "plain 6");
	ck_assert_str_ne(plain.col[0], grouped[0].col[0]); /* db_query is never grouped */

	struct evbuffer *m = evbuffer_new();
	metrics_render(m);
	evbuffer_add(m, "", 1);
	const char *text = (const char *)evbuffer_pullup(m, -1);
	ck_assert_msg(strstr(text, "\nsaga_db_group_commits_total 1\n") &&
			      strstr(text, "\nsaga_db_grouped_statements_total 5\n"),
		      "%s", text);
	evbuffer_free(m);
	db_pool_free(pool);
	event_base_free(base);
}
END_TEST

START_TEST(a_failing_statement_leaves_the_others_committed_once)
{
	struct db_pool *pool;
	struct outcome busy = { 0 }, ins[4] = { 0 };
	const char *vals[4] = { "1", "not a number", "3", "4" };

	env_sql(&env, "CREATE TABLE public.t (v int PRIMARY KEY)", 0, NULL);
	base = event_base_new();
	pool = db_pool_new(base, env.admin_url, "public", 1);
	db_query(pool, sleep_sql, 0, NULL, record, &busy);
	for (int i = 0; i < 4; i++)
		db_query_grouped(pool, vals[i], insert_sql, 1, &vals[i], record, &ins[i]);
	pending = 5;
	run_until_done();

	ck_assert_int_eq(ins[1].status, DB_SQL_ERROR);
	ck_assert_str_eq(ins[1].sqlstate, "22P02");
	for (int i = 0; i < 4; i += i == 0 ? 2 : 1) {
		ck_assert_int_eq(ins[i].status, DB_OK);
		ck_assert_str_eq(ins[i].col[1], vals[i]);
	}
	/* they ran again alone: each its own transaction */
	ck_assert_str_ne(ins[0].col[0], ins[2].col[0]);
	ck_assert_str_ne(ins[2].col[0], ins[3].col[0]);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM public.t", 0, NULL), 3);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT sum(v) FROM public.t", 0, NULL), 8);

	/* the statement was prepared in the group that failed; it still runs */
	struct outcome again = { 0 };
	const char *five[1] = { "5" };
	db_query_grouped(pool, "", insert_sql, 1, five, record, &again);
	pending = 1;
	run_until_done();
	ck_assert_int_eq(again.status, DB_OK);
	db_pool_free(pool);
	event_base_free(base);
}
END_TEST

/*
 * Terminates the backend running the group. On a loaded machine the group
 * may not run yet at the first try (the pool still connecting, or busy):
 * then it tries again 50 ms later, for up to 20 s, rather than count on
 * when the group starts.
 */
static void terminate_sleepers(evutil_socket_t fd, short what, void *arg)
{
	int *tries = arg;
	long long n = env_sql_ll(&env,
				 "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
				 " WHERE query = 'SELECT txid_current()::text, pg_sleep($1::float8), $2::text'",
				 0, NULL);

	if (n == 0 && ++*tries < 400) {
		struct timeval again = { 0, 50 * 1000 };

		event_base_once(base, -1, EV_TIMEOUT, terminate_sleepers, tries, &again);
		return;
	}
	ck_assert_int_ge(n, 1);
}

START_TEST(a_group_on_a_broken_connection_is_unavailable)
{
	struct db_pool *pool;
	struct outcome busy = { 0 }, nap[3] = { 0 }, after = { 0 };
	const char *p[2] = { "5", "x" };
	struct timeval at = { 0, 600 * 1000 };
	int tries = 0;

	base = event_base_new();
	pool = db_pool_new(base, env.admin_url, "public", 1);
	db_query(pool, sleep_sql, 0, NULL, record, &busy);
	for (int i = 0; i < 3; i++)
		db_query_grouped(pool, "", nap_sql, 2, p, record, &nap[i]);
	event_base_once(base, -1, EV_TIMEOUT, terminate_sleepers, &tries, &at);
	pending = 4;
	run_until_done();
	/* the outcome is unknown, as for one statement whose connection broke */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(nap[i].status, DB_UNAVAILABLE);

	/* the pool reconnects and runs what comes next */
	for (int i = 0; i < 200 && !db_pool_ready(pool); i++) {
		struct timeval slice = { 0, 50 * 1000 };

		event_base_loopexit(base, &slice);
		event_base_dispatch(base);
	}
	ck_assert(db_pool_ready(pool));
	const char *q[1] = { "after" };
	db_query_grouped(pool, "", "SELECT 0, $1::text", 1, q, record, &after);
	pending = 1;
	run_until_done();
	ck_assert_int_eq(after.status, DB_OK);
	ck_assert_str_eq(after.col[1], "after");
	db_pool_free(pool);
	event_base_free(base);
}
END_TEST

START_TEST(writes_wait_for_a_writer_and_reads_do_not)
{
	struct db_pool *pool;
	struct outcome first = { 0 }, later[2] = { 0 }, read = { 0 };
	const char *p[2] = { "0.3", "w" }, *q[2] = { "0", "w" }, *r[1] = { "read" };

	base = event_base_new();
	pool = db_pool_new(base, env.admin_url, "public", 3);
	db_pool_set_writers(pool, 1);
	db_query_grouped(pool, "a", nap_sql, 2, p, record, &first);
	db_query_grouped(pool, "b", nap_sql, 2, q, record, &later[0]);
	db_query_grouped(pool, "c", nap_sql, 2, q, record, &later[1]);
	db_query(pool, "SELECT 0, $1::text", 1, r, record, &read);
	pending = 4;
	run_until_done();
	/* the read took an idle connection; the two writes waited for the writer and went together */
	ck_assert_int_eq(read.order, 1);
	ck_assert_int_eq(first.order, 2);
	ck_assert_int_eq(later[0].status, DB_OK);
	ck_assert_int_eq(later[1].status, DB_OK);
	ck_assert_str_eq(later[0].col[0], later[1].col[0]);
	db_pool_free(pool);
	event_base_free(base);
}
END_TEST

/*
 * The socket options of the pool's one connection, found among this
 * process's descriptors by its local port, which the server reports
 * (inet_client_port()): keepalive, idle, interval, count, user timeout.
 */
static void pool_socket_options(const char *url, int got[5])
{
	struct db_pool *pool;
	struct outcome port = { 0 };
	int fd;

	base = event_base_new();
	pool = db_pool_new(base, url, "public", 1);
	db_query(pool, "SELECT inet_client_port()::text", 0, NULL, record, &port);
	pending = 1;
	run_until_done();
	ck_assert_int_eq(port.status, DB_OK);
	for (fd = 3; fd < 1024; fd++) {
		struct sockaddr_in a;
		socklen_t len = sizeof(a);

		if (getsockname(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
		    ntohs(a.sin_port) == atoi(port.col[0]))
			break;
	}
	ck_assert_msg(fd < 1024, "no socket of this process has local port %s", port.col[0]);
	const int opts[5][2] = { { SOL_SOCKET, SO_KEEPALIVE }, { IPPROTO_TCP, TCP_KEEPIDLE },
				 { IPPROTO_TCP, TCP_KEEPINTVL }, { IPPROTO_TCP, TCP_KEEPCNT },
				 { IPPROTO_TCP, TCP_USER_TIMEOUT } };
	for (int i = 0; i < 5; i++) {
		socklen_t len = sizeof(got[i]);

		ck_assert_int_eq(getsockopt(fd, opts[i][0], opts[i][1], &got[i], &len), 0);
	}
	db_pool_free(pool);
	event_base_free(base);
}

START_TEST(connections_carry_keepalives_unless_the_url_says_otherwise)
{
	int got[5];
	char url[640];

	pool_socket_options(env.admin_url, got);
	ck_assert_int_ne(got[0], 0);
	ck_assert_int_eq(got[1], 4);
	ck_assert_int_eq(got[2], 2);
	ck_assert_int_eq(got[3], 3);
	ck_assert_int_eq(got[4], 10000);

	snprintf(url, sizeof(url), "%s keepalives_idle=30 tcp_user_timeout=0", env.admin_url);
	pool_socket_options(url, got);
	ck_assert_int_ne(got[0], 0);
	ck_assert_int_eq(got[1], 30);
	ck_assert_int_eq(got[2], 2);
	ck_assert_int_eq(got[4], 0);
}
END_TEST

static Suite *db_suite(void)
{
	Suite *s = suite_create("db");
	TCase *tc = tcase_create("group");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, grouped_statements_commit_together);
	tcase_add_test(tc, a_failing_statement_leaves_the_others_committed_once);
	tcase_add_test(tc, a_group_on_a_broken_connection_is_unavailable);
	tcase_add_test(tc, writes_wait_for_a_writer_and_reads_do_not);
	tcase_add_test(tc, connections_carry_keepalives_unless_the_url_says_otherwise);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return harness_run(db_suite());
}
