/* steps: see steps.h. */
#include "steps.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct reader {
	const char *start, *p;
	char *err;
	size_t errlen;
};

static void skip_blanks(struct reader *r)
{
	while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n')
		r->p++;
}

static int fail(struct reader *r, const char *what)
{
	snprintf(r->err, r->errlen, "at %d: expected %s", (int)(r->p - r->start) + 1, what);
	return -1;
}

static int expect(struct reader *r, char c, const char *what)
{
	skip_blanks(r);
	if (*r->p != c)
		return fail(r, what);
	r->p++;
	return 0;
}

/* A message type: [A-Za-z0-9]{1,64}. */
static int type_name(struct reader *r, char out[STEPS_TYPE_MAX + 1], const char *what)
{
	size_t n = 0;

	skip_blanks(r);
	while (isascii((unsigned char)r->p[n]) && isalnum((unsigned char)r->p[n]))
		n++;
	if (n == 0 || n > STEPS_TYPE_MAX)
		return fail(r, what);
	memcpy(out, r->p, n);
	out[n] = '\0';
	r->p += n;
	return 0;
}

/* An optional [field] (the group key) where the reader is: [A-Za-z0-9_]{1,64}. */
static int key_field(struct reader *r, char out[STEPS_FIELD_MAX + 1])
{
	size_t n = 0;

	skip_blanks(r);
	if (*r->p != '[')
		return 0;
	r->p++;
	skip_blanks(r);
	while (isascii((unsigned char)r->p[n]) && (isalnum((unsigned char)r->p[n]) || r->p[n] == '_'))
		n++;
	if (n == 0 || n > STEPS_FIELD_MAX)
		return fail(r, "a field name in [ ] (1-64 of A-Za-z0-9_)");
	memcpy(out, r->p, n);
	out[n] = '\0';
	r->p += n;
	return expect(r, ']', "']' after the key field");
}

/* A function: [a-z_][a-z0-9_]{0,62}. */
static int function_name(struct reader *r, char out[STEPS_FUNCTION_MAX + 1], const char *what)
{
	size_t n = 0;

	skip_blanks(r);
	while ((r->p[n] >= 'a' && r->p[n] <= 'z') || r->p[n] == '_' ||
	       (n > 0 && r->p[n] >= '0' && r->p[n] <= '9'))
		n++;
	if (n == 0 || n > STEPS_FUNCTION_MAX)
		return fail(r, what);
	memcpy(out, r->p, n);
	out[n] = '\0';
	r->p += n;
	return 0;
}

static int one_step(struct reader *r, struct step *s)
{
	if (type_name(r, s->command, "a command type (1-64 of A-Za-z0-9)") != 0 ||
	    key_field(r, s->key) != 0 ||
	    expect(r, '=', "'=' after the command type") != 0 ||
	    function_name(r, s->function, "a function name (lower case, 1-63 of a-z0-9_)") != 0 ||
	    expect(r, '(', "'(' and the command's two events after the function name") != 0 ||
	    type_name(r, s->succeeded, "the succeeded event type") != 0 ||
	    expect(r, '|', "'|' between the succeeded and the failed event types") != 0 ||
	    type_name(r, s->failed, "the failed event type") != 0 ||
	    expect(r, ')', "')' after the failed event type") != 0 ||
	    expect(r, '/', "'/' and the compensation after the command") != 0 ||
	    type_name(r, s->compensation, "a compensation type (1-64 of A-Za-z0-9)") != 0 ||
	    expect(r, '=', "'=' after the compensation type") != 0 ||
	    function_name(r, s->undo, "a function name (lower case, 1-63 of a-z0-9_)") != 0 ||
	    expect(r, '(', "'(' and the compensated event after the function name") != 0 ||
	    type_name(r, s->compensated, "the compensated event type") != 0 ||
	    expect(r, ')', "')' after the compensated event type") != 0)
		return -1;
	return 0;
}

/* Every message type once: the participant routes commands by type. */
static int distinct(const struct steps *out, char *err, size_t errlen)
{
	const char *seen[STEPS_MAX * 5];
	size_t n = 0;

	for (size_t i = 0; i < out->n; i++) {
		const struct step *s = &out->step[i];
		const char *names[5] = { s->command, s->succeeded, s->failed, s->compensation,
					 s->compensated };

		for (size_t k = 0; k < 5; k++) {
			for (size_t j = 0; j < n; j++) {
				if (strcmp(seen[j], names[k]) == 0) {
					snprintf(err, errlen, "the message type %s appears twice", names[k]);
					return -1;
				}
			}
			seen[n++] = names[k];
		}
	}
	return 0;
}

int steps_parse(const char *text, struct steps *out, char *err, size_t errlen)
{
	struct reader r = { text, text, err, errlen };

	memset(out, 0, sizeof(*out));
	for (;;) {
		if (out->n == STEPS_MAX) {
			snprintf(err, errlen, "more than %d steps", STEPS_MAX);
			return -1;
		}
		if (one_step(&r, &out->step[out->n]) != 0)
			return -1;
		out->n++;
		skip_blanks(&r);
		if (*r.p == '\0')
			break;
		if (expect(&r, ',', "',' and another step, or the end") != 0)
			return -1;
	}
	return distinct(out, err, errlen);
}

int steps_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 58 || !(name[0] >= 'a' && name[0] <= 'z'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
		      name[i] == '_'))
			return 0;
	return 1;
}
