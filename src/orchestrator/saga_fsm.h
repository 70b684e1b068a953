/*
 * saga_fsm: the order saga's transition table. Pure: no I/O, so the unit
 * tests walk every pair of state and event.
 *
 *   PendingPayment   --PaymentSucceeded-->           PendingInventory  (reserve)
 *   PendingPayment   --PaymentFailed-->              Failed
 *   PendingPayment   --StepTimeout-->                Compensating      (refund)
 *   PendingInventory --InventoryReserved-->          Completed
 *   PendingInventory --InventoryReservationFailed--> Compensating      (refund)
 *   PendingInventory --StepTimeout-->                Compensating      (release)
 *   PendingPayment   --Cancelled-->                  Compensating      (refund)
 *   PendingInventory --Cancelled-->                  Compensating      (release)
 *   Compensating     --InventoryReleased-->          Compensating      (refund)
 *   Compensating     --PaymentRefunded-->            Compensated
 *
 * Compensation runs in reverse order, one undo at a time, so the saga's
 * `compensation` column says which answer it waits for. A refund is sent
 * even when the payment may not have happened: the payment service then
 * leaves a voided row and declines the late PayCommand.
 *
 * Cancelled (an operator's POST /admin/api/sagas/{id}/cancel) compensates
 * exactly as a step deadline does. A saga already compensating ignores it
 * (saga_compensating: the compensation under way is the cancellation's), a
 * finished one too (saga_finished).
 */
#ifndef PGSAGA_SAGA_FSM_H
#define PGSAGA_SAGA_FSM_H

#include <stdbool.h>

enum saga_state {
	SAGA_PENDING_PAYMENT,
	SAGA_PENDING_INVENTORY,
	SAGA_COMPLETED,
	SAGA_FAILED,
	SAGA_COMPENSATING,
	SAGA_COMPENSATED,
	SAGA_STATE_COUNT
};

enum saga_event {
	SAGA_PAYMENT_SUCCEEDED,
	SAGA_PAYMENT_FAILED,
	SAGA_PAYMENT_REFUNDED,
	SAGA_INVENTORY_RESERVED,
	SAGA_INVENTORY_RESERVATION_FAILED,
	SAGA_INVENTORY_RELEASED,
	SAGA_STEP_TIMEOUT,
	SAGA_CANCELLED,
	SAGA_EVENT_COUNT
};

enum saga_undo { SAGA_UNDO_NONE, SAGA_UNDO_RELEASE, SAGA_UNDO_REFUND };

enum saga_command {
	SAGA_CMD_NONE,
	SAGA_CMD_PAY,
	SAGA_CMD_RESERVE,
	SAGA_CMD_REFUND,
	SAGA_CMD_RELEASE,
};

struct saga_step {
	enum saga_state to;
	enum saga_undo undo;       /* awaited undo after the step (Compensating) */
	enum saga_command command; /* to send, or SAGA_CMD_NONE */
	bool deadline;             /* the new state has a step deadline */
};

/*
 * Returns true and fills step when ev moves a saga in state from (awaiting
 * undo while compensating); else false and *why names the reason the event
 * is ignored (a static string).
 */
bool saga_next(enum saga_state from, enum saga_undo undo, enum saga_event ev,
	       struct saga_step *step, const char **why);

/*
 * The one state (and awaited undo) in which event ev does something. Every
 * event that arrives as a message has exactly one, which lets the
 * orchestrator send its decision along with the read, in one round trip.
 * Returns false for StepTimeout and Cancelled.
 */
bool saga_expected(enum saga_event ev, enum saga_state *from, enum saga_undo *undo);

/* True for the events peers send (POST /events/{type}); false for
 * StepTimeout and Cancelled, which the orchestrator makes itself. */
bool saga_event_is_message(enum saga_event ev);

/* True for the states a saga ends in: Completed, Failed, Compensated. */
bool saga_state_terminal(enum saga_state s);

/* Names as in the database and the API; parse returns -1 for unknown. */
const char *saga_state_name(enum saga_state s);
int saga_state_parse(const char *s);
const char *saga_event_name(enum saga_event e);
int saga_event_parse(const char *s);
const char *saga_undo_name(enum saga_undo u); /* NULL for none */
int saga_undo_parse(const char *s);           /* NULL gives NONE */
const char *saga_command_name(enum saga_command c);
const char *saga_command_destination(enum saga_command c);

#endif
