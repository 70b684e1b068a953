/*
 * overload: offered more starts than it finishes, pgsaga refuses the excess
 * at the door (429 overloaded with Retry-After) and finishes what it
 * accepted in time (src/orchestrator/admission.h).
 *
 * The closed-loop capacity is measured first (saga-bench --concurrency,
 * admission control off), then 2.5 times that rate is offered for 40 s
 * (saga-bench --rate) with STEP_TIMEOUT_MS=20000 and the default, adaptive
 * limit: no accepted saga is compensated for a deadline, every accepted
 * saga ends, some starts are refused with Retry-After, and the sagas
 * finished per second are at least half the capacity. Then the same with
 * two orchestrators, the load split between them (the peers send every
 * event to the first: the second learns what finishes from the database
 * alone).
 *
 * Suite 'load': it runs once, not under the sanitizers (whose slowness is
 * not the deployment's). Pass/fail only on counts and on the goodput ratio
 * measured side by side in one run.
 */
#include <check.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <unistd.h>

#include "fixture.h"
#include "metrics_reader.h"

#define CAPACITY_CONCURRENCY 64
#define CAPACITY_SECONDS 15
#define OVERLOAD_SECONDS 40
#define OVERLOAD_FACTOR 2.5
/*
 * A floor that catches a collapse (a limit shrunk to a trickle, admission
 * refusing what it could take), not the performance target: the 90 % goal
 * is scripts/bench --overload's (docs/performance.md). On a shared 2-core
 * machine the ratio moved between 74 % and 121 % from run to run, so 80 %
 * failed CI once with nothing wrong.
 */
#define GOODPUT_SHARE 0.5

static const char *const step_timeout[] = { "STEP_TIMEOUT_MS=20000", NULL };

/* Starts saga-bench against the orchestrator on port with load (its options); read with bench_end. */
static FILE *bench_start(int port, const char *prefix, const char *load)
{
	char cmd[4096];
	const char *build = getenv("SAGA_BUILD_DIR");
	FILE *f;

	ck_assert_ptr_nonnull(build);
	snprintf(cmd, sizeof(cmd),
		 "'%s/src/bench/saga-bench' --url http://127.0.0.1:%d --db-url '%s'"
		 " --admin-url '%s' --prefix %s --wait 120 --quiet --no-wake %s",
		 build, port, env.auditor_url, env.admin_url, prefix, load);
	f = popen(cmd, "r");
	ck_assert_msg(f != NULL, "cannot run %s", cmd);
	return f;
}

static struct json_object *bench_end(FILE *f)
{
	size_t cap = 1 << 16, len = 0, n;
	char *buf = malloc(cap);

	ck_assert_ptr_nonnull(buf);
	while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
	}
	buf[len] = '\0';
	int rc = pclose(f);
	ck_assert_msg(rc == 0, "saga-bench failed (%d): %s", rc, buf);
	struct json_object *o = json_tokener_parse(buf);
	ck_assert_msg(o != NULL, "saga-bench printed no JSON: %s", buf);
	free(buf);
	return o;
}

static double jnum(struct json_object *o, const char *path)
{
	char p[128], *save = NULL;
	struct json_object *v = o;

	snprintf(p, sizeof(p), "%s", path);
	for (char *k = strtok_r(p, ".", &save); k; k = strtok_r(NULL, ".", &save))
		if (!json_object_object_get_ex(v, k, &v))
			return 0;
	return json_object_get_double(v);
}

/* Prints the orchestrator's limit and sagas in flight every second (diagnosis in the log). */
static volatile int watch_port;

static void *watch(void *arg)
{
	while (watch_port) {
		int port = watch_port;

		fprintf(stderr, "  limit %.0f, in flight %.0f, refused %.0f\n",
			metrics_read_series(port, "saga_admission_limit"),
			metrics_read_series(port, "saga_inflight"),
			metrics_read_series(port, "saga_admission_refused_total"));
		sleep(2);
	}
	return NULL;
}

