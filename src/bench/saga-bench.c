/*
 * saga-bench: load generator and end-to-end meter for pgsaga.
 *
 * Posts orders to the orchestrator, closed-loop (--concurrency N) or
 * open-loop (--rate R), for --count orders or --duration seconds, then waits
 * until every saga it started is terminal and prints one JSON summary on
 * stdout.
 *
 * Closed loop means N sagas in flight, not N POSTs in flight: a slot posts,
 * and posts again only once its saga is terminal (--pace saga, the default),
 * which is what a pgbench client running one saga's SQL does. Sagas finish
 * in the background, so the bench learns it by polling the database as
 * saga_auditor: one query by primary key, at most every --poll-ms, for the sagas in
 * flight that are old enough to be done: older than 0.8 x the 5th
 * percentile of the last 64 sagas' times from 201 to terminal (a saga
 * faster than that is noticed late by less than the difference). Noticing
 * the end costs a slot up to one poll interval plus a query, which a pgbench
 * client does not pay: at concurrency 1 that understates pgsaga's throughput
 * by roughly that share of a saga (the latencies, read from the server, are
 * not affected); the polls cost PostgreSQL CPU that the other series do not
 * pay, about 20 us per query plus 3-4 us per saga asked about. --pace post posts
 * again as soon as the 201 arrives (N POSTs in flight; the backlog then grows
 * when the pipeline is slower than POST).
 *
 * Every number but the POST latency comes from server timestamps, so client
 * and server clocks never mix: a saga's end-to-end latency is its terminal
 * saga_history.at minus saga_instances.created_at; sagas/s is the number of
 * sagas over the span from the first created_at to the last terminal at;
 * time in a state is the gap between consecutive history rows. Both are the
 * start times (now()) of the transactions that wrote them.
 *
 * Wake-up (commit of an outbox row to the peer's handler), per message:
 *   commit:  pg_xact_commit_timestamp() of a row the writing transaction
 *            inserted and nobody updates (the history row of the transition
 *            that wrote a command; the payments/reservations row of the
 *            handler that wrote an event); needs track_commit_timestamp=on,
 *            else the writer's transaction start (saga_history.at) is used
 *            and the figure includes the writer's own statement and commit.
 *   claim:   for a row a dispatcher claimed (one written by someone else,
 *            woken by NOTIFY or a sweep), the claim's transaction start:
 *            the claim sets next_attempt_at = now() + LEASE_MS and nothing
 *            later changes it on a first-try delivery (--lease-ms must match
 *            the services'). Rows a service writes itself are born claimed
 *            (next_attempt_at = the writer's now() + LEASE_MS) and sent from
 *            memory: they have no claim and are told apart by claim < commit.
 *   handler: the receiver's transaction start: payments.created_at,
 *            reservations.created_at for commands; for events the
 *            orchestrator's transition (saga_history.at), which comes after
 *            its read statement, so events include one more round trip.
 *
 * --saga NAME starts sagas of the definition NAME (POST /sagas/NAME) instead
 * of orders, with the order's fields and an address, which a definition that
 * does not declare it ignores (order-with-shipping ships to it).
 *
 * The sagas of one run are found by their customer ids, which all start with
 * a prefix unique to the run (--prefix; the column customer_id of an order,
 * the input's customerId of another saga), and by created_at >= the server's
 * now() taken before the first POST. --analyze PREFIX skips the load and
 * summarises sagas someone else started (scripts/bench uses it for sagas
 * created by pgbench from outside, whose dispatcher wakes by NOTIFY).
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <libpq-fe.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "jsonx.h"
#include "tls.h"
#include "uuid.h"
#include "version.h"

#define MAX_SLOTS 4096

/*
 * The sagas of a run, row being saga_instances' row: created since $1, their
 * customer (the order saga's column, another saga's input) starting with $2.
 * The input read through to_jsonb, not by its column, so that the query
 * also runs on 1.0.0's schema (scripts/bench --compare), which has none;
 * coalesce reads it only for a saga without the column.
 */
#define RUN_SAGAS(row) \
	row ".created_at >= $1 AND left(coalesce(" row ".customer_id, to_jsonb(" row \
	   ")->'input'->>'customerId'), length($2)) = $2"

/* --- settings ------------------------------------------------------------ */

