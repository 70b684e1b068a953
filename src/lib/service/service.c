/* service: see service.h. */
#include "service.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin_gate.h"
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
#include "version.h"
#include "transport_amqp.h"
#include "uuid.h"

#define DRAIN_LIMIT_MS 10000

static double gauge_pool_busy(void *arg)
{
	return db_pool_busy(arg);
}

static double gauge_pool_waiting(void *arg)
{
	return db_pool_waiting(arg);
}

/* The settings every service reads, bound to service's fields. */
static size_t common_vars(struct service *service, struct envcfg_var *v)
{
	size_t n = 0;

#define VAR(...) (v[n++] = (struct envcfg_var){ __VA_ARGS__ })
	VAR("DATABASE_URL", ENVCFG_STRING, &service->database_url, NULL, 0, 0,
	    "libpq connection string or URI; connect as this service's role (TCP keepalives and"
	    " tcp_user_timeout=10000 are added unless it sets them)", false, true);
	VAR("LISTEN_ADDR", ENVCFG_STRING, &service->listen_addr, service->spec->default_addr, 0, 0,
	    "host:port of the HTTP server");
	VAR("INTERNAL_TOKEN", ENVCFG_STRING, &service->token, NULL, 0, 0,
	    "shared secret for internal endpoints (Authorization: Bearer)", true, true);
	VAR("ADMIN_TOKEN", ENVCFG_STRING, &service->admin_token, "", 0, 0,
	    "secret for the admin API and console (16 characters or more, else a warning); "
	    "unset: both off", false, true);
	VAR("DISPATCH_BATCH", ENVCFG_INT, &service->batch, "64", 1, 1000, "outbox rows claimed per round");
	VAR("RETRY_MAX_ATTEMPTS", ENVCFG_INT, &service->retry_max, "10", 1, 1000000,
	    "delivery attempts before a message is a dead letter");
	VAR("RETRY_BASE_MS", ENVCFG_INT, &service->retry_base_ms, "200", 1, 3600000,
	    "first retry delay (exponential backoff, full jitter)");
	VAR("RETRY_CAP_MS", ENVCFG_INT, &service->retry_cap_ms, "30000", 1, 86400000,
	    "largest retry delay");
	VAR("HTTP_TIMEOUT_MS", ENVCFG_INT, &service->http_timeout_ms, "5000", 1, 600000,
	    "one delivery attempt's timeout");
	VAR("LEASE_MS", ENVCFG_INT, &service->lease_ms, "30000", 100, 86400000,
	    "how long a claimed outbox row stays claimed");
	VAR("MARK_WINDOW_MS", ENVCFG_INT, &service->mark_window_ms, "50", 1, 3600000,
	    "how long a delivery mark waits for the marks that follow");
	VAR("BREAKER_FAILURES", ENVCFG_INT, &service->breaker_failures, "5", 1, 1000000,
	    "consecutive failures that open a peer's circuit");
	VAR("BREAKER_OPEN_MS", ENVCFG_INT, &service->breaker_open_ms, "5000", 1, 86400000,
	    "how long an open circuit waits before one probe");
	VAR("DB_POOL_SIZE", ENVCFG_INT, &service->pool_size, "8", 1, 100,
	    "database connections of the pool");
	VAR("DB_WRITERS", ENVCFG_INT, &service->db_writers, "2", 1, 100,
	    "pool connections that run the service's writes at once; writes that wait commit together");
	VAR("RETENTION_S", ENVCFG_INT, &service->retention_s, "604800", 1, 315360000,
	    "processed outbox rows and inbox rows older than this are deleted");
	VAR("TRANSPORT", ENVCFG_STRING, &service->transport_name, "http", 0, 0,
	    "how messages travel: http or amqp (all services alike)");
	VAR("AMQP_URL", ENVCFG_STRING, &service->amqp_url, "amqp://guest:guest@127.0.0.1:5672/%2f", 0,
	    0, "the broker, amqp://user:password@host:port/vhost, or the nodes of one cluster"
	    " separated by commas (TRANSPORT=amqp)", false, true);
	VAR("AMQP_PREFETCH", ENVCFG_INT, &service->amqp_prefetch, "64", 1, 65535,
	    "unacknowledged deliveries held at once (TRANSPORT=amqp)");
	VAR("AMQP_CONFIRM_TIMEOUT_MS", ENVCFG_INT, &service->amqp_confirm_timeout_ms, "15000", 100,
	    600000, "a publish the broker has not confirmed by then is a failed attempt "
	    "(TRANSPORT=amqp)");
	VAR("TLS_CERT_FILE", ENVCFG_STRING, &service->tls_cert_file, "", 0, 0,
	    "PEM certificate chain: with TLS_KEY_FILE the listener is HTTPS only, and it is "
	    "the client certificate toward https:// peers and amqps:// brokers");
	VAR("TLS_KEY_FILE", ENVCFG_STRING, &service->tls_key_file, "", 0, 0,
	    "PEM private key of TLS_CERT_FILE");
	VAR("TLS_CA_FILE", ENVCFG_STRING, &service->tls_ca_file, "", 0, 0,
	    "PEM bundle that verifies https:// peers and amqps:// brokers; unset: the "
	    "system's trust store");
	VAR("TLS_CLIENT_CA_FILE", ENVCFG_STRING, &service->tls_client_ca_file, "", 0, 0,
	    "PEM bundle that verifies client certificates; set: internal endpoints need one "
	    "(403 client_certificate_required)");
	VAR("LOG_LEVEL", ENVCFG_STRING, &service->log_level, "info", 0, 0,
	    "debug, info, warn or error");
	if (service->spec->faults) {
		VAR("FAULT_FAIL_RATE", ENVCFG_RATE, &service->fail_rate, "0", 0, 0,
		    "share of commands answered 500 before any work");
		VAR("FAULT_DELAY_MS", ENVCFG_INT, &service->delay_ms, "0", 0, 600000,
		    "delay before handling each command");
		VAR("FAULT_DROP_RESPONSE_RATE", ENVCFG_RATE, &service->drop_rate, "0", 0, 0,
		    "share of commands whose effect commits but whose answer is dropped");
	}
#undef VAR
	return n;
}

