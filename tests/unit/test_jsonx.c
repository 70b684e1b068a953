/*
 * jsonx, and log, whose lines are checked by parsing them back with jsonx
 * (both share the one escaper).
 *
 * What json-c 0.16 does on its own with JSON_TOKENER_STRICT |
 * JSON_TOKENER_VALIDATE_UTF8, and so what jsonx's own lexical pass is for:
 * it accepts {'a':1}, NaN, Infinity, -Infinity, "-01", "[00]", "1.",
 * "1.e3", raw tabs and other control bytes inside strings, overlong UTF-8
 * (C0 AF), UTF-8-encoded surrogates (ED A0 80) and code points past
 * U+10FFFF; it turns a lone \ud800 or \udc00 into U+FFFD; it clamps
 * 99999999999999999999999 to UINT64_MAX and -99999999999999999999999 to
 * INT64_MIN without an error, and 1e400 becomes an infinity; it cuts an
 * object key at \u0000. It does refuse comments, trailing commas, missing
 * separators, trailing garbage, "01", ".5", "+1", bare 0xff bytes, and
 * nesting deeper than its depth. A bare number at the end of the buffer is
 * "continue" until a terminating byte is fed.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonx.h"
#include "log.h"
#include "suites.h"

static struct json_object *parse_n(const char *s, size_t len)
{
	char err[128];

	return jsonx_parse(s, len, err, sizeof(err));
}

static struct json_object *parse(const char *s)
{
	return parse_n(s, strlen(s));
}

/* An input with its length, so NUL bytes can be part of it. */
struct doc {
	const char *text;
	size_t len;
};

#define DOC(literal) { (literal), sizeof(literal) - 1 }

static const struct doc rejected[] = {
	/* not JSON at all, or JavaScript */
	DOC("{'a':1}"), DOC("{\"a\":'b'}"), DOC("/*c*/{}"), DOC("{} // c"), DOC("{} # c"),
	DOC("NaN"), DOC("[NaN]"), DOC("[Infinity]"), DOC("[-Infinity]"), DOC("undefined"),
	DOC("True"), DOC("tru"), DOC("[truex]"), DOC("[nul]"), DOC("{a:1}"),
	/* structure */
	DOC("{\"a\":1,}"), DOC("[1,2,]"), DOC("[1,,2]"), DOC("[,1]"), DOC("{,}"), DOC("{\"a\" 1}"),
	DOC("{\"a\":1 \"b\":2}"), DOC("[1 2]"), DOC("{1:2}"), DOC("{\"a\":1"), DOC("["), DOC("]"),
	DOC(""), DOC("   "), DOC("\"abc"), DOC("{\"a\":}"),
	/* trailing garbage */
	DOC("{} x"), DOC("{}{}"), DOC("1 2"), DOC("{}\x0c"), DOC("{}]"), DOC("\"a\"\"b\""),
	/* numbers */
	DOC("01"), DOC("[-01]"), DOC("[00]"), DOC("[-00]"), DOC("[001.5]"), DOC("[1.]"),
	DOC("[1.e3]"), DOC("[.5]"), DOC("[+1]"), DOC("[0x10]"), DOC("[1e]"), DOC("[1e+]"), DOC("-"),
	DOC("[--1]"), DOC("[1-2]"), DOC("[1e3.5]"), DOC("1true"),
	/* strings */
	DOC("\"a\tb\""), DOC("\"a\nb\""), DOC("\"a\x01" "b\""), DOC("\"\\x41\""), DOC("\"\\u12\""),
	DOC("\"\\u12g4\""), DOC("\"\\a\""), DOC("\"\\\""),
	/* json-c would cut a key at \u0000: "a\u0000b" and "a" one key */
	DOC("{\"a\\u0000b\":1}"), DOC("{\"a\\u0000\" \t: 1}"), DOC("[{\"\\u0000\":1}]"),
	DOC("\"\\ud800\""), DOC("\"\\udc00\""), DOC("\"\\ud800\\u0041\""), DOC("\"\\ud800x\""),
	DOC("\"\\udbff\\ud800\""), DOC("\"\\ud800\"\""),
	/* bytes */
	DOC("\"\xff\""), DOC("\"\xc0\xaf\""), DOC("\"\xe0\x80\xaf\""), DOC("\"\xe0\x9f\xbf\""),
	DOC("\"\xf0\x8f\xbf\xbf\""), DOC("\"\xed\xa0\x80\""),
	DOC("\"\xf4\x90\x80\x80\""), DOC("\"\xe2\x82\""), DOC("\"\x80\""),
	DOC("\"\xf8\x88\x80\x80\x80\""),
	DOC("\xef\xbb\xbf{}"), DOC("{\"a\":1}\xc2\xa0"),
	DOC("\"a\0b\""), DOC("{}\0"), DOC("\0{}"), DOC("[1,\0 2]"),
	/* a top-level null has no object to return */
	DOC("null"),
};

