/*
 * service: what the three services share around their own routes and SQL:
 * settings, logging, migrations, the event base, the database pool, the
 * peers, the outbox dispatcher, the HTTP server with /healthz, /readyz and
 * /metrics, fault injection, and graceful shutdown on SIGTERM/SIGINT.
 */
#ifndef PGSAGA_SERVICE_H
#define PGSAGA_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envcfg.h"
#include "httpd.h"
#include "migrate.h"
#include "transport.h"

struct event_base;
struct evhttp_request;

struct admin_spec;

struct service_peer_spec {
	const char *destination; /* outbox destination, e.g. "payment" */
	const char *env;         /* e.g. "PAYMENT_URL" */
	const char *def;         /* default URL */
};

struct service_spec {
	const char *service; /* schema, role suffix and log name: "payment" */
	const char *about;   /* one line for --help */
	const char *default_addr;
	const struct migration *migrations;
	size_t nmigrations;
	const struct envcfg_var *vars; /* the service's own settings */
	size_t nvars;
	const struct httpd_route *routes; /* the service's own routes */
	size_t nroutes;
	const struct service_peer_spec *peers;
	size_t npeers;
	bool faults; /* FAULT_* settings and POST /admin/faults */
	const struct admin_spec *admin; /* the service's admin API part (admin_api.h) */
	inmsg_fn consume; /* messages from the broker (TRANSPORT=amqp) */
};

struct service {
	const struct service_spec *spec;
	struct event_base *base;
	struct db_pool *pool;
	struct outbox *outbox;
	struct httpd *httpd;
	struct httpc_peer **peers;
	const char **dests;        /* peers[i] serves dests[i] */
	const char **urls;         /* at urls[i] (comma-separated) */
	struct transport *transport;
	struct tls *tls; /* HTTPS server and client contexts (tls.h), reloaded on SIGHUP */

	/* common settings */
	const char *database_url;
	const char *listen_addr;
	const char *token;
	const char *admin_token; /* ADMIN_TOKEN; NULL when unset: admin API off */
	const char *log_level;
	const char *transport_name, *amqp_url;
	/* TLS_CERT_FILE, TLS_KEY_FILE, TLS_CA_FILE, TLS_CLIENT_CA_FILE; "" when unset */
	const char *tls_cert_file, *tls_key_file, *tls_ca_file, *tls_client_ca_file;
	int64_t amqp_prefetch, amqp_confirm_timeout_ms;
	int64_t batch, retry_max, retry_base_ms, retry_cap_ms, http_timeout_ms, lease_ms;
	int64_t breaker_failures, breaker_open_ms, pool_size, db_writers, retention_s,
		mark_window_ms;
	/* faults (payment, inventory) */
	double fail_rate, drop_rate;
	int64_t delay_ms;

	bool stopping;
	struct event *sig_term, *sig_int, *sig_hup, *drain;
	struct httpd_route *all_routes;
};

/*
 * Parses argv (--help) and the environment, applies migrations, opens the
 * pool, peers, dispatcher and HTTP server. Returns 0, or prints why to
 * stderr and returns an exit code (0 after --help).
 */
__attribute__((warn_unused_result)) int service_init(struct service *service, const struct service_spec *spec,
						 int argc, char **argv, bool *done);

/*
 * Runs the loop until SIGTERM or SIGINT, then drains; returns the exit
 * status. SIGHUP re-reads the TLS files (tls_reload).
 */
int service_run(struct service *service);
void service_free(struct service *service);

/*
 * Fault injection gate for an internal command handler, called first after
 * the token check (over HTTP) or on delivery (over AMQP). Returns true when
 * it took over the message: answered 500 (fail rate) or arranged for
 * next(m, service, tail) to be called after the delay. Returns false when the
 * handler should go on at once.
 */
typedef void (*service_next_fn)(struct inmsg m, struct service *service, const char *tail);
bool service_fault_gate(struct service *service, struct inmsg m, const char *tail, service_next_fn next);

/*
 * Answers, unless the drop-response fault fires: then the answer is lost
 * (HTTP: the connection is closed; AMQP: not acknowledged, so redelivered)
 * although the effect has committed.
 */
void service_reply(struct service *service, struct inmsg m, int status, const char *json);

/* --- the parts (health.c, faults.c) ---------------------------------------- */

/* GET /healthz, /readyz and /metrics (static; the route's svc is the service). */
size_t service_health_routes(const struct httpd_route **out);

/* POST /admin/faults (internal token), on a service with spec->faults. */
extern const struct httpd_route service_fault_route;

#endif
