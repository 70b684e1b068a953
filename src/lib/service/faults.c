/*
 * faults: fault injection in payment and inventory (FAULT_* settings and
 * POST /admin/faults): fail before any work, answer late, or commit the
 * effect and lose the answer.
 */
#include "service.h"

#include <event2/event.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>

#include "backoff.h"
#include "jsonx.h"
#include "log.h"

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

static void set_faults(struct evhttp_request *req, void *svc, const char *tail)
{
	struct service *service = svc;
	size_t len;
	const char *body = httpd_body(req, &len);
	char err[128], out[160];
	struct json_object *obj = jsonx_parse(body, len, err, sizeof(err));
	double fail = service->fail_rate, drop = service->drop_rate, delay = (double)service->delay_ms;

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
	service->fail_rate = fail;
	service->drop_rate = drop;
	service->delay_ms = (int64_t)delay;
	log_warn("faults set: failRate %g, delayMs %lld, dropResponseRate %g", fail,
		 (long long)service->delay_ms, drop);
	snprintf(out, sizeof(out), "{\"failRate\":%g,\"delayMs\":%lld,\"dropResponseRate\":%g}",
		 fail, (long long)service->delay_ms, drop);
	httpd_reply(req, 200, out);
}

const struct httpd_route service_fault_route = { "POST", "/admin/faults", true, set_faults,
						 "/admin/faults" };

struct delayed {
	struct inmsg m;
	struct service *service;
	service_next_fn next;
	char tail[128];
};

static void delayed_cb(evutil_socket_t fd, short what, void *arg)
{
	struct delayed *d = arg;

	d->next(d->m, d->service, d->tail);
	free(d);
}

bool service_fault_gate(struct service *service, struct inmsg m, const char *tail, service_next_fn next)
{
	if (service->fail_rate > 0 && backoff_random() < service->fail_rate) {
		inmsg_error(m, 500, "injected_fault", "fault injection: failRate");
		return true;
	}
	if (service->delay_ms > 0) {
		struct delayed *d = calloc(1, sizeof(*d));
		struct timeval tv = { (time_t)(service->delay_ms / 1000),
				      (suseconds_t)(service->delay_ms % 1000) * 1000 };

		if (!d)
			abort();
		d->m = m;
		d->service = service;
		d->next = next;
		snprintf(d->tail, sizeof(d->tail), "%s", tail);
		if (event_base_once(service->base, -1, EV_TIMEOUT, delayed_cb, d, &tv) != 0)
			abort();
		return true;
	}
	return false;
}

void service_reply(struct service *service, struct inmsg m, int status, const char *json)
{
	if (service->drop_rate > 0 && status < 300 && backoff_random() < service->drop_rate) {
		inmsg_drop(m);
		return;
	}
	inmsg_reply(m, status, json);
}