START_TEST(test_rejects)
{
	const struct doc *d = &rejected[_i];
	char err[128] = "";
	struct json_object *v = jsonx_parse(d->text, d->len, err, sizeof(err));

	ck_assert_msg(v == NULL, "accepted #%d '%s' as %s", _i, d->text,
		      json_object_to_json_string(v));
	ck_assert_msg(err[0] != '\0' && strcmp(err, "ok") != 0, "no reason for #%d", _i);
	json_object_put(v);
}
END_TEST

static const struct doc accepted[] = {
	DOC("{}"), DOC("[]"), DOC("0"), DOC("-0"), DOC("1.5e3"), DOC("-1.25E-2"), DOC("true"),
	DOC("\"\""), DOC(" \t\r\n{ \"a\" : [ 1 , 2.5 , \"x\" , true , false , null ] } \n\t\r "),
	DOC("9223372036854775807"), DOC("-9223372036854775808"), DOC("[1e-400]"),
	/* well-formed but too large: parsed, then refused by the field reader */
	DOC("99999999999999999999999"), DOC("-99999999999999999999999"),
	DOC("9223372036854775808"), DOC("-9223372036854775809"), DOC("18446744073709551615"),
	DOC("[1e400]"), DOC("[-1e400]"), DOC("{\"q\":1.7976931348623159e308}"),
	DOC("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\""), DOC("\"\\ud83d\\ude00\""),
	DOC("\"\xf0\x9f\x98\x80 \xc3\xa9 \xe2\x82\xac \xef\xbf\xbf \xf4\x8f\xbf\xbf\""),
	DOC("{\"a\":1,\"a\":2}"), DOC("\"it's\""), DOC("\"/* not a comment */\""),
	DOC("\"NaN, 01, 'x'\""),
	/* a NUL in a value is well-formed: the field readers refuse it */
	DOC("\"\\u0000\""), DOC("{\"customerId\":\"a\\u0000b\"}"), DOC("[\"\\u0000\", 1]"),
};

START_TEST(test_accepts)
{
	const struct doc *d = &accepted[_i];
	char err[128];
	struct json_object *v = jsonx_parse(d->text, d->len, err, sizeof(err));

	ck_assert_msg(v != NULL, "refused #%d '%s': %s", _i, d->text, err);
	json_object_put(v);
}
END_TEST

START_TEST(test_depth)
{
	char doc[80];
	struct json_object *v;

	/* 32 levels of nesting are fine, 33 are refused. */
	memset(doc, '[', 32);
	memset(doc + 32, ']', 32);
	v = parse_n(doc, 64);
	ck_assert_ptr_nonnull(v);
	json_object_put(v);
	memset(doc, '[', 33);
	memset(doc + 33, ']', 33);
	ck_assert_ptr_null(parse_n(doc, 66));
}
END_TEST

START_TEST(test_values_decoded)
{
	struct json_object *v = parse("[\"\\ud83d\\ude00\", \"\\u00e9\", 1e-400, -0]");

	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(v, 0)),
			 "\xf0\x9f\x98\x80");
	ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(v, 1)), "\xc3\xa9");
	ck_assert_double_eq(json_object_get_double(json_object_array_get_idx(v, 2)), 0.0);
	ck_assert_int_eq(json_object_get_int64(json_object_array_get_idx(v, 3)), 0);
	json_object_put(v);
}
END_TEST

START_TEST(test_parse_only_reads_len)
{
	/* The bytes past len are not looked at: here they are garbage. */
	struct json_object *v = parse_n("{\"a\":12}garbage", 8);

	ck_assert_ptr_nonnull(v);
	json_object_put(v);
	v = parse_n("12345", 2);
	ck_assert_int_eq(json_object_get_int64(v), 12);
	json_object_put(v);
}
END_TEST

/*
 * The tokener is reused from one document to the next: a document that
 * failed halfway (json-c's own errors, the depth limit, one cut short)
 * leaves nothing behind for the next.
 */
