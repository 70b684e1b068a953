/*
 * The database as the services meet it: gone for a while (they answer 503
 * at once and come back by themselves), or one server per service (each
 * needs only its own DATABASE_URL).
 */
#include <check.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fixture.h"
#include "suites.h"
#include "uuid.h"

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

/* The fixture's teardown, and the clusters database_per_service made. */
static void teardown_with_clusters(void)
{
	fixture_teardown();
	destroy_extra_clusters();
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
		long long t0 = clock_ms();
		int status = 0;

		/* the pool notices the closed connections as the server goes */
		while (clock_ms() - t0 < 5000) {
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
	long long t0 = clock_ms();
	ck_assert_int_eq(env_post_order(&env, "during-outage", body, &r), 503);
	ck_assert_int_lt(clock_ms() - t0, 5000);
	char *retry = http_header(&r, "Retry-After");
	ck_assert_ptr_nonnull(retry);
	free(retry);
	ck_assert_ptr_nonnull(strstr(r.body, "database_unavailable"));
	http_resp_free(&r);

	harness_cluster_resume();
	for (int s = 0; s < SVC_COUNT; s++) {
		long long start = clock_ms();
		int status = 0;

		while (status != 200 && clock_ms() - start < WAIT_MS) {
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

/*
 * The server stops taking writes, as a primary demoted in a failover does
 * (here the orchestrator's role made read-only in this database): the
 * statement that meets it (SQLSTATE 25006) is a database outage, 503 with
 * Retry-After, never a 500; the service makes its connections anew and
 * takes orders again once the server takes writes.
 */
START_TEST(read_only_server_is_unavailable)
{
	struct http_resp r;
	char key[32];
	int n503 = 0;
	const char *body = "{\"customerId\":\"c-13\",\"itemId\":\"A001\",\"qty\":1,\"amount\":10}";
	const char *kill = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
			   " WHERE usename = 'saga_orchestrator' AND datname = current_database()";

	env_start_all(&env);
	seed_stock("A001", 10);
	free(env_sqlf(&env, "ALTER ROLE saga_orchestrator IN DATABASE \"%s\""
			    " SET default_transaction_read_only = on", env.dbname));
	free(env_sqlf(&env, "%s", kill));
	/* the old connections go at once; the new ones meet a read-only server */
	long long t0 = clock_ms();
	for (int i = 0; clock_ms() - t0 < 3000; i++) {
		snprintf(key, sizeof(key), "read-only-%d", i);
		int status = env_post_order(&env, key, body, &r);

		ck_assert_msg(status != 500, "POST /orders on a read-only server: 500 %s", r.body);
		n503 += status == 503;
		http_resp_free(&r);
		usleep(50 * 1000);
	}
	ck_assert_int_gt(n503, 0);
	free(env_sqlf(&env, "ALTER ROLE saga_orchestrator IN DATABASE \"%s\""
			    " RESET default_transaction_read_only", env.dbname));
	int status = 0;

	t0 = clock_ms();
	while (status != 201 && clock_ms() - t0 < WAIT_MS) {
		status = env_post_order(&env, "read-only-after", body, &r);
		http_resp_free(&r);
		if (status != 201)
			usleep(100 * 1000);
	}
	ck_assert_int_eq(status, 201);
}
END_TEST

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

Suite *databases_suite(void)
{
	Suite *s = suite_create("databases");
	TCase *db = tcase_create("databases");

	tcase_add_checked_fixture(db, fixture_setup, teardown_with_clusters);
	tcase_set_timeout(db, 120);
	tcase_add_test(db, database_outage);
	tcase_add_test(db, read_only_server_is_unavailable);
	tcase_add_test(db, database_per_service);
	suite_add_tcase(s, db);
	return s;
}