static struct {
	const char *url, *db_url, *admin_url, *prefix, *analyze, *since, *saga;
	const char *cacert, *cert, *key; /* https: TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE */
	int concurrency, customers, items, qty, max_conns, lease_ms;
	double rate, duration, poll_ms, wait_s;
	long long count, amount;
	bool pace_post, quiet, progress, no_wake;
} S = {
	.url = "http://127.0.0.1:8080",
	.concurrency = 0,
	.customers = 1000,
	.items = 100,
	.qty = 1,
	.amount = 100,
	.max_conns = 512,
	.lease_ms = 30000,
	.poll_ms = 1,
	.wait_s = 300,
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: saga-bench [options]\n"
		"Load: --concurrency N (closed loop) or --rate R (open loop, orders/s),\n"
		"      for --count N orders or --duration S seconds.\n"
		"  --url URL          orchestrator base URL (%s); https:// verifies the\n"
		"                     orchestrator with --cacert (else the system's CAs)\n"
		"  --cacert FILE      https: the CA certificates to verify the orchestrator with\n"
		"  --cert FILE --key FILE\n"
		"                     https: a client certificate to present\n"
		"  --db-url URL       libpq URL as saga_auditor (required; or SAGA_BENCH_DB_URL)\n"
		"  --admin-url URL    superuser URL: seed the --items items with ample stock first\n"
		"  --customers N      customers to spread orders over (%d)\n"
		"  --items N          items it-0001.. to spread orders over (%d)\n"
		"  --qty N --amount N per order (%d, %lld)\n"
		"  --pace saga|post   closed loop: next order when the saga is terminal (saga,\n"
		"                     default) or when the POST is answered (post)\n"
		"  --poll-ms MS       least time between two polls for terminal sagas (%g)\n"
		"  --max-conns N      open loop: connections at most (%d)\n"
		"  --prefix P         customer id prefix of this run (random)\n"
		"  --saga NAME        start sagas of the definition NAME (POST /sagas/NAME)\n"
		"                     instead of orders (POST /orders)\n"
		"  --wait S           give up waiting for terminal sagas after S s (%g)\n"
		"  --lease-ms MS      the services' LEASE_MS, for the wake-up figures (%d)\n"
		"  --analyze P        no load: summarise the sagas whose customers start with P\n"
		"  --since TS         with --analyze: only sagas created at or after TS\n"
		"  --quiet            no progress bar (it is shown only on a terminal anyway)\n"
		"  --no-wake          leave out the wake-up figures (their query is slow on\n"
		"                     tables never analysed, as in a fresh test database)\n"
		"  --version          print the version and exit\n"
		"Prints a JSON summary on stdout.\n",
		S.url, S.customers, S.items, S.qty, S.amount, S.poll_ms, S.max_conns, S.wait_s,
		S.lease_ms);
}

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("saga-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- samples --------------------------------------------------------------- */

struct samples {
	double *v;
	size_t n, cap;
};

static void sample_add(struct samples *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 1024;
		s->v = realloc(s->v, s->cap * sizeof(double));
		if (!s->v)
			abort();
	}
	s->v[s->n++] = x;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest rank on sorted samples. */
static double pct(const struct samples *s, double p)
{
	if (s->n == 0)
		return NAN;
	size_t k = (size_t)ceil(p / 100.0 * (double)s->n);

	return s->v[k ? k - 1 : 0];
}

static struct json_object *num(double x)
{
	/* three decimals are plenty for milliseconds; NaN is not JSON */
	char buf[32];

	if (isnan(x) || isinf(x))
		return NULL;
	snprintf(buf, sizeof(buf), "%.3f", x);
	return json_object_new_double_s(atof(buf), buf);
}

/* --- database --------------------------------------------------------------- */

static PGconn *db_open(const char *url)
{
	PGconn *c = PQconnectdb(url);

	if (PQstatus(c) != CONNECTION_OK)
		die("cannot connect to %s: %s", url, PQerrorMessage(c));
	return c;
}

static PGresult *db_exec(PGconn *c, const char *sql, int n, const char *const *params)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
		die("query failed: %s\n%s", PQresultErrorMessage(r), sql);
	return r;
}

/* digits of the item number in it-0001..: 4, more for more items */
static int item_width;

static void seed_stock(void)
{
	char n[16], w[16];
	PGconn *c = db_open(S.admin_url);

	snprintf(n, sizeof(n), "%d", S.items);
	snprintf(w, sizeof(w), "%d", item_width);
	const char *p[2] = { n, w };
	/* a restock (available raised) keeps the audit true: see stock_track_start */
	PQclear(db_exec(c,
			"INSERT INTO inventory.stock (item_id, available)"
			" SELECT 'it-' || lpad(i::text, $2::int, '0'), 1000000000"
			"   FROM generate_series(1, $1::int) i"
			" ON CONFLICT (item_id) DO UPDATE SET available = excluded.available"
			"  WHERE stock.available < 100000000",
			2, p));
	PQfinish(c);
}

/* --- load ------------------------------------------------------------------- */

struct conn {
	struct evhttp_connection *evcon;
	int outstanding; /* requests sent or queued on it */
	int slot;        /* closed loop: its slot; -1 in open loop */
};

struct post {
	struct conn *c;
	double t0; /* intended start (open loop) or send time */
};

struct inflight {
	char id[UUID_STR_LEN];
	int slot;
	double since; /* its 201 arrived */
};

/*
 * How soon after its 201 a saga can be terminal: the SEEN_K-th shortest of
 * the last SEEN_N times from a 201 to the poll that found the saga terminal
 * (about the 5th percentile). A poll asks only about sagas older than
 * GATE_SHARE of that ("due"), and none is sent while no saga is due.
 */
#define SEEN_N 64
#define SEEN_K 4
#define GATE_SHARE 0.8

static struct {
	struct event_base *base;
	struct evhttp_uri *uri;
	const char *host;
	int port;
	struct tls *tls;             /* https: else NULL */
	struct tls_cache *tls_cache; /* the session the connections resume */
	char hosthdr[300];
	char token[9];
	struct conn *conns;
	int nconns;
	long long issued, answered, created, st_other, st_error;
	long long st_429, st_429_retry; /* refused (overloaded); with a Retry-After */
	struct samples refused_lat;     /* time to a 429 */
	double start, post_end;
	bool posting_done;
	struct samples post_lat;
	/* closed loop, pace saga */
	struct inflight *inflight;
	int ninflight;
	PGconn *poll;
	struct event *poll_rd, *poll_timer;
	bool poll_busy;
	double poll_last;
	long long polls, polled_ids, finished;
	double seen[SEEN_N]; /* 201 to terminal, last SEEN_N sagas (ring) */
	int nseen;
	double gate; /* age from which a saga is due; 0 until SEEN_K are seen */
	struct event *tick, *progress_ev, *watchdog;
	double last_progress; /* a POST answered or a saga seen terminal */
} L;

static void post_one(struct conn *c, double t0);

static void slot_next(struct conn *c)
{
	if (L.posting_done)
		return;
	if ((S.count > 0 && L.issued >= S.count) ||
	    (S.duration > 0 && now_s() - L.start >= S.duration)) {
		L.posting_done = true;
		L.post_end = now_s();
		return;
	}
	post_one(c, now_s());
}