START_TEST(test_parse_after_failures)
{
	static const char *const bad[] = {
		"{\"a\" 1}", "[1,2,]", "{\"a\":[1,{\"b\":", "[1 2]",
		"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
	};
	const char *good = "{\"k\":[1,{\"x\":\"y\"}],\"n\":null}";

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[128] = "";
		struct json_object *v = jsonx_parse(bad[i], strlen(bad[i]), err, sizeof(err));

		ck_assert_msg(v == NULL, "accepted %s", bad[i]);
		ck_assert_str_ne(err, "ok");
		v = jsonx_parse(good, strlen(good), err, sizeof(err));
		ck_assert_msg(v != NULL, "after %s: %s", bad[i], err);
		ck_assert_str_eq(err, "ok");
		ck_assert_str_eq(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
				 good);
		json_object_put(v);
	}
}
END_TEST

static void *parse_in_thread(void *arg)
{
	struct json_object *v = parse(arg);
	intptr_t n = v ? (intptr_t)json_object_get_int64(json_object_object_get(v, "n")) : -1;

	json_object_put(v);
	return (void *)n;
}

/* Each thread has its own tokener, freed when the thread ends (ASan: no leak). */
START_TEST(test_parse_in_threads)
{
	static char doc[] = "{\"n\":7}";
	pthread_t t[4];
	void *r;

	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, parse_in_thread, doc), 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(pthread_join(t[i], &r), 0);
		ck_assert_int_eq((intptr_t)r, 7);
	}
}
END_TEST

START_TEST(test_get_id)
{
	char doc[256];
	struct json_object *v;
	const char *out = NULL;

	snprintf(doc, sizeof(doc),
		 "{\"ok\":\"c-1_Z9\",\"max\":\"%064d\",\"long\":\"%065d\",\"empty\":\"\","
		 "\"space\":\"a b\",\"slash\":\"a/b\",\"acc\":\"\xc3\xa9\",\"num\":1,"
		 "\"dot\":\"a.b\"}",
		 0, 0);
	v = parse(doc);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(jsonx_get_id(v, "ok", &out), 0);
	ck_assert_str_eq(out, "c-1_Z9");
	ck_assert_int_eq(jsonx_get_id(v, "max", &out), 0);
	ck_assert_uint_eq(strlen(out), 64);
	out = NULL;
	ck_assert_int_eq(jsonx_get_id(v, "long", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "empty", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "space", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "slash", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "acc", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "num", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "dot", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "missing", &out), -1);
	ck_assert_ptr_null(out);
	json_object_put(v);
}
END_TEST

START_TEST(test_get_int)
{
	struct json_object *v = parse(
		"{\"qty\":1,\"big\":1000,\"over\":1001,\"zero\":0,\"neg\":-1,\"one_f\":1.0,"
		"\"exp\":1e3,\"str\":\"1\",\"bool\":true,\"nul\":null,\"amt\":1000000000000,"
		"\"amt1\":1000000000001,\"max\":9223372036854775806,"
		"\"min\":-9223372036854775807,\"huge\":9223372036854775808,"
		"\"nhuge\":-9223372036854775809,\"vast\":1000000000000000000000000000000,"
		"\"nvast\":-1000000000000000000000000000000,\"inf\":1e400,"
		"\"bound\":9223372036854775807}");
	int64_t out = 77;

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(jsonx_get_int(v, "qty", 1, 1000, &out), 0);
	ck_assert_int_eq(out, 1);
	ck_assert_int_eq(jsonx_get_int(v, "big", 1, 1000, &out), 0);
	ck_assert_int_eq(out, 1000);
	ck_assert_int_eq(jsonx_get_int(v, "amt", 1, 1000000000000LL, &out), 0);
	ck_assert_int_eq(out, 1000000000000LL);
	ck_assert_int_eq(jsonx_get_int(v, "max", INT64_MIN, INT64_MAX, &out), 0);
	ck_assert_int_eq(out, INT64_MAX - 1);
	ck_assert_int_eq(jsonx_get_int(v, "min", INT64_MIN, INT64_MAX, &out), 0);
	ck_assert_int_eq(out, INT64_MIN + 1);
	out = 77;
	/* numbers that do not fit are out of every range, never a clamp */
	ck_assert_int_eq(jsonx_get_int(v, "huge", INT64_MIN, INT64_MAX, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "nhuge", INT64_MIN, INT64_MAX, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "vast", INT64_MIN, INT64_MAX, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "nvast", INT64_MIN, INT64_MAX, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "inf", INT64_MIN, INT64_MAX, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "bound", INT64_MIN, INT64_MAX, &out), -1);
	out = 77;
	ck_assert_int_eq(jsonx_get_int(v, "over", 1, 1000, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "zero", 1, 1000, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "neg", 1, 1000, &out), -1);
	/* Documented decision: integers only, so 1.0 and 1e3 are not quantities. */
	ck_assert_int_eq(jsonx_get_int(v, "one_f", 1, 1000, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "exp", 1, 1000, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "str", 1, 1000, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "bool", 0, 1000, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "nul", 0, 1000, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "amt1", 1, 1000000000000LL, &out), -1);
	ck_assert_int_eq(jsonx_get_int(v, "missing", 1, 1000, &out), -1);
	ck_assert_int_eq(out, 77);
	json_object_put(v);
}
END_TEST

