/*
 * metrics: counters, gauges and histograms in Prometheus text format.
 *
 * A family is declared once (name, help, type); series inside it are found by
 * their label text, e.g. `route="/orders",status="201"`. Lookups are linear:
 * families hold a handful of series, and hot paths keep the pointer that
 * metrics_series() returns. Single-threaded, like the event loop.
 */
#ifndef PGSAGA_METRICS_H
#define PGSAGA_METRICS_H

#include <stdint.h>

struct evbuffer;
struct metric_family;
struct metric_series;

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

/* name and help must be literals (borrowed for the process's life). */
struct metric_family *metrics_family(const char *name, const char *help, enum metric_type type);

/* Finds or creates the series with these labels ("" for none). */
struct metric_series *metrics_series(struct metric_family *f, const char *labels);

void metric_add(struct metric_series *s, double v);
void metric_set(struct metric_series *s, double v);
/* Histograms: records one observation in seconds. */
void metric_observe(struct metric_series *s, double seconds);

/* Shorthand: metric_add(metrics_series(f, labels), v). */
void metrics_inc(struct metric_family *f, const char *labels, double v);

/* Gauges computed when scraped: fn(arg) gives the value. */
void metrics_gauge_fn(const char *name, const char *help, const char *labels,
		      double (*fn)(void *arg), void *arg);

/* Appends every family to out. */
void metrics_render(struct evbuffer *out);

/* Frees everything (at exit, so leak checkers stay quiet). */
void metrics_free_all(void);

#endif
