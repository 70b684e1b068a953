/*
 * saga-payment: charges and refunds customers' accounts on the
 * orchestrator's commands, each command once (inbox), answering with an
 * event through its outbox.
 */
#include <stdio.h>

#include "admin_api.h"
#include "service.h"
#include "command.h"
#include "jsonx.h"

static int64_t default_credit;

static const char *pay_fields(const struct command_type *type, struct json_object *obj,
			      const char *extra[COMMAND_MAX_EXTRA], char buf[COMMAND_MAX_EXTRA][32])
{
	int64_t amount;

	if (jsonx_get_id(obj, "customerId", &extra[0]) != 0)
		return "customerId";
	if (jsonx_get_int(obj, "amount", 1, 1000000000000LL, &amount) != 0)
		return "amount";
	snprintf(buf[1], sizeof(buf[1]), "%lld", (long long)amount);
	snprintf(buf[2], sizeof(buf[2]), "%lld", (long long)default_credit);
	extra[1] = buf[1];
	extra[2] = buf[2];
	return NULL;
}

static const char *no_fields(const struct command_type *type, struct json_object *obj,
			     const char *extra[COMMAND_MAX_EXTRA], char buf[COMMAND_MAX_EXTRA][32])
{
	return NULL;
}

static const struct command_type commands[] = {
	{ "PayCommand", "SELECT * FROM handle_pay($1, $2, $3, $4::bigint, $5::bigint, $6, $7::int)", 3,
	  pay_fields },
	{ "RefundPaymentCommand", "SELECT * FROM handle_refund($1, $2, $3, $4::int)", 0, no_fields },
};

static const struct envcfg_var vars[] = {
	{ "PAYMENT_DEFAULT_CREDIT", ENVCFG_INT, &default_credit, "1000000", 0,
	  1000000000000000LL, "balance (minor units) of an account the first time it pays" },
};

/* The admin API's part of a saga here: its messages and its payment row. */
static const struct admin_spec admin = {
	.saga_row = "payment",
	.saga_row_sql =
		"SELECT json_build_object('messages', admin_messages($1, $2, $3::uuid[]),"
		" 'payment', (SELECT json_build_object('status', r.status, 'customerId', r.customer_id, 'amount', r.amount, 'reason', r.reason,"
		"                'createdAt', rfc3339(r.created_at), 'updatedAt', rfc3339(r.updated_at))"
		"           FROM payments r WHERE r.saga_id = $1))::text",
};

int main(int argc, char **argv)
{
	struct service_spec spec = {
		.service = "payment",
		.about = "the payment service: POST /commands/{PayCommand,RefundPaymentCommand}",
		.default_addr = "127.0.0.1:8081",
		.migrations = migrations_payment,
		.nmigrations = migrations_payment_count,
		.vars = vars,
		.nvars = sizeof(vars) / sizeof(vars[0]),
		.admin = &admin,
	};

	return command_main(&spec, commands, sizeof(commands) / sizeof(commands[0]), NULL, argc,
			    argv);
}