START_TEST(test_get_int_no_clamp)
{
	/* A uint64 built in code would read as INT64_MAX through json-c's clamp. */
	struct json_object *v = json_object_new_object();
	int64_t out = 5;

	json_object_object_add(v, "u", json_object_new_uint64(UINT64_MAX));
	json_object_object_add(v, "i", json_object_new_uint64((uint64_t)INT64_MAX - 1));
	ck_assert_int_eq(jsonx_get_int(v, "u", INT64_MIN, INT64_MAX, &out), -1);
	ck_assert_int_eq(out, 5);
	ck_assert_int_eq(jsonx_get_int(v, "i", INT64_MIN, INT64_MAX, &out), 0);
	ck_assert_int_eq(out, INT64_MAX - 1);
	json_object_put(v);
}
END_TEST

START_TEST(test_get_uuid_and_str)
{
	struct json_object *v = parse(
		"{\"lo\":\"123e4567-e89b-12d3-a456-426614174000\","
		"\"up\":\"123E4567-E89B-12D3-A456-426614174000\","
		"\"short\":\"123e4567-e89b-12d3-a456-42661417400\","
		"\"braces\":\"{123e4567-e89b-12d3-a456-426614174000}\",\"num\":7,"
		"\"s\":\"hello\",\"e\":\"\"}");
	const char *out = NULL;

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(jsonx_get_uuid(v, "lo", &out), 0);
	ck_assert_str_eq(out, "123e4567-e89b-12d3-a456-426614174000");
	ck_assert_int_eq(jsonx_get_uuid(v, "up", &out), 0);
	ck_assert_int_eq(jsonx_get_uuid(v, "short", &out), -1);
	ck_assert_int_eq(jsonx_get_uuid(v, "braces", &out), -1);
	ck_assert_int_eq(jsonx_get_uuid(v, "num", &out), -1);
	ck_assert_int_eq(jsonx_get_uuid(v, "s", &out), -1);
	ck_assert_int_eq(jsonx_get_str(v, "s", 5, &out), 0);
	ck_assert_str_eq(out, "hello");
	ck_assert_int_eq(jsonx_get_str(v, "s", 4, &out), -1);
	ck_assert_int_eq(jsonx_get_str(v, "e", 0, &out), 0);
	ck_assert_str_eq(out, "");
	ck_assert_int_eq(jsonx_get_str(v, "num", 100, &out), -1);
	ck_assert_int_eq(jsonx_get_str(v, "missing", 100, &out), -1);
	json_object_put(v);
}
END_TEST

START_TEST(test_getters_on_non_objects)
{
	struct json_object *v = parse("[\"x\"]");
	struct json_object *nul = json_object_new_object();
	const char *out;
	int64_t n;

	ck_assert_int_eq(jsonx_get_str(v, "0", 10, &out), -1);
	ck_assert_int_eq(jsonx_get_id(NULL, "a", &out), -1);
	ck_assert_int_eq(jsonx_get_int(NULL, "a", 0, 1, &n), -1);
	/* A string made in code with a NUL inside: a C caller would see half. */
	json_object_object_add(nul, "s", json_object_new_string_len("a\0b", 3));
	ck_assert_int_eq(jsonx_get_str(nul, "s", 10, &out), -1);
	ck_assert_int_eq(jsonx_get_id(nul, "s", &out), -1);
	json_object_put(v);
	json_object_put(nul);
}
END_TEST

/* Canonical text of a document, parsed strictly (NULL if refused). */
static char *canon_of(const char *doc)
{
	struct json_object *v = parse(doc);
	char *c;

	ck_assert_msg(v != NULL, "refused '%s'", doc);
	c = jsonx_canonical(v);
	json_object_put(v);
	ck_assert_ptr_nonnull(c);
	return c;
}

static void canon_is(const char *doc, const char *want)
{
	char *c = canon_of(doc);

	ck_assert_str_eq(c, want);
	free(c);
}

