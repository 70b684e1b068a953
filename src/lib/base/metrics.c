/* metrics: see metrics.h. */
#include "metrics.h"

#include <event2/buffer.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds in seconds, for delivery and request latencies. */
static const double buckets[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
				  0.05,   0.1,   0.25,   0.5,   1,    2.5, 5, 10 };
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

struct metric_series {
	struct metric_series *next;
	char *labels;
	double value; /* counter or gauge; histogram: sum */
	uint64_t count;
	uint64_t bucket[NBUCKETS];
	double (*fn)(void *arg);
	void *arg;
};

struct metric_family {
	struct metric_family *next;
	const char *name, *help;
	enum metric_type type;
	struct metric_series *series, **tail;
};

static struct metric_family *families, **families_tail = &families;

struct metric_family *metrics_family(const char *name, const char *help, enum metric_type type)
{
	struct metric_family *f;

	for (f = families; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			return f;
	f = calloc(1, sizeof(*f));
	if (!f)
		abort();
	f->name = name;
	f->help = help;
	f->type = type;
	f->tail = &f->series;
	*families_tail = f;
	families_tail = &f->next;
	return f;
}

struct metric_series *metrics_series(struct metric_family *f, const char *labels)
{
	struct metric_series *s;

	for (s = f->series; s; s = s->next)
		if (strcmp(s->labels, labels) == 0)
			return s;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->labels = strdup(labels)))
		abort();
	*f->tail = s;
	f->tail = &s->next;
	return s;
}

void metric_add(struct metric_series *s, double v)
{
	s->value += v;
}

void metric_set(struct metric_series *s, double v)
{
	s->value = v;
}

void metric_observe(struct metric_series *s, double seconds)
{
	for (size_t i = 0; i < NBUCKETS; i++)
		if (seconds <= buckets[i])
			s->bucket[i]++;
	s->count++;
	s->value += seconds;
}

void metrics_inc(struct metric_family *f, const char *labels, double v)
{
	metric_add(metrics_series(f, labels), v);
}

void metrics_gauge_fn(const char *name, const char *help, const char *labels,
		      double (*fn)(void *arg), void *arg)
{
	struct metric_series *s = metrics_series(metrics_family(name, help, METRIC_GAUGE), labels);

	s->fn = fn;
	s->arg = arg;
}

static const char *type_name(enum metric_type t)
{
	return t == METRIC_COUNTER ? "counter" : t == METRIC_GAUGE ? "gauge" : "histogram";
}

/* name{labels,extra} or name{extra} or name{labels} or name */
static void series_name(struct evbuffer *out, const char *name, const char *suffix,
			const char *labels, const char *extra)
{
	int has_l = labels[0] != '\0', has_e = extra && extra[0] != '\0';

	evbuffer_add_printf(out, "%s%s", name, suffix);
	if (has_l || has_e)
		evbuffer_add_printf(out, "{%s%s%s}", labels, has_l && has_e ? "," : "",
				    has_e ? extra : "");
}

void metrics_render(struct evbuffer *out)
{
	for (struct metric_family *f = families; f; f = f->next) {
		evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name,
				    type_name(f->type));
		for (struct metric_series *s = f->series; s; s = s->next) {
			if (f->type != METRIC_HISTOGRAM) {
				double v = s->fn ? s->fn(s->arg) : s->value;

				series_name(out, f->name, "", s->labels, NULL);
				evbuffer_add_printf(out, " %.17g\n", v);
				continue;
			}
			for (size_t i = 0; i < NBUCKETS; i++) {
				char le[32];

				snprintf(le, sizeof(le), "le=\"%g\"", buckets[i]);
				series_name(out, f->name, "_bucket", s->labels, le);
				evbuffer_add_printf(out, " %llu\n", (unsigned long long)s->bucket[i]);
			}
			series_name(out, f->name, "_bucket", s->labels, "le=\"+Inf\"");
			evbuffer_add_printf(out, " %llu\n", (unsigned long long)s->count);
			series_name(out, f->name, "_sum", s->labels, NULL);
			evbuffer_add_printf(out, " %.17g\n", s->value);
			series_name(out, f->name, "_count", s->labels, NULL);
			evbuffer_add_printf(out, " %llu\n", (unsigned long long)s->count);
		}
	}
}

void metrics_free_all(void)
{
	struct metric_family *f, *fn;
	struct metric_series *s, *sn;

	for (f = families; f; f = fn) {
		fn = f->next;
		for (s = f->series; s; s = sn) {
			sn = s->next;
			free(s->labels);
			free(s);
		}
		free(f);
	}
	families = NULL;
	families_tail = &families;
}
