/*
 * Admin API tests (SPEC §9): the three real services with ADMIN_TOKEN set,
 * on a throwaway PostgreSQL cluster, over real sockets. Sign-in, the CSRF
 * header, which token opens what, and the JSON API.
 */
#include <check.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "jsonx.h"
#include "uuid.h"

#define WAIT_MS 20000
#define ADMIN_TOKEN "test-admin-token-0123456789"

static struct saga_env env;
static const char *const admin_env[] = { "ADMIN_TOKEN=" ADMIN_TOKEN, NULL };

static void setup(void)
{
	env_create(&env);
}

static void teardown(void)
{
	env_destroy(&env);
}

static void start_all_admin(void)
{
	env_start(&env, SVC_INV, admin_env);
	env_start(&env, SVC_PAY, admin_env);
	env_start(&env, SVC_ORCH, admin_env);
}

/* --- HTTP helpers ------------------------------------------------------- */

static struct json_object *parse_body(const struct http_resp *r)
{
	char err[128];
	struct json_object *o = jsonx_parse(r->body, r->body_len, err, sizeof(err));

	ck_assert_msg(o != NULL, "response is not JSON (%s): %s", err, r->body);
	return o;
}

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	ck_assert_msg(json_object_object_get_ex(o, key, &v), "no %s in %s", key,
		      json_object_to_json_string(o));
	return json_object_get_string(v);
}

/* The error code of an error answer. */
static const char *error_code(struct json_object *o)
{
	struct json_object *e;

	ck_assert_msg(json_object_object_get_ex(o, "error", &e), "not an error: %s",
		      json_object_to_json_string(o));
	return jstr(e, "code");
}

/* A request with one optional extra header line; returns the status. */
static int req1(enum svc s, const char *method, const char *path, const char *header,
		const char *body, struct http_resp *r)
{
	const char *h[2] = { header, NULL };

	ck_assert_int_eq(http_do(env.port[s], method, path, header ? h : NULL, body,
				 body ? (size_t)-1 : 0, r),
			 0);
	return r->status;
}

static int req2(enum svc s, const char *method, const char *path, const char *h1,
		const char *h2, const char *body, struct http_resp *r)
{
	const char *h[3] = { h1, h2, NULL };

	ck_assert_int_eq(http_do(env.port[s], method, path, h, body, body ? (size_t)-1 : 0, r), 0);
	return r->status;
}

#define BEARER "Authorization: Bearer " ADMIN_TOKEN

/* Checks the status and error code of an answer, and frees it. */
static void expect_error(struct http_resp *r, int status, const char *code)
{
	struct json_object *o;

	ck_assert_msg(r->status == status, "status %d, want %d: %s", r->status, status, r->body);
	o = parse_body(r);
	ck_assert_str_eq(error_code(o), code);
	json_object_put(o);
	http_resp_free(r);
}

static void expect_security_headers(const struct http_resp *r)
{
	char *v = http_header(r, "X-Content-Type-Options");

	ck_assert_msg(v && strcmp(v, "nosniff") == 0, "nosniff missing");
	free(v);
	v = http_header(r, "Content-Security-Policy");
	ck_assert_msg(v && strcmp(v, "default-src 'self'; frame-ancestors 'none'") == 0,
		      "CSP: %s", v ? v : "(none)");
	free(v);
	v = http_header(r, "Cache-Control");
	ck_assert_msg(v && strcmp(v, "no-store") == 0, "Cache-Control: %s", v ? v : "(none)");
	free(v);
}

/* Signs in; writes "Cookie: pgsaga_admin=..." and "X-Pgsaga-Csrf: ..." lines. */
static void sign_in(char cookie[160], char csrf[120])
{
	struct http_resp r;
	struct json_object *o;
	char *sc, *semi;

	ck_assert_int_eq(req1(SVC_ORCH, "POST", "/admin/session", NULL,
			      "{\"token\":\"" ADMIN_TOKEN "\"}", &r),
			 200);
	expect_security_headers(&r);
	sc = http_header(&r, "Set-Cookie");
	ck_assert_ptr_nonnull(sc);
	ck_assert_msg(strstr(sc, "HttpOnly") && strstr(sc, "SameSite=Strict") &&
			      strstr(sc, "Path=/") && strncmp(sc, "pgsaga_admin=", 13) == 0,
		      "Set-Cookie: %s", sc);
	semi = strchr(sc, ';');
	ck_assert_ptr_nonnull(semi);
	*semi = '\0';
	snprintf(cookie, 160, "Cookie: %s", sc);
	free(sc);
	o = parse_body(&r);
	snprintf(csrf, 120, "X-Pgsaga-Csrf: %s", jstr(o, "csrf"));
	json_object_put(o);
	http_resp_free(&r);
}

