/*
 * Admin API tests (docs/protocol.md): the three real services with ADMIN_TOKEN set,
 * on a throwaway PostgreSQL cluster, over real sockets. Sign-in, the CSRF
 * header, which token opens what, and the JSON API.
 */
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fixture.h"
#include "stock_first.h"
#include "jsonx.h"
#include "metrics_reader.h"
#include "uuid.h"

/* short on purpose: no minimum length is promised, so a short token only earns a
 * warning, and every test here starts the services with one */
#define ADMIN_TOKEN "admin"

static const char *const admin_env[] = { "ADMIN_TOKEN=" ADMIN_TOKEN, NULL };

static void start_all_admin(void)
{
	env_start(&env, SVC_INV, admin_env);
	env_start(&env, SVC_PAY, admin_env);
	env_start(&env, SVC_ORCH, admin_env);
}

/* --- HTTP helpers ------------------------------------------------------- */

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
	ck_assert_msg(v && strcmp(v, "default-src 'self'; frame-ancestors 'none'; "
				     "form-action 'self'; base-uri 'none'") == 0,
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
	/* over plain HTTP (localhost) a Secure cookie would be dropped by the browser */
	ck_assert_msg(!strstr(sc, "Secure"), "Set-Cookie: %s", sc);
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


/* --- the JSON API ----------------------------------------------------------- */

/* GET path on the orchestrator with the admin token; asserts 200. */
static struct json_object *admin_get(const char *path)
{
	struct http_resp r;
	struct json_object *o;

	ck_assert_int_eq(http_do(env.port[SVC_ORCH], "GET", path,
				 (const char *const[]){ BEARER, NULL }, NULL, 0, &r),
			 0);
	ck_assert_msg(r.status == 200, "GET %s: %d %s", path, r.status, r.body);
	expect_security_headers(&r);
	o = parse_body(&r);
	http_resp_free(&r);
	return o;
}

static int admin_post(const char *path, const char *body, struct http_resp *r)
{
	return req1(SVC_ORCH, "POST", path, BEARER, body, r);
}

static size_t jlen(struct json_object *o, const char *key)
{
	struct json_object *v = jget(o, key);

	ck_assert(json_object_is_type(v, json_type_array));
	return json_object_array_length(v);
}

static struct json_object *jidx(struct json_object *o, const char *key, size_t i)
{
	return json_object_array_get_idx(jget(o, key), i);
}

static void expect_unavailable(struct json_object *o, const char *services)
{
	struct json_object *u = jget(o, "unavailable");
	char got[64] = "";

	for (size_t i = 0; i < json_object_array_length(u); i++)
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? "," : "",
			 json_object_get_string(json_object_array_get_idx(u, i)));
	ck_assert_str_eq(got, services);
}

