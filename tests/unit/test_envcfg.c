#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "envcfg.h"
#include "suites.h"

/*
 * The fixture resets the variables before each test, so none depends on
 * another, even with CK_FORK=no.
 */

static const char *token, *name;
static int64_t base_ms;
static double fail_rate;

static const struct envcfg_var table[] = {
	{ "T_TOKEN", ENVCFG_STRING, &token, NULL, 0, 0, "shared secret", true },
	{ "T_NAME", ENVCFG_STRING, &name, "svc", 0, 0, "a name", false },
	{ "T_BASE_MS", ENVCFG_INT, &base_ms, "200", 1, 60000, "backoff base", false },
	{ "T_RATE", ENVCFG_RATE, &fail_rate, "0", 0, 0, "fault rate", false },
};
#define NVARS (sizeof(table) / sizeof(table[0]))

static void clean_env(void)
{
	unsetenv("T_TOKEN");
	unsetenv("T_NAME");
	unsetenv("T_BASE_MS");
	unsetenv("T_RATE");
	setenv("T_TOKEN", "s3cr3t-value", 1);
}

/* Loads the table with T_BASE_MS (or another) set to val; returns the result. */
static int load_with(const char *var, const char *val, char *err, size_t errlen)
{
	setenv(var, val, 1);
	return envcfg_load(table, NVARS, err, errlen);
}

START_TEST(test_defaults)
{
	char err[128];

	ck_assert_int_eq(envcfg_load(table, NVARS, err, sizeof(err)), 0);
	ck_assert_str_eq(token, "s3cr3t-value");
	ck_assert_str_eq(name, "svc");
	ck_assert_int_eq(base_ms, 200);
	ck_assert_double_eq(fail_rate, 0.0);
}
END_TEST

START_TEST(test_values)
{
	char err[128];

	setenv("T_NAME", "", 1); /* empty is a value for an optional string */
	setenv("T_BASE_MS", "60000", 1);
	setenv("T_RATE", "0.25", 1);
	ck_assert_int_eq(envcfg_load(table, NVARS, err, sizeof(err)), 0);
	ck_assert_str_eq(name, "");
	ck_assert_int_eq(base_ms, 60000);
	ck_assert_double_eq(fail_rate, 0.25);
	ck_assert_int_eq(load_with("T_BASE_MS", "1", err, sizeof(err)), 0);
	ck_assert_int_eq(base_ms, 1);
	ck_assert_int_eq(load_with("T_RATE", "1", err, sizeof(err)), 0);
	ck_assert_double_eq(fail_rate, 1.0);
	ck_assert_int_eq(load_with("T_RATE", "1e-1", err, sizeof(err)), 0);
	ck_assert_double_eq(fail_rate, 0.1);
}
END_TEST

START_TEST(test_bad_integers)
{
	static const char *const bad[] = {
		"abc", "12x", " 12", "12 ", "", "1.5", "0x10", "99999999999999999999", "-",
	};
	char err[128];
	size_t i;

	ck_assert_int_eq(load_with("T_BASE_MS", "abc", err, sizeof(err)), -1);
	ck_assert_str_eq(err, "T_BASE_MS: not an integer: 'abc'");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		base_ms = 42;
		ck_assert_msg(load_with("T_BASE_MS", bad[i], err, sizeof(err)) == -1,
			      "accepted '%s'", bad[i]);
		ck_assert_ptr_nonnull(strstr(err, "T_BASE_MS"));
		ck_assert_int_eq(base_ms, 42);
	}
}
END_TEST

START_TEST(test_integer_bounds)
{
	char err[128];

	ck_assert_int_eq(load_with("T_BASE_MS", "0", err, sizeof(err)), -1);
	ck_assert_str_eq(err, "T_BASE_MS: 0 out of range [1, 60000]");
	ck_assert_int_eq(load_with("T_BASE_MS", "60001", err, sizeof(err)), -1);
	ck_assert_int_eq(load_with("T_BASE_MS", "-5", err, sizeof(err)), -1);
}
END_TEST

START_TEST(test_bad_rates)
{
	static const char *const bad[] = {
		"1.5", "-0.1", "nan", "inf", "", "0.5x", "0x0.8", "abc", "1e400", " 0.5",
	};
	char err[128];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(load_with("T_RATE", bad[i], err, sizeof(err)) == -1,
			      "accepted '%s'", bad[i]);
		ck_assert_ptr_nonnull(strstr(err, "T_RATE"));
	}
}
END_TEST