/* Applies migrations, waiting for the database to come up first. */
static int migrate(struct service *service)
{
	char err[1024];

	for (int tries = 0;; tries++) {
		PGPing ping = PQping(service->database_url);

		if (ping == PQPING_OK)
			break;
		if (ping == PQPING_NO_ATTEMPT) {
			fprintf(stderr, "saga-%s: DATABASE_URL is not a valid connection string\n",
				service->spec->service);
			return -1;
		}
		if (tries % 10 == 0)
			log_warn("database not reachable yet; retrying");
		usleep(500 * 1000);
	}
	int n = migrate_apply(service->database_url, service->spec->service, service->spec->migrations,
			      service->spec->nmigrations, err, sizeof(err));
	if (n < 0) {
		log_error("migrations failed: %s", err);
		return -1;
	}
	if (n > 0)
		log_info("applied %d migration(s)", n);
	return 0;
}

/* How every peer is opened, the spec's and those added at run time alike. */
static struct httpc_opts peer_opts(const struct service *service)
{
	return (struct httpc_opts){
		.max_in_flight = 32,
		.timeout_ms = (int)service->http_timeout_ms,
		.breaker_failures = (int)service->breaker_failures,
		.breaker_open_ms = (int)service->breaker_open_ms,
		.tls = service->tls,
	};
}

static int open_peers(struct service *service, char *err, size_t errlen)
{
	struct httpc_opts o = peer_opts(service);

	service->peers = calloc(service->spec->npeers + 1, sizeof(*service->peers));
	service->dests = calloc(service->spec->npeers + 1, sizeof(*service->dests));
	service->urls = calloc(service->spec->npeers + 1, sizeof(*service->urls));
	if (!service->peers || !service->dests || !service->urls)
		abort();
	for (size_t i = 0; i < service->spec->npeers; i++) {
		const struct service_peer_spec *ps = &service->spec->peers[i];
		const char *urls = getenv(ps->env);

		if (!urls || !*urls)
			urls = ps->def;
		service->peers[i] = httpc_peer_new(service->base, ps->destination, urls, &o, err, errlen);
		if (!service->peers[i])
			return -1;
		service->dests[i] = ps->destination;
		service->urls[i] = urls;
	}
	return 0;
}

