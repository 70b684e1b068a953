/*
 * db_conn_params (src/lib/pg/db.c): the parameters every connection of a
 * service is opened with, as libpq itself reads them (PQconninfo of a
 * connection started with them): the keepalive and tcp_user_timeout
 * defaults, what DATABASE_URL sets overriding them, and what the pool adds
 * overriding DATABASE_URL. The host is a socket directory that does not
 * exist, so nothing is connected to. And db_text_array, the text[]
 * parameters the services send.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "suites.h"

/* The value libpq settled on for each keyword asked, as one string "k=v k=v". */
static void effective(const struct db_conn_params *p, const char *const *want, char *out,
		      size_t len)
{
	PGconn *c = PQconnectStartParams(p->keys, p->vals, 1);
	PQconninfoOption *opts;

	ck_assert_ptr_nonnull(c);
	opts = PQconninfo(c);
	ck_assert_ptr_nonnull(opts);
	out[0] = '\0';
	for (const char *const *w = want; *w; w++) {
		const char *v = NULL;

		for (PQconninfoOption *o = opts; o->keyword; o++)
			if (strcmp(o->keyword, *w) == 0)
				v = o->val;
		size_t used = strlen(out);
		snprintf(out + used, len - used, "%s%s=%s", used ? " " : "", *w, v ? v : "(unset)");
	}
	PQconninfoFree(opts);
	PQfinish(c);
}

static const char *const tcp[] = { "keepalives", "keepalives_idle", "keepalives_interval",
				   "keepalives_count", "tcp_user_timeout", NULL };

START_TEST(test_defaults_when_the_url_sets_none)
{
	struct db_conn_params p;
	char got[512];
	const char *const who[] = { "host", "dbname", "user", NULL };

	db_conn_params_init(&p, "host=/nonexistent-pgsaga dbname=d user=u");
	effective(&p, tcp, got, sizeof(got));
	ck_assert_str_eq(got, "keepalives=1 keepalives_idle=4 keepalives_interval=2 "
			      "keepalives_count=3 tcp_user_timeout=10000");
	effective(&p, who, got, sizeof(got));
	ck_assert_str_eq(got, "host=/nonexistent-pgsaga dbname=d user=u");
}
END_TEST

START_TEST(test_the_url_overrides_them)
{
	struct db_conn_params p;
	char got[512];

	db_conn_params_init(&p, "postgresql://u@%2Fnonexistent-pgsaga/d"
				"?keepalives=0&keepalives_idle=30&tcp_user_timeout=0");
	effective(&p, tcp, got, sizeof(got));
	ck_assert_str_eq(got, "keepalives=0 keepalives_idle=30 keepalives_interval=2 "
			      "keepalives_count=3 tcp_user_timeout=0");

	db_conn_params_init(&p, "host=/nonexistent-pgsaga keepalives_count=9");
	effective(&p, tcp, got, sizeof(got));
	ck_assert_str_eq(got, "keepalives=1 keepalives_idle=4 keepalives_interval=2 "
			      "keepalives_count=9 tcp_user_timeout=10000");
}
END_TEST

START_TEST(test_what_is_added_overrides_the_url)
{
	struct db_conn_params p;
	char got[512];
	const char *const want[] = { "options", "dbname", NULL };

	db_conn_params_init(&p, "postgresql://u@%2Fnonexistent-pgsaga/d?options=-cwork_mem%3D1MB");
	db_conn_params_add(&p, "options", "-c search_path=payment");
	effective(&p, want, got, sizeof(got));
	ck_assert_str_eq(got, "options=-c search_path=payment dbname=d");
	ck_assert_ptr_null(p.keys[p.n]);
	ck_assert_ptr_null(p.vals[p.n]);
}
END_TEST

START_TEST(test_no_conninfo_keeps_the_defaults)
{
	struct db_conn_params p;
	char got[512];

	db_conn_params_init(&p, NULL);
	db_conn_params_add(&p, "host", "/nonexistent-pgsaga");
	effective(&p, tcp, got, sizeof(got));
	ck_assert_str_eq(got, "keepalives=1 keepalives_idle=4 keepalives_interval=2 "
			      "keepalives_count=3 tcp_user_timeout=10000");
}
END_TEST

/* a literal of elems as db_text_array writes it */
static void array_is(const char *const *elems, size_t n, const char *want)
{
	char *got = db_text_array(elems, n);

	ck_assert_str_eq(got, want);
	free(got);
}

START_TEST(test_text_array_quotes_each_element)
{
	array_is(NULL, 0, "{}");
	array_is((const char *[]){ "customerId" }, 1, "{\"customerId\"}");
	array_is((const char *[]){ "itemId", NULL, "qty" }, 3, "{\"itemId\",NULL,\"qty\"}");
	array_is((const char *[]){ NULL }, 1, "{NULL}");
	/* NULL as a word is a string, not a null element */
	array_is((const char *[]){ "NULL", "" }, 2, "{\"NULL\",\"\"}");
	/* " and \ escaped, commas and braces inside the quotes */
	array_is((const char *[]){ "a\"b", "c\\d", "{e,f}" }, 3,
		 "{\"a\\\"b\",\"c\\\\d\",\"{e,f}\"}");
}
END_TEST

Suite *db_params_suite(void)
{
	Suite *s = suite_create("db_params");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_defaults_when_the_url_sets_none);
	tcase_add_test(tc, test_the_url_overrides_them);
	tcase_add_test(tc, test_what_is_added_overrides_the_url);
	tcase_add_test(tc, test_no_conninfo_keeps_the_defaults);
	suite_add_tcase(s, tc);
	tc = tcase_create("text_array");
	tcase_add_test(tc, test_text_array_quotes_each_element);
	suite_add_tcase(s, tc);
	return s;
}