/* Posting is over once every POST has its answer; wait_terminal does the rest. */
static void maybe_finish(void)
{
	if (L.posting_done && L.issued == L.answered)
		event_base_loopexit(L.base, NULL);
}

/*
 * Once a second: end posting when the duration is up even if every slot
 * still waits for its saga, and give up when nothing moved for --wait
 * seconds (a saga that never ends would hold its slot forever).
 */
static void watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	double t = now_s();

	if (!L.posting_done && S.duration > 0 && t - L.start >= S.duration) {
		L.posting_done = true;
		L.post_end = t;
	}
	if (t - L.last_progress > S.wait_s) {
		fprintf(stderr, "saga-bench: nothing moved for %g s; giving up\n", S.wait_s);
		L.posting_done = true;
		event_base_loopexit(L.base, NULL);
	}
	maybe_finish();
}

static void poll_schedule(void);

static void seen_add(double d)
{
	double v[SEEN_N];
	int n;

	L.seen[L.nseen++ % SEEN_N] = d;
	n = L.nseen < SEEN_N ? L.nseen : SEEN_N;
	if (n < SEEN_K)
		return;
	memcpy(v, L.seen, (size_t)n * sizeof(double));
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	L.gate = GATE_SHARE * v[SEEN_K - 1];
}

static bool is_terminal(const char *state)
{
	return strcmp(state, "Completed") == 0 || strcmp(state, "Failed") == 0 ||
	       strcmp(state, "Compensated") == 0;
}

static void poll_read_cb(evutil_socket_t fd, short what, void *arg)
{
	PGresult *r;

	if (!PQconsumeInput(L.poll))
		die("poll connection: %s", PQerrorMessage(L.poll));
	if (PQisBusy(L.poll))
		return;
	while ((r = PQgetResult(L.poll))) {
		if (PQresultStatus(r) != PGRES_TUPLES_OK)
			die("poll failed: %s", PQresultErrorMessage(r));
		for (int i = 0; i < PQntuples(r); i++) {
			const char *id = PQgetvalue(r, i, 0);

			if (!is_terminal(PQgetvalue(r, i, 1)))
				continue;
			for (int j = 0; j < L.ninflight; j++) {
				if (strcmp(L.inflight[j].id, id) != 0)
					continue;
				int slot = L.inflight[j].slot;

				L.last_progress = now_s();
				seen_add(L.last_progress - L.inflight[j].since);
				L.inflight[j] = L.inflight[--L.ninflight];
				L.finished++;
				slot_next(&L.conns[slot]);
				break;
			}
		}
		PQclear(r);
	}
	event_del(L.poll_rd);
	L.poll_busy = false;
	poll_schedule();
	maybe_finish();
}

/* Asks about the due sagas; false (nothing sent) when none is. */
static bool poll_send_due(double t)
{
	size_t len = (size_t)L.ninflight * UUID_STR_LEN + 3;
	char *buf = malloc(len), *p = buf;
	double gate = L.gate;
	int n = 0;

	if (!buf)
		abort();
	*p++ = '{';
	for (int i = 0; i < L.ninflight; i++) {
		if (t - L.inflight[i].since < gate)
			continue;
		if (n++)
			*p++ = ',';
		memcpy(p, L.inflight[i].id, UUID_STR_LEN - 1);
		p += UUID_STR_LEN - 1;
	}
	*p++ = '}';
	*p = '\0';
	if (n == 0) {
		free(buf);
		return false;
	}
	const char *params[1] = { buf };
	if (!PQsendQueryPrepared(L.poll, "done", 1, params, NULL, NULL, 0))
		die("poll: %s", PQerrorMessage(L.poll));
	free(buf);
	L.poll_busy = true;
	L.poll_last = t;
	L.polls++;
	L.polled_ids += n;
	event_add(L.poll_rd, NULL);
	return true;
}

/*
 * The next poll: --poll-ms after the last one, and not before the oldest
 * saga in flight is due.
 */
static void poll_schedule(void)
{
	if (L.poll_busy || L.ninflight == 0 || evtimer_pending(L.poll_timer, NULL))
		return;
	double t = now_s(), oldest = t;

	for (int i = 0; i < L.ninflight; i++)
		if (L.inflight[i].since < oldest)
			oldest = L.inflight[i].since;
	double wait = fmax(L.poll_last + S.poll_ms / 1000.0, oldest + L.gate) - t;

	if (wait <= 0 && poll_send_due(t))
		return;
	if (wait <= 0) /* rounding: the oldest is due within a microsecond */
		wait = 1e-6;
	struct timeval tv = { (time_t)wait, (suseconds_t)((wait - floor(wait)) * 1e6) };
	evtimer_add(L.poll_timer, &tv);
}

static void poll_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	poll_schedule();
}

static void post_done(struct evhttp_request *req, void *arg)
{
	struct post *p = arg;
	struct conn *c = p->c;
	int code = req ? evhttp_request_get_response_code(req) : 0;
	char sid[UUID_STR_LEN] = "";

	L.answered++;
	L.last_progress = now_s();
	c->outstanding--;
	sample_add(&L.post_lat, (now_s() - p->t0) * 1000);
	if (code == 201) {
		struct evbuffer *in = evhttp_request_get_input_buffer(req);
		size_t len = evbuffer_get_length(in);
		const char *body = (const char *)evbuffer_pullup(in, -1), *id;
		char err[64];
		struct json_object *o = jsonx_parse(body ? body : "", body ? len : 0, err, sizeof(err));

		if (o && jsonx_get_uuid(o, "sagaId", &id) == 0)
			snprintf(sid, sizeof(sid), "%s", id);
		json_object_put(o);
		L.created++;
	} else if (code == 0) {
		L.st_error++;
	} else if (code == 429) {
		const char *ra = evhttp_find_header(evhttp_request_get_input_headers(req),
						    "Retry-After");

		L.st_429++;
		L.st_429_retry += ra && *ra && strspn(ra, "0123456789") == strlen(ra) && atoi(ra) >= 1;
		sample_add(&L.refused_lat, (now_s() - p->t0) * 1000);
	} else {
		L.st_other++;
	}
	free(p);
	if (c->slot >= 0) {
		if (sid[0] && !S.pace_post) {
			snprintf(L.inflight[L.ninflight].id, UUID_STR_LEN, "%s", sid);
			L.inflight[L.ninflight].slot = c->slot;
			L.inflight[L.ninflight].since = now_s();
			L.ninflight++;
			poll_schedule();
		} else {
			if (code != 201) /* do not spin on a failing server */
				usleep(10000);
			slot_next(c);
		}
	}
	maybe_finish();
}