static void set_fail_rate(enum svc s, double rate)
{
	struct http_resp r;
	char body[64];

	snprintf(body, sizeof(body), "{\"failRate\":%g}", rate);
	ck_assert_int_eq(req1(s, "POST", "/admin/faults", internal_auth(), body, &r), 200);
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

/*
 * Wrong tokens never lock the right one out: not at sign-in, not as a
 * bearer, not the orchestrator's own calls to a peer that is being guessed
 * at. They are 401 each time, and counted.
 */
START_TEST(wrong_tokens_never_lock_out)
{
	struct http_resp r;
	struct json_object *o;
	double before;

	start_all_admin();
	before = metrics_read_series(env.port[SVC_ORCH], "saga_admin_signin_failures_total");
	for (int i = 0; i < 20; i++) {
		req1(SVC_ORCH, "POST", "/admin/session", NULL, "{\"token\":\"guess\"}", &r);
		expect_error(&r, 401, "unauthorized");
		req1(SVC_ORCH, "GET", "/admin/api/deliveries", "Authorization: Bearer guess", NULL,
		     &r);
		expect_error(&r, 401, "unauthorized");
		req1(SVC_PAY, "GET", "/admin/api/deliveries", "Authorization: Bearer guess", NULL,
		     &r);
		expect_error(&r, 401, "unauthorized");
	}
	ck_assert_int_eq(req1(SVC_ORCH, "POST", "/admin/session", NULL,
			      "{\"token\":\"" ADMIN_TOKEN "\"}", &r),
			 200);
	http_resp_free(&r);
	ck_assert_int_eq(req1(SVC_ORCH, "GET", "/admin/api/deliveries", BEARER, NULL, &r), 200);
	o = parse_body(&r);
	expect_unavailable(o, ""); /* payment still answers the orchestrator */
	json_object_put(o);
	http_resp_free(&r);
	ck_assert(metrics_read_series(env.port[SVC_ORCH], "saga_admin_signin_failures_total") ==
		  before + 40);
}
END_TEST


/* --- the saga list ------------------------------------------------------- */

#define XSS "<img src=x onerror=alert(1)>"
#define XSS_Q "%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"

/*
 * 124 sagas written straight into the table (no service acts on them:
 * they have no deadline and no messages): every state, five customers,
 * three items, a minute apart, four of them at the same instant so that
 * paging must break ties; one customer id is markup.
 */
static void seed_sagas(void)
{
	free(env_sqlf(&env,
		"INSERT INTO orchestrator.saga_instances (saga_id, state, version, customer_id,"
		"  item_id, qty, amount, compensation, created_at, updated_at)"
		" SELECT gen_random_uuid(),"
		"   (ARRAY['Completed','Failed','Compensated','PendingPayment','PendingInventory',"
		"          'Compensating'])[1 + i %% 6], 1,"
		"   CASE WHEN i = 7 THEN '%s' ELSE 'c-' || (i %% 5) END, 'item-' || (i %% 3), 1, 100,"
		"   CASE WHEN i %% 6 = 5 THEN 'refund' END,"
		"   timestamptz '2026-01-01 00:00:00Z' + (CASE WHEN i > 120 THEN 60 ELSE i END)"
		"     * interval '1 minute',"
		"   timestamptz '2026-01-01 00:00:00Z'"
		" FROM generate_series(1, 124) i", XSS));
	/* two unfinished ones moved a moment ago: not stuck */
	free(env_sqlf(&env, "UPDATE orchestrator.saga_instances SET updated_at = now()"
			    " WHERE saga_id IN (SELECT saga_id FROM orchestrator.saga_instances"
			    "   WHERE state = 'PendingPayment' ORDER BY created_at LIMIT 2)"));
}

/* The ids of a list answer, comma-separated, appended to out. */
static void collect_ids(struct json_object *page, char *out, size_t outlen)
{
	for (size_t i = 0; i < jlen(page, "sagas"); i++)
		snprintf(out + strlen(out), outlen - strlen(out), "%s%s", *out ? "," : "",
			 jstr(jidx(page, "sagas", i), "sagaId"));
}

/* Follows next from the first page of query; all ids, newest first. */
static char *all_pages(const char *query, int *pages)
{
	char path[512], *ids = calloc(1, 124 * 40);
	struct json_object *page;

	ck_assert_ptr_nonnull(ids);
	snprintf(path, sizeof(path), "/admin/api/sagas?%s", query);
	for (*pages = 0;; ++*pages) {
		struct json_object *next;

		page = admin_get(path);
		collect_ids(page, ids, 124 * 40);
		next = jget(page, "next");
		if (!next) {
			json_object_put(page);
			return ids;
		}
		snprintf(path, sizeof(path), "/admin/api/sagas?%s&cursor=%s", query,
			 json_object_get_string(next));
		json_object_put(page);
		ck_assert_int_lt(*pages, 100);
	}
}

static char *ids_sql(const char *where)
{
	char *v = env_sqlf(&env,
			   "SELECT coalesce(string_agg(saga_id::text, ',' ORDER BY created_at DESC,"
			   " saga_id DESC), '') FROM orchestrator.saga_instances WHERE %s",
			   where);

	return v ? v : strdup("");
}

/* The filter gives exactly the sagas of where, in order, over pages. */
static void expect_filter(const char *query, const char *where)
{
	int pages;
	char *got = all_pages(query, &pages), *want = ids_sql(where);

	ck_assert_msg(strcmp(got, want) == 0, "%s: got %s, want %s", query, got, want);
	ck_assert_msg(strlen(want) > 0, "%s selects nothing: a weak test", query);
	free(got);
	free(want);
}

START_TEST(saga_list_filters_and_pages)
{
	struct json_object *o, *counts;
	char *got, *want;
	int pages;

	start_all_admin();
	seed_sagas();
	/* the first page: 50, newest first, counts of all six states */
	o = admin_get("/admin/api/sagas");
	ck_assert_int_eq(jlen(o, "sagas"), 50);
	ck_assert_ptr_nonnull(jget(o, "next"));
	counts = jget(o, "counts");
	long long total = 0;
	json_object_object_foreach(counts, state, n)
	{
		ck_assert_int_eq(json_object_get_int64(n),
				 env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances"
						   " WHERE state = '%s'", state));
		total += json_object_get_int64(n);
	}
	ck_assert_int_eq(json_object_object_length(counts), 6);
	ck_assert_int_eq(total, 124);
	json_object_put(o);

	/* every saga once over pages of 7 (ties at one instant included) */
	got = all_pages("limit=7", &pages);
	want = ids_sql("true");
	ck_assert_str_eq(got, want);
	ck_assert_int_eq(pages + 1, (124 + 6) / 7);
	free(got);
	/* a full last page has no next: 124 = 31 pages of 4 */
	got = all_pages("limit=4", &pages);
	ck_assert_str_eq(got, want);
	ck_assert_int_eq(pages + 1, 31);
	free(got);
	free(want);

	expect_filter("limit=9&state=Failed", "state = 'Failed'");
	expect_filter("limit=500&state=Failed,Compensated", "state IN ('Failed', 'Compensated')");
	expect_filter("limit=5&customerId=c-2", "customer_id = 'c-2'");
	expect_filter("limit=5&itemId=item-1", "item_id = 'item-1'");
	expect_filter("limit=6&since=2026-01-01T01:00:00Z&until=2026-01-01T01:30:00%2B00:00",
		      "created_at >= '2026-01-01T01:00:00Z' AND created_at < '2026-01-01T01:30:00Z'");
	expect_filter("limit=4&stuckSeconds=3600",
		      "state IN ('PendingPayment', 'PendingInventory', 'Compensating')"
		      " AND updated_at <= now() - interval '1 hour'");
	expect_filter("limit=3&state=Completed&customerId=c-1&itemId=item-0",
		      "state = 'Completed' AND customer_id = 'c-1' AND item_id = 'item-0'");

	/* counts follow every filter but the state */
	o = admin_get("/admin/api/sagas?customerId=c-3&state=Completed");
	ck_assert_int_eq(json_object_get_int64(jget(jget(o, "counts"), "Failed")),
			 env_sql_ll(&env, "SELECT count(*) FROM orchestrator.saga_instances"
					  " WHERE customer_id = 'c-3' AND state = 'Failed'", 0, NULL));
	json_object_put(o);

	/* markup is data: it round-trips as the same characters */
	o = admin_get("/admin/api/sagas?customerId=" XSS_Q);
	ck_assert_int_eq(jlen(o, "sagas"), 1);
	ck_assert_str_eq(jstr(jidx(o, "sagas", 0), "customerId"), XSS);
	json_object_put(o);
	/* an empty value is no filter */
	o = admin_get("/admin/api/sagas?state=&customerId=&itemId=&since=&until=&stuckSeconds=&limit=&cursor=");
	ck_assert_int_eq(jlen(o, "sagas"), 50);
	json_object_put(o);
	o = admin_get("/admin/api/sagas?customerId=nobody");
	ck_assert_int_eq(jlen(o, "sagas"), 0);
	ck_assert(jget(o, "next") == NULL);
	json_object_put(o);
}
END_TEST

