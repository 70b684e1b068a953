/*
 * health: the routes every service answers for its operators and its
 * orchestrator (process, database, broker), whatever its own routes are.
 */
#include "service.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>

#include "db.h"
#include "metrics.h"
#include "version.h"

static void healthz(struct evhttp_request *req, void *svc, const char *tail)
{
	char body[128];

	/* the version and commit are digits, dots and hex: nothing to escape */
	snprintf(body, sizeof(body), "{\"status\":\"alive\",\"version\":\"%s\",\"commit\":\"%s\"}",
		 pgsaga_version, pgsaga_commit);
	httpd_reply(req, 200, body);
}

static void readyz(struct evhttp_request *req, void *svc, const char *tail)
{
	struct service *service = svc;

	const char *broker = service->transport->ops->broker_state(service->transport);
	char body[64];

	if (!db_pool_ready(service->pool) || service->stopping) {
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

static const struct httpd_route routes[] = {
	{ "GET", "/healthz", false, healthz, "/healthz" },
	{ "GET", "/readyz", false, readyz, "/readyz" },
	{ "GET", "/metrics", false, metrics, "/metrics" },
};

size_t service_health_routes(const struct httpd_route **out)
{
	*out = routes;
	return sizeof(routes) / sizeof(routes[0]);
}