static void canon_differ(const char *a, const char *b)
{
	char *ca = canon_of(a), *cb = canon_of(b);

	ck_assert_str_ne(ca, cb);
	free(ca);
	free(cb);
}

START_TEST(test_canonical)
{
	const char *want = "{\"a\":[3,{\"c\":\"x\",\"d\":null}],\"b\":1}";

	canon_is("{\"b\":1,\"a\":[3,{\"d\":null,\"c\":\"x\"}]}", want);
	canon_is(" {\n \"a\" : [ 3 , { \"c\" : \"x\", \"d\" : null } ] ,\t\"b\" : 1 } ", want);
	canon_is("{\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1,\"amount\":1200}",
		 "{\"amount\":1200,\"customerId\":\"c-1\",\"itemId\":\"A001\",\"qty\":1}");
	/* The same string written two ways. */
	canon_is("\"\\u0041\\/\\u00e9\"", "\"A/\xc3\xa9\"");
	canon_is("\"A/\xc3\xa9\"", "\"A/\xc3\xa9\"");
	canon_is("\"\\u001f\\n\\\"\\\\\"", "\"\\u001f\\n\\\"\\\\\"");
	/* The same number written two ways, once json-c has read it. */
	canon_is("[1.50, 1.5e0, 15e-1]", "[1.5,1.5,1.5]");
	canon_is("[1e3, 1000.0, -0]", "[1000.0,1000.0,0]");
	/* Too large for a double: still the number written. */
	canon_is("[1e400, 10e399, -1e400, 1e999]", "[1e+400,1e+400,-1e+400,1e+999]");
	/* exponents past 10^15 are one value, and the canonical text is a fixed
	 * point (the fuzzer found 9.1e+10^16 written twice two ways) */
	canon_is("[91e10000000000000000, 9.1e+1000000000000000, 1e-99999999999999999]",
		 "[9.1e+1000000000000000,9.1e+1000000000000000,1e-1000000000000000]");
	canon_is("[9.1e+1000000000000000,1e-1000000000000000]",
		 "[9.1e+1000000000000000,1e-1000000000000000]");
	/* Bytewise key order: 'B' < '_' < 'a' < any UTF-8 lead byte. */
	canon_is("{\"\xc3\xa9\":1,\"a\":2,\"_\":3,\"B\":4}",
		 "{\"B\":4,\"_\":3,\"a\":2,\"\xc3\xa9\":1}");
	canon_is("{\"ab\":1,\"a\":2,\"\":3}", "{\"\":3,\"a\":2,\"ab\":1}");
	canon_is("[true,false,null,{},[]]", "[true,false,null,{},[]]");
	canon_differ("[1,2]", "[2,1]");
	canon_differ("{\"qty\":1}", "{\"qty\":2}");
	canon_differ("{\"qty\":1}", "{\"qty\":\"1\"}");
	/* Integer 1 and double 1.0 are kept apart: integers only, as in jsonx_get_int. */
	canon_differ("1", "1.0");
}
END_TEST

/*
 * Numbers are compared as written, not as the double or the clamped
 * integer json-c reads: two requests with different numbers are never the
 * same to the Idempotency-Key.
 */
START_TEST(test_canonical_numbers_as_written)
{
	static const char *const pairs[][2] = {
		{ "{\"x\":12345678901234567890}", "{\"x\":12345678901234567891}" },
		/* json-c clamps both to UINT64_MAX, or to INT64_MIN */
		{ "{\"x\":123456789012345678901234}", "{\"x\":123456789012345678901235}" },
		{ "{\"x\":18446744073709551616}", "{\"x\":18446744073709551617}" },
		{ "{\"x\":-9223372036854775809}", "{\"x\":-9223372036854775810}" },
		/* one double each */
		{ "{\"x\":1.00000000000000001}", "{\"x\":1.00000000000000002}" },
		{ "{\"x\":0.1}", "{\"x\":0.10000000000000001}" },
		{ "{\"x\":1e400}", "{\"x\":2e400}" },
		{ "{\"x\":1e-400}", "{\"x\":2e-400}" },
	};

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
		canon_differ(pairs[i][0], pairs[i][1]);
	/* zeros that do not count, wherever they are written */
	canon_is("[0.15e1, 15e-1, 1.50, 150E-2, 0.0015e3]", "[1.5,1.5,1.5,1.5,1.5]");
	canon_is("[1e2, 100.0, 0.1e3, 1e+2]", "[100.0,100.0,100.0,100.0]");
	canon_is("[0.00012, 0.000012, 1e17, 1.5e300, 0e5, -0.0]",
		 "[0.00012,1.2e-05,1e+17,1.5e+300,0.0,-0.0]");
	canon_is("[123456789012345678901234]", "[1.23456789012345678901234e+23]");
	canon_is("[18446744073709551615, -9223372036854775808]",
		 "[18446744073709551615,-9223372036854775808]");
	canon_is("[1.00000000000000001]", "[1.00000000000000001]");
	/* the canonical text reads back as itself */
	canon_is("[1.23456789012345678901234e+23,1.2e-05,1e+400,1.00000000000000001]",
		 "[1.23456789012345678901234e+23,1.2e-05,1e+400,1.00000000000000001]");
}
END_TEST