START_TEST(saga_list_bad_parameters)
{
	static const char *const bad[][2] = {
		{ "limit=0", "limit" },
		{ "limit=501", "limit" },
		{ "limit=ten", "limit" },
		{ "state=Pending", "state" },
		{ "state=Failed,", "state" },
		{ "since=now", "since" },
		{ "until=2026-13-45T00:00:00Z", "until" },
		{ "since=2026-02-30", "since" },
		{ "stuckSeconds=-1", "stuckSeconds" },
		{ "cursor=abc", "cursor" },
		{ "cursor=12.not-a-uuid", "cursor" },
		{ "customerId=%FF", "customerId" },
		{ "itemId=%C3%28", "itemId" },
		{ "cursor=9999999999999999999.6f1c1e4e-3d8e-4d7c-9a43-2a4f0b9d1c55", "cursor" },
		{ "stuckSeconds=9999999999", "stuckSeconds" },
		{ "limit=5&limit=x", "limit" },
		{ "definition=Order", "definition" },
		{ "definition=1order", "definition" },
		{ "definition=order%20saga", "definition" },
		{ "definition=-order", "definition" },
		{ "definition=a123456789012345678901234567890123456789012345678901234567890123",
		  "definition" },
		{ "state=PendingStock-1", "state" },
	};
	struct http_resp r;
	char path[128];

	start_all_admin();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct json_object *o;

		snprintf(path, sizeof(path), "/admin/api/sagas?%s", bad[i][0]);
		req1(SVC_ORCH, "GET", path, BEARER, NULL, &r);
		ck_assert_msg(r.status == 400, "%s: %d %s", path, r.status, r.body);
		o = parse_body(&r);
		ck_assert_str_eq(error_code(o), "invalid_field");
		ck_assert_msg(strstr(jstr(jget(o, "error"), "message"), bad[i][1]),
			      "%s: the message does not name %s: %s", path, bad[i][1], r.body);
		json_object_put(o);
		http_resp_free(&r);
	}
	req1(SVC_ORCH, "GET", "/admin/api/sagas/not-a-uuid", BEARER, NULL, &r);
	expect_error(&r, 400, "invalid_id");
	req1(SVC_ORCH, "GET", "/admin/api/sagas/6f1c1e4e-3d8e-4d7c-9a43-2a4f0b9d1c55", BEARER, NULL,
	     &r);
	expect_error(&r, 404, "not_found");
}
END_TEST

/* --- sagas of another definition ----------------------------------------- */

static const char stock_first[] = STOCK_FIRST("");

