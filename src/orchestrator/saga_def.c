/* saga_def: see saga_def.h. */
#include "saga_def.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"

/* The character classes of the format's names. */
enum word_class {
	WORD_LOWER,  /* [a-z0-9_-]: a definition's and a participant's name */
	WORD_ALNUM,  /* [A-Za-z0-9]: step names, message types */
	WORD_FIELD,  /* [A-Za-z0-9_]: input fields, output keys */
};

static const char *const class_text[] = {
	[WORD_LOWER] = "[a-z0-9_-]",
	[WORD_ALNUM] = "[A-Za-z0-9]",
	[WORD_FIELD] = "[A-Za-z0-9_]",
};

static bool in_class(unsigned char c, enum word_class k)
{
	bool lower = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

	switch (k) {
	case WORD_LOWER:
		return lower || c == '_' || c == '-';
	case WORD_ALNUM:
		return lower || (c >= 'A' && c <= 'Z');
	case WORD_FIELD:
		return lower || (c >= 'A' && c <= 'Z') || c == '_';
	}
	return false;
}

static bool word_ok(const char *s, size_t len, size_t max, enum word_class k)
{
	if (len < 1 || len > max)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!in_class((unsigned char)s[i], k))
			return false;
	return true;
}

bool saga_def_name_valid(const char *s, size_t len)
{
	return len > 0 && s[0] >= 'a' && s[0] <= 'z' &&
	       word_ok(s, len, SAGA_DEF_NAME_MAX, WORD_LOWER);
}

/* ---- errors ---- */

struct compile {
	char *err;
	size_t errlen;
};

