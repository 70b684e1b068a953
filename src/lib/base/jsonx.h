/*
 * jsonx: strict JSON in and out, on json-c.
 *
 * Ownership: jsonx_parse returns a new reference the caller puts;
 * jsonx_get_* borrow from the object they are given.
 */
#ifndef PGSAGA_JSONX_H
#define PGSAGA_JSONX_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Parses exactly one RFC 8259 JSON value from buf[0..len): no comments,
 * single quotes, trailing commas, NUL bytes, invalid UTF-8 or trailing
 * garbage (white space after the value is fine). Nesting deeper than 32 is
 * refused. Returns NULL on any error and writes a short reason into err.
 *
 * Stricter than json-c alone (see jsonx.c): also refused are NaN/Infinity,
 * leading zeros, "1.", unescaped control characters in strings, overlong or
 * surrogate UTF-8, unpaired \uD800-style escapes and \u0000 in an object
 * key (json-c would cut the key there). A \u0000 in a string value is
 * well-formed and kept (with the string's length); the field readers
 * refuse such a string, so it is an invalid field, not invalid JSON. A
 * top-level null is an error too, since json-c represents it as NULL.
 *
 * A well-formed number that does not fit is not an error here: an integer
 * beyond 64 bits is read as a double (json-c would clamp it to a bound)
 * that keeps its text, 1e400 is an infinity that keeps its text, and the
 * field reader refuses both (invalid_field).
 */
__attribute__((warn_unused_result)) struct json_object *jsonx_parse(const char *buf, size_t len,
								    char *err, size_t errlen);

/*
 * Field readers for an object. Each returns 0 when the field is present and
 * valid, else -1 (missing, wrong type, out of range, bad pattern).
 *
 * jsonx_get_id: a string of 1..64 characters of [A-Za-z0-9_-].
 * jsonx_get_int: a JSON integer (no fraction or exponent) in [min, max];
 *   INT64_MIN and INT64_MAX themselves are refused, since json-c clamps
 *   larger integers to them.
 * jsonx_get_uuid: a canonical hyphenated UUID string (either case).
 * jsonx_get_str: any string of at most maxlen bytes (may be empty).
 * The returned strings are borrowed from obj.
 */
__attribute__((warn_unused_result)) int jsonx_get_id(struct json_object *obj, const char *key,
						     const char **out);
__attribute__((warn_unused_result)) int jsonx_get_int(struct json_object *obj, const char *key,
						      int64_t min, int64_t max, int64_t *out);
__attribute__((warn_unused_result)) int jsonx_get_uuid(struct json_object *obj, const char *key,
						       const char **out);
__attribute__((warn_unused_result)) int jsonx_get_str(struct json_object *obj, const char *key,
						      size_t maxlen, const char **out);

/*
 * Canonical text of a JSON value: object keys sorted (bytewise), no white
 * space, json-c's string formatting; integers as json-c writes them, other
 * numbers as written less the zeros that do not count ("1.50", "15e-1" ->
 * 1.5), never through a double, so numbers that differ as written differ
 * here. Two documents that are the same JSON value give the same text. Returns a malloc'd string (caller
 * frees) or NULL on allocation failure.
 */
__attribute__((warn_unused_result)) char *jsonx_canonical(struct json_object *v);

/*
 * The one JSON style of every answer: compact (no white space), keys in the
 * order given. Rewrites JSON text made elsewhere (PostgreSQL's json_build_object
 * writes "a" : 1) into it. Returns a malloc'd string (caller frees), or NULL
 * when text is not valid JSON or memory ran out.
 */
__attribute__((warn_unused_result)) char *jsonx_compact(const char *text);

/*
 * The one JSON string escaper, shared by jsonx_buf_str and log: '"' and '\\'
 * are escaped, \n \r \t get their short forms, other bytes below 0x20 become
 * \u00XX, bytes from 0x80 up pass through untouched.
 *
 * Escapes src[0..srclen) into dst (no quotes added) and NUL-terminates dst
 * (dstlen must be > 0). It never splits an escape sequence or a UTF-8
 * character, so a cut-short result is still valid text. Returns how many
 * bytes of src were consumed (srclen when everything fit); *outlen receives
 * the length written, without the NUL.
 */
size_t jsonx_escape(char *dst, size_t dstlen, const char *src, size_t srclen, size_t *outlen);

/* True when s[0..n) is valid UTF-8 (RFC 3629: no overlongs, no surrogates). */
bool jsonx_utf8_valid(const char *s, size_t n);

/* Appends s to a JSON string literal, with quotes, into buf (evbuffer). */
struct evbuffer;
void jsonx_buf_str(struct evbuffer *buf, const char *s);

#endif