/* The three services, the orchestrator with stock-first from SAGA_DEFINITIONS_DIR. */
static void start_all_admin_stock_first(void)
{
	char dir[256], path[300], var[300];
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/defs-%s", harness_cluster_dir(), env.dbname);
	ck_assert_msg(mkdir(dir, 0755) == 0 || errno == EEXIST, "%s", dir);
	snprintf(path, sizeof(path), "%s/stock-first.json", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(stock_first, f);
	fclose(f);
	snprintf(var, sizeof(var), "SAGA_DEFINITIONS_DIR=%s", dir);
	const char *const orch_env[] = { "ADMIN_TOKEN=" ADMIN_TOKEN, var, NULL };

	env_start(&env, SVC_INV, admin_env);
	env_start(&env, SVC_PAY, admin_env);
	env_start(&env, SVC_ORCH, orch_env);
}

/* POST /sagas/stock-first with body; the new saga's id into saga. */
static void start_stock_first(const char *key, const char *body, char saga[UUID_STR_LEN])
{
	struct http_resp r;
	char kh[128];
	struct json_object *o;

	snprintf(kh, sizeof(kh), "Idempotency-Key: %s", key);
	ck_assert_int_eq(req2(SVC_ORCH, "POST", "/sagas/stock-first", kh,
			      "Content-Type: application/json", body, &r),
			 201);
	o = parse_body(&r);
	snprintf(saga, UUID_STR_LEN, "%s", jstr(o, "sagaId"));
	json_object_put(o);
	http_resp_free(&r);
}

/* The keys of an object, comma-separated, in its order. */
static void keys_of(struct json_object *o, char *out, size_t outlen)
{
	out[0] = '\0';
	json_object_object_foreach(o, k, v)
	{
		(void)v;
		snprintf(out + strlen(out), outlen - strlen(out), "%s%s", *out ? "," : "", k);
	}
}

/* Every saga of a list answer names the definition and version the table holds. */
static void expect_definitions(struct json_object *page)
{
	for (size_t i = 0; i < jlen(page, "sagas"); i++) {
		struct json_object *s = jidx(page, "sagas", i), *d = jget(s, "definition");
		char *want = env_sqlf(&env,
				      "SELECT definition_name || '/' || definition_version"
				      "  FROM orchestrator.saga_instances WHERE saga_id = '%s'",
				      jstr(s, "sagaId"));
		char got[128];

		snprintf(got, sizeof(got), "%s/%d", jstr(d, "name"),
			 json_object_get_int(jget(d, "version")));
		ck_assert_str_eq(got, want);
		free(want);
	}
}

/*
 * Order sagas and stock-first sagas side by side: real ones run through
 * the three services (one completes, one is compensated), and more written
 * into the table in each of stock-first's states, version 2 among them.
 */
START_TEST(saga_list_of_definitions)
{
	char order[UUID_STR_LEN], sf[UUID_STR_LEN], sf_comp[UUID_STR_LEN], keys[256], path[96];
	struct json_object *o, *counts, *in;

	start_all_admin_stock_first();
	seed_stock("A001", 10);
	env_new_order(&env, "c-1", "A001", 1, 100, order);
	start_stock_first("sf-1",
			  "{\"customerId\":\"c-7\",\"itemId\":\"A001\",\"qty\":2,"
			  "\"amount\":500,\"note\":\"gift\"}",
			  sf);
	/* more than the default credit: the payment fails, the stock is released */
	start_stock_first("sf-2",
			  "{\"customerId\":\"poor\",\"itemId\":\"A001\",\"qty\":1,"
			  "\"amount\":2000000,\"note\":\"\"}",
			  sf_comp);
	ck_assert(wait_state(order, "Completed"));
	ck_assert(wait_state(sf, "Completed"));
	ck_assert(wait_state(sf_comp, "Compensated"));
	free(env_sqlf(&env,
		"INSERT INTO orchestrator.saga_instances (saga_id, state, version, compensation,"
		"  definition_name, definition_version, input, created_at, updated_at)"
		" SELECT gen_random_uuid(), (ARRAY['PendingStock','PendingCharge','Compensating',"
		"   'Completed'])[1 + i %% 4], 1, CASE WHEN i %% 4 = 2 THEN 'Stock' END,"
		"   'stock-first', 1 + i %% 2,"
		"   jsonb_build_object('customerId', 'c-' || i, 'itemId', 'A001', 'qty', 1,"
		"                      'amount', 10, 'note', ''),"
		"   timestamptz '2026-01-01 00:00:00Z' + i * interval '1 minute',"
		"   timestamptz '2026-01-01 00:00:00Z'"
		" FROM generate_series(1, 11) i"));

	/* each saga names its definition; the counts keep the order saga's
	 * six states first, then the others that hold sagas, by name */
	o = admin_get("/admin/api/sagas?limit=500");
	ck_assert_int_eq(jlen(o, "sagas"), 14);
	expect_definitions(o);
	counts = jget(o, "counts");
	keys_of(counts, keys, sizeof(keys));
	ck_assert_str_eq(keys, "PendingPayment,PendingInventory,Compensating,Completed,Failed,"
			       "Compensated,PendingCharge,PendingStock");
	json_object_object_foreach(counts, state, n)
	{
		ck_assert_int_eq(json_object_get_int64(n),
				 env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances"
						   " WHERE state = '%s'", state));
	}
	ck_assert_int_eq(json_object_get_int64(jget(counts, "PendingStock")), 2);
	json_object_put(o);

	/* definition= keeps one definition's sagas, of every version, over pages */
	expect_filter("limit=2&definition=stock-first", "definition_name = 'stock-first'");
	expect_filter("limit=1&definition=order", "definition_name = 'order'");
	expect_filter("limit=2&state=PendingStock", "state = 'PendingStock'");
	expect_filter("limit=2&definition=stock-first&state=PendingCharge,Completed",
		      "definition_name = 'stock-first' AND state IN ('PendingCharge', 'Completed')");
	expect_filter("limit=2&definition=stock-first&stuckSeconds=60",
		      "definition_name = 'stock-first' AND state NOT IN ('Completed', 'Failed',"
		      " 'Compensated') AND updated_at <= now() - interval '1 minute'");
	expect_filter("limit=3&definition=order&customerId=c-1",
		      "definition_name = 'order' AND customer_id = 'c-1'");
	/* and its counts are that definition's */
	o = admin_get("/admin/api/sagas?definition=stock-first");
	expect_definitions(o);
	counts = jget(o, "counts");
	json_object_object_foreach(counts, st, cn)
	{
		ck_assert_int_eq(json_object_get_int64(cn),
				 env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances"
						   " WHERE state = '%s' AND definition_name ="
						   " 'stock-first'", st));
	}
	ck_assert_int_eq(json_object_get_int64(jget(counts, "Completed")), 4);
	ck_assert_int_eq(json_object_get_int64(jget(counts, "PendingPayment")), 0);
	json_object_put(o);
	/* the order saga's: its finished counts are every finished saga's less
	 * the other definitions' */
	o = admin_get("/admin/api/sagas?definition=order");
	counts = jget(o, "counts");
	json_object_object_foreach(counts, so, on)
	{
		ck_assert_int_eq(json_object_get_int64(on),
				 env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_instances"
						   " WHERE state = '%s' AND definition_name = 'order'",
						   so));
	}
	ck_assert_int_eq(json_object_get_int64(jget(counts, "Completed")), 1);
	json_object_put(o);
	/* a definition without sagas: nothing, and the six counts at zero */
	o = admin_get("/admin/api/sagas?definition=nothing-here");
	ck_assert_int_eq(jlen(o, "sagas"), 0);
	keys_of(jget(o, "counts"), keys, sizeof(keys));
	ck_assert_str_eq(keys, "PendingPayment,PendingInventory,Compensating,Completed,Failed,"
			       "Compensated");
	json_object_put(o);

	/* a stock-first saga's detail: its definition, input and outputs, and
	 * the peers' rows as for any saga */
	free(env_sqlf(&env, "UPDATE orchestrator.saga_instances SET outputs ="
			    " '{\"Stock\": {\"shelf\": \"B-4\", \"units\": 2}}' WHERE saga_id = '%s'",
		      sf));
	snprintf(path, sizeof(path), "/admin/api/sagas/%s", sf);
	o = admin_get(path);
	ck_assert_str_eq(jstr(jget(o, "definition"), "name"), "stock-first");
	ck_assert_int_eq(json_object_get_int(jget(jget(o, "definition"), "version")), 1);
	in = jget(o, "input");
	ck_assert_str_eq(jstr(in, "note"), "gift");
	ck_assert_str_eq(jstr(in, "customerId"), "c-7");
	ck_assert_int_eq(json_object_get_int(jget(in, "qty")), 2);
	ck_assert_str_eq(jstr(jget(jget(o, "outputs"), "Stock"), "shelf"), "B-4");
	ck_assert_int_eq(json_object_get_int(jget(jget(jget(o, "outputs"), "Stock"), "units")), 2);
	ck_assert(json_object_get_type(jget(o, "customerId")) == json_type_null);
	ck_assert_int_eq(jlen(o, "history"), 3);
	ck_assert_str_eq(jstr(jget(o, "reservation"), "status"), "reserved");
	ck_assert_str_eq(jstr(jget(o, "payment"), "status"), "captured");
	expect_unavailable(o, "");
	json_object_put(o);
	/* an order saga's: its input from its columns, no outputs */
	snprintf(path, sizeof(path), "/admin/api/sagas/%s", order);
	o = admin_get(path);
	ck_assert_str_eq(jstr(jget(o, "definition"), "name"), "order");
	ck_assert_str_eq(jstr(jget(o, "input"), "customerId"), "c-1");
	ck_assert_int_eq(json_object_get_int(jget(jget(o, "input"), "amount")), 100);
	ck_assert_int_eq(json_object_object_length(jget(o, "outputs")), 0);
	ck_assert_str_eq(jstr(o, "customerId"), "c-1");
	json_object_put(o);
}
END_TEST

/* --- a saga across the three services ----------------------------------- */

/* The message of service and direction whose type is type, or NULL. */
static struct json_object *find_msg(struct json_object *saga, const char *service,
				    const char *dir, const char *type)
{
	for (size_t i = 0; i < jlen(saga, "messages"); i++) {
		struct json_object *m = jidx(saga, "messages", i), *t;

		if (strcmp(jstr(m, "service"), service) == 0 && strcmp(jstr(m, "direction"), dir) == 0 &&
		    json_object_object_get_ex(m, "type", &t) && t &&
		    strcmp(json_object_get_string(t), type) == 0)
			return m;
	}
	return NULL;
}

