/* app: see app.h. */
#include "app.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "admin_api.h"
#include "admin_auth.h"
#include "backoff.h"
#include "db.h"
#include "httpc.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"
#include "tls.h"
#include "transport.h"
#include "uuid.h"

#define DRAIN_LIMIT_MS 10000

static void healthz(struct evhttp_request *req, void *svc, const char *tail)
{
	httpd_reply(req, 200, "{\"status\":\"alive\"}");
}

static void readyz(struct evhttp_request *req, void *svc, const char *tail)
{
	struct app *app = svc;

	const char *broker = app->transport->ops->broker_state(app->transport);
	char body[64];

	if (!db_pool_ready(app->pool) || app->stopping) {
		httpd_unavailable(req);
		return;
	}
	if (!broker) {
		httpd_reply(req, 200, "{\"status\":\"ready\"}");
		return;
	}
	/* the broker's state is reported, not required: orders wait in the outbox */
	snprintf(body, sizeof(body), "{\"status\":\"ready\",\"broker\":\"%s\"}", broker);
	httpd_reply(req, 200, body);
}

static void metrics(struct evhttp_request *req, void *svc, const char *tail)
{
	struct evbuffer *b = evbuffer_new();

	if (!b)
		abort();
	metrics_render(b);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; version=0.0.4");
	/* httpd_reply_buf would set a JSON content type: answer directly */
	httpd_reply_buf(req, 200, b);
	evbuffer_free(b);
}

static void admin_faults(struct evhttp_request *req, void *svc, const char *tail);

static const struct httpd_route common_routes[] = {
	{ "GET", "/healthz", false, healthz, "/healthz" },
	{ "GET", "/readyz", false, readyz, "/readyz" },
	{ "GET", "/metrics", false, metrics, "/metrics" },
};
static const struct httpd_route fault_route = { "POST", "/admin/faults", true, admin_faults,
						"/admin/faults" };

/* Reads a number in [0, max] from obj[key] if present. */
static int read_number(struct json_object *obj, const char *key, double max, double *out)
{
	struct json_object *v;

	if (!json_object_object_get_ex(obj, key, &v))
		return 0;
	if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
		return -1;
	double d = json_object_get_double(v);
	if (!(d >= 0 && d <= max))
		return -1;
	*out = d;
	return 0;
}

