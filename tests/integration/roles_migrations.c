/*
 * Who may do what: each service's role reaches only its own schema, the
 * internal endpoints want their token, a service migrates only as its
 * schema's owner, and operators keep accounts and stock with psql alone
 * while the audit stays true.
 */
#include <check.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "suites.h"
#include "uuid.h"

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
 * docs/protocol.md, "Tables": operators open accounts and add items with the documented columns
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
	/* saga_history has no foreign key: the audit catches a
	 * history row without its saga */
	ck_assert_int_eq(psql_c("INSERT INTO orchestrator.saga_history"
				" (saga_id, version, to_state, cause)"
				" VALUES (gen_random_uuid(), 1, 'PendingPayment', 'OrderPlaced')"), 0);
	ck_assert_int_ne(run_prog(argv), 0);
}
END_TEST

/*
 * The checks of a saga's state and awaited undo (migrations 006, 011), as
 * an operator meets them in psql: Pending and a step's name of 1 to 64
 * letters or digits, or one of the four other states; an undo of 1 to 64.
 */
START_TEST(saga_state_checks)
{
	static const struct {
		const char *state, *undo, *sqlstate;
	} rows[] = {
		{ "PendingShipping", NULL, "00000" },
		{ "Pending", NULL, "23514" },
		{ "Pendingaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL,
		  "00000" }, /* 64 letters */
		{ "Pendingaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL,
		  "23514" }, /* 65 */
		{ "Pending-Ship", NULL, "23514" },
		{ "Shipping", NULL, "23514" },
		{ "Completed", NULL, "00000" },
		{ "Compensating", "Shipping", "00000" },
		{ "Compensating", "", "23514" },
		{ "Compensating", "Ship ping", "23514" },
		{ "Compensating", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "00000" },
		{ "Compensating", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "23514" },
	};
	char sql[512], got[6];

	env_start(&env, SVC_ORCH, NULL);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		snprintf(sql, sizeof(sql),
			 "INSERT INTO orchestrator.saga_instances (saga_id, state, version,"
			 " compensation, definition_name, input, trace_id)"
			 " VALUES (gen_random_uuid(), '%s', 1, %s%s%s, 'x', '{}', 't')",
			 rows[i].state, rows[i].undo ? "'" : "", rows[i].undo ? rows[i].undo : "NULL",
			 rows[i].undo ? "'" : "");
		snprintf(got, sizeof(got), "%s", sql_state_as(env.admin_url, sql));
		ck_assert_msg(strcmp(got, rows[i].sqlstate) == 0, "state %s, undo %s: %s, not %s",
			      rows[i].state, rows[i].undo ? rows[i].undo : "null", got,
			      rows[i].sqlstate);
	}
}
END_TEST

Suite *roles_migrations_suite(void)
{
	Suite *s = suite_create("roles_migrations");
	TCase *sec = fixture_tcase("security");
	TCase *ops = fixture_tcase("operators");

	tcase_add_test(sec, role_isolation);
	tcase_add_test(sec, internal_endpoints_need_token);
	tcase_add_test(ops, migrations_only_as_the_schema_owner);
	tcase_add_test(ops, operator_accounts_and_stock_by_psql);
	tcase_add_test(ops, saga_state_checks);
	suite_add_tcase(s, sec);
	suite_add_tcase(s, ops);
	return s;
}