static void post_one(struct conn *c, double t0)
{
	char body[320], key[96], path[96];
	uint64_t seq = (uint64_t)L.issued++;
	int cust = 1 + (int)(backoff_random() * S.customers),
	    item = 1 + (int)(backoff_random() * S.items);
	struct post *p = calloc(1, sizeof(*p));
	struct evhttp_request *req;
	struct evkeyvalq *h;

	if (!p)
		abort();
	p->c = c;
	p->t0 = t0;
	/* the run token keeps keys unique when runs share a --prefix */
	snprintf(key, sizeof(key), "%s-%s-%" PRIu64, S.prefix, L.token, seq);
	snprintf(body, sizeof(body),
		 "{\"customerId\":\"%s-c%05d\",\"itemId\":\"it-%0*d\",\"qty\":%d,\"amount\":%lld%s%s%s}",
		 S.prefix, cust, item_width, item, S.qty, S.amount,
		 S.saga ? ",\"address\":\"1 Bench Street, " : "", S.saga ? S.prefix : "",
		 S.saga ? "\"" : "");
	snprintf(path, sizeof(path), "%s%s", S.saga ? "/sagas/" : "/orders", S.saga ? S.saga : "");
	req = evhttp_request_new(post_done, p);
	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", L.hosthdr);
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_add_header(h, "Idempotency-Key", key);
	evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
	c->outstanding++;
	if (evhttp_make_request(c->evcon, req, EVHTTP_REQ_POST, path) != 0)
		die("cannot send a request to %s", S.url);
}

static struct conn *conn_add(int slot)
{
	struct conn *c = &L.conns[L.nconns++];

	if (L.tls) {
		/* one session cache for all: the connections after the first resume */
		struct bufferevent *bev = tls_connect_bev(L.tls, L.base, L.host, L.tls_cache);

		if (!bev)
			die("cannot create a TLS connection to %s", S.url);
		c->evcon = evhttp_connection_base_bufferevent_new(L.base, NULL, bev, L.host,
								  (unsigned short)L.port);
	} else {
		c->evcon = evhttp_connection_base_new(L.base, NULL, L.host, (unsigned short)L.port);
	}
	if (!c->evcon)
		die("cannot create a connection to %s", S.url);
	evhttp_connection_set_timeout(c->evcon, 60);
	c->slot = slot;
	return c;
}

/* Open loop: send what the schedule says is due by now, then sleep until the next. */
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	double t = now_s(), el = t - L.start;
	/* order k (from 0) is due at start + k / rate */
	long long due = (long long)(el * S.rate) + 1;

	if (S.duration > 0 && el >= S.duration)
		due = (long long)(S.duration * S.rate);
	if (S.count > 0 && due > S.count)
		due = S.count;
	while (L.issued < due) {
		/* intended time, so queueing shows in the latency (no coordinated omission) */
		double t0 = L.start + (double)L.issued / S.rate;
		struct conn *best = NULL;

		for (int i = 0; i < L.nconns; i++)
			if (!best || L.conns[i].outstanding < best->outstanding)
				best = &L.conns[i];
		if ((!best || best->outstanding > 0) && L.nconns < S.max_conns)
			best = conn_add(-1);
		post_one(best, t0);
	}
	if ((S.count > 0 && L.issued >= S.count) ||
	    (S.duration > 0 && el >= S.duration)) {
		L.posting_done = true;
		L.post_end = t;
		maybe_finish();
		return;
	}
	/* sleep until the next order is due (the base has a precise timer) */
	double next = L.start + (double)L.issued / S.rate - now_s();

	if (next < 0)
		next = 0;
	struct timeval tv = { (time_t)next, (suseconds_t)((next - floor(next)) * 1e6) };
	evtimer_add(L.tick, &tv);
}

static void bar(const char *what, double frac, const char *detail)
{
	char b[31];
	int n = (int)(frac * 30);

	if (n > 30)
		n = 30;
	if (n < 0)
		n = 0;
	memset(b, '#', (size_t)n);
	memset(b + n, '.', (size_t)(30 - n));
	b[30] = '\0';
	fprintf(stderr, "\r%-8s [%s] %3d%% %s\033[K", what, b, (int)(frac * 100), detail);
	fflush(stderr);
}

static void progress_cb(evutil_socket_t fd, short what, void *arg)
{
	double el = now_s() - L.start, frac;
	char d[160];

	if (S.count > 0)
		frac = (double)L.issued / (double)S.count;
	else
		frac = el / S.duration;
	snprintf(d, sizeof(d), "%.1fs posted %lld, created %lld, in flight %d", el, L.issued,
		 L.created, L.ninflight);
	bar("load", frac, d);
}