static void admin_faults(struct evhttp_request *req, void *svc, const char *tail)
{
	struct app *app = svc;
	size_t len;
	const char *body = httpd_body(req, &len);
	char err[128], out[160];
	struct json_object *obj = jsonx_parse(body, len, err, sizeof(err));
	double fail = app->fail_rate, drop = app->drop_rate, delay = (double)app->delay_ms;

	if (!obj) {
		httpd_error(req, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		httpd_error(req, 400, "invalid_json", "expected an object");
		return;
	}
	const char *bad = read_number(obj, "failRate", 1, &fail) ? "failRate"
			  : read_number(obj, "dropResponseRate", 1, &drop) ? "dropResponseRate"
			  : read_number(obj, "delayMs", 600000, &delay) ? "delayMs"
									: NULL;
	json_object_put(obj);
	if (bad) {
		httpd_error(req, 400, "invalid_field", "%s: out of range or not a number", bad);
		return;
	}
	app->fail_rate = fail;
	app->drop_rate = drop;
	app->delay_ms = (int64_t)delay;
	log_warn("faults set: failRate %g, delayMs %lld, dropResponseRate %g", fail,
		 (long long)app->delay_ms, drop);
	snprintf(out, sizeof(out), "{\"failRate\":%g,\"delayMs\":%lld,\"dropResponseRate\":%g}",
		 fail, (long long)app->delay_ms, drop);
	httpd_reply(req, 200, out);
}

struct delayed {
	struct inmsg m;
	struct app *app;
	app_next_fn next;
	char tail[128];
};

static void delayed_cb(evutil_socket_t fd, short what, void *arg)
{
	struct delayed *d = arg;

	d->next(d->m, d->app, d->tail);
	free(d);
}

bool app_fault_gate(struct app *app, struct inmsg m, const char *tail, app_next_fn next)
{
	if (app->fail_rate > 0 && backoff_random() < app->fail_rate) {
		inmsg_error(m, 500, "injected_fault", "fault injection: failRate");
		return true;
	}
	if (app->delay_ms > 0) {
		struct delayed *d = calloc(1, sizeof(*d));
		struct timeval tv = { (time_t)(app->delay_ms / 1000),
				      (suseconds_t)(app->delay_ms % 1000) * 1000 };

		if (!d)
			abort();
		d->m = m;
		d->app = app;
		d->next = next;
		snprintf(d->tail, sizeof(d->tail), "%s", tail);
		if (event_base_once(app->base, -1, EV_TIMEOUT, delayed_cb, d, &tv) != 0)
			abort();
		return true;
	}
	return false;
}

void app_reply(struct app *app, struct inmsg m, int status, const char *json)
{
	if (app->drop_rate > 0 && status < 300 && backoff_random() < app->drop_rate) {
		inmsg_drop(m);
		return;
	}
	inmsg_reply(m, status, json);
}

void app_db_error(struct evhttp_request *req, const struct db_error *err, const char *what)
{
	app_msg_db_error(inmsg_http(req), err, what);
}

void app_msg_db_error(struct inmsg m, const struct db_error *err, const char *what)
{
	if (err->status == DB_UNAVAILABLE) {
		inmsg_unavailable(m);
		return;
	}
	log_error("%s: database error %s: %s", what, err->sqlstate, err->message);
	inmsg_error(m, 500, "internal", "database error %s", err->sqlstate);
}

static double gauge_pool_busy(void *arg)
{
	return db_pool_busy(arg);
}

static double gauge_pool_waiting(void *arg)
{
	return db_pool_waiting(arg);
}

/* The settings every service reads, bound to app's fields. */
static size_t common_vars(struct app *app, struct envcfg_var *v)
{
	size_t n = 0;

#define VAR(...) (v[n++] = (struct envcfg_var){ __VA_ARGS__ })
	VAR("DATABASE_URL", ENVCFG_STRING, &app->database_url, NULL, 0, 0,
	    "libpq connection string or URI; connect as this service's role", false, true);
	VAR("LISTEN_ADDR", ENVCFG_STRING, &app->listen_addr, app->spec->default_addr, 0, 0,
	    "host:port of the HTTP server");
	VAR("INTERNAL_TOKEN", ENVCFG_STRING, &app->token, NULL, 0, 0,
	    "shared secret for internal endpoints (Authorization: Bearer)", true, true);
	VAR("ADMIN_TOKEN", ENVCFG_STRING, &app->admin_token, "", 0, 0,
	    "secret for the admin API and console (16 characters or more, else a warning); "
	    "unset: both off", false, true);
	VAR("DISPATCH_BATCH", ENVCFG_INT, &app->batch, "64", 1, 1000, "outbox rows claimed per round");
	VAR("RETRY_MAX_ATTEMPTS", ENVCFG_INT, &app->retry_max, "10", 1, 1000000,
	    "delivery attempts before a message is a dead letter");
	VAR("RETRY_BASE_MS", ENVCFG_INT, &app->retry_base_ms, "200", 1, 3600000,
	    "first retry delay (exponential backoff, full jitter)");
	VAR("RETRY_CAP_MS", ENVCFG_INT, &app->retry_cap_ms, "30000", 1, 86400000,
	    "largest retry delay");
	VAR("HTTP_TIMEOUT_MS", ENVCFG_INT, &app->http_timeout_ms, "5000", 1, 600000,
	    "one delivery attempt's timeout");
	VAR("LEASE_MS", ENVCFG_INT, &app->lease_ms, "30000", 100, 86400000,
	    "how long a claimed outbox row stays claimed");
	VAR("MARK_WINDOW_MS", ENVCFG_INT, &app->mark_window_ms, "50", 1, 3600000,
	    "how long a delivery mark waits for the marks that follow");
	VAR("BREAKER_FAILURES", ENVCFG_INT, &app->breaker_failures, "5", 1, 1000000,
	    "consecutive failures that open a peer's circuit");
	VAR("BREAKER_OPEN_MS", ENVCFG_INT, &app->breaker_open_ms, "5000", 1, 86400000,
	    "how long an open circuit waits before one probe");
	VAR("DB_POOL_SIZE", ENVCFG_INT, &app->pool_size, "8", 1, 100,
	    "database connections of the pool");
	VAR("DB_WRITERS", ENVCFG_INT, &app->db_writers, "2", 1, 100,
	    "pool connections that run the service's writes at once; writes that wait commit together");
	VAR("RETENTION_S", ENVCFG_INT, &app->retention_s, "604800", 1, 315360000,
	    "processed outbox rows and inbox rows older than this are deleted");
	VAR("TRANSPORT", ENVCFG_STRING, &app->transport_name, "http", 0, 0,
	    "how messages travel: http or amqp (all services alike)");
	VAR("AMQP_URL", ENVCFG_STRING, &app->amqp_url, "amqp://guest:guest@127.0.0.1:5672/%2f", 0,
	    0, "the broker, amqp://user:password@host:port/vhost (TRANSPORT=amqp)", false, true);
	VAR("AMQP_PREFETCH", ENVCFG_INT, &app->amqp_prefetch, "64", 1, 65535,
	    "unacknowledged deliveries held at once (TRANSPORT=amqp)");
	VAR("TLS_CERT_FILE", ENVCFG_STRING, &app->tls_cert_file, "", 0, 0,
	    "PEM certificate chain: with TLS_KEY_FILE the listener is HTTPS only, and it is "
	    "the client certificate toward https:// peers");
	VAR("TLS_KEY_FILE", ENVCFG_STRING, &app->tls_key_file, "", 0, 0,
	    "PEM private key of TLS_CERT_FILE");
	VAR("TLS_CA_FILE", ENVCFG_STRING, &app->tls_ca_file, "", 0, 0,
	    "PEM bundle that verifies https:// peers and amqps:// brokers; unset: the "
	    "system's trust store");
	VAR("TLS_CLIENT_CA_FILE", ENVCFG_STRING, &app->tls_client_ca_file, "", 0, 0,
	    "PEM bundle that verifies client certificates; set: internal endpoints need one "
	    "(403 client_certificate_required)");
	VAR("LOG_LEVEL", ENVCFG_STRING, &app->log_level, "info", 0, 0,
	    "debug, info, warn or error");
	if (app->spec->faults) {
		VAR("FAULT_FAIL_RATE", ENVCFG_RATE, &app->fail_rate, "0", 0, 0,
		    "share of commands answered 500 before any work");
		VAR("FAULT_DELAY_MS", ENVCFG_INT, &app->delay_ms, "0", 0, 600000,
		    "delay before handling each command");
		VAR("FAULT_DROP_RESPONSE_RATE", ENVCFG_RATE, &app->drop_rate, "0", 0, 0,
		    "share of commands whose effect commits but whose answer is dropped");
	}
#undef VAR
	return n;
}

/* Applies migrations, waiting for the database to come up first. */
static int migrate(struct app *app)
{
	char err[1024];

	for (int tries = 0;; tries++) {
		PGPing ping = PQping(app->database_url);

		if (ping == PQPING_OK)
			break;
		if (ping == PQPING_NO_ATTEMPT) {
			fprintf(stderr, "saga-%s: DATABASE_URL is not a valid connection string\n",
				app->spec->service);
			return -1;
		}
		if (tries % 10 == 0)
			log_warn("database not reachable yet; retrying");
		usleep(500 * 1000);
	}
	int n = migrate_apply(app->database_url, app->spec->service, app->spec->migrations,
			      app->spec->nmigrations, err, sizeof(err));
	if (n < 0) {
		log_error("migrations failed: %s", err);
		return -1;
	}
	if (n > 0)
		log_info("applied %d migration(s)", n);
	return 0;
}

static int open_peers(struct app *app, char *err, size_t errlen)
{
	struct httpc_opts o = {
		.max_in_flight = 32,
		.timeout_ms = (int)app->http_timeout_ms,
		.breaker_failures = (int)app->breaker_failures,
		.breaker_open_ms = (int)app->breaker_open_ms,
		.tls = app->tls,
	};

	app->peers = calloc(app->spec->npeers + 1, sizeof(*app->peers));
	app->dests = calloc(app->spec->npeers + 1, sizeof(*app->dests));
	if (!app->peers || !app->dests)
		abort();
	for (size_t i = 0; i < app->spec->npeers; i++) {
		const struct app_peer_spec *ps = &app->spec->peers[i];
		const char *urls = getenv(ps->env);

		if (!urls || !*urls)
			urls = ps->def;
		app->peers[i] = httpc_peer_new(app->base, ps->destination, urls, &o, err, errlen);
		if (!app->peers[i])
			return -1;
		app->dests[i] = ps->destination;
	}
	return 0;
}

static void on_signal(evutil_socket_t sig, short what, void *arg);

/*
 * SIGHUP: certificate rotation. The files are read on the loop (a few
 * small files); connections already open keep their contexts.
 */
static void on_hup(evutil_socket_t sig, short what, void *arg)
{
	struct app *app = arg;
	char err[512];

	if (tls_reload(app->tls, err, sizeof(err)) != 0) {
		log_error("SIGHUP: TLS files not reloaded, the old ones stay in use: %s", err);
		return;
	}
	log_info("SIGHUP: TLS files reloaded");
}

/*
 * Empty means unset; a set one must differ from INTERNAL_TOKEN. SPEC sets no
 * minimum length, so a short one only earns a warning: refusing it stopped
 * every service over a test setup's "admin".
 */
static int check_admin_token(struct app *app)
{
	if (app->admin_token && !*app->admin_token)
		app->admin_token = NULL;
	if (!app->admin_token)
		return 0;
	if (strcmp(app->admin_token, app->token) == 0) {
		fprintf(stderr, "saga-%s: ADMIN_TOKEN must differ from INTERNAL_TOKEN\n",
			app->spec->service);
		return -1;
	}
	if (strlen(app->admin_token) < ADMIN_TOKEN_SHORT)
		log_warn("short admin token: easy to guess (ADMIN_TOKEN has %zu characters; "
			 "use %d or more)", strlen(app->admin_token), ADMIN_TOKEN_SHORT);
	return 0;
}

/* The service's routes, the common ones, and the admin API's. */
static size_t all_routes(struct app *app)
{
	const struct httpd_route *admin, *api;
	const struct admin_spec *as = app->spec->admin;
	size_t nadmin = admin_routes(&admin), napi = admin_api_routes(&api);
	size_t n = app->spec->nroutes + sizeof(common_routes) / sizeof(common_routes[0]) + 1 +
		   nadmin + napi + (as ? as->nroutes : 0);

	app->all_routes = calloc(n, sizeof(*app->all_routes));
	if (!app->all_routes)
		abort();
	n = 0;
	for (size_t i = 0; i < app->spec->nroutes; i++)
		app->all_routes[n++] = app->spec->routes[i];
	for (size_t i = 0; i < sizeof(common_routes) / sizeof(common_routes[0]); i++)
		app->all_routes[n++] = common_routes[i];
	if (app->spec->faults)
		app->all_routes[n++] = fault_route;
	for (size_t i = 0; i < nadmin; i++)
		app->all_routes[n++] = admin[i];
	/* the service's own first: /admin/api/sagas/ is more specific there */
	for (size_t i = 0; as && i < as->nroutes; i++)
		app->all_routes[n++] = as->routes[i];
	for (size_t i = 0; i < napi; i++)
		app->all_routes[n++] = api[i];
	return n;
}

/*
 * With the epoll change list, interest changed and changed back within one
 * loop turn (evhttp disables reading while it writes an answer, then enables
 * it again) costs no epoll_ctl at all: the orchestrator makes about 10 of
 * its 64 system calls per saga fewer. Its known pitfall, a descriptor
 * dup()ed into another watched one, does not arise here: every socket is
 * watched once.
 */
static struct event_base *new_base(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base;

	if (!cfg)
		return NULL;
	event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return base;
}

static void broker_up(void *arg)
{
	struct app *app = arg;

	/* rows that failed while it was away go now, not at their next sweep */
	if (app->outbox)
		outbox_kick(app->outbox);
}

/* --- refused deliveries (AMQP) ------------------------------------------- */

/* SQL: sql/common/008_refused_deliveries.sql */
static const char refused_sql[] = "SELECT outbox_refused($1::uuid, $2, $3, $4, $5, $6)";

struct refusal {
	void (*done)(void *tok, bool retry);
	void *tok;
};

static void refusal_written(void *arg, PGresult *res, const struct db_error *err)
{
	struct refusal *f = arg;
	bool retry = err->status != DB_OK && err->status != DB_SQL_ERROR;

	if (err->status == DB_SQL_ERROR)
		log_error("keeping a refused message failed: %s", err->message);
	f->done(f->tok, retry);
	free(f);
}

/*
 * Over HTTP a message the receiver refuses for good is the sender's dead
 * letter, which the admin API and the console list and retry. Over AMQP the
 * sender's row was delivered (the broker confirmed it) and the refusal
 * lands in pgsaga.dead, out of their sight; so the receiver keeps it as a
 * dead letter of its own outbox, addressed to itself: listed like the
 * others, and retried by publishing it to its own queue again.
 */
static void keep_refused(void *arg, const struct transport_refusal *r,
			 void (*done)(void *tok, bool retry), void *tok)
{
	struct app *app = arg;
	struct refusal *f = malloc(sizeof(*f));
	size_t tl = strlen(r->type);
	char why[400], placeholder[80];
	const char *body = r->body;

	if (!f)
		abort();
	*f = (struct refusal){ done, tok };
	/* a text parameter holds neither a NUL nor invalid UTF-8 */
	if (memchr(r->body, '\0', r->len) || !jsonx_utf8_valid(r->body, r->len)) {
		snprintf(placeholder, sizeof(placeholder), "(%zu bytes, not UTF-8 text)", r->len);
		body = placeholder;
	}
	snprintf(why, sizeof(why), "refused by %s: %d %s", app->spec->service, r->status, r->why);
	const char *params[6] = {
		uuid_valid(r->id) ? r->id : NULL,
		tl > 7 && strcmp(r->type + tl - 7, "Command") == 0 ? "command" : "event",
		app->spec->service,
		r->type[0] ? r->type : "(none)",
		body,
		why,
	};
	db_query(app->pool, refused_sql, 6, params, refusal_written, f);
}

static int open_transport(struct app *app, char *err, size_t errlen)
{
	if (strcmp(app->transport_name, "http") == 0) {
		app->transport =
			transport_http_new(app->dests, app->peers, app->spec->npeers, app->token);
		return app->transport ? 0 : -1;
	}
	if (strcmp(app->transport_name, "amqp") != 0) {
		snprintf(err, errlen, "TRANSPORT: expected http or amqp, got '%s'",
			 app->transport_name);
		return -1;
	}
	struct transport_amqp_opts o = {
		.url = app->amqp_url,
		.service = app->spec->service,
		.dests = app->dests,
		.ndests = app->spec->npeers,
		.prefetch = (int)app->amqp_prefetch,
		.tls_ca = app->tls_ca_file,
		.tls_cert = app->tls_cert_file,
		.tls_key = app->tls_key_file,
		.breaker_failures = (int)app->breaker_failures,
		.breaker_open_ms = (int)app->breaker_open_ms,
		.retry_base_ms = (int)app->retry_base_ms,
		.retry_cap_ms = (int)app->retry_cap_ms,
		.consume = app->spec->consume,
		.on_up = broker_up,
		.refused = keep_refused,
		.arg = app,
	};
	app->transport = transport_amqp_new(app->base, &o, err, errlen);
	return app->transport ? 0 : -1;
}

int app_init(struct app *app, const struct app_spec *spec, int argc, char **argv, bool *done)
{
	struct envcfg_var vars[64];
	char err[512], host[256];
	size_t n;
	int port;
	enum log_level lvl;

	memset(app, 0, sizeof(*app));
	app->spec = spec;
	*done = false;
	n = common_vars(app, vars);
	for (size_t i = 0; i < spec->nvars && n < 56; i++)
		vars[n++] = spec->vars[i];
	for (size_t i = 0; i < spec->npeers; i++)
		vars[n++] = (struct envcfg_var){ spec->peers[i].env, ENVCFG_STRING, NULL,
						 spec->peers[i].def, 0, 0,
						 "peer base URL(s), comma-separated" };
	log_set_service(spec->service);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			envcfg_help(stdout, argv[0], spec->about, vars, n);
			*done = true;
			return 0;
		}
		fprintf(stderr, "%s: unknown argument '%s' (try --help)\n", argv[0], argv[i]);
		return 2;
	}
	/* the peers' URLs are read when opening them; skip them here */
	if (envcfg_load(vars, n - spec->npeers, err, sizeof(err)) != 0) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 2;
	}
	if (log_parse_level(app->log_level, &lvl) != 0) {
		fprintf(stderr, "saga-%s: LOG_LEVEL: expected debug, info, warn or error\n",
			spec->service);
		return 2;
	}
	log_min_level = lvl;
	if (check_admin_token(app) != 0)
		return 2;
	if (strcmp(app->transport_name, "http") != 0 && strcmp(app->transport_name, "amqp") != 0) {
		fprintf(stderr, "saga-%s: TRANSPORT: expected http or amqp, got '%s'\n",
			spec->service, app->transport_name);
		return 2;
	}
	if (envcfg_parse_addr(app->listen_addr, host, sizeof(host), &port) != 0) {
		fprintf(stderr, "saga-%s: LISTEN_ADDR: expected host:port, got '%s'\n",
			spec->service, app->listen_addr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (migrate(app) != 0)
		return 1;

	app->base = new_base();
	if (!app->base)
		return 1;
	app->pool = db_pool_new(app->base, app->database_url, spec->service, (int)app->pool_size);
	if (!app->pool)
		return 1;
	db_pool_set_writers(app->pool, (int)app->db_writers);
	metrics_gauge_fn("saga_db_pool_in_use", "Pool connections running a statement", "",
			 gauge_pool_busy, app->pool);
	metrics_gauge_fn("saga_db_pool_waiting", "Statements waiting for a pool connection", "",
			 gauge_pool_waiting, app->pool);
	struct tls_files tf = { app->tls_cert_file, app->tls_key_file, app->tls_ca_file,
				app->tls_client_ca_file };
	app->tls = tls_new(&tf, err, sizeof(err));
	if (!app->tls) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 2;
	}
	if (open_peers(app, err, sizeof(err)) != 0) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 2;
	}
	if (open_transport(app, err, sizeof(err)) != 0) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 2;
	}
	struct outbox_opts oo = {
		.schema = spec->service,
		.conninfo = app->database_url,
		.batch = (int)app->batch,
		.max_attempts = (int)app->retry_max,
		.base_ms = (int)app->retry_base_ms,
		.cap_ms = (int)app->retry_cap_ms,
		.lease_ms = (int)app->lease_ms,
		.sweep_ms = 1000,
		.retention_s = (int)app->retention_s,
		.mark_window_ms = (int)app->mark_window_ms,
	};
	app->outbox = outbox_new(app->base, app->pool, &oo, app->transport);
	if (!app->outbox)
		return 1;

	n = all_routes(app);
	app->httpd = httpd_new(app->base, host, port, app->all_routes, n, app->token, app, err,
			       sizeof(err));
	if (!app->httpd) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 1;
	}
	httpd_set_tls(app->httpd, app->tls);
	if (app->admin_token)
		admin_enable(app);
	app->sig_term = evsignal_new(app->base, SIGTERM, on_signal, app);
	app->sig_int = evsignal_new(app->base, SIGINT, on_signal, app);
	app->sig_hup = evsignal_new(app->base, SIGHUP, on_hup, app);
	evsignal_add(app->sig_term, NULL);
	evsignal_add(app->sig_int, NULL);
	evsignal_add(app->sig_hup, NULL);
	log_info("listening on %s:%d (%s)", host, httpd_port(app->httpd),
		 tls_server_on(app->tls) ? tls_client_certs_on(app->tls)
						   ? "https, client certificates checked"
						   : "https"
					 : "http");
	return 0;
}