/*
 * The saga's detail lists its undelivered outbox row of type: pending
 * (dead false) or dead. Those rows are read apart from the delivered ones,
 * whose index holds nothing else (outbox_messages_saga_idx).
 */
static void expect_undelivered(const char *saga, const char *type, bool dead)
{
	char path[96];
	struct json_object *o, *m;

	snprintf(path, sizeof(path), "/admin/api/sagas/%s", saga);
	o = admin_get(path);
	m = find_msg(o, "orchestrator", "out", type);
	ck_assert_msg(m != NULL, "%s of %s missing: %s", type, saga, json_object_to_json_string(o));
	ck_assert(jget(m, "processedAt") == NULL);
	ck_assert_int_eq(jget(m, "deadAt") != NULL, dead);
	ck_assert_int_gt(json_object_get_int(jget(m, "attemptCount")), 0);
	json_object_put(o);
}

START_TEST(saga_messages_from_three_services)
{
	char saga[UUID_STR_LEN], path[96], upper[UUID_STR_LEN];
	struct json_object *o, *m;

	start_all_admin();
	seed_stock("A001", 5);
	env_new_order(&env, "c-1", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));
	/* an event's inbox row is written before its sender marks it delivered */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM payment.outbox_messages"
				     " WHERE processed_at IS NULL", "0", WAIT_MS));
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM inventory.outbox_messages"
				     " WHERE processed_at IS NULL", "0", WAIT_MS));
	/* and a command's mark may come after the saga completed (seen on a busy machine) */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
				     " WHERE processed_at IS NULL", "0", WAIT_MS));
	for (int i = 0; i < UUID_STR_LEN; i++)
		upper[i] = (char)toupper((unsigned char)saga[i]);
	snprintf(path, sizeof(path), "/admin/api/sagas/%s", upper);
	o = admin_get(path);
	ck_assert_str_eq(jstr(o, "sagaId"), saga);
	ck_assert_str_eq(jstr(o, "state"), "Completed");
	ck_assert_int_eq(jlen(o, "history"), 3);
	expect_unavailable(o, "");
	/* each message out of one service, and into the next */
	static const char *const flow[][3] = {
		{ "orchestrator", "payment", "PayCommand" },
		{ "payment", "orchestrator", "PaymentSucceeded" },
		{ "orchestrator", "inventory", "ReserveInventoryCommand" },
		{ "inventory", "orchestrator", "InventoryReserved" },
	};
	for (size_t i = 0; i < 4; i++) {
		struct json_object *out = find_msg(o, flow[i][0], "out", flow[i][2]);
		struct json_object *in = find_msg(o, flow[i][1], "in", flow[i][2]);

		ck_assert_msg(out && in, "%s from %s to %s missing: %s", flow[i][2], flow[i][0],
			      flow[i][1], json_object_to_json_string(o));
		ck_assert_str_eq(jstr(out, "messageId"), jstr(in, "messageId"));
		ck_assert_int_eq(json_object_get_int(jget(out, "attemptCount")), 0); /* no failure */
		ck_assert_ptr_nonnull(jget(out, "processedAt"));
		ck_assert(jget(out, "deadAt") == NULL);
		ck_assert_ptr_nonnull(jget(in, "processedAt"));
	}
	ck_assert_int_eq(jlen(o, "messages"), 8);
	m = jget(o, "payment");
	ck_assert_str_eq(jstr(m, "status"), "captured");
	ck_assert_int_eq(json_object_get_int(jget(m, "amount")), 100);
	ck_assert_str_eq(jstr(jget(o, "reservation"), "status"), "reserved");
	json_object_put(o);

	/* inventory with another ADMIN_TOKEN: refused, so named as missing */
	env_stop(&env, SVC_INV, SIGTERM);
	{
		const char *other[] = { "ADMIN_TOKEN=another-admin-token-0123", NULL };

		env_start(&env, SVC_INV, other);
	}
	o = admin_get(path);
	expect_unavailable(o, "inventory");
	ck_assert(jget(o, "reservation") == NULL);
	ck_assert_str_eq(jstr(jget(o, "payment"), "status"), "captured");
	json_object_put(o);
	env_stop(&env, SVC_INV, SIGTERM);
	env_start(&env, SVC_INV, admin_env);

	/* payment down: the rest, and payment named as missing */
	env_stop(&env, SVC_PAY, SIGTERM);
	o = admin_get(path);
	expect_unavailable(o, "payment");
	ck_assert(jget(o, "payment") == NULL);
	ck_assert_str_eq(jstr(jget(o, "reservation"), "status"), "reserved");
	ck_assert_ptr_nonnull(find_msg(o, "inventory", "out", "InventoryReserved"));
	ck_assert(find_msg(o, "payment", "out", "PaymentSucceeded") == NULL);
	json_object_put(o);
	o = admin_get("/admin/api/deliveries");
	expect_unavailable(o, "payment");
	ck_assert_int_eq(jlen(o, "deliveries"), 3); /* ours to two peers, inventory's to us */
	json_object_put(o);
	o = admin_get("/admin/api/dead-letters");
	expect_unavailable(o, "payment");
	json_object_put(o);
}
END_TEST

/* --- cancel ------------------------------------------------------------------ */

static int cancel(const char *saga, const char *reason, struct http_resp *r)
{
	char path[96], body[256];

	snprintf(path, sizeof(path), "/admin/api/sagas/%s/cancel", saga);
	snprintf(body, sizeof(body), "{\"reason\":\"%s\"}", reason);
	return admin_post(path, body, r);
}

static void expect_cancelled(const char *saga, bool cancelled)
{
	struct http_resp r;
	struct json_object *o;

	ck_assert_int_eq(cancel(saga, "customer called", &r), 200);
	o = parse_body(&r);
	ck_assert_str_eq(jstr(o, "state"), "Compensating");
	ck_assert_int_eq(json_object_get_boolean(jget(o, "cancelled")), cancelled);
	json_object_put(o);
	http_resp_free(&r);
}