/* A NUL in a value: well-formed JSON, an invalid field. */
START_TEST(test_nul_in_value_is_a_field_error)
{
	struct json_object *v = parse("{\"customerId\":\"a\\u0000b\",\"itemId\":\"\\u0000\","
				      "\"reason\":\"x\\u0000\",\"id\":\"c-1\"}");
	const char *out = NULL;
	char *c;

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(jsonx_get_id(v, "customerId", &out), -1);
	ck_assert_int_eq(jsonx_get_id(v, "itemId", &out), -1);
	ck_assert_int_eq(jsonx_get_str(v, "reason", 200, &out), -1);
	ck_assert_int_eq(jsonx_get_uuid(v, "reason", &out), -1);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(jsonx_get_id(v, "id", &out), 0);
	c = jsonx_canonical(v);
	ck_assert_str_eq(c, "{\"customerId\":\"a\\u0000b\",\"id\":\"c-1\",\"itemId\":\"\\u0000\","
			    "\"reason\":\"x\\u0000\"}");
	free(c);
	json_object_put(v);
	canon_differ("{\"x\":\"a\\u0000b\"}", "{\"x\":\"a\"}");
}
END_TEST

START_TEST(test_canonical_null_and_built)
{
	struct json_object *v = json_object_new_object();
	char *c = jsonx_canonical(NULL);

	ck_assert_str_eq(c, "null");
	free(c);
	json_object_object_add(v, "z", json_object_new_string_len("a\0b", 3));
	json_object_object_add(v, "y", json_object_new_double(0.5));
	c = jsonx_canonical(v);
	ck_assert_str_eq(c, "{\"y\":0.5,\"z\":\"a\\u0000b\"}");
	free(c);
	json_object_put(v);
}
END_TEST

START_TEST(test_escape)
{
	const char *src = "a\"b\\c\n\r\t\x01\x1f\x7f \xc3\xa9\xff";
	char dst[64];
	size_t w, used;

	used = jsonx_escape(dst, sizeof(dst), src, strlen(src), &w);
	ck_assert_uint_eq(used, strlen(src));
	ck_assert_str_eq(dst, "a\\\"b\\\\c\\n\\r\\t\\u0001\\u001f\x7f \xc3\xa9\xff");
	ck_assert_uint_eq(w, strlen(dst));
}
END_TEST

START_TEST(test_escape_never_splits)
{
	char dst[16];
	size_t w, used;

	/* "\"\"" needs 4 bytes and a NUL: only the first escape fits in 4. */
	used = jsonx_escape(dst, 4, "\"\"", 2, &w);
	ck_assert_uint_eq(used, 1);
	ck_assert_str_eq(dst, "\\\"");
	/* \u0001 is 6 bytes: it does not fit in 6 with the NUL. */
	used = jsonx_escape(dst, 6, "\x01", 1, &w);
	ck_assert_uint_eq(used, 0);
	ck_assert_uint_eq(w, 0);
	ck_assert_str_eq(dst, "");
	/* A 4-byte character is kept whole or not at all. */
	used = jsonx_escape(dst, 5, "ab\xf0\x9f\x98\x80", 6, &w);
	ck_assert_uint_eq(used, 2);
	ck_assert_str_eq(dst, "ab");
	used = jsonx_escape(dst, 7, "ab\xf0\x9f\x98\x80", 6, &w);
	ck_assert_uint_eq(used, 6);
	/* A NUL in the middle is escaped, not a stop. */
	used = jsonx_escape(dst, sizeof(dst), "a\0b", 3, &w);
	ck_assert_uint_eq(used, 3);
	ck_assert_mem_eq(dst, "a\\u0000b", 8);
	ck_assert_uint_eq(w, 8);
}
END_TEST

