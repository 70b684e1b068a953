/* Header parsers of httpd: Idempotency-Key (traceparent: test_traceparent.c). */
#include <check.h>
#include <string.h>

#include "httpd.h"
#include "suites.h"

START_TEST(idempotency_key_forms)
{
	char out[256], long_key[300];

	ck_assert(httpd_idempotency_key("order-42", out, sizeof(out)));
	ck_assert_str_eq(out, "order-42");
	/* byte for byte (docs/protocol.md, "HTTP endpoints"): quotes are part of the key */
	ck_assert(httpd_idempotency_key("\"order-42\"", out, sizeof(out)));
	ck_assert_str_eq(out, "\"order-42\"");
	ck_assert(httpd_idempotency_key("a\"b", out, sizeof(out)));
	ck_assert(httpd_idempotency_key("\"\"", out, sizeof(out)));
	ck_assert_str_eq(out, "\"\"");
	ck_assert(httpd_idempotency_key("\"a\"b\"", out, sizeof(out)));
	ck_assert(httpd_idempotency_key("\"a\\b\"", out, sizeof(out)));
	ck_assert(!httpd_idempotency_key("", out, sizeof(out)));
	ck_assert(!httpd_idempotency_key("has space", out, sizeof(out)));
	ck_assert(!httpd_idempotency_key("tab\there", out, sizeof(out)));
	ck_assert(!httpd_idempotency_key("caf\xc3\xa9", out, sizeof(out)));
	memset(long_key, 'k', 255);
	long_key[255] = '\0';
	ck_assert(httpd_idempotency_key(long_key, out, sizeof(out)));
	long_key[255] = 'k';
	long_key[256] = '\0';
	ck_assert(!httpd_idempotency_key(long_key, out, sizeof(out)));
	/* the length counts the quotes: 255 inside them is 257 */
	long_key[0] = '"';
	long_key[255] = 'k';
	long_key[256] = '"';
	long_key[257] = '\0';
	ck_assert(!httpd_idempotency_key(long_key, out, sizeof(out)));
}
END_TEST

Suite *httpd_suite(void)
{
	Suite *s = suite_create("httpd");
	TCase *tc = tcase_create("headers");

	tcase_add_test(tc, idempotency_key_forms);
	suite_add_tcase(s, tc);
	return s;
}
