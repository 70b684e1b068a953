/* The saga's transition table, walked exhaustively. */
#include <check.h>
#include <string.h>

#include "saga_fsm.h"
#include "suites.h"

/* The happy path and both compensations, step by step. */
START_TEST(fsm_happy_path)
{
	struct saga_step s;
	const char *why;

	ck_assert(saga_next(SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_PAYMENT_SUCCEEDED, &s, &why));
	ck_assert_int_eq(s.to, SAGA_PENDING_INVENTORY);
	ck_assert_int_eq(s.command, SAGA_CMD_RESERVE);
	ck_assert(s.deadline);
	ck_assert(saga_next(SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_INVENTORY_RESERVED, &s,
			    &why));
	ck_assert_int_eq(s.to, SAGA_COMPLETED);
	ck_assert_int_eq(s.command, SAGA_CMD_NONE);
}
END_TEST

START_TEST(fsm_decline_fails_without_compensation)
{
	struct saga_step s;
	const char *why;

	ck_assert(saga_next(SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_PAYMENT_FAILED, &s, &why));
	ck_assert_int_eq(s.to, SAGA_FAILED);
	ck_assert_int_eq(s.command, SAGA_CMD_NONE);
}
END_TEST

START_TEST(fsm_rejection_refunds)
{
	struct saga_step s;
	const char *why;

	ck_assert(saga_next(SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE,
			    SAGA_INVENTORY_RESERVATION_FAILED, &s, &why));
	ck_assert_int_eq(s.to, SAGA_COMPENSATING);
	ck_assert_int_eq(s.undo, SAGA_UNDO_REFUND);
	ck_assert_int_eq(s.command, SAGA_CMD_REFUND);
	ck_assert(saga_next(SAGA_COMPENSATING, SAGA_UNDO_REFUND, SAGA_PAYMENT_REFUNDED, &s, &why));
	ck_assert_int_eq(s.to, SAGA_COMPENSATED);
	ck_assert_int_eq(s.command, SAGA_CMD_NONE);
}
END_TEST

/* A timed-out inventory step undoes in reverse order: release, then refund. */
START_TEST(fsm_timeout_compensates_in_reverse)
{
	struct saga_step s;
	const char *why;

	ck_assert(saga_next(SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_STEP_TIMEOUT, &s, &why));
	ck_assert_int_eq(s.to, SAGA_COMPENSATING);
	ck_assert_int_eq(s.undo, SAGA_UNDO_RELEASE);
	ck_assert_int_eq(s.command, SAGA_CMD_RELEASE);
	ck_assert(saga_next(SAGA_COMPENSATING, SAGA_UNDO_RELEASE, SAGA_INVENTORY_RELEASED, &s,
			    &why));
	ck_assert_int_eq(s.to, SAGA_COMPENSATING);
	ck_assert_int_eq(s.undo, SAGA_UNDO_REFUND);
	ck_assert_int_eq(s.command, SAGA_CMD_REFUND);
	/* a refund answer while still waiting for the release changes nothing */
	ck_assert(!saga_next(SAGA_COMPENSATING, SAGA_UNDO_RELEASE, SAGA_PAYMENT_REFUNDED, &s,
			     &why));
	ck_assert_str_eq(why, "saga_compensating");

	ck_assert(saga_next(SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_STEP_TIMEOUT, &s, &why));
	ck_assert_int_eq(s.undo, SAGA_UNDO_REFUND);
	ck_assert_int_eq(s.command, SAGA_CMD_REFUND);
}
END_TEST

/*
 * Every (state, undo, event): terminal states accept nothing, exactly ten
 * transitions exist, every command goes to the right service, and a state
 * with a deadline is one a StepTimeout can leave.
 */
START_TEST(fsm_exhaustive)
{
	int accepted = 0;

	for (int st = 0; st < SAGA_STATE_COUNT; st++)
		for (int u = SAGA_UNDO_NONE; u <= SAGA_UNDO_REFUND; u++)
			for (int ev = 0; ev < SAGA_EVENT_COUNT; ev++) {
				struct saga_step s;
				const char *why = NULL;
				bool ok = saga_next(st, u, ev, &s, &why);

				if (!ok) {
					ck_assert_ptr_nonnull(why);
					continue;
				}
				accepted++;
				ck_assert(st != SAGA_COMPLETED && st != SAGA_FAILED &&
					  st != SAGA_COMPENSATED);
				ck_assert((s.to == SAGA_COMPENSATING) == (s.undo != SAGA_UNDO_NONE));
				if (s.deadline) {
					struct saga_step t;
					const char *w;

					ck_assert(saga_next(s.to, s.undo, SAGA_STEP_TIMEOUT, &t, &w));
				}
				if (s.command != SAGA_CMD_NONE) {
					const char *d = saga_command_destination(s.command);

					ck_assert_ptr_nonnull(d);
					ck_assert_ptr_nonnull(saga_command_name(s.command));
				}
			}
	ck_assert_int_eq(accepted, 10);
}
END_TEST

