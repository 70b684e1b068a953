/* admin_gate: see admin_gate.h. */
#include "admin_gate.h"

#include <event2/http.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "admin_api.h"
#include "admin_auth.h"
#include "httpd.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"

/*
 * No limit on wrong tokens: a limit can only turn their 401 into 429 (a
 * right guess must still pass, or anyone could lock the operator out), so
 * guessing is left to the token's entropy. Wrong tokens are counted and
 * logged so that an attack shows; the log says it at most once a minute,
 * with how many came since, so a flood does not flood the log too.
 */
#define FAIL_LOG_S 60

/* ADMIN_TOKEN, from admin_enable; one service per process. */
static const char *admin_token;

static long long fails_unlogged;
static int64_t fails_logged_at;

static struct metric_family *failures(void)
{
	return metrics_family("saga_admin_signin_failures_total",
			      "Wrong admin tokens presented, at sign-in or as a bearer token",
			      METRIC_COUNTER);
}

void admin_secure_headers(struct evhttp_request *req)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);

	evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(out, "Content-Security-Policy",
			  "default-src 'self'; frame-ancestors 'none'; form-action 'self'; "
			  "base-uri 'none'");
	evhttp_add_header(out, "Cache-Control", "no-store");
	evhttp_add_header(out, "Referrer-Policy", "no-referrer");
}

static void failed(struct evhttp_request *req)
{
	int64_t now = (int64_t)time(NULL);
	char addr[64];

	metrics_inc(failures(), "", 1);
	fails_unlogged++;
	if (now - fails_logged_at >= FAIL_LOG_S) {
		httpd_peer_addr(req, addr, sizeof(addr));
		log_warn("admin: %lld wrong admin token(s) since the last warning, the latest from %s",
			 fails_unlogged, addr);
		fails_unlogged = 0;
		fails_logged_at = now;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
	httpd_error(req, 401, "unauthorized", "wrong admin token");
}

/* The request's valid session cookie, copied into out; false when none. */
static bool session_of(struct evhttp_request *req, char out[ADMIN_COOKIE_LEN])
{
	const char *h = httpd_header(req, "Cookie");

	return h && admin_cookie_get(h, ADMIN_COOKIE_NAME, out, ADMIN_COOKIE_LEN) &&
	       admin_session_valid(admin_token, out, (int64_t)time(NULL));
}

static bool is_get(struct evhttp_request *req)
{
	enum evhttp_cmd_type t = evhttp_request_get_command(req);

	return t == EVHTTP_REQ_GET || t == EVHTTP_REQ_HEAD;
}

static bool admin_gate(struct evhttp_request *req, void *arg, bool need_auth)
{
	const char *auth = httpd_header(req, "Authorization");
	char cookie[ADMIN_COOKIE_LEN], csrf[ADMIN_CSRF_LEN];

	admin_secure_headers(req);
	if (!need_auth)
		return true;
	if (auth) {
		if (strncasecmp(auth, "Bearer ", 7) != 0 ||
		    !admin_token_equal(auth + 7, admin_token)) {
			failed(req);
			return false;
		}
		return true;
	}
	if (!session_of(req, cookie)) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
				  "Bearer");
		httpd_error(req, 401, "unauthorized", "sign in, or send the admin token as a bearer");
		return false;
	}
	if (!is_get(req)) {
		const char *got = httpd_header(req, "X-Pgsaga-Csrf");

		admin_csrf(admin_token, cookie, csrf);
		if (!got || !admin_token_equal(got, csrf)) {
			httpd_error(req, 403, "csrf_missing",
				    "a POST with the session cookie needs the X-Pgsaga-Csrf header");
			return false;
		}
	}
	return true;
}

static void reply_csrf(struct evhttp_request *req, const char *cookie)
{
	char csrf[ADMIN_CSRF_LEN], body[96];

	admin_csrf(admin_token, cookie, csrf);
	snprintf(body, sizeof(body), "{\"csrf\":\"%s\"}", csrf);
	httpd_reply(req, 200, body);
}

static void sign_in(struct evhttp_request *req, void *svc, const char *tail)
{
	char err[128], cookie[ADMIN_COOKIE_LEN], header[ADMIN_COOKIE_LEN + 128];
	size_t len;
	const char *token, *body = httpd_body(req, &len);
	struct json_object *obj = jsonx_parse(body, len, err, sizeof(err));

	if (!obj) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object) ||
	    jsonx_get_str(obj, "token", 4096, &token) != 0) {
		json_object_put(obj);
		httpd_error(req, 400, "invalid_field", "token is missing or invalid");
		return;
	}
	bool ok = admin_token_equal(token, admin_token);

	json_object_put(obj);
	if (!ok) {
		failed(req);
		return;
	}
	admin_session_new(admin_token, (int64_t)time(NULL), cookie);
	/* Secure only over TLS: the console is also served over plain http on
	 * localhost, where a browser would drop a Secure cookie */
	snprintf(header, sizeof(header), "%s=%s; HttpOnly; SameSite=Strict; Path=/; Max-Age=%d%s",
		 ADMIN_COOKIE_NAME, cookie, ADMIN_SESSION_S, httpd_over_tls() ? "; Secure" : "");
	evhttp_add_header(evhttp_request_get_output_headers(req), "Set-Cookie", header);
	reply_csrf(req, cookie);
}

static void session_get(struct evhttp_request *req, void *svc, const char *tail)
{
	char cookie[ADMIN_COOKIE_LEN];

	if (!session_of(req, cookie)) {
		httpd_error(req, 401, "unauthorized", "not signed in");
		return;
	}
	reply_csrf(req, cookie);
}

static void sign_out(struct evhttp_request *req, void *svc, const char *tail)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Set-Cookie",
			  httpd_over_tls() ? ADMIN_COOKIE_NAME
				  "=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0; Secure"
					   : ADMIN_COOKIE_NAME
				  "=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
	httpd_reply(req, 200, "{\"signedOut\":true}");
}

static const struct httpd_route routes[] = {
	{ "POST", "/admin/session", false, sign_in, "/admin/session", HTTPD_ADMIN_OPEN },
	{ "GET", "/admin/session", false, session_get, "/admin/session", HTTPD_ADMIN_OPEN },
	{ "POST", "/admin/session/logout", false, sign_out, "/admin/session/logout",
	  HTTPD_ADMIN_AUTH },
};

size_t admin_routes(const struct httpd_route **out)
{
	*out = routes;
	return sizeof(routes) / sizeof(routes[0]);
}

void admin_enable(const struct admin_ctx *ctx)
{
	admin_token = ctx->token;
	admin_api_open(ctx);
	httpd_set_admin_gate(ctx->httpd, admin_gate, NULL);
	metrics_series(failures(), ""); /* shown as 0 from the start */
}

void admin_disable(void)
{
	admin_api_close();
	admin_token = NULL;
}