static long long history_causes(const char *saga, const char *cause)
{
	return env_sql_llf(&env, "SELECT count(*) FROM orchestrator.saga_history"
				 " WHERE saga_id = '%s' AND cause = '%s'", saga, cause);
}

/*
 * PendingPayment (payment failing: the PayCommand waits): cancel refunds
 * before the payment, which leaves a voided row; the late PayCommand is
 * then declined. Twice is one cancellation.
 */
START_TEST(cancel_pending_payment)
{
	char saga[UUID_STR_LEN];
	struct json_object *o;

	start_all_admin();
	seed_stock("A001", 5);
	set_fail_rate(SVC_PAY, 1);
	env_new_order(&env, "c-1", "A001", 1, 100, saga);
	ck_assert(env_wait_sql(&env, "SELECT count(*) > 0 FROM orchestrator.outbox_messages"
				     " WHERE attempt_count > 0", "t", WAIT_MS));
	expect_undelivered(saga, "PayCommand", false);
	expect_cancelled(saga, true);
	expect_cancelled(saga, false);
	ck_assert_int_eq(history_causes(saga, "Cancelled"), 1);
	set_fail_rate(SVC_PAY, 0);
	ck_assert(wait_state(saga, "Compensated"));
	/* refund first: voided, the PayCommand declined; else captured and refunded */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
				     " WHERE processed_at IS NULL", "0", WAIT_MS));
	ck_assert(env_wait_sql(&env, "SELECT string_agg(status, ',') IN ('voided', 'refunded')"
				     " FROM payment.payments", "t", WAIT_MS));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT balance FROM payment.accounts"
					  " UNION ALL SELECT 1000000 LIMIT 1", 0, NULL), 1000000);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM inventory.reservations", 0, NULL), 0);
	o = admin_get("/admin/api/sagas?state=Compensated");
	ck_assert_int_eq(jlen(o, "sagas"), 1);
	json_object_put(o);
	{
		char path[96];

		snprintf(path, sizeof(path), "/admin/api/sagas/%s", saga);
		o = admin_get(path);
		ck_assert_str_eq(jstr(jget(o, "cancellation"), "reason"), "customer called");
		ck_assert_str_eq(jstr(jidx(o, "history", 1), "cause"), "Cancelled");
		json_object_put(o);
	}
}
END_TEST

/* PendingInventory (inventory failing): release, then refund, as on a deadline. */
START_TEST(cancel_pending_inventory)
{
	char saga[UUID_STR_LEN];

	start_all_admin();
	seed_stock("A001", 5);
	set_fail_rate(SVC_INV, 1);
	env_new_order(&env, "c-1", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "PendingInventory"));
	expect_cancelled(saga, true);
	/* compensating, waiting for the release: a second cancel changes nothing */
	expect_cancelled(saga, false);
	set_fail_rate(SVC_INV, 0);
	ck_assert(wait_state(saga, "Compensated"));
	ck_assert_int_eq(history_causes(saga, "Cancelled"), 1);
	ck_assert_int_eq(history_causes(saga, "InventoryReleased"), 1);
	ck_assert_int_eq(history_causes(saga, "PaymentRefunded"), 1);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM inventory.reservations"
				     " WHERE status = 'reserved'", "0", WAIT_MS));
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM payment.payments"
					  " WHERE status = 'captured'", 0, NULL), 0);
	ck_assert_int_eq(env_sql_ll(&env, "SELECT available FROM inventory.stock", 0, NULL), 5);
}
END_TEST

/* Compensating for another cause (no stock, refund failing), then finished ones. */
START_TEST(cancel_compensating_and_finished)
{
	char comp[UUID_STR_LEN], done[UUID_STR_LEN], path[96];
	struct http_resp r;

	start_all_admin();
	seed_stock("A001", 5);
	seed_stock("B002", 0);
	env_new_order(&env, "c-1", "A001", 1, 100, done);
	ck_assert(wait_state(done, "Completed"));
	cancel(done, "too late", &r);
	expect_error(&r, 409, "saga_finished");
	ck_assert_int_eq(history_causes(done, "Cancelled"), 0);

	/* each path with the other's method: 405 naming the right one */
	snprintf(path, sizeof(path), "/admin/api/sagas/%s/cancel", done);
	req1(SVC_ORCH, "GET", path, BEARER, NULL, &r);
	char *allow = http_header(&r, "Allow");
	ck_assert_str_eq(allow ? allow : "(none)", "POST");
	free(allow);
	expect_error(&r, 405, "method_not_allowed");
	snprintf(path, sizeof(path), "/admin/api/sagas/%s", done);
	admin_post(path, "{}", &r);
	allow = http_header(&r, "Allow");
	ck_assert_str_eq(allow ? allow : "(none)", "GET, HEAD");
	free(allow);
	expect_error(&r, 405, "method_not_allowed");

	env_new_order(&env, "c-1", "B002", 1, 100, comp); /* rejected: compensates with a refund */
	ck_assert(wait_state(comp, "Compensated"));
	cancel(comp, "too late", &r);
	expect_error(&r, 409, "saga_finished");

	/* one stuck in Compensating: a refund that cannot get through */
	set_fail_rate(SVC_PAY, 1);
	env_stop(&env, SVC_INV, SIGTERM);
	env_new_order(&env, "c-2", "B002", 1, 100, comp);
	/* payment fails too: the saga waits in PendingPayment; an event moves it on */
	expect_cancelled(comp, true);
	expect_cancelled(comp, false);
	ck_assert_int_eq(history_causes(comp, "Cancelled"), 1);

	/* bad requests change nothing */
	snprintf(path, sizeof(path), "/admin/api/sagas/%s/cancel", comp);
	admin_post(path, "{\"reason\":\"\"}", &r);
	expect_error(&r, 400, "invalid_field");
	admin_post(path, "{\"why\":\"x\"}", &r);
	expect_error(&r, 400, "invalid_field");
	admin_post(path, "[1]", &r);
	expect_error(&r, 400, "invalid_json");
	admin_post("/admin/api/sagas/nope/cancel", "{\"reason\":\"x\"}", &r);
	expect_error(&r, 400, "invalid_id");
	admin_post("/admin/api/sagas/6f1c1e4e-3d8e-4d7c-9a43-2a4f0b9d1c55/cancel",
		   "{\"reason\":\"x\"}", &r);
	expect_error(&r, 404, "not_found");
	/* the cookie without the CSRF header cannot cancel */
	{
		char cookie[160], csrf[120];

		sign_in(cookie, csrf);
		req1(SVC_ORCH, "POST", path, cookie, "{\"reason\":\"x\"}", &r);
		expect_error(&r, 403, "csrf_missing");
		ck_assert_int_eq(req2(SVC_ORCH, "POST", path, cookie, csrf, "{\"reason\":\"x\"}", &r),
				 200);
		http_resp_free(&r);
	}
}
END_TEST