/* --- security ------------------------------------------------------------- */

START_TEST(admin_off_without_token)
{
	static const char *const paths[] = { "/admin/api/sagas", "/admin/session",
					     "/admin/api/dead-letters", "/console/",
					     "/admin/api/deliveries" };
	struct http_resp r;

	env_start_all(&env);
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		req1(SVC_ORCH, "GET", paths[i], BEARER, NULL, &r);
		expect_error(&r, 404, "not_found");
	}
	req1(SVC_ORCH, "POST", "/admin/session", NULL, "{\"token\":\"" ADMIN_TOKEN "\"}", &r);
	expect_error(&r, 404, "not_found");
	req1(SVC_PAY, "GET", "/admin/api/deliveries", BEARER, NULL, &r);
	expect_error(&r, 404, "not_found");
}
END_TEST

START_TEST(tokens_are_not_interchangeable)
{
	struct http_resp r;
	char internal[128];

	start_all_admin();
	snprintf(internal, sizeof(internal), "Authorization: Bearer %s", env.token);
	for (int s = 0; s < SVC_COUNT; s++) {
		/* no credential, the internal token, a wrong one */
		req1(s, "GET", "/admin/api/deliveries", NULL, NULL, &r);
		expect_security_headers(&r);
		expect_error(&r, 401, "unauthorized");
		req1(s, "GET", "/admin/api/deliveries", internal, NULL, &r);
		expect_error(&r, 401, "unauthorized");
		req1(s, "GET", "/admin/api/deliveries", "Authorization: Bearer nope", NULL, &r);
		expect_error(&r, 401, "unauthorized");
		ck_assert_int_eq(req1(s, "GET", "/admin/api/deliveries", BEARER, NULL, &r), 200);
		expect_security_headers(&r);
		http_resp_free(&r);
	}
	/* the admin token opens no internal endpoint */
	req1(SVC_ORCH, "POST", "/events/PaymentSucceeded", BEARER, "{}", &r);
	expect_error(&r, 401, "unauthorized");
	req1(SVC_PAY, "POST", "/commands/PayCommand", BEARER, "{}", &r);
	expect_error(&r, 401, "unauthorized");
	req1(SVC_PAY, "POST", "/admin/faults", BEARER, "{}", &r);
	expect_error(&r, 401, "unauthorized");
}
END_TEST