static void run_load(void)
{
	struct timeval prog = { 0, 200000 };
	struct event_config *cfg = event_config_new();

	/* timerfd: open-loop orders leave on time, not on the next millisecond */
	event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
	L.base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (!L.base)
		die("cannot create an event base");
	L.uri = evhttp_uri_parse(S.url);
	if (!L.uri || !evhttp_uri_get_host(L.uri))
		die("bad --url %s", S.url);
	L.host = evhttp_uri_get_host(L.uri);
	if (evhttp_uri_get_scheme(L.uri) && !strcmp(evhttp_uri_get_scheme(L.uri), "https")) {
		struct tls_files f = { .cert = S.cert, .key = S.key, .ca = S.cacert };
		char err[256];

		if (!(L.tls = tls_new(&f, err, sizeof(err))))
			die("%s", err);
		L.tls_cache = tls_cache_new();
	}
	L.port = evhttp_uri_get_port(L.uri) > 0 ? evhttp_uri_get_port(L.uri) : L.tls ? 443 : 80;
	snprintf(L.hosthdr, sizeof(L.hosthdr), "%s:%d", L.host, L.port);
	L.conns = calloc(MAX_SLOTS, sizeof(*L.conns));
	L.inflight = calloc(MAX_SLOTS, sizeof(*L.inflight));
	if (!L.conns || !L.inflight)
		abort();
	if (S.progress) {
		L.progress_ev = event_new(L.base, -1, EV_PERSIST, progress_cb, NULL);
		event_add(L.progress_ev, &prog);
	}
	{
		char u[UUID_STR_LEN];

		uuid_new(u);
		memcpy(L.token, u, 8);
	}
	L.start = L.last_progress = now_s();
	L.watchdog = event_new(L.base, -1, EV_PERSIST, watchdog_cb, NULL);
	{
		struct timeval sec = { 1, 0 };

		event_add(L.watchdog, &sec);
	}
	if (S.rate > 0) {
		L.tick = evtimer_new(L.base, tick_cb, NULL);
		tick_cb(-1, 0, NULL);
	} else {
		if (!S.pace_post) {
			L.poll = db_open(S.db_url);
			/*
			 * By primary key only, the state tested here: with a
			 * condition on state the planner, whose statistics lag a
			 * table growing by thousands of sagas a second, ANDed in
			 * a scan of the state index over every finished saga, a
			 * poll's cost growing with the table (0.35 ms at 5,700
			 * sagas against 0.12, a thousand polls a second).
			 *
			 * And never a sequential scan: the generic plan, made
			 * after five polls of a table that the warm-up left with
			 * a few hundred rows, scans it, and keeps scanning it
			 * while it grows (38 ms a poll of 128 sagas at 30,000
			 * rows against 0.3 by the key). At 128 in flight that
			 * backend took 23 % of the machine's CPU from the
			 * services measured.
			 */
			PQclear(db_exec(L.poll, "SET enable_seqscan = off", 0, NULL));
			PGresult *r = PQprepare(L.poll, "done",
						"SELECT saga_id::text, state FROM orchestrator.saga_instances"
						" WHERE saga_id = ANY($1::uuid[])",
						1, NULL);
			if (PQresultStatus(r) != PGRES_COMMAND_OK)
				die("prepare: %s", PQresultErrorMessage(r));
			PQclear(r);
			L.poll_rd = event_new(L.base, PQsocket(L.poll), EV_READ | EV_PERSIST,
					      poll_read_cb, NULL);
			L.poll_timer = evtimer_new(L.base, poll_timer_cb, NULL);
		}
		for (int i = 0; i < S.concurrency; i++)
			conn_add(i);
		for (int i = 0; i < S.concurrency; i++)
			slot_next(&L.conns[i]);
	}
	event_base_dispatch(L.base);
	if (S.progress) {
		progress_cb(-1, 0, NULL);
		fputc('\n', stderr);
	}
	if (!L.post_end)
		L.post_end = now_s();
	for (int i = 0; i < L.nconns; i++)
		evhttp_connection_free(L.conns[i].evcon);
	tls_cache_free(L.tls_cache); /* after the connections that fill it */
	tls_free(L.tls);
	if (L.poll) {
		event_free(L.poll_rd);
		event_free(L.poll_timer);
		PQfinish(L.poll);
	}
	if (L.tick)
		event_free(L.tick);
	if (L.progress_ev)
		event_free(L.progress_ev);
	event_free(L.watchdog);
	evhttp_uri_free(L.uri);
	event_base_free(L.base);
	free(L.inflight);
	free(L.conns);
}

/* --- summary ---------------------------------------------------------------- */

/* Waits until the run's sagas are terminal; returns how many are not. */
static long long wait_terminal(PGconn *c, const char *const *run, long long expect)
{
	double start = now_s();

	for (;;) {
		PGresult *r = db_exec(c,
				      "SELECT state, count(*) FROM orchestrator.saga_instances"
				      " WHERE " RUN_SAGAS("saga_instances")
				      " GROUP BY state",
				      2, run);
		long long done = 0, all = 0;
		char d[96];

		for (int i = 0; i < PQntuples(r); i++) {
			long long n = atoll(PQgetvalue(r, i, 1));

			all += n;
			if (is_terminal(PQgetvalue(r, i, 0)))
				done += n;
		}
		PQclear(r);
		if (S.progress) {
			snprintf(d, sizeof(d), "%lld/%lld terminal", done, all);
			bar("settle", all ? (double)done / (double)all : 1, d);
		}
		if (done == all && all >= expect)
			return 0;
		if (now_s() - start > S.wait_s) {
			fprintf(stderr, "saga-bench: %lld sagas still not terminal after %g s\n",
				all - done, S.wait_s);
			return all - done;
		}
		usleep(100000);
	}
}

static void add_pcts(struct json_object *o, struct samples *s, const double *ps, int n)
{
	char k[16];

	if (s->n)
		qsort(s->v, s->n, sizeof(double), cmp_double);
	for (int i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "p%g", ps[i]);
		json_object_object_add(o, k, num(pct(s, ps[i])));
	}
}

