/* metrics_reader: see metrics_reader.h. */
#include "metrics_reader.h"

#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/*
 * Calls visit(series, value, arg) for each sample line of the page on port;
 * series is NUL-terminated, the line cut before its value. false when the
 * service did not answer 200.
 */
static bool scrape(int port, void (*visit)(const char *series, double value, void *arg), void *arg)
{
	struct http_resp r;
	bool ok = http_do(port, "GET", "/metrics", NULL, NULL, 0, &r) == 0 && r.status == 200;

	for (char *line = ok ? r.body : NULL; line && *line;) {
		char *next = strchr(line, '\n'), *sp;

		if (next)
			*next = '\0';
		sp = strrchr(line, ' ');
		if (line[0] != '#' && sp) {
			*sp = '\0';
			visit(line, strtod(sp + 1, NULL), arg);
		}
		line = next ? next + 1 : NULL;
	}
	http_resp_free(&r);
	return ok;
}

struct find {
	const char *want;
	double value;
	bool found;
};

static void find_series(const char *series, double value, void *arg)
{
	struct find *f = arg;

	if (!f->found && strcmp(series, f->want) == 0) {
		f->value = value;
		f->found = true;
	}
}

double metrics_read_series(int port, const char *series)
{
	struct find f = { series, -1, false };

	ck_assert_msg(scrape(port, find_series, &f), "GET /metrics on port %d did not answer 200",
		      port);
	return f.value;
}

static void add_metric(const char *series, double value, void *arg)
{
	struct find *f = arg;
	size_t n = strlen(f->want);

	if (strncmp(series, f->want, n) == 0 && (series[n] == '\0' || series[n] == '{'))
		f->value += value;
}

double metrics_read_sum(int port, const char *name)
{
	struct find f = { name, 0, false };

	return scrape(port, add_metric, &f) ? f.value : -1;
}
