/* Header parsers of httpd: Idempotency-Key and traceparent. */
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

START_TEST(traceparent_forms)
{
	char id[33];

	ck_assert(httpd_trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", id));
	ck_assert_str_eq(id, "4bf92f3577b34da6a3ce929d0e0e4736");
	ck_assert(!httpd_trace_id(NULL, id));
	ck_assert(!httpd_trace_id("00-00000000000000000000000000000000-00f067aa0ba902b7-01", id));
	ck_assert(!httpd_trace_id("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", id));
	ck_assert(!httpd_trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0", id));
	ck_assert(!httpd_trace_id("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", id));
	ck_assert(!httpd_trace_id("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", id));
}
END_TEST

Suite *httpd_suite(void)
{
	Suite *s = suite_create("httpd");
	TCase *tc = tcase_create("headers");

	tcase_add_test(tc, idempotency_key_forms);
	tcase_add_test(tc, traceparent_forms);
	suite_add_tcase(s, tc);
	return s;
}