/* --- dead letters --------------------------------------------------------- */

/* Three PayCommands dead (payment down, one attempt each), one by hand in
 * payment's outbox with markup in its error. */
static void make_dead_letters(char sagas[3][UUID_STR_LEN])
{
	const char *const give_up[] = { "ADMIN_TOKEN=" ADMIN_TOKEN, "RETRY_MAX_ATTEMPTS=1",
					"BREAKER_FAILURES=100", NULL };

	env_start(&env, SVC_INV, admin_env);
	env_start(&env, SVC_ORCH, give_up);
	seed_stock("A001", 10);
	for (int i = 0; i < 3; i++)
		env_new_order(&env, "c-1", "A001", 1, 100, sagas[i]);
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.dead_letters", "3", WAIT_MS));
	env_start(&env, SVC_PAY, admin_env);
	free(env_sqlf(&env,
		"INSERT INTO payment.outbox_messages (message_id, kind, destination, type, payload,"
		"  attempt_count, dead_at, last_error, next_attempt_at)"
		" VALUES (gen_random_uuid(), 'event', 'orchestrator', 'PaymentSucceeded',"
		"  jsonb_build_object('sagaId', gen_random_uuid()), 3, now(), '%s', now())", XSS));
}

static char *dead_id_of(const char *saga)
{
	return env_sqlf(&env, "SELECT message_id FROM orchestrator.outbox_messages"
			      " WHERE payload->>'sagaId' = '%s'", saga);
}

START_TEST(dead_letters_listed_and_retried)
{
	char sagas[3][UUID_STR_LEN], body[256], *id0, *id1;
	struct json_object *o, *g;
	struct http_resp r;

	make_dead_letters(sagas);
	expect_undelivered(sagas[2], "PayCommand", true);

	o = admin_get("/admin/api/dead-letters");
	expect_unavailable(o, "");
	ck_assert_int_eq(jlen(o, "deadLetters"), 4);
	ck_assert_int_eq(jlen(o, "groups"), 2);
	g = jidx(o, "groups", 0); /* the biggest first */
	ck_assert_str_eq(jstr(g, "service"), "orchestrator");
	ck_assert_str_eq(jstr(g, "type"), "PayCommand");
	ck_assert_int_eq(json_object_get_int(jget(g, "count")), 3);
	json_object_put(o);
	o = admin_get("/admin/api/dead-letters?service=payment");
	ck_assert_int_eq(jlen(o, "deadLetters"), 1);
	ck_assert_str_eq(jstr(jidx(o, "deadLetters", 0), "lastError"), XSS);
	ck_assert_str_eq(jstr(jidx(o, "deadLetters", 0), "service"), "payment");
	json_object_put(o);
	o = admin_get("/admin/api/dead-letters?type=PayCommand");
	ck_assert_int_eq(jlen(o, "deadLetters"), 3);
	json_object_put(o);
	o = admin_get("/admin/api/dead-letters?service=orchestrator&type=PaymentSucceeded");
	ck_assert_int_eq(jlen(o, "deadLetters"), 0);
	json_object_put(o);

	/* type and lastError narrow "all" only: with ids they are refused, not
	 * ignored, and nothing is retried */
	id0 = dead_id_of(sagas[0]);
	snprintf(body, sizeof(body),
		 "{\"service\":\"orchestrator\",\"messageIds\":[\"%s\"],"
		 "\"type\":\"PaymentSucceeded\"}",
		 id0);
	admin_post("/admin/api/dead-letters/retry", body, &r);
	expect_error(&r, 400, "invalid_field");
	ck_assert_int_eq(env_sql_ll(&env, "SELECT count(*) FROM orchestrator.dead_letters", 0, NULL),
			 3);

	/* one: delivered again at once, and the saga goes on */
	snprintf(body, sizeof(body), "{\"service\":\"orchestrator\",\"messageIds\":[\"%s\"]}", id0);
	ck_assert_int_eq(admin_post("/admin/api/dead-letters/retry", body, &r), 200);
	o = parse_body(&r);
	ck_assert_int_eq(json_object_get_int(jget(o, "retried")), 1);
	json_object_put(o);
	http_resp_free(&r);
	ck_assert(wait_state(sagas[0], "Completed"));
	ck_assert_int_eq(env_sql_llf(&env, "SELECT version FROM orchestrator.saga_instances"
					   " WHERE saga_id = '%s'", sagas[1]),
			 1); /* the others still wait */
	/* a list: one of them is no dead letter any more */
	id1 = dead_id_of(sagas[1]);
	snprintf(body, sizeof(body),
		 "{\"service\":\"orchestrator\",\"messageIds\":[\"%s\",\"%s\"]}", id0, id1);
	ck_assert_int_eq(admin_post("/admin/api/dead-letters/retry", body, &r), 200);
	ck_assert_str_eq(r.body, "{\"retried\":1}");
	http_resp_free(&r);
	ck_assert(wait_state(sagas[1], "Completed"));
	/* all */
	ck_assert_int_eq(admin_post("/admin/api/dead-letters/retry",
				    "{\"service\":\"orchestrator\",\"all\":true}", &r),
			 200);
	ck_assert_str_eq(r.body, "{\"retried\":1}");
	http_resp_free(&r);
	ck_assert(wait_state(sagas[2], "Completed"));
	/* payment's group, through the orchestrator (it dies again: a 404) */
	ck_assert_int_eq(admin_post("/admin/api/dead-letters/retry",
				    "{\"service\":\"payment\",\"all\":true,\"type\":\"PayCommand\"}",
				    &r),
			 200);
	ck_assert_str_eq(r.body, "{\"retried\":0}"); /* no such group */
	http_resp_free(&r);
	ck_assert_int_eq(admin_post("/admin/api/dead-letters/retry",
				    "{\"service\":\"payment\",\"all\":true,"
				    "\"type\":\"PaymentSucceeded\",\"lastError\":\"" XSS "\"}",
				    &r),
			 200);
	ck_assert_str_eq(r.body, "{\"retried\":1}");
	http_resp_free(&r);
	ck_assert(env_wait_sql(&env, "SELECT attempt_count FROM payment.dead_letters", "1",
			       WAIT_MS));
	free(id0);
	free(id1);

	/* refused */
	static const char *const bad[] = {
		"{\"service\":\"orchestrator\"}",
		"{\"service\":\"orchestrator\",\"all\":true,\"messageIds\":[]}",
		"{\"service\":\"orchestrator\",\"messageIds\":[\"x\"]}",
		"{\"service\":\"orchestrator\",\"all\":1}",
		"{\"service\":\"billing\",\"all\":true}",
		"{\"all\":true}",
		("{\"service\":\"payment\",\"lastError\":\"x\","
		 "\"messageIds\":[\"00000000-0000-4000-8000-000000000001\"]}"),
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		admin_post("/admin/api/dead-letters/retry", bad[i], &r);
		expect_error(&r, 400, "invalid_field");
	}
	req1(SVC_ORCH, "GET", "/admin/api/dead-letters?service=billing", BEARER, NULL, &r);
	expect_error(&r, 400, "invalid_field");
	/* the peer is down: said so, nothing invented */
	env_stop(&env, SVC_PAY, SIGTERM);
	admin_post("/admin/api/dead-letters/retry", "{\"service\":\"payment\",\"all\":true}", &r);
	expect_error(&r, 503, "service_unavailable");
}
END_TEST