START_TEST(test_buf_str_round_trip)
{
	struct evbuffer *buf = evbuffer_new();
	char src[3001], *text; /* 3000 = 375 whole patterns: no é is cut */
	struct json_object *v;
	size_t i, len;

	/* Long enough to take several chunks, with escapes across their edges. */
	for (i = 0; i < sizeof(src) - 1; i++)
		src[i] = "ab\"\\\n\x01\xc3\xa9"[i % 8];
	src[sizeof(src) - 1] = '\0';
	jsonx_buf_str(buf, src);
	len = evbuffer_get_length(buf);
	text = (char *)evbuffer_pullup(buf, -1);
	ck_assert_int_eq(text[0], '"');
	ck_assert_int_eq(text[len - 1], '"');
	v = parse_n(text, len);
	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(json_object_get_string(v), src);
	json_object_put(v);
	evbuffer_free(buf);
}
END_TEST

/* ---- log ---- */

struct capture {
	int rfd, saved;
};

static void capture_start(struct capture *c)
{
	int fds[2];

	ck_assert_int_eq(pipe(fds), 0);
	c->rfd = fds[0];
	c->saved = dup(STDERR_FILENO);
	ck_assert_int_ge(c->saved, 0);
	ck_assert_int_ge(dup2(fds[1], STDERR_FILENO), 0);
	close(fds[1]);
}

/* Restores stderr and returns what was written meanwhile (NUL-terminated). */
static size_t capture_end(struct capture *c, char *out, size_t outlen)
{
	size_t len = 0;
	ssize_t n;

	/* Restoring stderr closes the pipe's last write end: read sees EOF. */
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	while (len < outlen - 1 && (n = read(c->rfd, out + len, outlen - 1 - len)) > 0)
		len += (size_t)n;
	close(c->rfd);
	out[len] = '\0';
	return len;
}

START_TEST(test_log_parse_level)
{
	enum log_level l = LOG_ERROR;

	ck_assert_int_eq(log_parse_level("debug", &l), 0);
	ck_assert_int_eq(l, LOG_DEBUG);
	ck_assert_int_eq(log_parse_level("info", &l), 0);
	ck_assert_int_eq(l, LOG_INFO);
	ck_assert_int_eq(log_parse_level("warn", &l), 0);
	ck_assert_int_eq(l, LOG_WARN);
	ck_assert_int_eq(log_parse_level("error", &l), 0);
	ck_assert_int_eq(l, LOG_ERROR);
	ck_assert_int_eq(log_parse_level("INFO", &l), -1);
	ck_assert_int_eq(log_parse_level("warning", &l), -1);
	ck_assert_int_eq(log_parse_level("", &l), -1);
	ck_assert_int_eq(log_parse_level(NULL, &l), -1);
	ck_assert_int_eq(l, LOG_ERROR);
	ck_assert_int_eq(log_min_level, LOG_INFO);
}
END_TEST

START_TEST(test_log_line_is_json)
{
	struct log_ctx ctx = { .saga_id = "123e4567-e89b-12d3-a456-426614174000",
			       .peer = "http://127.0.0.1:8082\n\"x\"" };
	struct capture c;
	char out[8192];
	struct json_object *v;
	const char *s;
	size_t len;

	log_set_service("payment");
	capture_start(&c);
	errno = EAGAIN;
	log_write(LOG_WARN, &ctx, "retry %d of \"%s\"\t\x01 \xc3\xa9", 3, "pay\\x");
	ck_assert_int_eq(errno, EAGAIN);
	len = capture_end(&c, out, sizeof(out));
	ck_assert_uint_gt(len, 0);
	/* Exactly one line. */
	ck_assert_int_eq(out[len - 1], '\n');
	ck_assert_ptr_eq(strchr(out, '\n'), out + len - 1);
	v = parse_n(out, len);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(jsonx_get_str(v, "ts", 64, &s), 0);
	/* 2026-11-29T10:54:02.123Z */
	ck_assert_uint_eq(strlen(s), 24);
	ck_assert_int_eq(s[10], 'T');
	ck_assert_int_eq(s[19], '.');
	ck_assert_int_eq(s[23], 'Z');
	ck_assert_int_eq(jsonx_get_str(v, "level", 64, &s), 0);
	ck_assert_str_eq(s, "warn");
	ck_assert_int_eq(jsonx_get_str(v, "service", 64, &s), 0);
	ck_assert_str_eq(s, "payment");
	ck_assert_int_eq(jsonx_get_str(v, "msg", 256, &s), 0);
	ck_assert_str_eq(s, "retry 3 of \"pay\\x\"\t\x01 \xc3\xa9");
	ck_assert_int_eq(jsonx_get_uuid(v, "sagaId", &s), 0);
	ck_assert_int_eq(jsonx_get_str(v, "peer", 256, &s), 0);
	ck_assert_str_eq(s, ctx.peer);
	ck_assert_int_eq(json_object_object_get_ex(v, "messageId", NULL), 0);
	ck_assert_int_eq(json_object_object_get_ex(v, "traceId", NULL), 0);
	json_object_put(v);
}
END_TEST