/* --- destinations added at run time ---------------------------------------- */

/*
 * One of service_destination_add's, allocated on its own: its name is
 * borrowed by its peer (logs, metrics) and must not move.
 */
struct service_dest {
	char name[64];
	struct httpc_peer *peer; /* NULL: none (amqp, or no URL) */
};

bool service_destination_variable(const char *participant, char *out, size_t outlen)
{
	size_t n = strlen(participant);

	if (n + sizeof("_URL") > outlen)
		return false;
	for (size_t i = 0; i < n; i++)
		out[i] = participant[i] == '-' ? '_' : (char)toupper((unsigned char)participant[i]);
	memcpy(out + n, "_URL", sizeof("_URL"));
	return true;
}

/* A participant's name: 1-63 characters of [a-z0-9_-]. */
static bool destination_name_ok(const char *p)
{
	size_t n = strlen(p);

	if (n < 1 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '_' ||
		      p[i] == '-'))
			return false;
	return true;
}

static bool destination_known(const struct service *service, const char *name)
{
	for (size_t i = 0; i < service->spec->npeers; i++)
		if (strcmp(service->spec->peers[i].destination, name) == 0)
			return true;
	for (size_t i = 0; i < service->nadded; i++)
		if (strcmp(service->added[i]->name, name) == 0)
			return true;
	return false;
}

static struct service_dest *destination_new(struct service *service, const char *name)
{
	struct service_dest *d = calloc(1, sizeof(*d));

	if (!d)
		abort();
	if (service->nadded == service->added_cap) {
		service->added_cap = service->added_cap ? 2 * service->added_cap : 8;
		service->added = realloc(service->added, service->added_cap * sizeof(*service->added));
		if (!service->added)
			abort();
	}
	snprintf(d->name, sizeof(d->name), "%s", name);
	service->added[service->nadded++] = d;
	return d;
}

int service_destination_add(struct service *service, const char *participant, char *err,
			    size_t errlen)
{
	struct httpc_opts o = peer_opts(service);
	struct service_dest *d;
	char var[80], why[600];
	const char *urls;

	if (!participant || !destination_name_ok(participant)) {
		snprintf(err, errlen, "participant '%s': expected 1-63 characters of [a-z0-9_-]",
			 participant ? participant : "(null)");
		return -1;
	}
	if (destination_known(service, participant))
		return 0;
	d = destination_new(service, participant);
	if (!service_destination_variable(participant, var, sizeof(var)))
		abort(); /* 63 characters and "_URL" fit */
	/* as the spec's peers: read when opened, not a setting of the table */
	urls = getenv(var);
	/* the admin API asks it over HTTP whatever the transport; destinations
	 * come with the definitions, after service_init has opened the admin API */
	if (urls && *urls)
		admin_api_add_peer(d->name, urls);
	if (strcmp(service->transport_name, "amqp") == 0) {
		transport_amqp_add_dest(service->transport, d->name);
		log_info("destination %s: queue pgsaga.%s", d->name, d->name);
		return 0;
	}
	if (!urls || !*urls) {
		snprintf(why, sizeof(why), "%s is not set", var);
		log_warn("destination %s: %s; its messages are dead letters", d->name, why);
		transport_http_add(service->transport, d->name, NULL, why);
		return 0;
	}
	d->peer = httpc_peer_new(service->base, d->name, urls, &o, why, sizeof(why));
	if (!d->peer) {
		snprintf(err, errlen, "%s: %s", var, why);
		log_error("destination %s: %s; its messages are dead letters", d->name, err);
		transport_http_add(service->transport, d->name, NULL, err);
		return -1;
	}
	transport_http_add(service->transport, d->name, d->peer, NULL);
	log_info("destination %s: %s", d->name, urls);
	return 0;
}

static void on_signal(evutil_socket_t sig, short what, void *arg);

/*
 * SIGHUP: certificate rotation. The files are read on the loop (a few
 * small files); connections already open keep their contexts.
 */
