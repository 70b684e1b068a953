/*
 * app: what the three services share around their own routes and SQL:
 * settings, logging, migrations, the event base, the database pool, the
 * peers, the outbox dispatcher, the HTTP server with /healthz, /readyz and
 * /metrics, fault injection, and graceful shutdown on SIGTERM/SIGINT.
 */
#ifndef PGSAGA_APP_H
#define PGSAGA_APP_H

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

struct app_peer_spec {
	const char *destination; /* outbox destination, e.g. "payment" */
	const char *env;         /* e.g. "PAYMENT_URL" */
	const char *def;         /* default URL */
};

struct app_spec {
	const char *service; /* schema, role suffix and log name: "payment" */
	const char *about;   /* one line for --help */
	const char *default_addr;
	const struct migration *migrations;
	size_t nmigrations;
	const struct envcfg_var *vars; /* the service's own settings */
	size_t nvars;
	const struct httpd_route *routes; /* the service's own routes */
	size_t nroutes;
	const struct app_peer_spec *peers;
	size_t npeers;
	bool faults; /* FAULT_* settings and POST /admin/faults */
	const struct admin_spec *admin; /* the service's admin API part (admin_api.h) */
	inmsg_fn consume; /* messages from the broker (TRANSPORT=amqp) */
};

struct app {
	const struct app_spec *spec;
	struct event_base *base;
	struct db_pool *pool;
	struct outbox *outbox;
	struct httpd *httpd;
	struct httpc_peer **peers;
	const char **dests;        /* peers[i] serves dests[i] */
	struct transport *transport;
	struct tls *tls; /* HTTPS server and client contexts (tls.h), reloaded on SIGHUP */
	void *svc; /* the service's own state */

	/* common settings */
	const char *database_url;
	const char *listen_addr;
	const char *token;
	const char *admin_token; /* ADMIN_TOKEN; NULL when unset: admin API off */
	const char *log_level;
	const char *transport_name, *amqp_url;
	/* TLS_CERT_FILE, TLS_KEY_FILE, TLS_CA_FILE, TLS_CLIENT_CA_FILE; "" when unset */
	const char *tls_cert_file, *tls_key_file, *tls_ca_file, *tls_client_ca_file;
	int64_t amqp_prefetch;
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
__attribute__((warn_unused_result)) int app_init(struct app *app, const struct app_spec *spec,
						 int argc, char **argv, bool *done);

/*
 * Runs the loop until SIGTERM or SIGINT, then drains; returns the exit
 * status. SIGHUP re-reads the TLS files (tls_reload).
 */
int app_run(struct app *app);
void app_free(struct app *app);

/*
 * Fault injection gate for an internal command handler, called first after
 * the token check (over HTTP) or on delivery (over AMQP). Returns true when
 * it took over the message: answered 500 (fail rate) or arranged for
 * next(m, app, tail) to be called after the delay. Returns false when the
 * handler should go on at once.
 */
typedef void (*app_next_fn)(struct inmsg m, struct app *app, const char *tail);
bool app_fault_gate(struct app *app, struct inmsg m, const char *tail, app_next_fn next);

/*
 * Answers, unless the drop-response fault fires: then the answer is lost
 * (HTTP: the connection is closed; AMQP: not acknowledged, so redelivered)
 * although the effect has committed.
 */
void app_reply(struct app *app, struct inmsg m, int status, const char *json);

/* 503 for DB_UNAVAILABLE, else 500 (logged): the generic database failure. */
struct db_error;
void app_db_error(struct evhttp_request *req, const struct db_error *err, const char *what);
/* The same as the answer to a message (HTTP or AMQP). */
void app_msg_db_error(struct inmsg m, const struct db_error *err, const char *what);

#endif
