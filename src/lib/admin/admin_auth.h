/*
 * admin_auth: the pure half of the admin API's security: the stateless
 * session cookie, its CSRF value and token comparison. No I/O: the caller
 * passes the time, so unit tests drive it.
 *
 * The cookie is "<expiry>.<nonce>.<mac>": expiry in Unix seconds, 16 random
 * hex digits, and HMAC-SHA256(ADMIN_TOKEN, "pgsaga-session|<expiry>.<nonce>")
 * in hex. Nothing is stored on the server, so any orchestrator instance
 * with the same ADMIN_TOKEN accepts it, and changing ADMIN_TOKEN signs
 * everyone out. The CSRF value is HMAC-SHA256(ADMIN_TOKEN,
 * "pgsaga-csrf|<cookie>"): a page that can read it was given it by us.
 * Signing out clears the browser's cookie; a copied cookie stays valid until
 * its expiry (ADMIN_SESSION_S).
 */
#ifndef PGSAGA_ADMIN_AUTH_H
#define PGSAGA_ADMIN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ADMIN_COOKIE_NAME "pgsaga_admin"
#define ADMIN_SESSION_S (8 * 3600)
#define ADMIN_COOKIE_LEN 100 /* buffer for a cookie value, NUL included */
#define ADMIN_CSRF_LEN 65    /* 64 hex digits and the NUL */
#define ADMIN_TOKEN_SHORT 16 /* a shorter ADMIN_TOKEN is accepted with a warning */

/* Equal strings, in time that depends on neither content nor length. */
bool admin_token_equal(const char *got, const char *want);

/* A new session cookie value valid until now_s + ADMIN_SESSION_S. */
void admin_session_new(const char *token, int64_t now_s, char out[ADMIN_COOKIE_LEN]);

/* True when cookie was made by admin_session_new with token and has not expired. */
bool admin_session_valid(const char *token, const char *cookie, int64_t now_s);

/* The CSRF value that goes with a cookie. */
void admin_csrf(const char *token, const char *cookie, char out[ADMIN_CSRF_LEN]);

/*
 * The value of cookie `name` in a Cookie request header ("a=1; b=2"), copied
 * into out; false when absent or longer than outlen - 1.
 */
bool admin_cookie_get(const char *header, const char *name, char *out, size_t outlen);

#endif