static void on_hup(evutil_socket_t sig, short what, void *arg)
{
	struct service *service = arg;
	char err[512];

	/* the broker link reads its own on its thread, and logs for itself */
	if (service->transport->ops->reload_tls)
		service->transport->ops->reload_tls(service->transport);
	if (tls_reload(service->tls, err, sizeof(err)) != 0) {
		log_error("SIGHUP: TLS files not reloaded, the old ones stay in use: %s", err);
		return;
	}
	log_info("SIGHUP: TLS files reloaded");
}

/*
 * Empty means unset; a set one must differ from INTERNAL_TOKEN. No minimum
 * length is promised, so a short one only earns a warning: refusing it stopped
 * every service over a test setup's "admin".
 */
static int check_admin_token(struct service *service)
{
	if (service->admin_token && !*service->admin_token)
		service->admin_token = NULL;
	if (!service->admin_token)
		return 0;
	if (strcmp(service->admin_token, service->token) == 0) {
		fprintf(stderr, "saga-%s: ADMIN_TOKEN must differ from INTERNAL_TOKEN\n",
			service->spec->service);
		return -1;
	}
	if (strlen(service->admin_token) < ADMIN_TOKEN_SHORT)
		log_warn("short admin token: easy to guess (ADMIN_TOKEN has %zu characters; "
			 "use %d or more)", strlen(service->admin_token), ADMIN_TOKEN_SHORT);
	return 0;
}

/* The service's routes, the common ones, and the admin API's. */
static size_t all_routes(struct service *service)
{
	const struct httpd_route *health, *admin, *api;
	const struct admin_spec *as = service->spec->admin;
	size_t nhealth = service_health_routes(&health), nadmin = admin_routes(&admin),
	       napi = admin_api_routes(&api);
	size_t n = service->spec->nroutes + nhealth + 1 + nadmin + napi + (as ? as->nroutes : 0);

	service->all_routes = calloc(n, sizeof(*service->all_routes));
	if (!service->all_routes)
		abort();
	n = 0;
	for (size_t i = 0; i < service->spec->nroutes; i++)
		service->all_routes[n++] = service->spec->routes[i];
	for (size_t i = 0; i < nhealth; i++)
		service->all_routes[n++] = health[i];
	if (service->spec->faults)
		service->all_routes[n++] = service_fault_route;
	for (size_t i = 0; i < nadmin; i++)
		service->all_routes[n++] = admin[i];
	/* the service's own first: /admin/api/sagas/ is more specific there */
	for (size_t i = 0; as && i < as->nroutes; i++)
		service->all_routes[n++] = as->routes[i];
	for (size_t i = 0; i < napi; i++)
		service->all_routes[n++] = api[i];
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
	struct service *service = arg;

	/* rows that failed while it was away go now, not at their next sweep */
	if (service->outbox)
		outbox_kick(service->outbox);
}

/* --- refused deliveries (AMQP) ------------------------------------------- */

/* SQL: outbox_refused in sql/common/002_outbox_functions.sql */
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
	struct service *service = arg;
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
	snprintf(why, sizeof(why), "refused by %s: %d %s", service->spec->service, r->status, r->why);
	const char *params[6] = {
		uuid_valid(r->id) ? r->id : NULL,
		tl > 7 && strcmp(r->type + tl - 7, "Command") == 0 ? "command" : "event",
		service->spec->service,
		r->type[0] ? r->type : "(none)",
		body,
		why,
	};
	db_query(service->pool, refused_sql, 6, params, refusal_written, f);
}