/* Exits the loop once nothing is in flight, or after DRAIN_LIMIT_MS. */
static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct app *app = arg;
	static int waited_ms;
	struct timeval tv = { 0, 20 * 1000 };

	if ((httpd_in_flight(app->httpd) == 0 && outbox_idle(app->outbox) &&
	     app->transport->ops->idle(app->transport) &&
	     db_pool_busy(app->pool) == 0 && db_pool_waiting(app->pool) == 0) ||
	    waited_ms >= DRAIN_LIMIT_MS) {
		if (waited_ms >= DRAIN_LIMIT_MS)
			log_warn("shutdown: gave up waiting for work in flight");
		event_base_loopexit(app->base, NULL);
		return;
	}
	waited_ms += 20;
	evtimer_add(app->drain, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct app *app = arg;

	if (app->stopping)
		return;
	log_info("signal %d: draining", (int)sig);
	app->stopping = true;
	httpd_stop_accepting(app->httpd);
	outbox_stop(app->outbox);
	app->transport->ops->stop(app->transport);
	app->drain = evtimer_new(app->base, drain_cb, app);
	drain_cb(-1, 0, app);
}

int app_run(struct app *app)
{
	event_base_dispatch(app->base);
	log_info("stopped");
	return 0;
}

void app_free(struct app *app)
{
	if (app->drain)
		event_free(app->drain);
	if (app->sig_term)
		event_free(app->sig_term);
	if (app->sig_int)
		event_free(app->sig_int);
	if (app->sig_hup)
		event_free(app->sig_hup);
	httpd_free(app->httpd);
	admin_disable();
	outbox_free(app->outbox);
	if (app->transport)
		app->transport->ops->free(app->transport);
	for (size_t i = 0; app->peers && i < app->spec->npeers; i++)
		httpc_peer_free(app->peers[i]);
	free(app->peers);
	free(app->dests);
	db_pool_free(app->pool);
	if (app->base)
		event_base_free(app->base);
	tls_free(app->tls); /* after the connections, freed with the base */
	free(app->all_routes);
	metrics_free_all();
	envcfg_release();
}
