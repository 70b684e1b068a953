/*
 * admin_gate: who may use the admin API and the console, and the session
 * endpoints of signing in and out, as every service serves them, on when
 * ADMIN_TOKEN is set (else each admin path answers 404). The API's data is
 * admin_api.h's.
 *
 * Security, for every admin route (httpd's HTTPD_ADMIN_* routes, the
 * console's files included): the answers carry X-Content-Type-Options:
 * nosniff, Content-Security-Policy: default-src 'self'; frame-ancestors
 * 'none'; form-action 'self'; base-uri 'none', and Cache-Control: no-store.
 * A route that needs the credential accepts either Authorization: Bearer
 * $ADMIN_TOKEN or the session cookie (see admin_auth.h); with the cookie,
 * every POST must also carry X-Pgsaga-Csrf with the session's CSRF value
 * (403 csrf_missing). The right token always passes; a wrong one, at
 * sign-in or as a bearer, is always 401, counted
 * (saga_admin_signin_failures_total) and logged (a warning at most once a
 * minute).
 *
 * Sessions:
 *   POST /admin/session {"token": "..."}  -> 200 {"csrf": "..."} + Set-Cookie
 *   GET  /admin/session                   -> 200 {"csrf": "..."} or 401
 *   POST /admin/session/logout            -> 200, cookie cleared
 */
#ifndef PGSAGA_ADMIN_GATE_H
#define PGSAGA_ADMIN_GATE_H

#include <stdbool.h>
#include <stddef.h>

struct admin_ctx;
struct evhttp_request;
struct httpd_route;

/* The routes of the admin API common to all services (borrowed, static). */
size_t admin_routes(const struct httpd_route **out);

/* Turns the admin routes on: ctx->token is set, ctx->httpd open (see admin_api.h). */
void admin_enable(const struct admin_ctx *ctx);
/* Frees what admin_enable opened (at exit). */
void admin_disable(void);

/* Adds the security headers every admin and console answer carries. */
void admin_secure_headers(struct evhttp_request *req);

#endif
