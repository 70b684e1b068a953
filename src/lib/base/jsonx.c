/*
 * jsonx: strict JSON on json-c.
 *
 * json-c 0.16's JSON_TOKENER_STRICT is not RFC 8259: it still accepts
 * single-quoted strings, NaN and Infinity, leading zeros ("-01", "[00]"),
 * "1." and "1.e3", raw control characters inside strings, overlong and
 * surrogate UTF-8 even with JSON_TOKENER_VALIDATE_UTF8, lone \ud800 escapes
 * (silently replaced by U+FFFD), and it clamps integers that overflow into
 * range without any error. It does check the structure well (commas,
 * colons, trailing commas, trailing garbage, depth). So a lexical pass of our
 * own checks every token first, and json-c only builds the tree.
 */
#include "jsonx.h"

#include <event2/buffer.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uuid.h"

#define JSONX_MAX_DEPTH 32
#define JSONX_ID_MAX 64

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- escaping ---- */

/* Length of the UTF-8 sequence a lead byte announces (1 for anything else). */
static size_t utf8_lead_len(unsigned char c)
{
	if (c >= 0xf0 && c <= 0xf7)
		return 4;
	if (c >= 0xe0)
		return c <= 0xef ? 3 : 1;
	if (c >= 0xc0)
		return 2;
	return 1;
}

/*
 * How many bytes of src, from i, belong to one output unit: a whole UTF-8
 * sequence when the bytes that follow really are continuation bytes, else a
 * single byte (invalid input passes through byte by byte).
 */
static size_t unit_len(const unsigned char *src, size_t i, size_t srclen)
{
	size_t want = utf8_lead_len(src[i]);
	size_t n = 1;

	while (n < want && i + n < srclen && (src[i + n] & 0xc0) == 0x80)
		n++;
	return n;
}

size_t jsonx_escape(char *dst, size_t dstlen, const char *src, size_t srclen, size_t *outlen)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)src;
	size_t i = 0, o = 0;

	while (i < srclen) {
		char tmp[6];
		const char *piece = tmp;
		size_t n = 0, take = 1;
		unsigned char c = s[i];

		if (c == '"' || c == '\\') {
			tmp[0] = '\\';
			tmp[1] = (char)c;
			n = 2;
		} else if (c == '\n' || c == '\r' || c == '\t') {
			tmp[0] = '\\';
			tmp[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
			n = 2;
		} else if (c < 0x20) {
			memcpy(tmp, "\\u00", 4);
			tmp[4] = hex[c >> 4];
			tmp[5] = hex[c & 0xf];
			n = 6;
		} else {
			piece = src + i;
			take = unit_len(s, i, srclen);
			n = take;
		}
		/* Keep one byte for the NUL. */
		if (n >= dstlen - o)
			break;
		memcpy(dst + o, piece, n);
		o += n;
		i += take;
	}
	dst[o] = '\0';
	if (outlen)
		*outlen = o;
	return i;
}

/* Returns 0, or -1 when the evbuffer could not grow. */
static int buf_str_len(struct evbuffer *buf, const char *s, size_t len)
{
	int rc = evbuffer_add(buf, "\"", 1);

	while (len > 0 && rc == 0) {
		char chunk[256];
		size_t used, w;

		used = jsonx_escape(chunk, sizeof(chunk), s, len, &w);
		rc = evbuffer_add(buf, chunk, w);
		s += used;
		len -= used;
	}
	return rc == 0 ? evbuffer_add(buf, "\"", 1) : rc;
}

void jsonx_buf_str(struct evbuffer *buf, const char *s)
{
	(void)buf_str_len(buf, s, strlen(s));
}

/* ---- the lexical pass ---- */

/* Length of one valid UTF-8 sequence at p (RFC 3629, shortest form), or 0. */
static size_t utf8_valid_len(const unsigned char *p, size_t n)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len, k;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0; /* continuation byte, overlong C0/C1, or beyond U+10FFFF */
	/* The second byte's range is what rules out overlongs and surrogates. */
	if (p[0] == 0xe0)
		lo = 0xa0;
	else if (p[0] == 0xed)
		hi = 0x9f;
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f;
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (k = 2; k < len; k++)
		if ((p[k] & 0xc0) != 0x80)
			return 0;
	return len;
}

