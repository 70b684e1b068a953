/*
 * saga-orchestrator: accepts orders (orders.h), drives each saga through
 * its steps on the events payment and inventory send back and on step
 * deadlines (saga_engine.h), and serves the operator console and its part
 * of the admin API (console.h, admin_sagas.h). This file only wires them.
 */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "monotime.h"
#include "admin_api.h"
#include "admission.h"
#include "admin_sagas.h"
#include "console.h"
#include "orders.h"
#include "log.h"
#include "saga_engine.h"
#include "saga_registry.h"
#include "service.h"

static struct {
	struct service service;
	int64_t step_timeout_ms;
	int64_t idempotency_ttl_s;
	int64_t max_inflight;
	const char *definitions_dir;
	struct admission admission;
} O;

static const struct httpd_route routes[] = {
	{ "POST", "/orders", false, orders_post, "/orders" },
	{ "GET", "/orders/", false, orders_get, "/orders/{id}" },
	{ "POST", "/sagas/", false, sagas_post, "/sagas/{name}" },
	{ "GET", "/sagas/", false, sagas_get, "/sagas/{id}" },
	{ "POST", "/events/", true, saga_post_event, "/events/{type}" },
	{ "GET", "/console", false, console_redirect, "/console", HTTPD_ADMIN_OPEN },
	{ "GET", "/console/", false, console_get, "/console/{file}", HTTPD_ADMIN_OPEN },
};

static const struct envcfg_var vars[] = {
	{ "STEP_TIMEOUT_MS", ENVCFG_INT, &O.step_timeout_ms, "120000", 10, 86400000,
	  "a saga step's deadline, after which it compensates" },
	{ "IDEMPOTENCY_TTL_S", ENVCFG_INT, &O.idempotency_ttl_s, "86400", 1, 31536000,
	  "how long an Idempotency-Key is remembered" },
	{ "ADMISSION_MAX_INFLIGHT", ENVCFG_INT, &O.max_inflight, "-1", -1, 100000000,
	  "refuse a start (429) while this many sagas are in flight; 0: never; -1: follow what the deployment finishes" },
	{ "SAGA_DEFINITIONS_DIR", ENVCFG_STRING, &O.definitions_dir, "", 0, 0,
	  "a directory whose *.json saga definitions are registered at start; unset: none (the order saga is always registered)" },
};

static const struct service_peer_spec peers[] = {
	{ "payment", "PAYMENT_URL", "http://127.0.0.1:8081" },
	{ "inventory", "INVENTORY_URL", "http://127.0.0.1:8082" },
};

static const struct service_spec spec = {
	.service = "orchestrator",
	.about = "the order saga's orchestrator: POST /orders, GET /orders/{id}, POST /events/{type}",
	.default_addr = "127.0.0.1:8080",
	.migrations = migrations_orchestrator,
	.nmigrations = 0, /* set in main: the count is not a constant expression */
	.vars = vars,
	.nvars = sizeof(vars) / sizeof(vars[0]),
	.routes = routes,
	.nroutes = sizeof(routes) / sizeof(routes[0]),
	.peers = peers,
	.npeers = sizeof(peers) / sizeof(peers[0]),
	.participants = true, /* the others': service_destination_add */
	.admin = &admin_sagas_spec,
	.consume = saga_handle_event,
};

/* A definition loaded: its participants become destinations (<NAME>_URL, pgsaga.<name>). */
static void open_participants(const struct saga_def *d, void *arg)
{
	char err[256];

	for (size_t i = 0; i < d->n_steps; i++)
		if (service_destination_add(arg, d->steps[i].participant, err, sizeof(err)) != 0)
			log_error("saga %s version %d, step %s: %s", d->name, (int)d->version,
				  d->steps[i].name, err);
}

int main(int argc, char **argv)
{
	struct service_spec s = spec;
	bool done;
	char err[1024];
	int rc;

	s.nmigrations = migrations_orchestrator_count;
	rc = service_init(&O.service, &s, argc, argv, &done);
	if (rc != 0 || done) {
		service_free(&O.service);
		return rc;
	}
	if (saga_registry_open(&O.service, O.definitions_dir, err, sizeof(err)) != 0) {
		log_error("%s", err);
		service_free(&O.service);
		return 1;
	}
	saga_registry_watch(open_participants, &O.service);
	admission_init(&O.admission, O.max_inflight, O.step_timeout_ms, monotime_ms());
	saga_engine_open(&O.service, &O.admission, O.step_timeout_ms);
	orders_open(&O.service, &O.admission, O.step_timeout_ms, O.idempotency_ttl_s);
	rc = service_run(&O.service);
	orders_close();
	saga_engine_close();
	saga_registry_close();
	service_free(&O.service);
	return rc;
}