START_TEST(test_secret_required)
{
	char err[128];

	unsetenv("T_TOKEN");
	ck_assert_int_eq(envcfg_load(table, NVARS, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_TOKEN"));
	/* Empty counts as missing. */
	ck_assert_int_eq(load_with("T_TOKEN", "", err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_TOKEN"));
}
END_TEST

START_TEST(test_required_non_secret)
{
	static const char *req;
	static const struct envcfg_var one = { "T_REQ", ENVCFG_STRING, &req, NULL, 0, 0,
					       "required", false };
	char err[128];

	unsetenv("T_REQ");
	ck_assert_int_eq(envcfg_load(&one, 1, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "T_REQ: required, not set");
	setenv("T_REQ", "", 1);
	ck_assert_int_eq(envcfg_load(&one, 1, err, sizeof(err)), -1);
	setenv("T_REQ", "x", 1);
	ck_assert_int_eq(envcfg_load(&one, 1, err, sizeof(err)), 0);
	ck_assert_str_eq(req, "x");
}
END_TEST

START_TEST(test_first_error_reported)
{
	char err[128];

	setenv("T_BASE_MS", "nope", 1);
	setenv("T_RATE", "2", 1);
	ck_assert_int_eq(envcfg_load(table, NVARS, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_BASE_MS"));
	ck_assert_ptr_null(strstr(err, "T_RATE"));
}
END_TEST

START_TEST(test_help_hides_secret)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	envcfg_help(f, "payment", "Pays for orders.", table, NVARS);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "usage: payment"));
	ck_assert_ptr_nonnull(strstr(text, "Pays for orders."));
	ck_assert_ptr_nonnull(strstr(text, "(required, secret)"));
	ck_assert_ptr_nonnull(strstr(text, "T_BASE_MS"));
	ck_assert_ptr_nonnull(strstr(text, "'200'"));
	ck_assert_ptr_nonnull(strstr(text, "backoff base"));
	ck_assert_ptr_null(strstr(text, "s3cr3t"));
	free(text);
}
END_TEST

START_TEST(test_secret_default_ignored)
{
	static const char *tok;
	static const struct envcfg_var one = { "T_TOK", ENVCFG_STRING, &tok, "dflt", 0, 0,
					       "token", true };
	char err[128];

	/* A secret is always required: a default would be a secret in the source. */
	unsetenv("T_TOK");
	ck_assert_int_eq(envcfg_load(&one, 1, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_TOK"));
	setenv("T_TOK", "", 1);
	ck_assert_int_eq(envcfg_load(&one, 1, err, sizeof(err)), -1);
}
END_TEST

START_TEST(test_secret_value_never_in_error)
{
	static int64_t pin;
	static const struct envcfg_var one = { "T_PIN", ENVCFG_INT, &pin, NULL, 0, 9999,
					       "pin", true };
	char err[128];

	setenv("T_PIN", "hunter2", 1);
	ck_assert_int_eq(envcfg_load(&one, 1, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_PIN"));
	ck_assert_ptr_null(strstr(err, "hunter2"));
}
END_TEST

/* Runs envcfg_parse_addr and checks host and port, or the failure. */
static void addr_ok(const char *s, const char *host, int port)
{
	char h[64];
	int p = -1;

	ck_assert_msg(envcfg_parse_addr(s, h, sizeof(h), &p) == 0, "refused '%s'", s);
	ck_assert_str_eq(h, host);
	ck_assert_int_eq(p, port);
}

START_TEST(test_parse_addr)
{
	static const char *const bad[] = {
		"",	    "8080",	   "host:",	 "host:abc", "host:65536", "host:-1",
		"host:+80", "::1:8080",	   "[::1]8080", "[::1]",    "[]:80",	  "[::1:80",
		"h :80",    "host:80 ",	   ":",		 "host:8x",  "a]:80",
	};
	char h[64], tiny[4];
	int p;
	size_t i;

	addr_ok("127.0.0.1:8081", "127.0.0.1", 8081);
	addr_ok("localhost:1", "localhost", 1);
	addr_ok(":8080", "127.0.0.1", 8080);
	addr_ok("[::1]:8080", "::1", 8080);
	addr_ok("0.0.0.0:65535", "0.0.0.0", 65535);
	addr_ok("127.0.0.1:0", "127.0.0.1", 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(envcfg_parse_addr(bad[i], h, sizeof(h), &p) == -1,
			      "accepted '%s'", bad[i]);
	/* A host that does not fit the buffer is an error, not a cut name. */
	ck_assert_int_eq(envcfg_parse_addr("abcd:80", tiny, sizeof(tiny), &p), -1);
	ck_assert_int_eq(envcfg_parse_addr("abc:80", tiny, sizeof(tiny), &p), 0);
	ck_assert_int_eq(envcfg_parse_addr(":80", tiny, sizeof(tiny), &p), -1);
}
END_TEST

static const char *url;
static const struct envcfg_var file_table[] = {
	{ "T_URL", ENVCFG_STRING, &url, NULL, 0, 0, "a URL", false, true },
};

/* Writes content to a new temporary file; its name goes to path. */
static void temp_file(char *path, size_t len, const char *content)
{
	int fd;

	snprintf(path, len, "/tmp/pgsaga-envcfg-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
}

START_TEST(test_value_from_file)
{
	char path[64], err[256];

	unsetenv("T_URL");
	temp_file(path, sizeof(path), "postgresql://u:pw@h/db\n");
	setenv("T_URL_FILE", path, 1);
	ck_assert_int_eq(envcfg_load(file_table, 1, err, sizeof(err)), 0);
	/* one trailing newline removed, nothing else */
	ck_assert_str_eq(url, "postgresql://u:pw@h/db");
	unlink(path);
	temp_file(path, sizeof(path), "tok\n\n");
	setenv("T_URL_FILE", path, 1);
	ck_assert_int_eq(envcfg_load(file_table, 1, err, sizeof(err)), 0);
	ck_assert_str_eq(url, "tok\n");
	unlink(path);
	/* an empty _FILE is unset: the variable itself counts */
	setenv("T_URL_FILE", "", 1);
	setenv("T_URL", "direct", 1);
	ck_assert_int_eq(envcfg_load(file_table, 1, err, sizeof(err)), 0);
	ck_assert_str_eq(url, "direct");
	unsetenv("T_URL");
	unsetenv("T_URL_FILE");
	envcfg_release();
}
END_TEST

START_TEST(test_value_and_file_both_set)
{
	char path[64], err[256];

	temp_file(path, sizeof(path), "from-file");
	setenv("T_URL", "secret-direct-value", 1);
	setenv("T_URL_FILE", path, 1);
	ck_assert_int_eq(envcfg_load(file_table, 1, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_URL and T_URL_FILE"));
	ck_assert_ptr_null(strstr(err, "secret-direct-value"));
	ck_assert_ptr_null(strstr(err, "from-file"));
	unlink(path);
	unsetenv("T_URL");
	unsetenv("T_URL_FILE");
}
END_TEST

START_TEST(test_unreadable_file)
{
	char err[256];

	unsetenv("T_URL");
	setenv("T_URL_FILE", "/nonexistent/pgsaga-secret", 1);
	ck_assert_int_eq(envcfg_load(file_table, 1, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_URL_FILE"));
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/pgsaga-secret"));
	unsetenv("T_URL_FILE");
	/* neither set: required, and the message names both ways */
	ck_assert_int_eq(envcfg_load(file_table, 1, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "T_URL_FILE"));
}
END_TEST

START_TEST(test_redact)
{
	static const char *const cases[][2] = {
		{ "amqp://guest:guest@127.0.0.1:5672/%2f", "amqp://guest:***@127.0.0.1:5672/%2f" },
		{ "amqps://u:p@a:5671/v,amqps://u:q@b:5671/v", "amqps://u:***@a:5671/v,amqps://u:***@b:5671/v" },
		{ "postgresql://saga_payment@h:5432/db", "postgresql://saga_payment@h:5432/db" },
		{ "postgresql://h/db?user=u&password=pw&sslmode=verify-full",
		  "postgresql://h/db?user=u&password=***&sslmode=verify-full" },
		{ "host=h user=u password=secret dbname=d", "host=h user=u password=*** dbname=d" },
		{ "host=h password='a b\\' c' dbname=d", "host=h password=*** dbname=d" },
		{ "host=h mypassword=x", "host=h mypassword=x" },
	};
	char out[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_str_eq(envcfg_redact(cases[i][0], out, sizeof(out)), cases[i][1]);
	/* truncated, still terminated */
	ck_assert_str_eq(envcfg_redact("amqp://u:p@host", out, 8), "amqp://");
}
END_TEST

Suite *envcfg_suite(void)
{
	Suite *s = suite_create("envcfg");
	TCase *tc = tcase_create("load");
	TCase *addr = tcase_create("addr");

	tcase_add_checked_fixture(tc, clean_env, NULL);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_values);
	tcase_add_test(tc, test_bad_integers);
	tcase_add_test(tc, test_integer_bounds);
	tcase_add_test(tc, test_bad_rates);
	tcase_add_test(tc, test_secret_required);
	tcase_add_test(tc, test_required_non_secret);
	tcase_add_test(tc, test_first_error_reported);
	tcase_add_test(tc, test_help_hides_secret);
	tcase_add_test(tc, test_secret_default_ignored);
	tcase_add_test(tc, test_secret_value_never_in_error);
	tcase_add_test(tc, test_value_from_file);
	tcase_add_test(tc, test_value_and_file_both_set);
	tcase_add_test(tc, test_unreadable_file);
	tcase_add_test(tc, test_redact);
	suite_add_tcase(s, tc);
	tcase_add_test(addr, test_parse_addr);
	suite_add_tcase(s, addr);
	return s;
}