START_TEST(session_cookie_and_csrf)
{
	struct http_resp r;
	char cookie[160], csrf[120], *sc;
	struct json_object *o;

	start_all_admin();
	/* not signed in */
	req1(SVC_ORCH, "GET", "/admin/session", NULL, NULL, &r);
	expect_error(&r, 401, "unauthorized");
	req1(SVC_ORCH, "POST", "/admin/session", NULL, "{\"token\":\"wrong-token-wrong-token\"}", &r);
	expect_security_headers(&r);
	expect_error(&r, 401, "unauthorized");
	req1(SVC_ORCH, "POST", "/admin/session", NULL, "{\"token\":", &r);
	expect_error(&r, 400, "invalid_json");
	req1(SVC_ORCH, "POST", "/admin/session", NULL, "{\"token\":1}", &r);
	expect_error(&r, 400, "invalid_field");

	sign_in(cookie, csrf);
	ck_assert_int_eq(req1(SVC_ORCH, "GET", "/admin/session", cookie, NULL, &r), 200);
	o = parse_body(&r);
	ck_assert_str_eq(jstr(o, "csrf"), csrf + strlen("X-Pgsaga-Csrf: "));
	json_object_put(o);
	http_resp_free(&r);
	/* the cookie opens GETs; a POST needs the CSRF header too */
	ck_assert_int_eq(req1(SVC_ORCH, "GET", "/admin/api/deliveries", cookie, NULL, &r), 200);
	http_resp_free(&r);
	req1(SVC_ORCH, "POST", "/admin/session/logout", cookie, NULL, &r);
	expect_error(&r, 403, "csrf_missing");
	req2(SVC_ORCH, "POST", "/admin/session/logout", cookie, "X-Pgsaga-Csrf: 00", NULL, &r);
	expect_error(&r, 403, "csrf_missing");
	/* a forged or altered cookie opens nothing */
	req1(SVC_ORCH, "GET", "/admin/api/deliveries", "Cookie: pgsaga_admin=9999999999.x.y", NULL,
	     &r);
	expect_error(&r, 401, "unauthorized");
	ck_assert_int_eq(req2(SVC_ORCH, "POST", "/admin/session/logout", cookie, csrf, NULL, &r),
			 200);
	sc = http_header(&r, "Set-Cookie");
	ck_assert_msg(sc && strstr(sc, "Max-Age=0"), "logout keeps the cookie: %s",
		      sc ? sc : "(none)");
	free(sc);
	http_resp_free(&r);
	/* a cookie from the orchestrator is worth nothing on another token */
	env_stop(&env, SVC_ORCH, SIGTERM);
	{
		const char *other[] = { "ADMIN_TOKEN=another-admin-token-0123", NULL };

		env_start(&env, SVC_ORCH, other);
	}
	req1(SVC_ORCH, "GET", "/admin/session", cookie, NULL, &r);
	expect_error(&r, 401, "unauthorized");
}
END_TEST

START_TEST(sign_in_rate_limited)
{
	struct http_resp r;
	char *v;
	long long before, after;
	int limited_at = -1;

	start_all_admin();
	before = env_sql_ll(&env, "SELECT 0", 0, NULL);
	for (int i = 0; i < 30 && limited_at < 0; i++) {
		req1(SVC_ORCH, "POST", "/admin/session", NULL, "{\"token\":\"guess-guess-guess-1\"}",
		     &r);
		if (r.status == 429)
			limited_at = i;
		else
			ck_assert_int_eq(r.status, 401);
		if (r.status == 429) {
			v = http_header(&r, "Retry-After");
			ck_assert_msg(v && atoi(v) > 0, "no Retry-After");
			free(v);
			expect_error(&r, 429, "too_many_attempts");
		} else {
			http_resp_free(&r);
		}
	}
	ck_assert_msg(limited_at > 0, "never limited");
	/* now even the right token is refused, at sign-in and as a bearer */
	req1(SVC_ORCH, "POST", "/admin/session", NULL, "{\"token\":\"" ADMIN_TOKEN "\"}", &r);
	expect_error(&r, 429, "too_many_attempts");
	req1(SVC_ORCH, "GET", "/admin/api/deliveries", BEARER, NULL, &r);
	expect_error(&r, 429, "too_many_attempts");
	/* the failures are counted */
	ck_assert_int_eq(req1(SVC_ORCH, "GET", "/metrics", NULL, NULL, &r), 200);
	v = strstr(r.body, "\nsaga_admin_signin_failures_total ");
	ck_assert_msg(v, "no failure counter in /metrics");
	after = atoll(v + strlen("\nsaga_admin_signin_failures_total "));
	ck_assert_int_eq(after, before + limited_at);
	http_resp_free(&r);
}
END_TEST

static Suite *admin_suite(void)
{
	Suite *s = suite_create("admin");
	TCase *sec = tcase_create("security");

	TCase *all[] = { sec };
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		tcase_add_checked_fixture(all[i], setup, teardown);
		tcase_set_timeout(all[i], 120);
		suite_add_tcase(s, all[i]);
	}
	tcase_add_test(sec, admin_off_without_token);
	tcase_add_test(sec, tokens_are_not_interchangeable);
	tcase_add_test(sec, session_cookie_and_csrf);
	tcase_add_test(sec, sign_in_rate_limited);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	harness_cluster_start();
	sr = srunner_create(admin_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	harness_cluster_stop();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