static int fail(struct compile *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct compile *c, const char *fmt, ...)
{
	va_list ap;

	if (c->err && c->errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(c->err, c->errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* A user's text for a message: JSON-escaped, cut short with "..." to fit buf. */
static const char *quoted(char *buf, size_t len, const char *s)
{
	size_t n = strlen(s), out;

	if (jsonx_escape(buf, len - 3, s, n, &out) < n)
		memcpy(buf + out, "...", 4);
	return buf;
}

/* ---- readers ---- */

/*
 * A string member of obj matching the class, copied into out (max + 1
 * bytes). Messages: "<path>: required" when absent, else the pattern.
 */
static int word(struct compile *c, struct json_object *obj, const char *path, const char *key,
		enum word_class k, size_t max, char *out)
{
	struct json_object *v;
	const char *s;
	size_t len;

	if (!json_object_object_get_ex(obj, key, &v))
		return fail(c, "%s%s: required", path, key);
	s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
	len = (size_t)json_object_get_string_len(v);
	if (!word_ok(s, len, max, k))
		return fail(c, "%s%s: must be 1-%zu characters of %s", path, key, max, class_text[k]);
	memcpy(out, s, len + 1);
	return 0;
}

/*
 * An integer member anywhere in 64 bits. jsonx_get_int refuses INT64_MIN
 * and INT64_MAX themselves (json-c clamps larger integers to them); after
 * jsonx_parse, an integer below INT64_MIN is a double, and one above
 * INT64_MAX a uint64, so both bounds can be told from the clamped ones.
 */
static bool int64_exact(struct json_object *v, int64_t *out)
{
	int64_t n;

	if (!json_object_is_type(v, json_type_int))
		return false;
	n = json_object_get_int64(v);
	if (n == INT64_MAX && json_object_get_uint64(v) != (uint64_t)INT64_MAX)
		return false;
	*out = n;
	return true;
}

/* ---- input ---- */

static int compile_input_field(struct compile *c, const char *key, struct json_object *spec,
			       struct saga_input_field *f)
{
	struct json_object *v;
	const char *type;
	int64_t n;

	snprintf(f->name, sizeof(f->name), "%s", key);
	if (!json_object_is_type(spec, json_type_object))
		return fail(c, "input.%s: must be an object with a type", key);
	if (!json_object_object_get_ex(spec, "type", &v))
		return fail(c, "input.%s.type: required", key);
	if (jsonx_get_str(spec, "type", 16, &type) != 0)
		type = "";
	if (strcmp(type, "id") == 0) {
		f->type = SAGA_INPUT_ID;
		return 0;
	}
	if (strcmp(type, "string") == 0) {
		f->type = SAGA_INPUT_STRING;
		if (!json_object_object_get_ex(spec, "maxLength", NULL))
			return fail(c, "input.%s.maxLength: required", key);
		if (jsonx_get_int(spec, "maxLength", 1, SAGA_DEF_STRING_MAX, &n) != 0)
			return fail(c, "input.%s.maxLength: must be an integer from 1 to %d", key,
				    SAGA_DEF_STRING_MAX);
		f->max_length = (size_t)n;
		return 0;
	}
	if (strcmp(type, "integer") != 0)
		return fail(c, "input.%s.type: must be id, integer or string", key);
	f->type = SAGA_INPUT_INTEGER;
	if (!json_object_object_get_ex(spec, "min", &v))
		return fail(c, "input.%s.min: required", key);
	if (!int64_exact(v, &f->min))
		return fail(c, "input.%s.min: must be a 64-bit integer", key);
	if (!json_object_object_get_ex(spec, "max", &v))
		return fail(c, "input.%s.max: required", key);
	if (!int64_exact(v, &f->max))
		return fail(c, "input.%s.max: must be a 64-bit integer", key);
	if (f->min > f->max)
		return fail(c, "input.%s: min must be <= max", key);
	return 0;
}

static int compile_input(struct compile *c, struct json_object *doc, struct saga_def *d)
{
	struct json_object *input;
	char q[80];
	size_t i = 0;

	if (!json_object_object_get_ex(doc, "input", &input))
		return fail(c, "input: required");
	if (!json_object_is_type(input, json_type_object))
		return fail(c, "input: must be an object");
	d->n_input = (size_t)json_object_object_length(input);
	d->input = calloc(d->n_input ? d->n_input : 1, sizeof(*d->input));
	if (!d->input)
		abort();
	json_object_object_foreach(input, key, spec)
	{
		if (!word_ok(key, strlen(key), SAGA_DEF_WORD_MAX, WORD_FIELD))
			return fail(c, "input.%s: field names must be 1-%d characters of %s",
				    quoted(q, sizeof(q), key), SAGA_DEF_WORD_MAX,
				    class_text[WORD_FIELD]);
		if (compile_input_field(c, key, spec, &d->input[i++]) < 0)
			return -1;
	}
	return 0;
}

static int input_index(const struct saga_def *d, const char *name)
{
	for (size_t i = 0; i < d->n_input; i++)
		if (strcmp(d->input[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* ---- steps ---- */

/*
 * One entry of a step's fields: an input field's name, or Step.key for the
 * output key of an earlier step. path is "steps[i].fields[j]".
 */
static int compile_field(struct compile *c, const struct saga_def *d, size_t i,
			 struct json_object *v, const char *path, struct saga_field_ref *f)
{
	const char *s, *dot;
	size_t len;
	int step = -1;

	if (!json_object_is_type(v, json_type_string))
		return fail(c, "%s: must be a string", path);
	s = json_object_get_string(v);
	len = (size_t)json_object_get_string_len(v);
	dot = memchr(s, '.', len);
	if (dot ? !word_ok(s, (size_t)(dot - s), SAGA_DEF_WORD_MAX, WORD_ALNUM) ||
			  !word_ok(dot + 1, len - (size_t)(dot - s) - 1, SAGA_DEF_WORD_MAX,
				   WORD_FIELD)
		: !word_ok(s, len, SAGA_DEF_WORD_MAX, WORD_FIELD))
		return fail(c, "%s: must be an input field's name or Step.key (a step's name, a dot, "
			       "an output key)",
			    path);
	memcpy(f->ref, s, len + 1);
	snprintf(f->name, sizeof(f->name), "%s", dot ? dot + 1 : s);
	if (strcmp(f->name, "commandId") == 0 || strcmp(f->name, "sagaId") == 0)
		return fail(c, "%s: %s is carried by every command, not by fields", path, f->name);
	if (dot) {
		for (size_t k = 0; k < i && step < 0; k++)
			if (strlen(d->steps[k].name) == (size_t)(dot - s) &&
			    memcmp(d->steps[k].name, s, (size_t)(dot - s)) == 0)
				step = (int)k;
		if (step < 0)
			return fail(c, "%s: %s names a step that does not come before this one",
				    path, s);
	} else if (input_index(d, s) < 0) {
		return fail(c, "%s: %s is not an input field", path, s);
	}
	f->step = step;
	return 0;
}

static int compile_fields(struct compile *c, struct json_object *o, const char *path,
			  struct saga_def *d, size_t i)
{
	struct saga_step_def *s = &d->steps[i];
	struct json_object *arr;
	char fpath[64];

	if (!json_object_object_get_ex(o, "fields", &arr))
		return 0;
	if (!json_object_is_type(arr, json_type_array))
		return fail(c, "%sfields: must be an array", path);
	s->n_fields = json_object_array_length(arr);
	s->fields = calloc(s->n_fields ? s->n_fields : 1, sizeof(*s->fields));
	if (!s->fields)
		abort();
	for (size_t j = 0; j < s->n_fields; j++) {
		snprintf(fpath, sizeof(fpath), "%sfields[%zu]", path, j);
		if (compile_field(c, d, i, json_object_array_get_idx(arr, j), fpath,
				  &s->fields[j]) < 0)
			return -1;
		for (size_t k = 0; k < j; k++)
			if (strcmp(s->fields[k].name, s->fields[j].name) == 0)
				return fail(c, "%s: carries %s twice", fpath, s->fields[j].name);
	}
	return 0;
}

/* An event type: a word, and distinct from every event type before it. */
static int event_type(struct compile *c, struct json_object *o, const char *path,
		      const char *key, struct saga_def *d, size_t i, char *out)
{
	if (word(c, o, path, key, WORD_ALNUM, SAGA_DEF_WORD_MAX, out) < 0)
		return -1;
	for (size_t k = 0; k <= i; k++) {
		const struct saga_step_def *s = &d->steps[k];
		const char *seen[3] = { s->succeeded, s->failed, s->compensated };

		for (int e = 0; e < 3; e++)
			if (seen[e] != out && seen[e][0] && strcmp(seen[e], out) == 0)
				return fail(c, "%s%s: event type %s is used twice", path, key, out);
	}
	return 0;
}

static int compile_step(struct compile *c, struct json_object *o, struct saga_def *d, size_t i)
{
	struct saga_step_def *s = &d->steps[i];
	struct json_object *v;
	char path[24];
	int64_t n;

	snprintf(path, sizeof(path), "steps[%zu].", i);
	if (!json_object_is_type(o, json_type_object))
		return fail(c, "steps[%zu]: must be an object", i);
	if (word(c, o, path, "name", WORD_ALNUM, SAGA_DEF_WORD_MAX, s->name) < 0)
		return -1;
	if (saga_def_step(d, s->name) != (int)i)
		return fail(c, "%sname: step name %s is used twice", path, s->name);
	snprintf(s->pending, sizeof(s->pending), "Pending%s", s->name);
	if (word(c, o, path, "participant", WORD_LOWER, SAGA_DEF_NAME_MAX, s->participant) < 0 ||
	    word(c, o, path, "command", WORD_ALNUM, SAGA_DEF_WORD_MAX, s->command) < 0 ||
	    compile_fields(c, o, path, d, i) < 0 ||
	    event_type(c, o, path, "succeeded", d, i, s->succeeded) < 0 ||
	    event_type(c, o, path, "failed", d, i, s->failed) < 0 ||
	    word(c, o, path, "compensation", WORD_ALNUM, SAGA_DEF_WORD_MAX, s->compensation) < 0 ||
	    event_type(c, o, path, "compensated", d, i, s->compensated) < 0)
		return -1;
	if (json_object_object_get_ex(o, "deadlineMs", &v)) {
		if (jsonx_get_int(o, "deadlineMs", 1, INT32_MAX, &n) != 0)
			return fail(c, "%sdeadlineMs: must be an integer from 1 to %d", path,
				    INT32_MAX);
		s->deadline_ms = n;
	}
	return 0;
}

static int compile_steps(struct compile *c, struct json_object *doc, struct saga_def *d)
{
	struct json_object *steps;
	size_t n;

	if (!json_object_object_get_ex(doc, "steps", &steps))
		return fail(c, "steps: required");
	if (!json_object_is_type(steps, json_type_array))
		return fail(c, "steps: must be an array");
	n = json_object_array_length(steps);
	if (n < 1 || n > SAGA_DEF_MAX_STEPS)
		return fail(c, "steps: 1 to %d steps", SAGA_DEF_MAX_STEPS);
	for (size_t i = 0; i < n; i++) {
		/* counted as it goes, so that saga_def_step sees the steps before this one */
		d->n_steps = i + 1;
		if (compile_step(c, json_object_array_get_idx(steps, i), d, i) < 0)
			return -1;
	}
	return 0;
}

/* ---- the document ---- */

static int compile_head(struct compile *c, struct json_object *doc, struct saga_def *d)
{
	const char *name;
	int64_t version;

	if (!json_object_object_get_ex(doc, "name", NULL))
		return fail(c, "name: required");
	if (jsonx_get_str(doc, "name", SAGA_DEF_NAME_MAX, &name) != 0 ||
	    !word_ok(name, strlen(name), SAGA_DEF_NAME_MAX, WORD_LOWER) || name[0] < 'a' ||
	    name[0] > 'z')
		return fail(c, "name: must be 1-%d characters of %s, starting with a letter",
			    SAGA_DEF_NAME_MAX, class_text[WORD_LOWER]);
	snprintf(d->name, sizeof(d->name), "%s", name);
	if (!json_object_object_get_ex(doc, "version", NULL))
		return fail(c, "version: required");
	if (jsonx_get_int(doc, "version", 1, INT32_MAX, &version) != 0)
		return fail(c, "version: must be an integer from 1 to %d", INT32_MAX);
	d->version = (int32_t)version;
	return 0;
}

struct saga_def *saga_def_compile(struct json_object *doc, char *err, size_t errlen)
{
	struct compile c = { err, errlen };
	struct saga_def *d;

	if (err && errlen > 0)
		err[0] = '\0';
	if (!json_object_is_type(doc, json_type_object)) {
		(void)fail(&c, "definition: must be a JSON object");
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		abort();
	if (compile_head(&c, doc, d) < 0 || compile_input(&c, doc, d) < 0 ||
	    compile_steps(&c, doc, d) < 0) {
		saga_def_free(d);
		return NULL;
	}
	return d;
}

struct saga_def *saga_def_parse(const char *text, size_t len, char *err, size_t errlen)
{
	char why[128];
	struct json_object *doc = jsonx_parse(text, len, why, sizeof(why));
	struct saga_def *d;

	if (!doc) {
		if (err && errlen > 0)
			snprintf(err, errlen, "definition: not valid JSON (%s)", why);
		return NULL;
	}
	d = saga_def_compile(doc, err, errlen);
	json_object_put(doc);
	return d;
}

void saga_def_free(struct saga_def *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < SAGA_DEF_MAX_STEPS; i++)
		free(d->steps[i].fields);
	free(d->input);
	free(d);
}

int saga_def_step(const struct saga_def *d, const char *name)
{
	for (size_t i = 0; i < d->n_steps; i++)
		if (strcmp(d->steps[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* ---- what crosses the border ---- */

/*
 * Unicode characters in valid UTF-8 (jsonx_parse checked it): the bytes
 * that start one. *control is set when one is a control character: C0,
 * DEL, or C1 (U+0080-U+009F, 0xc2 0x80-0x9f).
 */
static size_t utf8_chars(const char *s, size_t len, bool *control)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = 0;

	*control = false;
	for (size_t i = 0; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			n++;
		if (p[i] < 0x20 || p[i] == 0x7f ||
		    (p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f))
			*control = true;
	}
	return n;
}

static bool input_ok(const struct saga_input_field *f, struct json_object *input)
{
	const char *s;
	int64_t n;
	bool control;

	switch (f->type) {
	case SAGA_INPUT_ID:
		return jsonx_get_id(input, f->name, &s) == 0;
	case SAGA_INPUT_INTEGER:
		return jsonx_get_int(input, f->name, f->min, f->max, &n) == 0;
	case SAGA_INPUT_STRING:
		/* a character is at most 4 bytes: the byte bound only saves counting */
		return jsonx_get_str(input, f->name, 4 * f->max_length, &s) == 0 &&
		       utf8_chars(s, strlen(s), &control) <= f->max_length && !control;
	}
	return false;
}

int saga_input_check(const struct saga_def *d, struct json_object *input, const char **bad)
{
	*bad = NULL;
	if (!json_object_is_type(input, json_type_object))
		return -1;
	for (size_t i = 0; i < d->n_input; i++) {
		if (!input_ok(&d->input[i], input)) {
			*bad = d->input[i].name;
			return -1;
		}
	}
	return 0;
}

int saga_output_check(struct json_object *output, char *err, size_t errlen)
{
	struct compile c = { err, errlen };
	char q[80];

	if (!json_object_is_type(output, json_type_object))
		return fail(&c, "output: must be an object");
	if (json_object_object_length(output) > SAGA_DEF_OUTPUT_KEYS)
		return fail(&c, "output: at most %d keys", SAGA_DEF_OUTPUT_KEYS);
	json_object_object_foreach(output, key, v)
	{
		const char *s;
		int64_t n;
		bool control;

		if (!word_ok(key, strlen(key), SAGA_DEF_WORD_MAX, WORD_FIELD))
			return fail(&c, "output.%s: keys must be 1-%d characters of %s",
				    quoted(q, sizeof(q), key), SAGA_DEF_WORD_MAX,
				    class_text[WORD_FIELD]);
		/* jsonx_get_str refuses a string holding U+0000 */
		if (json_object_is_type(v, json_type_string)
			    ? jsonx_get_str(output, key, 4 * SAGA_DEF_STRING_MAX, &s) != 0 ||
				      utf8_chars(s, strlen(s), &control) > SAGA_DEF_STRING_MAX
			    : jsonx_get_int(output, key, INT64_MIN, INT64_MAX, &n) != 0)
			return fail(&c,
				    "output.%s: must be a string of at most %d characters or an "
				    "integer",
				    key, SAGA_DEF_STRING_MAX);
	}
	return 0;
}
