/* saga_fsm: see saga_fsm.h. */
#include "saga_fsm.h"

#include <stddef.h>
#include <string.h>

static const char *const state_names[SAGA_STATE_COUNT] = {
	[SAGA_PENDING_PAYMENT] = "PendingPayment", [SAGA_PENDING_INVENTORY] = "PendingInventory",
	[SAGA_COMPLETED] = "Completed",            [SAGA_FAILED] = "Failed",
	[SAGA_COMPENSATING] = "Compensating",      [SAGA_COMPENSATED] = "Compensated",
};

static const char *const event_names[SAGA_EVENT_COUNT] = {
	[SAGA_PAYMENT_SUCCEEDED] = "PaymentSucceeded",
	[SAGA_PAYMENT_FAILED] = "PaymentFailed",
	[SAGA_PAYMENT_REFUNDED] = "PaymentRefunded",
	[SAGA_INVENTORY_RESERVED] = "InventoryReserved",
	[SAGA_INVENTORY_RESERVATION_FAILED] = "InventoryReservationFailed",
	[SAGA_INVENTORY_RELEASED] = "InventoryReleased",
	[SAGA_STEP_TIMEOUT] = "StepTimeout",
	[SAGA_CANCELLED] = "Cancelled",
};

struct rule {
	enum saga_state from;
	enum saga_undo undo;
	enum saga_event ev;
	struct saga_step step;
};

/* The whole saga; anything not listed is ignored. */
static const struct rule rules[] = {
	{ SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_PAYMENT_SUCCEEDED,
	  { SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_CMD_RESERVE, true } },
	{ SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_PAYMENT_FAILED,
	  { SAGA_FAILED, SAGA_UNDO_NONE, SAGA_CMD_NONE, false } },
	{ SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_STEP_TIMEOUT,
	  { SAGA_COMPENSATING, SAGA_UNDO_REFUND, SAGA_CMD_REFUND, false } },
	{ SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_INVENTORY_RESERVED,
	  { SAGA_COMPLETED, SAGA_UNDO_NONE, SAGA_CMD_NONE, false } },
	{ SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_INVENTORY_RESERVATION_FAILED,
	  { SAGA_COMPENSATING, SAGA_UNDO_REFUND, SAGA_CMD_REFUND, false } },
	{ SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_STEP_TIMEOUT,
	  { SAGA_COMPENSATING, SAGA_UNDO_RELEASE, SAGA_CMD_RELEASE, false } },
	{ SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_CANCELLED,
	  { SAGA_COMPENSATING, SAGA_UNDO_REFUND, SAGA_CMD_REFUND, false } },
	{ SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_CANCELLED,
	  { SAGA_COMPENSATING, SAGA_UNDO_RELEASE, SAGA_CMD_RELEASE, false } },
	{ SAGA_COMPENSATING, SAGA_UNDO_RELEASE, SAGA_INVENTORY_RELEASED,
	  { SAGA_COMPENSATING, SAGA_UNDO_REFUND, SAGA_CMD_REFUND, false } },
	{ SAGA_COMPENSATING, SAGA_UNDO_REFUND, SAGA_PAYMENT_REFUNDED,
	  { SAGA_COMPENSATED, SAGA_UNDO_NONE, SAGA_CMD_NONE, false } },
};

bool saga_next(enum saga_state from, enum saga_undo undo, enum saga_event ev,
	       struct saga_step *step, const char **why)
{
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
		if (rules[i].from == from && rules[i].undo == undo && rules[i].ev == ev) {
			*step = rules[i].step;
			return true;
		}
	}
	switch (from) {
	case SAGA_COMPLETED:
	case SAGA_FAILED:
	case SAGA_COMPENSATED:
		*why = "saga_finished";
		break;
	case SAGA_COMPENSATING:
		*why = "saga_compensating";
		break;
	default:
		*why = "unexpected_in_state";
		break;
	}
	return false;
}

bool saga_expected(enum saga_event ev, enum saga_state *from, enum saga_undo *undo)
{
	int found = 0;

	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
		if (rules[i].ev != ev)
			continue;
		*from = rules[i].from;
		*undo = rules[i].undo;
		found++;
	}
	return found == 1;
}

bool saga_event_is_message(enum saga_event ev)
{
	return ev < SAGA_EVENT_COUNT && ev != SAGA_STEP_TIMEOUT && ev != SAGA_CANCELLED;
}

static int parse(const char *const *names, int n, const char *s)
{
	for (int i = 0; s && i < n; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

bool saga_state_terminal(enum saga_state s)
{
	return s == SAGA_COMPLETED || s == SAGA_FAILED || s == SAGA_COMPENSATED;
}

const char *saga_state_name(enum saga_state s)
{
	return s < SAGA_STATE_COUNT ? state_names[s] : "?";
}

int saga_state_parse(const char *s)
{
	return parse(state_names, SAGA_STATE_COUNT, s);
}

const char *saga_event_name(enum saga_event e)
{
	return e < SAGA_EVENT_COUNT ? event_names[e] : "?";
}

int saga_event_parse(const char *s)
{
	return parse(event_names, SAGA_EVENT_COUNT, s);
}

const char *saga_undo_name(enum saga_undo u)
{
	return u == SAGA_UNDO_RELEASE ? "release" : u == SAGA_UNDO_REFUND ? "refund" : NULL;
}

int saga_undo_parse(const char *s)
{
	if (!s)
		return SAGA_UNDO_NONE;
	if (strcmp(s, "release") == 0)
		return SAGA_UNDO_RELEASE;
	if (strcmp(s, "refund") == 0)
		return SAGA_UNDO_REFUND;
	return -1;
}

const char *saga_command_name(enum saga_command c)
{
	switch (c) {
	case SAGA_CMD_PAY:
		return "PayCommand";
	case SAGA_CMD_RESERVE:
		return "ReserveInventoryCommand";
	case SAGA_CMD_REFUND:
		return "RefundPaymentCommand";
	case SAGA_CMD_RELEASE:
		return "ReleaseInventoryCommand";
	default:
		return NULL;
	}
}

const char *saga_command_destination(enum saga_command c)
{
	return c == SAGA_CMD_PAY || c == SAGA_CMD_REFUND	 ? "payment"
	       : c == SAGA_CMD_RESERVE || c == SAGA_CMD_RELEASE ? "inventory"
								 : NULL;
}
