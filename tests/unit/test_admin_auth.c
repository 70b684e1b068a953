/* sha256 against published vectors; the admin session cookie and token comparison. */
#include <check.h>
#include <string.h>

#include "admin_auth.h"
#include "sha256.h"
#include "suites.h"

static const char *hex_of(const void *data, size_t len)
{
	static char out[65];
	uint8_t d[SHA256_LEN];

	sha256(data, len, d);
	sha256_hex(d, SHA256_LEN, out);
	return out;
}

START_TEST(sha256_vectors)
{
	char million[1000001];

	/* FIPS 180-4 examples */
	ck_assert_str_eq(hex_of("abc", 3),
			 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	ck_assert_str_eq(hex_of("", 0),
			 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	ck_assert_str_eq(
		hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56),
		"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	memset(million, 'a', 1000000);
	ck_assert_str_eq(hex_of(million, 1000000),
			 "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	/* 55, 56 and 64 bytes: padding into one or two blocks */
	ck_assert_str_eq(hex_of(million, 55),
			 "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
	ck_assert_str_eq(hex_of(million, 64),
			 "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}
END_TEST

static const char *hmac_hex(const void *key, size_t kl, const void *msg, size_t ml)
{
	static char out[65];
	uint8_t d[SHA256_LEN];

	hmac_sha256(key, kl, msg, ml, d);
	sha256_hex(d, SHA256_LEN, out);
	return out;
}

START_TEST(hmac_vectors)
{
	uint8_t k[131];

	/* RFC 4231 test cases 1, 2 and 6 */
	memset(k, 0x0b, 20);
	ck_assert_str_eq(hmac_hex(k, 20, "Hi There", 8),
			 "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	ck_assert_str_eq(hmac_hex("Jefe", 4, "what do ya want for nothing?", 28),
			 "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(k, 0xaa, 131);
	ck_assert_str_eq(
		hmac_hex(k, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54),
		"60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}
END_TEST

#define TOKEN "admin-token-for-tests"

START_TEST(session_cookie)
{
	char c[ADMIN_COOKIE_LEN], c2[ADMIN_COOKIE_LEN], csrf[ADMIN_CSRF_LEN], csrf2[ADMIN_CSRF_LEN];

	admin_session_new(TOKEN, 1000, c);
	ck_assert(admin_session_valid(TOKEN, c, 1000));
	ck_assert(admin_session_valid(TOKEN, c, 1000 + ADMIN_SESSION_S));
	ck_assert(!admin_session_valid(TOKEN, c, 1001 + ADMIN_SESSION_S)); /* expired */
	ck_assert(!admin_session_valid(TOKEN "x", c, 1000));                /* other token */
	/* a longer expiry with the old MAC */
	strcpy(c2, c);
	c2[0] = c2[0] == '9' ? '8' : (char)(c2[0] + 1);
	ck_assert(!admin_session_valid(TOKEN, c2, 1000));
	/* a flipped MAC digit */
	strcpy(c2, c);
	c2[strlen(c2) - 1] = c2[strlen(c2) - 1] == '0' ? '1' : '0';
	ck_assert(!admin_session_valid(TOKEN, c2, 1000));
	ck_assert(!admin_session_valid(TOKEN, "", 1000));
	ck_assert(!admin_session_valid(TOKEN, "1.2.3", 1000));
	ck_assert(!admin_session_valid(TOKEN, "99999999999", 1000));
	/* every session has its own CSRF value */
	admin_session_new(TOKEN, 1000, c2);
	ck_assert_str_ne(c, c2);
	admin_csrf(TOKEN, c, csrf);
	admin_csrf(TOKEN, c2, csrf2);
	ck_assert_str_ne(csrf, csrf2);
	ck_assert_uint_eq(strlen(csrf), 64);
}
END_TEST

START_TEST(token_compare_and_cookie_header)
{
	char v[32];

	ck_assert(admin_token_equal("abc", "abc"));
	ck_assert(!admin_token_equal("abc", "abd"));
	ck_assert(!admin_token_equal("abc", "abcd"));
	ck_assert(!admin_token_equal("", "abc"));
	ck_assert(admin_cookie_get("a=1; pgsaga_admin=xyz; b=2", "pgsaga_admin", v, sizeof(v)));
	ck_assert_str_eq(v, "xyz");
	ck_assert(admin_cookie_get("pgsaga_admin=q", "pgsaga_admin", v, sizeof(v)));
	ck_assert_str_eq(v, "q");
	ck_assert(!admin_cookie_get("xpgsaga_admin=q", "pgsaga_admin", v, sizeof(v)));
	ck_assert(!admin_cookie_get("pgsaga_adminx=q", "pgsaga_admin", v, sizeof(v)));
	ck_assert(!admin_cookie_get("", "pgsaga_admin", v, sizeof(v)));
	ck_assert(!admin_cookie_get("pgsaga_admin=0123456789012345678901234567890123456789",
				    "pgsaga_admin", v, sizeof(v)));
}
END_TEST

Suite *admin_auth_suite(void)
{
	Suite *s = suite_create("admin_auth");
	TCase *tc = tcase_create("admin_auth");

	tcase_add_test(tc, sha256_vectors);
	tcase_add_test(tc, hmac_vectors);
	tcase_add_test(tc, session_cookie);
	tcase_add_test(tc, token_compare_and_cookie_header);
	suite_add_tcase(s, tc);
	return s;
}