START_TEST(test_log_long_message_cut)
{
	static char big[10000];
	struct capture c;
	char out[16384];
	struct json_object *v;
	const char *s;
	size_t len;

	/* Quotes double in size once escaped; the line must still fit and parse. */
	memset(big, '"', sizeof(big) - 1);
	capture_start(&c);
	log_write(LOG_ERROR, NULL, "%s", big);
	len = capture_end(&c, out, sizeof(out));
	ck_assert_uint_le(len, 4096);
	ck_assert_ptr_eq(strchr(out, '\n'), out + len - 1);
	v = parse_n(out, len);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(jsonx_get_str(v, "msg", sizeof(big), &s), 0);
	ck_assert_uint_gt(strlen(s), 1000);
	ck_assert_str_eq(s + strlen(s) - 3, "...");
	json_object_put(v);
}
END_TEST

START_TEST(test_log_keeps_errno)
{
	int full = open("/dev/full", O_WRONLY);
	int saved = dup(STDERR_FILENO);

	/* Even a write that fails (ENOSPC here) must leave the caller's errno. */
	ck_assert_int_ge(full, 0);
	dup2(full, STDERR_FILENO);
	errno = EAGAIN;
	log_error("lost %s", "line");
	ck_assert_int_eq(errno, EAGAIN);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(full);
}
END_TEST

static int evaluated;

static int side_effect(void)
{
	return ++evaluated;
}

START_TEST(test_log_level_gate)
{
	struct capture c;
	char out[256];

	log_min_level = LOG_WARN;
	capture_start(&c);
	log_info("skipped %d", side_effect());
	log_debug("skipped %d", side_effect());
	ck_assert_uint_eq(capture_end(&c, out, sizeof(out)), 0);
	ck_assert_int_eq(evaluated, 0);
	capture_start(&c);
	log_error("kept %d", side_effect());
	ck_assert_uint_gt(capture_end(&c, out, sizeof(out)), 0);
	ck_assert_int_eq(evaluated, 1);
	ck_assert_ptr_nonnull(strstr(out, "\"msg\":\"kept 1\""));
	ck_assert_ptr_nonnull(strstr(out, "\"level\":\"error\""));
	log_min_level = LOG_INFO;
}
END_TEST

Suite *jsonx_suite(void)
{
	Suite *s = suite_create("jsonx");
	TCase *tc = tcase_create("parse");
	TCase *get = tcase_create("get");
	TCase *out = tcase_create("out");
	TCase *log = tcase_create("log");

	tcase_add_loop_test(tc, test_rejects, 0, (int)(sizeof(rejected) / sizeof(rejected[0])));
	tcase_add_loop_test(tc, test_accepts, 0, (int)(sizeof(accepted) / sizeof(accepted[0])));
	tcase_add_test(tc, test_depth);
	tcase_add_test(tc, test_values_decoded);
	tcase_add_test(tc, test_parse_only_reads_len);
	tcase_add_test(tc, test_parse_after_failures);
	tcase_add_test(tc, test_parse_in_threads);
	suite_add_tcase(s, tc);

	tcase_add_test(get, test_get_id);
	tcase_add_test(get, test_get_int);
	tcase_add_test(get, test_get_int_no_clamp);
	tcase_add_test(get, test_get_uuid_and_str);
	tcase_add_test(get, test_getters_on_non_objects);
	suite_add_tcase(s, get);

	tcase_add_test(out, test_canonical);
	tcase_add_test(out, test_canonical_numbers_as_written);
	tcase_add_test(out, test_nul_in_value_is_a_field_error);
	tcase_add_test(out, test_canonical_null_and_built);
	tcase_add_test(out, test_escape);
	tcase_add_test(out, test_escape_never_splits);
	tcase_add_test(out, test_buf_str_round_trip);
	suite_add_tcase(s, out);

	tcase_add_test(log, test_log_parse_level);
	tcase_add_test(log, test_log_line_is_json);
	tcase_add_test(log, test_log_long_message_cut);
	tcase_add_test(log, test_log_keeps_errno);
	tcase_add_test(log, test_log_level_gate);
	suite_add_tcase(s, log);
	return s;
}