/* What every overload run must show, summed over its saga-bench runs. */
static double check_overload(struct json_object *const *runs, int n, const char *what)
{
	double created = 0, sagas = 0, terminal = 0, timeouts = 0, refused = 0, retry = 0,
	       failed = 0, other = 0, span = 0;

	for (int i = 0; i < n; i++) {
		created += jnum(runs[i], "post.created_201");
		sagas += jnum(runs[i], "sagas");
		terminal += jnum(runs[i], "terminal");
		timeouts += jnum(runs[i], "step_timeouts");
		refused += jnum(runs[i], "post.refused_429");
		retry += jnum(runs[i], "post.refused_with_retry_after");
		failed += jnum(runs[i], "post.failed");
		other += jnum(runs[i], "post.other_status");
		if (jnum(runs[i], "span_s") > span)
			span = jnum(runs[i], "span_s");
	}
	fprintf(stderr,
		"overload (%s): %.0f accepted, %.0f refused, %.0f terminal, %.0f StepTimeout,"
		" %.1f sagas/s\n",
		what, created, refused, terminal, timeouts, span > 0 ? terminal / span : 0);
	ck_assert_msg(created > 0 && sagas == created, "%s: %.0f accepted, %.0f sagas", what,
		      created, sagas);
	ck_assert_msg(terminal == sagas, "%s: %.0f of %.0f sagas not terminal", what,
		      sagas - terminal, sagas);
	ck_assert_msg(timeouts == 0, "%s: %.0f accepted sagas compensated for a deadline", what,
		      timeouts);
	ck_assert_msg(refused > 0, "%s: no start refused", what);
	ck_assert_msg(retry == refused, "%s: %.0f of %.0f refusals without Retry-After", what,
		      refused - retry, refused);
	ck_assert_msg(failed == 0 && other == 0, "%s: %.0f starts unanswered, %.0f other answers",
		      what, failed, other);
	return span > 0 ? terminal / span : 0;
}

START_TEST(overload_is_refused_at_the_door)
{
	const char *const off[] = { "ADMISSION_MAX_INFLIGHT=0", "STEP_TIMEOUT_MS=20000", NULL };
	char load[128], orch_urls[128], peers_env[160];

	/* closed-loop capacity, admission control off */
	env_start(&env, SVC_INV, NULL);
	env_start(&env, SVC_PAY, NULL);
	env_start(&env, SVC_ORCH, off);
	snprintf(load, sizeof(load), "--concurrency %d --duration %d", CAPACITY_CONCURRENCY,
		 CAPACITY_SECONDS);
	struct json_object *cap = bench_end(bench_start(env.port[SVC_ORCH], "cap", load));
	double capacity = jnum(cap, "sagas_per_s");
	fprintf(stderr, "overload: closed-loop capacity %.1f sagas/s at %d in flight\n", capacity,
		CAPACITY_CONCURRENCY);
	ck_assert(capacity > 0);
	json_object_put(cap);

	/* 2.5 times that, one orchestrator with the default limit */
	env_stop(&env, SVC_ORCH, SIGTERM);
	env_start(&env, SVC_ORCH, step_timeout);
	snprintf(load, sizeof(load), "--rate %.0f --duration %d", OVERLOAD_FACTOR * capacity,
		 OVERLOAD_SECONDS);
	pthread_t w;

	watch_port = env.port[SVC_ORCH];
	ck_assert_int_eq(pthread_create(&w, NULL, watch, NULL), 0);
	struct json_object *one = bench_end(bench_start(env.port[SVC_ORCH], "one", load));
	watch_port = 0;
	pthread_join(w, NULL);
	double goodput = check_overload(&one, 1, "one orchestrator");
	json_object_put(one);
	ck_assert_msg(goodput >= GOODPUT_SHARE * capacity,
		      "one orchestrator: %.1f sagas/s, under %.0f %% of the capacity (%.1f)", goodput,
		      GOODPUT_SHARE * 100, capacity);

	/* two orchestrators, the load split between them */
	struct saga_env two = env;

	two.pid[SVC_ORCH] = 0;
	two.port[SVC_ORCH] = free_port();
	snprintf(two.dbname, sizeof(two.dbname), "%.50s-2", env.dbname);
	env_start(&two, SVC_ORCH, step_timeout);
	snprintf(orch_urls, sizeof(orch_urls), "http://127.0.0.1:%d,http://127.0.0.1:%d",
		 env.port[SVC_ORCH], two.port[SVC_ORCH]);
	snprintf(peers_env, sizeof(peers_env), "ORCHESTRATOR_URL=%s", orch_urls);
	const char *const peers[] = { peers_env, NULL };
	env_stop(&env, SVC_PAY, SIGTERM);
	env_stop(&env, SVC_INV, SIGTERM);
	env_start(&env, SVC_PAY, peers);
	env_start(&env, SVC_INV, peers);
	snprintf(load, sizeof(load), "--rate %.0f --duration %d", OVERLOAD_FACTOR * capacity / 2,
		 OVERLOAD_SECONDS);
	FILE *a = bench_start(env.port[SVC_ORCH], "twoa", load);
	FILE *b = bench_start(two.port[SVC_ORCH], "twob", load);
	struct json_object *runs[2] = { bench_end(a), bench_end(b) };
	goodput = check_overload(runs, 2, "two orchestrators");
	json_object_put(runs[0]);
	json_object_put(runs[1]);
	env_stop(&two, SVC_ORCH, SIGTERM);
	ck_assert_msg(goodput >= GOODPUT_SHARE * capacity,
		      "two orchestrators: %.1f sagas/s, under %.0f %% of the capacity (%.1f)",
		      goodput, GOODPUT_SHARE * 100, capacity);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("load");
	TCase *tc = fixture_tcase("overload");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, overload_is_refused_at_the_door);
	suite_add_tcase(s, tc);
	return harness_run(s);
}