static int open_transport(struct service *service, char *err, size_t errlen)
{
	if (strcmp(service->transport_name, "http") == 0) {
		service->transport =
			transport_http_new(service->dests, service->peers, service->spec->npeers, service->token);
		return service->transport ? 0 : -1;
	}
	if (strcmp(service->transport_name, "amqp") != 0) {
		snprintf(err, errlen, "TRANSPORT: expected http or amqp, got '%s'",
			 service->transport_name);
		return -1;
	}
	struct transport_amqp_opts o = {
		.url = service->amqp_url,
		.service = service->spec->service,
		.dests = service->dests,
		.ndests = service->spec->npeers,
		.prefetch = (int)service->amqp_prefetch,
		.confirm_timeout_ms = (int)service->amqp_confirm_timeout_ms,
		.tls_ca = service->tls_ca_file,
		.tls_cert = service->tls_cert_file,
		.tls_key = service->tls_key_file,
		.breaker_failures = (int)service->breaker_failures,
		.breaker_open_ms = (int)service->breaker_open_ms,
		.retry_base_ms = (int)service->retry_base_ms,
		.retry_cap_ms = (int)service->retry_cap_ms,
		.consume = service->spec->consume,
		.on_up = broker_up,
		.refused = keep_refused,
		.arg = service,
	};
	service->transport = transport_amqp_new(service->base, &o, err, errlen);
	return service->transport ? 0 : -1;
}

int service_init(struct service *service, const struct service_spec *spec, int argc, char **argv, bool *done)
{
	struct envcfg_var vars[64];
	char err[512], host[256];
	size_t n;
	int port;
	enum log_level lvl;

	memset(service, 0, sizeof(*service));
	service->spec = spec;
	*done = false;
	n = common_vars(service, vars);
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
			if (spec->participants)
				fputs("\nAny other participant's base URL(s), comma-separated, come from"
				      " <NAME>_URL:\nits name upper-cased, - as _ (SHIPPING_URL for"
				      " shipping), read when a saga\ndefinition first names it; unset,"
				      " commands to it are dead letters whose\nlast_error names the"
				      " variable (TRANSPORT=http).\n",
				      stdout);
			*done = true;
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			version_print(stdout);
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
	if (log_parse_level(service->log_level, &lvl) != 0) {
		fprintf(stderr, "saga-%s: LOG_LEVEL: expected debug, info, warn or error\n",
			spec->service);
		return 2;
	}
	log_min_level = lvl;
	if (check_admin_token(service) != 0)
		return 2;
	if (strcmp(service->transport_name, "http") != 0 && strcmp(service->transport_name, "amqp") != 0) {
		fprintf(stderr, "saga-%s: TRANSPORT: expected http or amqp, got '%s'\n",
			spec->service, service->transport_name);
		return 2;
	}
	if (envcfg_parse_addr(service->listen_addr, host, sizeof(host), &port) != 0) {
		fprintf(stderr, "saga-%s: LISTEN_ADDR: expected host:port, got '%s'\n",
			spec->service, service->listen_addr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (migrate(service) != 0)
		return 1;

	service->base = new_base();
	if (!service->base)
		return 1;
	service->pool = db_pool_new(service->base, service->database_url, spec->service, (int)service->pool_size);
	if (!service->pool)
		return 1;
	db_pool_set_writers(service->pool, (int)service->db_writers);
	snprintf(err, sizeof(err), "version=\"%s\",commit=\"%s\"", pgsaga_version,
		 pgsaga_commit);
	metric_set(metrics_series(metrics_family("saga_build_info",
						 "The running build: version and commit, always 1",
						 METRIC_GAUGE),
				  err),
		   1);
	metrics_gauge_fn("saga_db_pool_in_use", "Pool connections running a statement", "",
			 gauge_pool_busy, service->pool);
	metrics_gauge_fn("saga_db_pool_waiting", "Statements waiting for a pool connection", "",
			 gauge_pool_waiting, service->pool);
	struct tls_files tf = { service->tls_cert_file, service->tls_key_file,
				service->tls_ca_file, service->tls_client_ca_file };
	service->tls = tls_new(&tf, err, sizeof(err));
	if (!service->tls) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 2;
	}
	if (open_peers(service, err, sizeof(err)) != 0) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 2;
	}
	if (open_transport(service, err, sizeof(err)) != 0) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 2;
	}
	struct outbox_opts oo = {
		.schema = spec->service,
		.conninfo = service->database_url,
		.batch = (int)service->batch,
		.max_attempts = (int)service->retry_max,
		.base_ms = (int)service->retry_base_ms,
		.cap_ms = (int)service->retry_cap_ms,
		.lease_ms = (int)service->lease_ms,
		.sweep_ms = 1000,
		.retention_s = (int)service->retention_s,
		.mark_window_ms = (int)service->mark_window_ms,
	};
	service->outbox = outbox_new(service->base, service->pool, &oo, service->transport);
	if (!service->outbox)
		return 1;

	n = all_routes(service);
	service->httpd = httpd_new(service->base, host, port, service->all_routes, n, service->token, service, err,
			       sizeof(err));
	if (!service->httpd) {
		fprintf(stderr, "saga-%s: %s\n", spec->service, err);
		return 1;
	}
	httpd_set_tls(service->httpd, service->tls);
	if (service->admin_token) {
		struct admin_ctx ac = {
			.service = spec->service,
			.token = service->admin_token,
			.spec = spec->admin,
			.base = service->base,
			.httpd = service->httpd,
			.pool = service->pool,
			.outbox = service->outbox,
			.transport = service->transport,
			.peer_names = service->dests,
			.peer_urls = service->urls,
			.npeers = spec->npeers,
			.http_timeout_ms = (int)service->http_timeout_ms,
			.tls = service->tls,
		};
		admin_enable(&ac);
	}
	service->sig_term = evsignal_new(service->base, SIGTERM, on_signal, service);
	service->sig_int = evsignal_new(service->base, SIGINT, on_signal, service);
	service->sig_hup = evsignal_new(service->base, SIGHUP, on_hup, service);
	evsignal_add(service->sig_term, NULL);
	evsignal_add(service->sig_int, NULL);
	evsignal_add(service->sig_hup, NULL);
	log_info("listening on %s:%d (%s)", host, httpd_port(service->httpd),
		 tls_server_on(service->tls) ? tls_client_certs_on(service->tls)
						       ? "https, client certificates checked"
						       : "https"
					     : "http");
	return 0;
}