/* --- deliveries ------------------------------------------------------------- */

START_TEST(deliveries_per_service_and_peer)
{
	struct json_object *o;
	char saga[UUID_STR_LEN];
	int seen = 0;

	start_all_admin();
	seed_stock("A001", 5);
	set_fail_rate(SVC_INV, 1);
	env_new_order(&env, "c-1", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "PendingInventory"));
	ck_assert(env_wait_sql(&env, "SELECT count(*) > 0 FROM orchestrator.outbox_messages"
				     " WHERE attempt_count > 1", "t", WAIT_MS));
	/* a delivered message is marked after its answer: wait for the marks */
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM orchestrator.outbox_messages"
				     " WHERE processed_at IS NULL", "1", WAIT_MS));
	ck_assert(env_wait_sql(&env, "SELECT count(*) FROM payment.outbox_messages"
				     " WHERE processed_at IS NULL", "0", WAIT_MS));
	o = admin_get("/admin/api/deliveries");
	for (size_t i = 0; i < jlen(o, "deliveries"); i++) {
		struct json_object *d = jidx(o, "deliveries", i);
		const char *svc = jstr(d, "service"), *dest = jstr(d, "destination");

		if (strcmp(svc, "orchestrator") == 0 && strcmp(dest, "inventory") == 0) {
			ck_assert_int_eq(json_object_get_int(jget(d, "pending")), 1);
			ck_assert_int_eq(json_object_get_int(jget(d, "dead")), 0);
			ck_assert(json_object_get_double(jget(d, "oldestPendingSeconds")) > 0);
			seen++;
		} else {
			ck_assert_int_eq(json_object_get_int(jget(d, "pending")), 0);
			ck_assert_str_eq(jstr(d, "breaker"), "closed");
			seen += 10;
		}
	}
	ck_assert_int_eq(seen, 1 + 3 * 10); /* orchestrator→payment, payment→, inventory→ */
	json_object_put(o);
}
END_TEST

/* Over RabbitMQ (SAGA_TEST_TRANSPORT=amqp): the breaker is the transport's. */
START_TEST(deliveries_over_amqp)
{
	struct json_object *o;
	char saga[UUID_STR_LEN];

	ck_assert(harness_amqp());
	start_all_admin();
	seed_stock("A001", 5);
	env_new_order(&env, "c-1", "A001", 1, 100, saga);
	ck_assert(wait_state(saga, "Completed"));
	o = admin_get("/admin/api/deliveries");
	expect_unavailable(o, "");
	ck_assert_int_eq(jlen(o, "deliveries"), 4);
	for (size_t i = 0; i < jlen(o, "deliveries"); i++) {
		struct json_object *d = jidx(o, "deliveries", i);

		ck_assert_str_eq(jstr(d, "breaker"), "closed");
		ck_assert_int_eq(json_object_get_int(jget(d, "dead")), 0);
	}
	json_object_put(o);
}
END_TEST

static Suite *admin_suite(void)
{
	Suite *s = suite_create("admin");
	TCase *sec = fixture_tcase("security");
	TCase *api = fixture_tcase("api");
	TCase *cancels = fixture_tcase("cancel");

	suite_add_tcase(s, sec);
	suite_add_tcase(s, api);
	suite_add_tcase(s, cancels);
	if (harness_amqp()) {
		/*
		 * Over RabbitMQ: what the transport changes (a saga's messages,
		 * the breakers). The rest reads tables or needs HTTP's failure
		 * modes (a peer down makes dead letters), and runs under http.
		 */
		tcase_add_test(api, saga_messages_from_three_services);
		tcase_add_test(api, deliveries_over_amqp);
		tcase_add_test(sec, tokens_are_not_interchangeable);
		return s;
	}
	tcase_add_test(sec, admin_off_without_token);
	tcase_add_test(sec, tokens_are_not_interchangeable);
	tcase_add_test(sec, session_cookie_and_csrf);
	tcase_add_test(sec, wrong_tokens_never_lock_out);
	tcase_add_test(api, saga_list_filters_and_pages);
	tcase_add_test(api, saga_list_bad_parameters);
	tcase_add_test(api, saga_list_of_definitions);
	tcase_add_test(api, saga_messages_from_three_services);
	tcase_add_test(api, dead_letters_listed_and_retried);
	tcase_add_test(api, deliveries_per_service_and_peer);
	tcase_add_test(cancels, cancel_pending_payment);
	tcase_add_test(cancels, cancel_pending_inventory);
	tcase_add_test(cancels, cancel_compensating_and_finished);
	return s;
}

int main(void)
{
	return harness_run(admin_suite());
}