bool jsonx_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0, k; i < n; i += k)
		if ((k = utf8_valid_len(p + i, n - i)) == 0)
			return false;
	return true;
}

static int hex4(const unsigned char *p, size_t n, unsigned *out)
{
	unsigned v = 0;
	size_t k;

	if (n < 4)
		return -1;
	for (k = 0; k < 4; k++) {
		unsigned char c = p[k];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	*out = v;
	return 0;
}

/*
 * Checks the string starting at the opening quote b[*pos]; on success *pos
 * is just past the closing quote, and *nul at the offset of its first
 * \u0000 escape, or (size_t)-1 when it has none.
 */
static int scan_string(const unsigned char *b, size_t len, size_t *pos, size_t *nul, char *err,
		       size_t errlen)
{
	size_t i = *pos + 1;

	*nul = (size_t)-1;

	while (i < len) {
		unsigned char c = b[i];
		unsigned cp, lo;
		size_t n;

		if (c == '"') {
			*pos = i + 1;
			return 0;
		}
		if (c < 0x20) {
			set_err(err, errlen, "control character in string at offset %zu", i);
			return -1;
		}
		if (c >= 0x80) {
			n = utf8_valid_len(b + i, len - i);
			if (n == 0) {
				set_err(err, errlen, "invalid UTF-8 at offset %zu", i);
				return -1;
			}
			i += n;
			continue;
		}
		if (c != '\\') {
			i++;
			continue;
		}
		if (i + 1 >= len)
			break;
		if (b[i + 1] != '\0' && strchr("\"\\/bfnrt", b[i + 1])) {
			i += 2;
			continue;
		}
		if (b[i + 1] != 'u' || hex4(b + i + 2, len - i - 2, &cp) < 0) {
			set_err(err, errlen, "bad escape at offset %zu", i);
			return -1;
		}
		/* the caller decides: fine in a value, not in a key */
		if (cp == 0 && *nul == (size_t)-1)
			*nul = i;
		/*
		 * A lone surrogate has no UTF-8 form; json-c would quietly turn
		 * it into U+FFFD, changing the value, so refuse it.
		 */
		if (cp >= 0xdc00 && cp <= 0xdfff) {
			set_err(err, errlen, "unpaired surrogate at offset %zu", i);
			return -1;
		}
		if (cp >= 0xd800 && cp <= 0xdbff) {
			if (i + 7 >= len || b[i + 6] != '\\' || b[i + 7] != 'u' ||
			    hex4(b + i + 8, len - i - 8, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff) {
				set_err(err, errlen, "unpaired surrogate at offset %zu", i);
				return -1;
			}
			i += 12;
			continue;
		}
		i += 6;
	}
	set_err(err, errlen, "unterminated string");
	return -1;
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/*
 * RFC 8259 number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, covering
 * all of t[0..n). *is_int is set when it has no fraction or exponent.
 */
static bool valid_number(const unsigned char *t, size_t n, bool *is_int)
{
	size_t i = 0, start;

	*is_int = true;
	if (i < n && t[i] == '-')
		i++;
	if (i < n && t[i] == '0') {
		i++;
	} else if (i < n && t[i] >= '1' && t[i] <= '9') {
		while (i < n && is_digit(t[i]))
			i++;
	} else {
		return false;
	}
	if (i < n && t[i] == '.') {
		*is_int = false;
		start = ++i;
		while (i < n && is_digit(t[i]))
			i++;
		if (i == start)
			return false;
	}
	if (i < n && (t[i] == 'e' || t[i] == 'E')) {
		*is_int = false;
		i++;
		if (i < n && (t[i] == '+' || t[i] == '-'))
			i++;
		start = i;
		while (i < n && is_digit(t[i]))
			i++;
		if (i == start)
			return false;
	}
	return i == n;
}

static bool is_id_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '_' ||
	       c == '-';
}

static bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_delim(unsigned char c)
{
	return is_ws(c) || c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ',' ||
	       c == '"';
}

static bool token_is(const unsigned char *t, size_t n, const char *word)
{
	return n == strlen(word) && memcmp(t, word, n) == 0;
}

/*
 * Every token of the text, one by one: strings, numbers and the three
 * literals. The structure (where commas and colons go, nesting) is left to
 * json-c, which checks it well.
 */
/*
 * An integer json-c would clamp: below INT64_MIN, or above UINT64_MAX (it
 * keeps one between INT64_MAX and UINT64_MAX exactly, as a uint64).
 */
static bool int_clamps(const unsigned char *t, size_t n)
{
	bool neg = n > 0 && t[0] == '-';
	const char *lim = neg ? "9223372036854775808" : "18446744073709551615";
	size_t nd = n - neg, nl = strlen(lim);

	return nd > nl || (nd == nl && memcmp(t + neg, lim, nl) > 0);
}

/*
 * Checks every token. *big counts the integers json-c would clamp; when out
 * is given (len + 2 * *big + 1 bytes), it receives the document with ".0"
 * after each of them, so that json-c reads them as doubles and keeps their
 * text (see jsonx_parse), and *outlen its length.
 */
static int scan_tokens(const unsigned char *b, size_t len, size_t *big, char *out,
		       size_t *outlen, char *err, size_t errlen)
{
	size_t i = 0, copied = 0, o = 0;

	*big = 0;

	while (i < len) {
		size_t start = i;
		bool is_int;

		if (b[i] == '"') {
			size_t nul, k;

			if (scan_string(b, len, &i, &nul, err, errlen) < 0)
				return -1;
			/*
			 * json-c keeps a \u0000 in a string value, with its
			 * length, but cuts an object key at it: "a\u0000b" and
			 * "a" would be one key. A string followed by ':' is a key
			 * (or the document is malformed anyway). In a value it is
			 * well-formed JSON: the field readers refuse a string
			 * holding a NUL, so it is an invalid field, not invalid
			 * JSON, and the canonical form writes it back as \u0000.
			 */
			for (k = i; k < len && is_ws(b[k]); k++)
				;
			if (nul != (size_t)-1 && k < len && b[k] == ':') {
				set_err(err, errlen, "\\u0000 in an object key at offset %zu", nul);
				return -1;
			}
			continue;
		}
		if (is_delim(b[i])) {
			i++;
			continue;
		}
		while (i < len && !is_delim(b[i]))
			i++;
		if (token_is(b + start, i - start, "true") ||
		    token_is(b + start, i - start, "false") ||
		    token_is(b + start, i - start, "null"))
			continue;
		if (!valid_number(b + start, i - start, &is_int)) {
			if (b[start] >= 0x20 && b[start] < 0x7f)
				set_err(err, errlen, "unexpected '%c' at offset %zu", b[start],
					start);
			else
				set_err(err, errlen, "unexpected byte 0x%02x at offset %zu",
					b[start], start);
			return -1;
		}
		/*
		 * A well-formed number is the document's business; whether it
		 * fits is the field's (jsonx_get_int), so that 1e400 or twenty
		 * digits are an invalid field, not invalid JSON.
		 */
		if (is_int && int_clamps(b + start, i - start)) {
			(*big)++;
			if (out) {
				memcpy(out + o, b + copied, i - copied);
				o += i - copied;
				memcpy(out + o, ".0", 2);
				o += 2;
				copied = i;
			}
		}
	}
	if (out) {
		memcpy(out + o, b + copied, len - copied);
		o += len - copied;
		out[o] = '\0';
		*outlen = o;
	}
	return 0;
}

/*
 * One tokener per thread, reset for each document: creating one costs three
 * allocations (the tokener, its depth stack, its string buffer), about a
 * fifth of parsing a message. A thread's tokener is freed when it exits.
 */
static pthread_key_t tok_key;
static pthread_once_t tok_once = PTHREAD_ONCE_INIT;

static void tok_free(void *tok)
{
	json_tokener_free(tok);
}

static void tok_key_init(void)
{
	if (pthread_key_create(&tok_key, tok_free) != 0)
		abort();
}

static struct json_tokener *thread_tokener(void)
{
	struct json_tokener *tok;

	pthread_once(&tok_once, tok_key_init);
	tok = pthread_getspecific(tok_key);
	if (tok) {
		json_tokener_reset(tok);
		return tok;
	}
	tok = json_tokener_new_ex(JSONX_MAX_DEPTH);
	if (!tok)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	if (pthread_setspecific(tok_key, tok) != 0) {
		json_tokener_free(tok);
		return NULL;
	}
	return tok;
}

static struct json_object *tree_parse(const char *buf, size_t len, char *err, size_t errlen)
{
	struct json_tokener *tok;
	struct json_object *v;
	enum json_tokener_error e;
	size_t end, k;

	tok = thread_tokener();
	if (!tok) {
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	v = json_tokener_parse_ex(tok, buf, (int)len);
	e = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	/*
	 * A number or literal at the very end is still "continue": json-c
	 * waits for a byte that ends it. Feeding the terminating NUL finishes
	 * it, and makes any truly incomplete document an error.
	 */
	if (!v && e == json_tokener_continue) {
		v = json_tokener_parse_ex(tok, "", 1);
		e = json_tokener_get_error(tok);
		end = len;
	}
	if (e != json_tokener_success) {
		set_err(err, errlen, "%s", json_tokener_error_desc(e));
		json_object_put(v);
		return NULL;
	}
	if (!v) {
		set_err(err, errlen, "document is null");
		return NULL;
	}
	/* STRICT refuses trailing data already; this keeps it so if json-c changes. */
	for (k = end; k < len; k++) {
		if (!is_ws((unsigned char)buf[k])) {
			set_err(err, errlen, "trailing data at offset %zu", k);
			json_object_put(v);
			return NULL;
		}
	}
	return v;
}

struct json_object *jsonx_parse(const char *buf, size_t len, char *err, size_t errlen)
{
	size_t big, wide_len;
	char *wide;
	struct json_object *v;

	if (err && errlen > 0) { /* "ok", as set_err would write it, without a printf */
		size_t n = errlen > 2 ? 2 : errlen - 1;

		memcpy(err, "ok", n);
		err[n] = '\0';
	}
	if (!buf) {
		set_err(err, errlen, "no document");
		return NULL;
	}
	if (len > INT_MAX) {
		set_err(err, errlen, "document too large");
		return NULL;
	}
	if (scan_tokens((const unsigned char *)buf, len, &big, NULL, NULL, err, errlen) < 0)
		return NULL;
	if (big == 0)
		return tree_parse(buf, len, err, errlen);
	/*
	 * json-c clamps an integer beyond 64 bits to a bound, so that two
	 * different numbers would be one value (in the canonical form, the
	 * Idempotency-Key's comparison). Written with ".0" it is a double to
	 * json-c, which keeps its text; the field readers refuse it either way.
	 */
	if (len + 2 * big + 1 > INT_MAX || !(wide = malloc(len + 2 * big + 1))) {
		set_err(err, errlen, "document too large");
		return NULL;
	}
	(void)scan_tokens((const unsigned char *)buf, len, &big, wide, &wide_len, err, errlen);
	v = tree_parse(wide, wide_len, err, errlen);
	free(wide);
	return v;
}

char *jsonx_compact(const char *text)
{
	char err[64];
	struct json_object *v = text ? jsonx_parse(text, strlen(text), err, sizeof(err)) : NULL;
	char *out;

	if (!v)
		return NULL;
	out = strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
							       JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(v);
	return out;
}

/* ---- field readers ---- */

static struct json_object *field(struct json_object *obj, const char *key, enum json_type type)
{
	struct json_object *v = NULL;

	if (!obj || !json_object_is_type(obj, json_type_object))
		return NULL;
	if (!json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, type))
		return NULL;
	return v;
}

/* A string field without an embedded NUL (a C caller could not see past it). */
static const char *string_field(struct json_object *obj, const char *key, size_t *len)
{
	struct json_object *v = field(obj, key, json_type_string);
	const char *s;

	if (!v)
		return NULL;
	s = json_object_get_string(v);
	*len = (size_t)json_object_get_string_len(v);
	if (strlen(s) != *len)
		return NULL;
	return s;
}

int jsonx_get_id(struct json_object *obj, const char *key, const char **out)
{
	size_t len, k;
	const char *s = string_field(obj, key, &len);

	if (!s || len < 1 || len > JSONX_ID_MAX)
		return -1;
	for (k = 0; k < len; k++)
		if (!is_id_char((unsigned char)s[k]))
			return -1;
	*out = s;
	return 0;
}

int jsonx_get_int(struct json_object *obj, const char *key, int64_t min, int64_t max, int64_t *out)
{
	struct json_object *v = field(obj, key, json_type_int);
	int64_t n;

	/* json_type_int only: 1.0 and 1e3 are doubles to json-c, and refused. */
	if (!v)
		return -1;
	n = json_object_get_int64(v);
	/*
	 * json-c clamps an integer outside int64 to INT64_MIN or INT64_MAX
	 * (UINT64_MAX for a large positive one, which get_int64 clamps again)
	 * without a word, so a bound may stand for any larger number: never
	 * take one for a value.
	 */
	if (n == INT64_MIN || n == INT64_MAX)
		return -1;
	if (n < min || n > max)
		return -1;
	*out = n;
	return 0;
}

int jsonx_get_uuid(struct json_object *obj, const char *key, const char **out)
{
	size_t len;
	const char *s = string_field(obj, key, &len);

	if (!s || !uuid_valid(s))
		return -1;
	*out = s;
	return 0;
}

int jsonx_get_str(struct json_object *obj, const char *key, size_t maxlen, const char **out)
{
	size_t len;
	const char *s = string_field(obj, key, &len);

	if (!s || len > maxlen)
		return -1;
	*out = s;
	return 0;
}

/* ---- canonical form ---- */

struct member {
	const char *key;
	struct json_object *val;
};

static int cmp_members(const void *a, const void *b)
{
	const struct member *x = a, *y = b;

	/* strcmp compares as unsigned char: bytewise, as documented. */
	return strcmp(x->key, y->key);
}

static int canon_value(struct evbuffer *out, struct json_object *v);

static int put(struct evbuffer *out, const char *s)
{
	return evbuffer_add(out, s, strlen(s));
}

static int canon_object(struct evbuffer *out, struct json_object *v)
{
	size_t n = (size_t)json_object_object_length(v), k = 0;
	struct member *m;
	int rc;

	m = malloc((n ? n : 1) * sizeof(*m));
	if (!m)
		return -1;
	json_object_object_foreach(v, key, val)
	{
		m[k].key = key;
		m[k].val = val;
		k++;
	}
	qsort(m, n, sizeof(*m), cmp_members);
	rc = put(out, "{");
	for (k = 0; k < n && rc == 0; k++) {
		if (k > 0)
			rc |= put(out, ",");
		rc |= buf_str_len(out, m[k].key, strlen(m[k].key));
		rc |= put(out, ":");
		rc |= canon_value(out, m[k].val);
	}
	free(m);
	return rc == 0 ? put(out, "}") : -1;
}

/*
 * Beyond this an exponent's size is not followed: 1e(10^15) and 1e(10^16)
 * are one value, written with the exponent 10^15. The written exponent is
 * clamped (not the one read), so that the canonical text of a canonical
 * text is itself: digits after the point shift the exponent read.
 */
#define EXP_LIMIT 1000000000000000LL

/*
 * The canonical text of the decimal number t[0..n) (RFC 8259 syntax): the
 * number as written, not the double it rounds to, so 1.00000000000000001
 * and 1.00000000000000002 stay two values (a double would make two
 * different requests one to the Idempotency-Key). Zeros that do not count
 * go ("1.50", "15e-1" and "0.15e1" are one value), and the digits are laid
 * out as printf's %.17g lays them out (plain from 1e-4 to below 1e17, else
 * d.ddde+XX), with ".0" on a whole number as json-c writes a double: a
 * double that %.17g writes exactly (1.5, 100.0, 0.25) keeps the canonical
 * text it always had.
 */
static int canon_decimal(struct evbuffer *out, const char *t, size_t n)
{
	char *d = malloc(n + 1);
	size_t i = 0, nd = 0, frac = 0, lead = 0, k;
	long long e = 0, sci;
	bool neg = n > 0 && t[0] == '-', eneg = false;
	int rc = 0;

	if (!d)
		return -1;
	for (i = neg; i < n && is_digit((unsigned char)t[i]); i++)
		d[nd++] = t[i];
	if (i < n && t[i] == '.')
		for (i++; i < n && is_digit((unsigned char)t[i]); i++, frac++)
			d[nd++] = t[i];
	if (i < n && (t[i] == 'e' || t[i] == 'E')) {
		if (++i < n && (t[i] == '+' || t[i] == '-'))
			eneg = t[i++] == '-';
		for (; i < n && is_digit((unsigned char)t[i]); i++)
			if (e < 10 * EXP_LIMIT) /* far past it: a body's digits cannot come back */
				e = e * 10 + (t[i] - '0');
	}
	e = (eneg ? -e : e) - (long long)frac;
	while (lead < nd && d[lead] == '0')
		lead++;
	while (nd > lead && d[nd - 1] == '0') {
		nd--;
		e++;
	}
	k = nd - lead;
	if (k == 0) {
		free(d);
		return put(out, neg ? "-0.0" : "0.0");
	}
	sci = e + (long long)k - 1; /* d.ddd * 10^sci */
	if (sci > EXP_LIMIT)
		sci = EXP_LIMIT;
	else if (sci < -EXP_LIMIT)
		sci = -EXP_LIMIT;
	if (neg)
		rc |= put(out, "-");
	if (sci >= 17 || sci < -4) {
		rc |= evbuffer_add(out, d + lead, 1);
		if (k > 1) {
			rc |= put(out, ".");
			rc |= evbuffer_add(out, d + lead + 1, k - 1);
		}
		rc |= evbuffer_add_printf(out, "e%c%02lld", sci < 0 ? '-' : '+',
					  sci < 0 ? -sci : sci) < 0;
	} else if (sci >= 0) {
		size_t whole = (size_t)sci + 1;

		rc |= evbuffer_add(out, d + lead, whole < k ? whole : k);
		for (size_t z = k; z < whole; z++)
			rc |= put(out, "0");
		rc |= put(out, ".");
		rc |= whole < k ? evbuffer_add(out, d + lead + whole, k - whole) : put(out, "0");
	} else {
		rc |= put(out, "0.");
		for (long long z = -sci - 1; z > 0; z--)
			rc |= put(out, "0");
		rc |= evbuffer_add(out, d + lead, k);
	}
	free(d);
	return rc == 0 ? 0 : -1;
}

/*
 * A parsed double keeps its text as json-c's userdata ("1.50"); one made in
 * code is written through printf's %.17g first.
 */
static int canon_double(struct evbuffer *out, struct json_object *v)
{
	const char *text = json_object_get_userdata(v);
	char tmp[64];
	double d;
	bool is_int;

	if (text && valid_number((const unsigned char *)text, strlen(text), &is_int))
		return canon_decimal(out, text, strlen(text));
	d = json_object_get_double(v);
	/* no JSON text for these: one number that parses back to an infinity */
	if (!isfinite(d))
		return put(out, d > 0 ? "1e999" : "-1e999");
	snprintf(tmp, sizeof(tmp), "%.17g", d);
	return canon_decimal(out, tmp, strlen(tmp));
}

static int canon_array(struct evbuffer *out, struct json_object *v)
{
	size_t n = json_object_array_length(v), k;
	int rc = put(out, "[");

	for (k = 0; k < n && rc == 0; k++) {
		if (k > 0)
			rc |= put(out, ",");
		rc |= canon_value(out, json_object_array_get_idx(v, k));
	}
	return rc == 0 ? put(out, "]") : -1;
}

static int canon_value(struct evbuffer *out, struct json_object *v)
{
	switch (json_object_get_type(v)) {
	case json_type_null:
		return put(out, "null");
	case json_type_boolean:
		return put(out, json_object_get_boolean(v) ? "true" : "false");
	case json_type_int:
		return put(out, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
	case json_type_double:
		return canon_double(out, v);
	case json_type_string:
		/* With its length: a string built in code may hold a NUL. */
		return buf_str_len(out, json_object_get_string(v),
				   (size_t)json_object_get_string_len(v));
	case json_type_array:
		return canon_array(out, v);
	case json_type_object:
		return canon_object(out, v);
	}
	return -1;
}

char *jsonx_canonical(struct json_object *v)
{
	struct evbuffer *out = evbuffer_new();
	char *s = NULL;
	size_t len;

	if (!out)
		return NULL;
	if (canon_value(out, v) == 0) {
		len = evbuffer_get_length(out);
		s = malloc(len + 1);
		if (s) {
			evbuffer_remove(out, s, len);
			s[len] = '\0';
		}
	}
	evbuffer_free(out);
	return s;
}
