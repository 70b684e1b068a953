/*
 * saga-inventory: reserves and releases stock on the orchestrator's
 * commands, each command once (inbox), answering with an event through its
 * outbox.
 */
#include <stdio.h>

#include "admin_api.h"
#include "service.h"
#include "command.h"
#include "jsonx.h"

static const char *reserve_fields(const struct command_type *type, struct json_object *obj,
				  const char *extra[COMMAND_MAX_EXTRA], char buf[COMMAND_MAX_EXTRA][32])
{
	int64_t qty;

	if (jsonx_get_id(obj, "itemId", &extra[0]) != 0)
		return "itemId";
	if (jsonx_get_int(obj, "qty", 1, 1000, &qty) != 0)
		return "qty";
	snprintf(buf[1], sizeof(buf[1]), "%lld", (long long)qty);
	extra[1] = buf[1];
	return NULL;
}

static const char *no_fields(const struct command_type *type, struct json_object *obj,
			     const char *extra[COMMAND_MAX_EXTRA], char buf[COMMAND_MAX_EXTRA][32])
{
	return NULL;
}

static const struct command_type commands[] = {
	{ "ReserveInventoryCommand", "SELECT * FROM handle_reserve($1, $2, $3, $4::int, $5, $6::int)", 2,
	  reserve_fields },
	{ "ReleaseInventoryCommand", "SELECT * FROM handle_release($1, $2, $3, $4::int)", 0, no_fields },
};

/* The admin API's part of a saga here: its messages and its reservation row. */
static const struct admin_spec admin = {
	.saga_row = "reservation",
	.saga_row_sql =
		"SELECT json_build_object('messages', admin_messages($1, $2, $3::uuid[]),"
		" 'reservation', (SELECT json_build_object('status', r.status, 'itemId', r.item_id, 'qty', r.qty, 'reason', r.reason,"
		"                'createdAt', rfc3339(r.created_at), 'updatedAt', rfc3339(r.updated_at))"
		"           FROM reservations r WHERE r.saga_id = $1))::text",
};

int main(int argc, char **argv)
{
	struct service_spec spec = {
		.service = "inventory",
		.about = "the inventory service: POST /commands/{ReserveInventoryCommand,"
			 "ReleaseInventoryCommand}",
		.default_addr = "127.0.0.1:8082",
		.migrations = migrations_inventory,
		.nmigrations = migrations_inventory_count,
		.admin = &admin,
	};

	return command_main(&spec, commands, sizeof(commands) / sizeof(commands[0]), NULL, argc,
			    argv);
}
