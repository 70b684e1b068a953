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
	/*
	 * It sends to participants named at run time (service_destination_add):
	 * --help says how their URLs are named, after the settings.
	 */
	bool participants;
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
	struct service_dest **added; /* service_destination_add's (service.c) */
	size_t nadded, added_cap;
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
 * One destination more, named at run time: a saga definition's participant,
 * 1-63 characters of [a-z0-9_-]. Idempotent: a destination the service knows
 * already (its spec's peers, or one added before) is left as it is.
 *
 * TRANSPORT=http: its base URL(s) come from <NAME>_URL, the name upper-cased
 * with '-' as '_' (SHIPPING_URL for shipping, COLD_STORAGE_URL for
 * cold-storage), read now from the environment, a comma-separated list, and
 * opened as the spec's peers are (https:// with the TLS_* files, a circuit
 * breaker per instance, HTTP_TIMEOUT_MS). Unset or empty: the destination is
 * known but has no URL, and every message to it is a dead letter at its
 * first attempt, last_error "<NAME>_URL is not set" (set it, restart, retry
 * the dead letters).
 *
 * TRANSPORT=amqp: no URL; its messages are published with the participant's
 * name as routing key, and the service declares the participant's queue
 * pgsaga.<participant> (where its broker user may) before it publishes there,
 * so that they wait in it until the participant consumes them.
 *
 * Returns 0. Returns -1 with the reason in err when participant is not a
 * valid name (nothing is added), or when its URL does not parse (its messages
 * are then dead letters whose last_error is that reason). On the loop's
 * thread, after service_init.
 */
__attribute__((warn_unused_result)) int service_destination_add(struct service *s, const char *participant,
								   char *err, size_t errlen);

/*
 * The variable that holds participant's URL(s), "<NAME>_URL", into out;
 * false when it does not fit.
 */
bool service_destination_variable(const char *participant, char *out, size_t outlen);

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