static struct json_object *summarise(PGconn *c, const char *const *run)
{
	struct json_object *out = json_object_new_object(), *o;
	struct samples e2e = { 0 };
	PGresult *r;
	static const double p_post[] = { 50, 99 }, p_e2e[] = { 50, 95, 99 };

	/* outcomes, throughput and end-to-end latency */
	r = db_exec(c,
		    "SELECT s.state, extract(epoch FROM h.at - s.created_at) * 1000,"
		    "       extract(epoch FROM max(h.at) OVER () - min(s.created_at) OVER ())"
		    "  FROM orchestrator.saga_instances s"
		    "  JOIN orchestrator.saga_history h ON h.saga_id = s.saga_id AND h.version = s.version"
		    " WHERE " RUN_SAGAS("s"),
		    2, run);
	struct json_object *outcomes = json_object_new_object();
	double span = 0, maxv = 0, sum = 0;
	long long terminal = 0;

	for (int i = 0; i < PQntuples(r); i++) {
		const char *st = PQgetvalue(r, i, 0);
		struct json_object *cnt;

		if (!json_object_object_get_ex(outcomes, st, &cnt)) {
			cnt = json_object_new_int64(0);
			json_object_object_add(outcomes, st, cnt);
		}
		json_object_set_int64(cnt, json_object_get_int64(cnt) + 1);
		span = atof(PQgetvalue(r, i, 2));
		if (is_terminal(st)) {
			double v = atof(PQgetvalue(r, i, 1));

			terminal++;
			sample_add(&e2e, v);
			sum += v;
			if (v > maxv)
				maxv = v;
		}
	}
	json_object_object_add(out, "sagas", json_object_new_int64(PQntuples(r)));
	json_object_object_add(out, "terminal", json_object_new_int64(terminal));
	json_object_object_add(out, "outcomes", outcomes);
	json_object_object_add(out, "span_s", num(span));
	json_object_object_add(out, "sagas_per_s", num(span > 0 ? (double)terminal / span : NAN));
	PQclear(r);
	o = json_object_new_object();
	add_pcts(o, &e2e, p_e2e, 3);
	json_object_object_add(o, "max", num(e2e.n ? maxv : NAN));
	json_object_object_add(o, "mean", num(e2e.n ? sum / (double)e2e.n : NAN));
	json_object_object_add(out, "e2e_ms", o);
	free(e2e.v);

	/* sagas compensated because a step's deadline passed */
	r = db_exec(c,
		    "SELECT count(*) FROM orchestrator.saga_history h"
		    "  JOIN orchestrator.saga_instances s ON s.saga_id = h.saga_id"
		    " WHERE h.cause = 'StepTimeout' AND " RUN_SAGAS("s"),
		    2, run);
	json_object_object_add(out, "step_timeouts", json_object_new_int64(atoll(PQgetvalue(r, 0, 0))));
	PQclear(r);

	if (L.issued > 0) {
		o = json_object_new_object();
		json_object_object_add(o, "sent", json_object_new_int64(L.issued));
		json_object_object_add(o, "created_201", json_object_new_int64(L.created));
		/* refused at the door (429 overloaded), apart from the other answers */
		json_object_object_add(o, "refused_429", json_object_new_int64(L.st_429));
		json_object_object_add(o, "refused_with_retry_after",
				       json_object_new_int64(L.st_429_retry));
		if (L.st_429) {
			struct json_object *ro = json_object_new_object();

			add_pcts(ro, &L.refused_lat, p_post, 2);
			json_object_object_add(o, "refused_ms", ro);
		}
		json_object_object_add(o, "other_status", json_object_new_int64(L.st_other));
		json_object_object_add(o, "failed", json_object_new_int64(L.st_error));
		json_object_object_add(o, "per_s",
				       num((double)L.answered / (L.post_end - L.start)));
		add_pcts(o, &L.post_lat, p_post, 2);
		if (L.polls) {
			json_object_object_add(o, "terminal_polls", json_object_new_int64(L.polls));
			json_object_object_add(o, "terminal_polled_ids",
					       json_object_new_int64(L.polled_ids));
			json_object_object_add(o, "terminal_poll_gate_ms", num(L.gate * 1000));
		}
		json_object_object_add(out, "post", o);
	}

	/* time spent in each state: from one history row to the next */
	r = db_exec(c,
		    "SELECT to_state, count(*), avg(d),"
		    "       percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
		    "       percentile_cont(0.99) WITHIN GROUP (ORDER BY d)"
		    "  FROM (SELECT h.to_state, extract(epoch FROM lead(h.at) OVER"
		    "               (PARTITION BY h.saga_id ORDER BY h.version) - h.at) * 1000 AS d"
		    "          FROM orchestrator.saga_history h"
		    "          JOIN orchestrator.saga_instances s ON s.saga_id = h.saga_id"
		    "         WHERE " RUN_SAGAS("s") ") x"
		    " WHERE d IS NOT NULL GROUP BY to_state ORDER BY to_state",
		    2, run);
	o = json_object_new_object();
	for (int i = 0; i < PQntuples(r); i++) {
		struct json_object *st = json_object_new_object();

		json_object_object_add(st, "n", json_object_new_int64(atoll(PQgetvalue(r, i, 1))));
		json_object_object_add(st, "mean", num(atof(PQgetvalue(r, i, 2))));
		json_object_object_add(st, "p50", num(atof(PQgetvalue(r, i, 3))));
		json_object_object_add(st, "p99", num(atof(PQgetvalue(r, i, 4))));
		json_object_object_add(o, PQgetvalue(r, i, 0), st);
	}
	json_object_object_add(out, "state_ms", o);
	PQclear(r);

