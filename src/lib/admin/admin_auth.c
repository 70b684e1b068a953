/* admin_auth: see admin_auth.h. */
#include "admin_auth.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "sha256.h"

bool admin_token_equal(const char *got, const char *want)
{
	uint8_t a[SHA256_LEN], b[SHA256_LEN];

	/* comparing digests hides the length as well as the content */
	sha256(got, strlen(got), a);
	sha256(want, strlen(want), b);
	return CRYPTO_memcmp(a, b, SHA256_LEN) == 0;
}

static void session_mac(const char *token, const char *body, size_t bodylen, char hex[65])
{
	char msg[96];
	uint8_t mac[SHA256_LEN];
	int n = snprintf(msg, sizeof(msg), "pgsaga-session|%.*s", (int)bodylen, body);

	hmac_sha256(token, strlen(token), msg, (size_t)n, mac);
	sha256_hex(mac, SHA256_LEN, hex);
}

void admin_session_new(const char *token, int64_t now_s, char out[ADMIN_COOKIE_LEN])
{
	uint8_t nonce[8];
	char nonce_hex[17], mac[65];
	int n;

	if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
		abort();
	sha256_hex(nonce, sizeof(nonce), nonce_hex);
	n = snprintf(out, ADMIN_COOKIE_LEN, "%" PRId64 ".%s", now_s + ADMIN_SESSION_S, nonce_hex);
	session_mac(token, out, (size_t)n, mac);
	snprintf(out + n, (size_t)(ADMIN_COOKIE_LEN - n), ".%s", mac);
}

bool admin_session_valid(const char *token, const char *cookie, int64_t now_s)
{
	const char *dot1 = strchr(cookie, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
	char mac[65], *end;
	long long expiry;

	if (!dot1 || !dot2 || dot1 == cookie || dot2 - dot1 != 17 || strlen(dot2 + 1) != 64)
		return false;
	expiry = strtoll(cookie, &end, 10);
	if (end != dot1 || expiry < now_s)
		return false;
	session_mac(token, cookie, (size_t)(dot2 - cookie), mac);
	return admin_token_equal(dot2 + 1, mac);
}

void admin_csrf(const char *token, const char *cookie, char out[ADMIN_CSRF_LEN])
{
	char msg[ADMIN_COOKIE_LEN + 16];
	uint8_t mac[SHA256_LEN];
	int n = snprintf(msg, sizeof(msg), "pgsaga-csrf|%s", cookie);

	hmac_sha256(token, strlen(token), msg, (size_t)n, mac);
	sha256_hex(mac, SHA256_LEN, out);
}

bool admin_cookie_get(const char *header, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);
	const char *p = header;

	while (p && *p) {
		while (*p == ' ' || *p == '\t' || *p == ';')
			p++;
		const char *end = strchr(p, ';');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
			size_t vl = len - nl - 1;

			while (vl > 0 && (p[nl + 1 + vl - 1] == ' ' || p[nl + 1 + vl - 1] == '\t'))
				vl--;
			if (vl + 1 > outlen)
				return false;
			memcpy(out, p + nl + 1, vl);
			out[vl] = '\0';
			return true;
		}
		p = end;
	}
	return false;
}
