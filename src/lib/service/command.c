/* command: see command.h. */
#include "command.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service.h"
#include "db.h"
#include "transport.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "outbox.h"
#include "traceparent.h"
#include "uuid.h"

/* The participant this process is (command_main). */
static struct service participant;
static const struct command_type *registered;
static size_t nregistered;

struct cmd_ctx {
	struct service *service;
	struct inmsg m;
	const struct command_type *type;
	char command_id[UUID_STR_LEN];
	char saga_id[UUID_STR_LEN];
	char trace[TRACE_ID_LEN];
};

static struct metric_family *duplicates(void)
{
	return metrics_family("saga_inbox_duplicates_total",
			      "Messages received again and not applied again", METRIC_COUNTER);
}

static void handled(void *arg, PGresult *res, const struct db_error *err)
{
	struct cmd_ctx *c = arg;
	struct log_ctx lc = { .saga_id = c->saga_id, .message_id = c->command_id,
			      .trace_id = c->trace[0] ? c->trace : NULL };

	if (err->status == DB_SQL_ERROR && strcmp(err->sqlstate, COMMAND_SQLSTATE_INVALID) == 0) {
		/* "ERROR:  itemId is missing or invalid\nCONTEXT: ...": its first line */
		const char *msg = err->message, *colon = strstr(msg, ":  ");
		int len;

		msg = colon ? colon + 3 : msg;
		len = (int)strcspn(msg, "\n");
		inmsg_error(c->m, 400, "invalid_field", "%.*s", len > 200 ? 200 : len, msg);
		free(c);
		return;
	}
	if (err->status != DB_OK) {
		inmsg_db_error(c->m, err, c->type->name);
		free(c);
		return;
	}
	if (strcmp(PQgetvalue(res, 0, 0), "duplicate") == 0) {
		metrics_inc(duplicates(), "", 1);
		LOG_AT(LOG_DEBUG, &lc, "%s again: already handled", c->type->name);
		service_reply(c->service, c->m, 200, "{\"duplicated\":true}");
	} else {
		const char *event = PQgetvalue(res, 0, 0);

		LOG_AT(LOG_INFO, &lc, "%s handled: %s", c->type->name, event);
		outbox_send(c->service->outbox, PQgetvalue(res, 0, 1), "event", "orchestrator", event,
			    PQgetvalue(res, 0, 2), c->trace[0] ? c->trace : NULL);
		service_reply(c->service, c->m, 200, "{\"duplicated\":false}");
	}
	free(c);
}

/*
 * The group key of a command (command_type): the first extra field (the row
 * the handler locks), else the key_field's value in the body when there is
 * one, else the saga.
 */
static const char *group_key(const struct command_type *type, struct json_object *obj,
			     const char *first_extra, const char *saga_id)
{
	struct json_object *v;

	if (type->nextra > 0 && !type->by_saga)
		return first_extra;
	if (type->key_field && *type->key_field && json_object_object_get_ex(obj, type->key_field, &v) &&
	    !json_object_is_type(v, json_type_null))
		return json_object_get_string(v);
	return saga_id;
}

static void run(struct inmsg m, struct service *service, const char *tail)
{
	const struct command_type *type = NULL;
	const char *params[4 + COMMAND_MAX_EXTRA], *bad = NULL, *cid, *sid;
	char buf[COMMAND_MAX_EXTRA][32], err[128], trace[TRACE_ID_LEN];
	struct json_object *obj;
	struct cmd_ctx *c;
	size_t len;
	const char *body;

	for (size_t i = 0; i < nregistered; i++)
		if (strcmp(registered[i].name, tail) == 0)
			type = &registered[i];
	body = inmsg_body(m, &len);
	obj = jsonx_parse(body, len, err, sizeof(err));
	if (!obj) {
		inmsg_error(m, 400, "invalid_json", "%s", err);
		return;
	}
	if (!json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		inmsg_error(m, 400, "invalid_json", "the body must be a JSON object");
		return;
	}
	if (jsonx_get_uuid(obj, "commandId", &cid) != 0)
		bad = "commandId";
	else if (jsonx_get_uuid(obj, "sagaId", &sid) != 0)
		bad = "sagaId";
	else
		bad = type->extract(type, obj, params + 2, buf);
	if (bad) {
		inmsg_error(m, 400, "invalid_field", "%s is missing or invalid", bad);
		json_object_put(obj);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	c->service = service;
	c->m = m;
	c->type = type;
	snprintf(c->command_id, sizeof(c->command_id), "%s", cid);
	snprintf(c->saga_id, sizeof(c->saga_id), "%s", sid);
	params[0] = cid;
	params[1] = sid;
	if (traceparent_parse(inmsg_traceparent(m), trace)) {
		memcpy(c->trace, trace, sizeof(c->trace));
		params[2 + type->nextra] = c->trace;
	} else {
		params[2 + type->nextra] = NULL;
	}
	params[3 + type->nextra] = outbox_lease_ms(service->outbox);
	/* commits with the commands that wait beside it, in the order of the rows they lock */
	db_query_grouped(service->pool, group_key(type, obj, params[2], sid), type->sql,
			 4 + type->nextra, params, handled, c);
	json_object_put(obj);
}

/* A command of type tail (the {Type} of its path, or the broker's type). */
static void command_handle(struct inmsg m, const char *tail)
{
	bool known = false;

	for (size_t i = 0; i < nregistered; i++)
		known |= strcmp(registered[i].name, tail) == 0;
	if (!known) {
		inmsg_error(m, 404, "unknown_type", "unknown command type");
		return;
	}
	if (service_fault_gate(&participant, m, tail, run))
		return;
	run(m, &participant, tail);
}

static void post_command(struct evhttp_request *req, void *svc, const char *tail)
{
	command_handle(inmsg_http(req), tail);
}

static const struct httpd_route routes[] = {
	{ "POST", "/commands/", true, post_command, "/commands/{type}" },
};

static const struct service_peer_spec peers[] = {
	{ "orchestrator", "ORCHESTRATOR_URL", "http://127.0.0.1:8080" },
};

int command_main(struct service_spec *spec, const struct command_type *types, size_t ntypes,
		 int (*ready)(struct service *service), int argc, char **argv)
{
	bool done = false;
	int rc;

	registered = types;
	nregistered = ntypes;
	spec->routes = routes;
	spec->nroutes = sizeof(routes) / sizeof(routes[0]);
	spec->peers = peers;
	spec->npeers = sizeof(peers) / sizeof(peers[0]);
	spec->faults = true;
	spec->consume = command_handle;
	rc = service_init(&participant, spec, argc, argv, &done);
	if (rc == 0 && !done && ready)
		rc = ready(&participant);
	if (rc == 0 && !done)
		rc = service_run(&participant);
	service_free(&participant);
	return rc;
}