	if (S.no_wake)
		return out;
	/* wake-up: see the comment at the top */
	r = db_exec(c, "SELECT current_setting('track_commit_timestamp')::bool", 0, NULL);
	bool ts = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	char sql[4096], lease[16];
	const char *commit_h = ts ? "pg_xact_commit_timestamp(h.xmin)" : "h.at",
		   *commit_p = ts ? "pg_xact_commit_timestamp(p.xmin)" : "p.created_at",
		   *commit_r = ts ? "pg_xact_commit_timestamp(r.xmin)" : "r.created_at";
	snprintf(sql, sizeof(sql),
		 "WITH s AS (SELECT saga_id FROM orchestrator.saga_instances"
		 "            WHERE " RUN_SAGAS("saga_instances") "),"
		 " m AS ("
		 "  SELECT o.type AS kind, %s AS c, o.next_attempt_at - $3::int * interval '1 ms' AS cl,"
		 "         coalesce(p.created_at, r.created_at) AS rx"
		 "    FROM orchestrator.outbox_messages o"
		 "    JOIN s ON s.saga_id = (o.payload->>'sagaId')::uuid"
		 "    JOIN orchestrator.saga_history h ON h.saga_id = s.saga_id"
		 "     AND h.version = CASE o.type WHEN 'PayCommand' THEN 1 ELSE 2 END"
		 "    LEFT JOIN payment.payments p ON o.type = 'PayCommand' AND p.saga_id = s.saga_id"
		 "    LEFT JOIN inventory.reservations r"
		 "           ON o.type = 'ReserveInventoryCommand' AND r.saga_id = s.saga_id"
		 "   WHERE o.type IN ('PayCommand', 'ReserveInventoryCommand')"
		 "     AND o.processed_at IS NOT NULL AND o.attempt_count = 0"
		 "  UNION ALL"
		 "  SELECT h.cause, %s, o.next_attempt_at - $3::int * interval '1 ms', h.at"
		 "    FROM orchestrator.saga_history h JOIN s ON s.saga_id = h.saga_id"
		 "    JOIN payment.outbox_messages o ON o.message_id = h.message_id"
		 "    JOIN payment.payments p ON p.saga_id = h.saga_id"
		 "   WHERE h.cause = 'PaymentSucceeded' AND o.attempt_count = 0"
		 "  UNION ALL"
		 "  SELECT h.cause, %s, o.next_attempt_at - $3::int * interval '1 ms', h.at"
		 "    FROM orchestrator.saga_history h JOIN s ON s.saga_id = h.saga_id"
		 "    JOIN inventory.outbox_messages o ON o.message_id = h.message_id"
		 "    JOIN inventory.reservations r ON r.saga_id = h.saga_id"
		 "   WHERE h.cause = 'InventoryReserved' AND o.attempt_count = 0)"
		 "SELECT kind, count(*),"
		 "  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM rx - c)) * 1000,"
		 "  percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM rx - c)) * 1000,"
		 "  count(*) FILTER (WHERE cl > c),"
		 "  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM cl - c))"
		 "    FILTER (WHERE cl > c) * 1000,"
		 "  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM rx - cl))"
		 "    FILTER (WHERE cl > c) * 1000"
		 "  FROM m WHERE rx IS NOT NULL GROUP BY kind ORDER BY min(rx - c) IS NULL, kind",
		 commit_h, commit_p, commit_r);
	snprintf(lease, sizeof(lease), "%d", S.lease_ms);
	const char *wp[3] = { run[0], run[1], lease };
	r = db_exec(c, sql, 3, wp);
	o = json_object_new_object();
	json_object_object_add(o, "commit_from",
			       json_object_new_string(ts ? "commit_timestamp" : "writer_txn_start"));
	for (int i = 0; i < PQntuples(r); i++) {
		struct json_object *k = json_object_new_object();

		json_object_object_add(k, "n", json_object_new_int64(atoll(PQgetvalue(r, i, 1))));
		json_object_object_add(k, "commit_to_handler_p50", num(atof(PQgetvalue(r, i, 2))));
		json_object_object_add(k, "commit_to_handler_p99", num(atof(PQgetvalue(r, i, 3))));
		/* rows a dispatcher claimed after their commit (else born claimed) */
		json_object_object_add(k, "claimed", json_object_new_int64(atoll(PQgetvalue(r, i, 4))));
		json_object_object_add(k, "commit_to_claim_p50",
				       PQgetisnull(r, i, 5) ? NULL : num(atof(PQgetvalue(r, i, 5))));
		json_object_object_add(k, "claim_to_handler_p50",
				       PQgetisnull(r, i, 6) ? NULL : num(atof(PQgetvalue(r, i, 6))));
		json_object_object_add(o, PQgetvalue(r, i, 0), k);
	}
	json_object_object_add(out, "wake_ms", o);
	PQclear(r);
	return out;
}

/* --- main ------------------------------------------------------------------- */