/* Every event that comes as a message acts in exactly one state. */
START_TEST(fsm_expected_state_is_unique)
{
	for (int ev = 0; ev < SAGA_EVENT_COUNT; ev++) {
		enum saga_state from;
		enum saga_undo undo;
		struct saga_step s;
		const char *why;

		if (!saga_event_is_message(ev)) {
			ck_assert(!saga_expected(ev, &from, &undo));
			continue;
		}
		ck_assert(saga_expected(ev, &from, &undo));
		ck_assert(saga_next(from, undo, ev, &s, &why));
		for (int st = 0; st < SAGA_STATE_COUNT; st++)
			for (int u = SAGA_UNDO_NONE; u <= SAGA_UNDO_REFUND; u++)
				if (st != (int)from || u != (int)undo)
					ck_assert(!saga_next(st, u, ev, &s, &why));
	}
	enum saga_state from;
	enum saga_undo undo;
	ck_assert(saga_expected(SAGA_INVENTORY_RELEASED, &from, &undo));
	ck_assert_int_eq(from, SAGA_COMPENSATING);
	ck_assert_int_eq(undo, SAGA_UNDO_RELEASE);
}
END_TEST

/*
 * Cancel, in every state: the two pending states compensate exactly as on a
 * step deadline; a compensating saga ignores it (its compensation is under
 * way: cancelling twice is one cancellation); a finished one refuses it.
 */
START_TEST(fsm_cancel_in_every_state)
{
	for (int st = 0; st < SAGA_STATE_COUNT; st++)
		for (int u = SAGA_UNDO_NONE; u <= SAGA_UNDO_REFUND; u++) {
			struct saga_step c, t;
			const char *why = NULL, *why_t = NULL;
			bool ok = saga_next(st, u, SAGA_CANCELLED, &c, &why);
			bool ok_t = saga_next(st, u, SAGA_STEP_TIMEOUT, &t, &why_t);

			ck_assert_int_eq(ok, ok_t);
			if (ok) {
				ck_assert_int_eq(u, SAGA_UNDO_NONE);
				ck_assert(st == SAGA_PENDING_PAYMENT || st == SAGA_PENDING_INVENTORY);
				ck_assert_int_eq(c.to, t.to);
				ck_assert_int_eq(c.undo, t.undo);
				ck_assert_int_eq(c.command, t.command);
				ck_assert_int_eq(c.deadline, t.deadline);
				/* once cancelled, a second cancel changes nothing */
				ck_assert(!saga_next(c.to, c.undo, SAGA_CANCELLED, &t, &why));
				ck_assert_str_eq(why, "saga_compensating");
				continue;
			}
			if (st == SAGA_COMPLETED || st == SAGA_FAILED || st == SAGA_COMPENSATED)
				ck_assert_str_eq(why, "saga_finished");
			else if (st == SAGA_COMPENSATING)
				ck_assert_str_eq(why, "saga_compensating");
			else
				ck_assert_str_eq(why, "unexpected_in_state"); /* an undo pending: impossible */
		}
	struct saga_step c;
	const char *why;

	ck_assert(saga_next(SAGA_PENDING_PAYMENT, SAGA_UNDO_NONE, SAGA_CANCELLED, &c, &why));
	ck_assert_int_eq(c.to, SAGA_COMPENSATING);
	ck_assert_int_eq(c.command, SAGA_CMD_REFUND);
	ck_assert(saga_next(SAGA_PENDING_INVENTORY, SAGA_UNDO_NONE, SAGA_CANCELLED, &c, &why));
	ck_assert_int_eq(c.undo, SAGA_UNDO_RELEASE);
	ck_assert_int_eq(c.command, SAGA_CMD_RELEASE);
	ck_assert(!saga_event_is_message(SAGA_CANCELLED));
	ck_assert(!saga_event_is_message(SAGA_STEP_TIMEOUT));
	ck_assert(saga_event_is_message(SAGA_PAYMENT_REFUNDED));
}
END_TEST

START_TEST(fsm_names_round_trip)
{
	for (int st = 0; st < SAGA_STATE_COUNT; st++)
		ck_assert_int_eq(saga_state_parse(saga_state_name(st)), st);
	for (int ev = 0; ev < SAGA_EVENT_COUNT; ev++)
		ck_assert_int_eq(saga_event_parse(saga_event_name(ev)), ev);
	ck_assert_int_eq(saga_state_parse("Pending"), -1);
	ck_assert_int_eq(saga_event_parse("paymentsucceeded"), -1);
	ck_assert_int_eq(saga_event_parse(NULL), -1);
	ck_assert_int_eq(saga_undo_parse(NULL), SAGA_UNDO_NONE);
	ck_assert_int_eq(saga_undo_parse("refund"), SAGA_UNDO_REFUND);
	ck_assert_int_eq(saga_undo_parse("x"), -1);
	ck_assert_str_eq(saga_command_destination(SAGA_CMD_REFUND), "payment");
	ck_assert_str_eq(saga_command_destination(SAGA_CMD_RELEASE), "inventory");
}
END_TEST

Suite *fsm_suite(void)
{
	Suite *s = suite_create("fsm");
	TCase *tc = tcase_create("transitions");

	tcase_add_test(tc, fsm_happy_path);
	tcase_add_test(tc, fsm_decline_fails_without_compensation);
	tcase_add_test(tc, fsm_rejection_refunds);
	tcase_add_test(tc, fsm_timeout_compensates_in_reverse);
	tcase_add_test(tc, fsm_exhaustive);
	tcase_add_test(tc, fsm_expected_state_is_unique);
	tcase_add_test(tc, fsm_cancel_in_every_state);
	tcase_add_test(tc, fsm_names_round_trip);
	suite_add_tcase(s, tc);
	return s;
}