/* Exits the loop once nothing is in flight, or after DRAIN_LIMIT_MS. */
static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct service *service = arg;
	static int waited_ms;
	struct timeval tv = { 0, 20 * 1000 };

	if ((httpd_in_flight(service->httpd) == 0 && outbox_idle(service->outbox) &&
	     service->transport->ops->idle(service->transport) &&
	     db_pool_busy(service->pool) == 0 && db_pool_waiting(service->pool) == 0) ||
	    waited_ms >= DRAIN_LIMIT_MS) {
		if (waited_ms >= DRAIN_LIMIT_MS)
			log_warn("shutdown: gave up waiting for work in flight");
		event_base_loopexit(service->base, NULL);
		return;
	}
	waited_ms += 20;
	evtimer_add(service->drain, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct service *service = arg;

	if (service->stopping)
		return;
	log_info("signal %d: draining", (int)sig);
	service->stopping = true;
	httpd_stop_accepting(service->httpd);
	outbox_stop(service->outbox);
	service->transport->ops->stop(service->transport);
	service->drain = evtimer_new(service->base, drain_cb, service);
	drain_cb(-1, 0, service);
}

int service_run(struct service *service)
{
	event_base_dispatch(service->base);
	log_info("stopped");
	return 0;
}

void service_free(struct service *service)
{
	if (service->drain)
		event_free(service->drain);
	if (service->sig_term)
		event_free(service->sig_term);
	if (service->sig_int)
		event_free(service->sig_int);
	if (service->sig_hup)
		event_free(service->sig_hup);
	httpd_free(service->httpd);
	admin_disable();
	outbox_free(service->outbox);
	if (service->transport)
		service->transport->ops->free(service->transport);
	for (size_t i = 0; service->peers && i < service->spec->npeers; i++)
		httpc_peer_free(service->peers[i]);
	for (size_t i = 0; i < service->nadded; i++) {
		httpc_peer_free(service->added[i]->peer);
		free(service->added[i]);
	}
	free(service->added);
	free(service->peers);
	free(service->dests);
	free(service->urls);
	db_pool_free(service->pool);
	if (service->base)
		event_base_free(service->base);
	tls_free(service->tls); /* after the connections, freed with the base */
	free(service->all_routes);
	metrics_free_all();
	envcfg_release();
}