static void parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ "db-url", required_argument, NULL, 'd' },
		{ "cacert", required_argument, NULL, 'K' },
		{ "cert", required_argument, NULL, 'E' },
		{ "key", required_argument, NULL, 'Y' },
		{ "admin-url", required_argument, NULL, 'A' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "rate", required_argument, NULL, 'R' },
		{ "count", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'T' },
		{ "customers", required_argument, NULL, 'C' },
		{ "items", required_argument, NULL, 'I' },
		{ "qty", required_argument, NULL, 'q' },
		{ "amount", required_argument, NULL, 'a' },
		{ "pace", required_argument, NULL, 'p' },
		{ "poll-ms", required_argument, NULL, 'P' },
		{ "max-conns", required_argument, NULL, 'M' },
		{ "prefix", required_argument, NULL, 'x' },
		{ "saga", required_argument, NULL, 'g' },
		{ "wait", required_argument, NULL, 'w' },
		{ "lease-ms", required_argument, NULL, 'l' },
		{ "analyze", required_argument, NULL, 'z' },
		{ "since", required_argument, NULL, 's' },
		{ "quiet", no_argument, NULL, 'Q' },
		{ "no-wake", no_argument, NULL, 'W' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	S.db_url = getenv("SAGA_BENCH_DB_URL");
	while ((ch = getopt_long(argc, argv, "c:R:n:T:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'u': S.url = optarg; break;
		case 'd': S.db_url = optarg; break;
		case 'K': S.cacert = optarg; break;
		case 'E': S.cert = optarg; break;
		case 'Y': S.key = optarg; break;
		case 'A': S.admin_url = optarg; break;
		case 'c': S.concurrency = atoi(optarg); break;
		case 'R': S.rate = atof(optarg); break;
		case 'n': S.count = atoll(optarg); break;
		case 'T': S.duration = atof(optarg); break;
		case 'C': S.customers = atoi(optarg); break;
		case 'I': S.items = atoi(optarg); break;
		case 'q': S.qty = atoi(optarg); break;
		case 'a': S.amount = atoll(optarg); break;
		case 'p':
			if (strcmp(optarg, "post") && strcmp(optarg, "saga"))
				die("--pace is saga or post");
			S.pace_post = strcmp(optarg, "post") == 0;
			break;
		case 'P': S.poll_ms = atof(optarg); break;
		case 'M': S.max_conns = atoi(optarg); break;
		case 'x': S.prefix = optarg; break;
		case 'g': S.saga = optarg; break;
		case 'w': S.wait_s = atof(optarg); break;
		case 'l': S.lease_ms = atoi(optarg); break;
		case 'z': S.analyze = optarg; break;
		case 's': S.since = optarg; break;
		case 'Q': S.quiet = true; break;
		case 'W': S.no_wake = true; break;
		case 'h': usage(stdout); exit(0);
		case 'V': version_print(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc)
		die("unexpected argument %s (see --help)", argv[optind]);
	if (!S.db_url)
		die("--db-url (saga_auditor) is required");
	if (S.analyze)
		return;
	if ((S.concurrency > 0) == (S.rate > 0))
		die("give one of --concurrency N or --rate R");
	if ((S.count > 0) == (S.duration > 0))
		die("give one of --count N or --duration S");
	if (S.concurrency > MAX_SLOTS)
		die("--concurrency is at most %d", MAX_SLOTS);
	if (S.max_conns < 1 || S.max_conns > MAX_SLOTS)
		die("--max-conns is 1..%d", MAX_SLOTS);
	if (S.customers < 1 || S.customers > 99999 || S.items < 1 || S.items > 99999999)
		die("--customers is 1..99999, --items 1..99999999");
	if (S.qty < 1 || S.qty > 1000 || S.amount < 1)
		die("--qty is 1..1000, --amount at least 1");
	if (S.prefix && (strlen(S.prefix) > 40 || strspn(S.prefix, "abcdefghijklmnopqrstuvwxyz"
							 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
							 strlen(S.prefix)))
		die("--prefix: at most 40 of [A-Za-z0-9-]");
	if (S.saga && (strlen(S.saga) < 1 || strlen(S.saga) > 63 ||
		       strspn(S.saga, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(S.saga)))
		die("--saga: a definition's name, 1 to 63 of [a-z0-9_-]");
}

int main(int argc, char **argv)
{
	char prefix[16], since[64];
	struct json_object *out;
	PGconn *c;

	signal(SIGPIPE, SIG_IGN);
	parse_args(argc, argv);
	S.progress = !S.quiet && isatty(2);
	if (!S.prefix && !S.analyze) {
		char u[UUID_STR_LEN];

		uuid_new(u);
		snprintf(prefix, sizeof(prefix), "b%.8s", u);
		S.prefix = prefix;
	}
	c = db_open(S.db_url);
	if (S.analyze) {
		S.prefix = S.analyze;
		snprintf(since, sizeof(since), "%s", S.since ? S.since : "-infinity");
	} else {
		for (item_width = 4; S.items > 9999 && item_width < 8; item_width++)
			if (S.items < (int)pow(10, item_width))
				break;
		if (S.admin_url)
			seed_stock();
		/* the server's clock: created_at of every saga of the run is later */
		PGresult *r = db_exec(c, "SELECT now()::text", 0, NULL);
		snprintf(since, sizeof(since), "%s", PQgetvalue(r, 0, 0));
		PQclear(r);
		run_load();
	}
	const char *run[2] = { since, S.prefix };
	long long stuck = wait_terminal(c, run, L.created);

	if (S.progress)
		fputc('\n', stderr);
	out = summarise(c, run);
	json_object_object_add(out, "prefix", json_object_new_string(S.prefix));
	json_object_object_add(out, "since", json_object_new_string(since));
	if (!S.analyze) {
		json_object_object_add(out, "mode",
				       json_object_new_string(S.rate > 0 ? "open" : "closed"));
		if (S.rate > 0)
			json_object_object_add(out, "rate", num(S.rate));
		else
			json_object_object_add(out, "concurrency",
					       json_object_new_int(S.concurrency));
		json_object_object_add(out, "pace", json_object_new_string(
			S.rate > 0 ? "open" : S.pace_post ? "post" : "saga"));
	}
	json_object_object_add(out, "not_terminal", json_object_new_int64(stuck));
	{
		/* the load generator's own share of the machine */
		struct rusage ru;

		getrusage(RUSAGE_SELF, &ru);
		json_object_object_add(out, "client_cpu_s",
				       num((double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
					   (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6));
	}
	puts(json_object_to_json_string_ext(out, JSON_C_TO_STRING_PRETTY |
							 JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(out);
	PQfinish(c);
	free(L.post_lat.v);
	free(L.refused_lat.v);
	return stuck ? 1 : 0;
}
