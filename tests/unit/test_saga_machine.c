/*
 * saga_machine: every shape (1 to 16 steps; success, failure, deadline and
 * cancel at each step), compensation in reverse with each undo once, late
 * and unknown events ignored with their reason; the order definition's
 * table as 1.0 had it; migration. Command bodies are built in SQL
 * (saga_step), tested by the integration suite.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "saga_def.h"
#include "saga_machine.h"
#include "suites.h"

/*
 * The order saga's definition file, compact (jsonx_compact keeps the key
 * order), so that a test can change one member by replacing its text.
 */
static char *order_doc;

static void load_order(void)
{
	char *text = saga_test_definition("order.json");

	order_doc = jsonx_compact(text);
	ck_assert_ptr_nonnull(order_doc);
	free(text);
}

static void free_order(void)
{
	free(order_doc);
	order_doc = NULL;
}

static struct saga_def *compile(const char *text)
{
	char err[256];
	struct saga_def *d = saga_def_parse(text, strlen(text), err, sizeof(err));

	ck_assert_msg(d != NULL, "%s", err);
	return d;
}

static struct json_object *parse(const char *s)
{
	char err[128];
	struct json_object *v = jsonx_parse(s, strlen(s), err, sizeof(err));

	ck_assert_msg(v != NULL, "%s: %s", s, err);
	return v;
}

/*
 * A definition of n steps S0..S(n-1): participant p<i>, command Do<i>,
 * events Done<i> / Failed<i> / Undone<i>, compensation Undo<i>; step i has
 * deadlineMs 1000 + i when deadlines is set.
 */
static struct saga_def *shape(int n, bool deadlines)
{
	char buf[8192];
	size_t len;

	snprintf(buf, sizeof(buf), "{\"name\":\"shape\",\"version\":1,\"input\":{},\"steps\":[");
	for (int i = 0; i < n; i++) {
		len = strlen(buf);
		snprintf(buf + len, sizeof(buf) - len,
			 "%s{\"name\":\"S%d\",\"participant\":\"p%d\",\"command\":\"Do%d\","
			 "\"succeeded\":\"Done%d\",\"failed\":\"Failed%d\",\"compensation\":\"Undo%d\","
			 "\"compensated\":\"Undone%d\"",
			 i ? "," : "", i, i, i, i, i, i, i);
		len = strlen(buf);
		if (deadlines)
			snprintf(buf + len, sizeof(buf) - len, ",\"deadlineMs\":%d}", 1000 + i);
		else
			snprintf(buf + len, sizeof(buf) - len, "}");
	}
	strcat(buf, "]}");
	return compile(buf);
}

static struct saga_pos running(int k)
{
	return (struct saga_pos){ SAGA_RUNNING, k };
}

static struct saga_pos undoing(int k)
{
	return (struct saga_pos){ SAGA_UNDOING, k };
}

/* Every event type of d, and one it does not have. */
static void all_types(const struct saga_def *d, const char *types[], size_t *n)
{
	*n = 0;
	for (size_t i = 0; i < d->n_steps; i++) {
		types[(*n)++] = d->steps[i].succeeded;
		types[(*n)++] = d->steps[i].failed;
		types[(*n)++] = d->steps[i].compensated;
	}
}

static void expect_ignored(const struct saga_def *d, struct saga_pos at, enum saga_trigger t,
			   const char *type, const char *why_want)
{
	struct saga_move m;
	const char *why = NULL;

	ck_assert_msg(!saga_machine_next(d, at, t, type, &m, &why), "%s at %s/%d accepted",
		      type ? type : "trigger", saga_machine_state(d, at), at.step);
	ck_assert_msg(why && strcmp(why, why_want) == 0, "%s at %s: %s, want %s",
		      type ? type : "trigger", saga_machine_state(d, at), why, why_want);
}

/*
 * At every running position, only the step's own succeeded and failed act
 * (and deadline, cancel); answers of other steps are unexpected_in_state.
 */
static void check_running_refuses_others(const struct saga_def *d, int k)
{
	const char *types[3 * SAGA_DEF_MAX_STEPS];
	size_t n;

	all_types(d, types, &n);
	for (size_t i = 0; i < n; i++)
		if (strcmp(types[i], d->steps[k].succeeded) != 0 &&
		    strcmp(types[i], d->steps[k].failed) != 0)
			expect_ignored(d, running(k), SAGA_ON_EVENT, types[i], "unexpected_in_state");
	expect_ignored(d, running(k), SAGA_ON_EVENT, "Nope", "unknown_type");
}

/* While step j's undo is awaited, nothing but its compensated event acts. */
static void check_undoing_refuses_others(const struct saga_def *d, int j)
{
	const char *types[3 * SAGA_DEF_MAX_STEPS];
	size_t n;

	all_types(d, types, &n);
	for (size_t i = 0; i < n; i++)
		if (strcmp(types[i], d->steps[j].compensated) != 0)
			expect_ignored(d, undoing(j), SAGA_ON_EVENT, types[i], "saga_compensating");
	expect_ignored(d, undoing(j), SAGA_ON_DEADLINE, NULL, "saga_compensating");
	expect_ignored(d, undoing(j), SAGA_ON_CANCEL, NULL, "saga_compensating");
	expect_ignored(d, undoing(j), SAGA_ON_EVENT, "Nope", "unknown_type");
}

static void check_finished_refuses_all(const struct saga_def *d, struct saga_pos at)
{
	const char *types[3 * SAGA_DEF_MAX_STEPS];
	size_t n;

	all_types(d, types, &n);
	for (size_t i = 0; i < n; i++)
		expect_ignored(d, at, SAGA_ON_EVENT, types[i], "saga_finished");
	expect_ignored(d, at, SAGA_ON_DEADLINE, NULL, "saga_finished");
	expect_ignored(d, at, SAGA_ON_CANCEL, NULL, "saga_finished");
}

/* A saga's timeline: the history rows and the messages sent. */
struct walk {
	const struct saga_def *d;
	struct saga_pos at;
	int rows;
	char sent[64][80]; /* "p3 Do3", "p2 Undo2" */
	int n_sent;
};

static void record(struct walk *w, const struct saga_move *m)
{
	w->at = m->to;
	w->rows++;
	ck_assert_str_eq(m->to_state, saga_machine_state(w->d, m->to));
	if (m->action == SAGA_SEND_NONE) {
		ck_assert_ptr_null(m->message);
		ck_assert_int_eq(m->action_step, -1);
		return;
	}
	const struct saga_step_def *s = &w->d->steps[m->action_step];

	ck_assert_str_eq(m->participant, s->participant);
	ck_assert_str_eq(m->message, m->action == SAGA_SEND_COMMAND ? s->command : s->compensation);
	snprintf(w->sent[w->n_sent++], sizeof(w->sent[0]), "%s %s", m->participant, m->message);
}

static void walk_start(struct walk *w, const struct saga_def *d)
{
	struct saga_move m = saga_machine_start(d);

	memset(w, 0, sizeof(*w));
	w->d = d;
	ck_assert_ptr_null(m.from_state);
	ck_assert_str_eq(m.to_state, d->steps[0].pending);
	ck_assert_str_eq(m.cause, "SagaStarted");
	ck_assert(m.deadline);
	ck_assert_int_eq(m.action, SAGA_SEND_COMMAND);
	ck_assert_int_eq(m.action_step, 0);
	record(w, &m);
}

static void walk_step(struct walk *w, enum saga_trigger t, const char *type, const char *from_state,
		      const char *to_state)
{
	struct saga_move m;
	const char *why = NULL;

	ck_assert_msg(saga_machine_next(w->d, w->at, t, type, &m, &why), "%s ignored: %s",
		      type ? type : "trigger", why);
	ck_assert_str_eq(m.from_state, from_state);
	ck_assert_str_eq(m.to_state, to_state);
	ck_assert_str_eq(m.cause, t == SAGA_ON_EVENT	 ? type
				  : t == SAGA_ON_DEADLINE ? "StepTimeout"
							  : "Cancelled");
	ck_assert(!m.deadline == (m.to.phase != SAGA_RUNNING));
	record(w, &m);
}

/* Runs steps 0..k-1 to success: the saga is then at running(k). */
static void walk_to(struct walk *w, int k)
{
	for (int i = 0; i < k; i++) {
		check_running_refuses_others(w->d, i);
		walk_step(w, SAGA_ON_EVENT, w->d->steps[i].succeeded, w->d->steps[i].pending,
			  w->d->steps[i + 1].pending);
		/* the step's answer again, later: ignored */
		expect_ignored(w->d, w->at, SAGA_ON_EVENT, w->d->steps[i].succeeded,
			       "unexpected_in_state");
	}
}

/*
 * From Compensating awaiting `from`, answer each undo: every answer is a
 * row, the next undo goes out only then, and an undo answered once is
 * ignored if it comes again.
 */
static void walk_undo(struct walk *w, int from)
{
	for (int j = from; j >= 0; j--) {
		ck_assert_int_eq(w->at.phase, SAGA_UNDOING);
		ck_assert_int_eq(w->at.step, j);
		ck_assert_str_eq(saga_machine_compensation(w->d, w->at), w->d->steps[j].name);
		check_undoing_refuses_others(w->d, j);
		walk_step(w, SAGA_ON_EVENT, w->d->steps[j].compensated, "Compensating",
			  j > 0 ? "Compensating" : "Compensated");
		expect_ignored(w->d, w->at, SAGA_ON_EVENT, w->d->steps[j].compensated,
			       j > 0 ? "saga_compensating" : "saga_finished");
	}
	ck_assert_int_eq(w->at.phase, SAGA_DONE_COMPENSATED);
	ck_assert_ptr_null(saga_machine_compensation(w->d, w->at));
}

/* The messages sent, from index `from`, are exactly want (space-separated pairs). */
static void expect_sent(const struct walk *w, int from, const char *const want[], int n)
{
	ck_assert_int_eq(w->n_sent - from, n);
	for (int i = 0; i < n; i++)
		ck_assert_str_eq(w->sent[from + i], want[i]);
}

START_TEST(machine_success_every_shape)
{
	for (int n = 1; n <= SAGA_DEF_MAX_STEPS; n++) {
		struct saga_def *d = shape(n, false);
		struct walk w;
		struct saga_move m;
		const char *why;

		walk_start(&w, d);
		walk_to(&w, n - 1);
		walk_step(&w, SAGA_ON_EVENT, d->steps[n - 1].succeeded, d->steps[n - 1].pending,
			  "Completed");
		ck_assert_int_eq(w.at.phase, SAGA_DONE_COMPLETED);
		ck_assert_int_eq(w.rows, n + 1); /* creation + one per step */
		ck_assert_int_eq(w.n_sent, n);
		for (int i = 0; i < n; i++) {
			char want[80];

			snprintf(want, sizeof(want), "p%d Do%d", i, i);
			ck_assert_str_eq(w.sent[i], want);
		}
		check_finished_refuses_all(d, w.at);
		ck_assert(!saga_machine_next(d, w.at, SAGA_ON_EVENT, "Nope", &m, &why));
		ck_assert_str_eq(why, "unknown_type");
		saga_def_free(d);
	}
}
END_TEST

/*
 * Failure at step k: the first step's is Failed with nothing to undo; a
 * later one undoes the steps before it, in reverse, each once.
 */
START_TEST(machine_failure_at_each_step)
{
	for (int n = 1; n <= SAGA_DEF_MAX_STEPS; n++) {
		struct saga_def *d = shape(n, false);

		for (int k = 0; k < n; k++) {
			struct walk w;
			int mark;
			char want[SAGA_DEF_MAX_STEPS][80];
			const char *wantp[SAGA_DEF_MAX_STEPS];

			walk_start(&w, d);
			walk_to(&w, k);
			check_running_refuses_others(d, k);
			mark = w.n_sent;
			walk_step(&w, SAGA_ON_EVENT, d->steps[k].failed, d->steps[k].pending,
				  k == 0 ? "Failed" : "Compensating");
			if (k == 0) {
				ck_assert_int_eq(w.at.phase, SAGA_DONE_FAILED);
				ck_assert_int_eq(w.n_sent, mark);
				check_finished_refuses_all(d, w.at);
				continue;
			}
			walk_undo(&w, k - 1);
			for (int j = k - 1, i = 0; j >= 0; j--, i++) {
				snprintf(want[i], sizeof(want[i]), "p%d Undo%d", j, j);
				wantp[i] = want[i];
			}
			expect_sent(&w, mark, wantp, k);
			/* creation, k successes, the failure, k undos */
			ck_assert_int_eq(w.rows, 1 + k + 1 + k);
			check_finished_refuses_all(d, w.at);
		}
		saga_def_free(d);
	}
}
END_TEST

/*
 * A deadline or a cancel at step k undoes that step too (it may have run),
 * then those before it: k+1 undos, in reverse, each once.
 */
START_TEST(machine_deadline_and_cancel_at_each_step)
{
	for (int n = 1; n <= SAGA_DEF_MAX_STEPS; n++) {
		struct saga_def *d = shape(n, true);

		for (int k = 0; k < n; k++)
			for (int t = SAGA_ON_DEADLINE; t <= SAGA_ON_CANCEL; t++) {
				struct walk w;
				int mark;
				char want[SAGA_DEF_MAX_STEPS][80];
				const char *wantp[SAGA_DEF_MAX_STEPS];

				walk_start(&w, d);
				walk_to(&w, k);
				mark = w.n_sent;
				walk_step(&w, (enum saga_trigger)t, NULL, d->steps[k].pending,
					  "Compensating");
				/* the late answer of the step: ignored, the undo is out */
				expect_ignored(d, w.at, SAGA_ON_EVENT, d->steps[k].succeeded,
					       "saga_compensating");
				walk_undo(&w, k);
				for (int j = k, i = 0; j >= 0; j--, i++) {
					snprintf(want[i], sizeof(want[i]), "p%d Undo%d", j, j);
					wantp[i] = want[i];
				}
				expect_sent(&w, mark, wantp, k + 1);
				ck_assert_int_eq(w.rows, 1 + k + 1 + (k + 1));
			}
		saga_def_free(d);
	}
}
END_TEST

/* Each running step's own deadlineMs goes with the move that starts it. */
START_TEST(machine_deadlines_per_step)
{
	struct saga_def *d = shape(4, true), *plain = shape(2, false);
	struct saga_move m = saga_machine_start(d);
	const char *why;

	ck_assert(m.deadline);
	ck_assert_int_eq(m.deadline_ms, 1000);
	for (int k = 0; k < 3; k++) {
		ck_assert(saga_machine_next(d, running(k), SAGA_ON_EVENT, d->steps[k].succeeded, &m,
					    &why));
		ck_assert(m.deadline);
		ck_assert_int_eq(m.deadline_ms, 1000 + k + 1);
	}
	ck_assert(saga_machine_next(d, running(3), SAGA_ON_EVENT, "Done3", &m, &why));
	ck_assert(!m.deadline);
	ck_assert_int_eq(m.deadline_ms, 0);
	ck_assert(saga_machine_next(d, running(2), SAGA_ON_DEADLINE, NULL, &m, &why));
	ck_assert(!m.deadline); /* compensating: no step deadline */
	m = saga_machine_start(plain);
	ck_assert(m.deadline);
	ck_assert_int_eq(m.deadline_ms, 0); /* STEP_TIMEOUT_MS */
	saga_def_free(d);
	saga_def_free(plain);
}
END_TEST

/*
 * saga_machine_expected names, for every event type, the one position
 * where it acts; at every other position of the definition it is ignored.
 */
START_TEST(machine_expected_is_unique)
{
	struct saga_def *d = shape(5, false);
	const char *types[3 * SAGA_DEF_MAX_STEPS];
	size_t n;
	struct saga_pos at;

	all_types(d, types, &n);
	for (size_t i = 0; i < n; i++) {
		ck_assert(saga_machine_expected(d, types[i], &at));
		for (int ph = SAGA_RUNNING; ph <= SAGA_DONE_COMPENSATED; ph++)
			for (int k = -1; k < 5; k++) {
				struct saga_pos p = { (enum saga_phase)ph, k };
				struct saga_move m;
				const char *why;
				bool inside = ph <= SAGA_UNDOING ? k >= 0 : k == -1;

				if (!inside)
					continue;
				ck_assert_int_eq(saga_machine_next(d, p, SAGA_ON_EVENT, types[i], &m, &why),
						 p.phase == at.phase && p.step == at.step);
			}
	}
	ck_assert(!saga_machine_expected(d, "Nope", &at));
	ck_assert(!saga_machine_expected(d, NULL, &at));
	ck_assert(saga_machine_expected(d, "Undone3", &at));
	ck_assert_int_eq(at.phase, SAGA_UNDOING);
	ck_assert_int_eq(at.step, 3);
	saga_def_free(d);
}
END_TEST

START_TEST(machine_positions_round_trip)
{
	struct saga_def *d = shape(3, false);
	struct saga_pos p, q;
	struct saga_move m;
	const char *why;

	for (int ph = SAGA_RUNNING; ph <= SAGA_DONE_COMPENSATED; ph++)
		for (int k = -1; k < 3; k++) {
			if ((ph <= SAGA_UNDOING) != (k >= 0))
				continue;
			p.phase = (enum saga_phase)ph;
			p.step = k;
			ck_assert_int_eq(saga_machine_pos(d, saga_machine_state(d, p),
							  saga_machine_compensation(d, p), &q),
					 0);
			ck_assert_int_eq(q.phase, p.phase);
			ck_assert_int_eq(q.step, p.step);
		}
	ck_assert_int_eq(saga_machine_pos(d, "PendingS3", NULL, &q), -1);
	ck_assert_int_eq(saga_machine_pos(d, "PendingS1", "S0", &q), -1);
	ck_assert_int_eq(saga_machine_pos(d, "Compensating", NULL, &q), -1);
	ck_assert_int_eq(saga_machine_pos(d, "Compensating", "S9", &q), -1);
	ck_assert_int_eq(saga_machine_pos(d, "Completed", "S0", &q), -1);
	ck_assert_int_eq(saga_machine_pos(d, NULL, NULL, &q), -1);
	ck_assert_int_eq(saga_machine_pos(d, "Pending", NULL, &q), -1);
	/* a position no saga of d can be at */
	ck_assert(!saga_machine_next(d, running(3), SAGA_ON_DEADLINE, NULL, &m, &why));
	ck_assert_str_eq(why, "unknown_state");
	ck_assert(!saga_machine_next(d, undoing(-1), SAGA_ON_EVENT, "Undone0", &m, &why));
	ck_assert_str_eq(why, "unknown_state");
	saga_def_free(d);
}
END_TEST

/* ---- the order definition: the order saga of 1.0 ---- */

/*
 * Its transitions, written out as 1.0's table had them: all ten, and the
 * legacy names of the awaited undo (refund, release) that 1.0
 * orchestrators read in the compensation column during a rolling upgrade.
 */
static const struct {
	const char *state, *undo; /* from */
	enum saga_trigger trigger;
	const char *type;
	const char *to, *new_undo;
	const char *message, *participant;
	bool deadline;
} order_table[] = {
	{ "PendingPayment", NULL, SAGA_ON_EVENT, "PaymentSucceeded", "PendingInventory", NULL,
	  "ReserveInventoryCommand", "inventory", true },
	{ "PendingPayment", NULL, SAGA_ON_EVENT, "PaymentFailed", "Failed", NULL, NULL, NULL, false },
	{ "PendingPayment", NULL, SAGA_ON_DEADLINE, NULL, "Compensating", "refund",
	  "RefundPaymentCommand", "payment", false },
	{ "PendingPayment", NULL, SAGA_ON_CANCEL, NULL, "Compensating", "refund",
	  "RefundPaymentCommand", "payment", false },
	{ "PendingInventory", NULL, SAGA_ON_EVENT, "InventoryReserved", "Completed", NULL, NULL,
	  NULL, false },
	{ "PendingInventory", NULL, SAGA_ON_EVENT, "InventoryReservationFailed", "Compensating",
	  "refund", "RefundPaymentCommand", "payment", false },
	{ "PendingInventory", NULL, SAGA_ON_DEADLINE, NULL, "Compensating", "release",
	  "ReleaseInventoryCommand", "inventory", false },
	{ "PendingInventory", NULL, SAGA_ON_CANCEL, NULL, "Compensating", "release",
	  "ReleaseInventoryCommand", "inventory", false },
	{ "Compensating", "release", SAGA_ON_EVENT, "InventoryReleased", "Compensating", "refund",
	  "RefundPaymentCommand", "payment", false },
	{ "Compensating", "refund", SAGA_ON_EVENT, "PaymentRefunded", "Compensated", NULL, NULL,
	  NULL, false },
};

START_TEST(machine_order_table)
{
	struct saga_def *d = compile(order_doc);
	struct saga_pos p;
	struct saga_move m;
	const char *why;

	for (size_t i = 0; i < sizeof(order_table) / sizeof(order_table[0]); i++) {
		struct saga_pos q;
		const char *cause = order_table[i].type ? order_table[i].type
				    : order_table[i].trigger == SAGA_ON_DEADLINE ? "StepTimeout"
										 : "Cancelled";

		ck_assert_int_eq(saga_machine_pos(d, order_table[i].state, order_table[i].undo, &p), 0);
		ck_assert_msg(saga_machine_next(d, p, order_table[i].trigger, order_table[i].type, &m,
						&why),
			      "row %zu", i);
		ck_assert_str_eq(m.from_state, order_table[i].state);
		ck_assert_str_eq(m.to_state, order_table[i].to);
		if (order_table[i].new_undo)
			ck_assert_str_eq(m.compensation, order_table[i].new_undo);
		else
			ck_assert_ptr_null(m.compensation);
		ck_assert_int_eq(m.deadline, order_table[i].deadline);
		ck_assert_str_eq(m.cause, cause);
		if (!order_table[i].message) {
			ck_assert_int_eq(m.action, SAGA_SEND_NONE);
		} else {
			ck_assert_str_eq(m.message, order_table[i].message);
			ck_assert_str_eq(m.participant, order_table[i].participant);
		}
		/* the legacy undo name reads back as the position it names */
		ck_assert_int_eq(saga_machine_pos(d, m.to_state, m.compensation, &q), 0);
		ck_assert_int_eq(q.phase, m.to.phase);
		ck_assert_int_eq(q.step, m.to.step);
	}
	/* a finished saga ignores everything, a compensating one what it does not await */
	ck_assert_int_eq(saga_machine_pos(d, "Completed", NULL, &p), 0);
	ck_assert(!saga_machine_next(d, p, SAGA_ON_EVENT, "PaymentRefunded", &m, &why));
	ck_assert_str_eq(why, "saga_finished");
	ck_assert_int_eq(saga_machine_pos(d, "Compensating", "release", &p), 0);
	ck_assert(!saga_machine_next(d, p, SAGA_ON_EVENT, "PaymentRefunded", &m, &why));
	ck_assert_str_eq(why, "saga_compensating");
	ck_assert(!saga_machine_next(d, p, SAGA_ON_CANCEL, NULL, &m, &why));
	ck_assert_str_eq(why, "saga_compensating");
	ck_assert_int_eq(saga_machine_pos(d, "PendingInventory", NULL, &p), 0);
	ck_assert(!saga_machine_next(d, p, SAGA_ON_EVENT, "PaymentSucceeded", &m, &why));
	ck_assert_str_eq(why, "unexpected_in_state");
	/* the step's own name reads back too */
	ck_assert_int_eq(saga_machine_pos(d, "Compensating", "Payment", &p), 0);
	ck_assert_int_eq(p.step, 0);

	/* the start: POST /orders' PendingPayment, OrderPlaced, a PayCommand with a deadline */
	m = saga_machine_start(d);
	ck_assert_ptr_null(m.from_state);
	ck_assert_str_eq(m.to_state, "PendingPayment");
	ck_assert_str_eq(m.cause, "OrderPlaced");
	ck_assert_str_eq(m.message, "PayCommand");
	ck_assert_str_eq(m.participant, "payment");
	ck_assert(m.deadline);
	saga_def_free(d);
}
END_TEST

static const char ship_doc[] =
	"{\"name\":\"ship\",\"version\":1,"
	"\"input\":{\"itemId\":{\"type\":\"id\"},\"note\":{\"type\":\"string\",\"maxLength\":50}},"
	"\"steps\":[{\"name\":\"Payment\",\"participant\":\"payment\",\"command\":\"PayCommand\","
	"\"succeeded\":\"PaymentSucceeded\",\"failed\":\"PaymentFailed\","
	"\"compensation\":\"RefundPaymentCommand\",\"compensated\":\"PaymentRefunded\"},"
	"{\"name\":\"Inventory\",\"participant\":\"inventory\",\"command\":\"Reserve\","
	"\"fields\":[\"itemId\"],\"succeeded\":\"InventoryReserved\","
	"\"failed\":\"InventoryReservationFailed\",\"compensation\":\"Release\","
	"\"compensated\":\"InventoryReleased\"},"
	"{\"name\":\"Shipping\",\"participant\":\"shipping\",\"command\":\"ShipOrderCommand\","
	"\"fields\":[\"note\",\"Inventory.slot\",\"Payment.receipt\",\"itemId\"],"
	"\"succeeded\":\"OrderShipped\",\"failed\":\"ShippingFailed\","
	"\"compensation\":\"CancelShipmentCommand\",\"compensated\":\"ShipmentCancelled\"}]}";

/*
 * missing_field: Inventory succeeded without the slot Shipping needs. The
 * saga moves to PendingShipping (the command cannot be built), then
 * Shipping fails as ShippingFailed: Inventory, then Payment, are undone.
 */
START_TEST(machine_missing_field_compensates)
{
	struct saga_def *d = compile(ship_doc);
	struct saga_move m;
	const char *why;

	ck_assert(saga_machine_next(d, running(1), SAGA_ON_EVENT, "InventoryReserved", &m, &why));
	ck_assert_int_eq(m.action, SAGA_SEND_COMMAND);
	ck_assert_int_eq(m.action_step, 2);
	/* Shipping's fields, as saga_step is sent them (saga_engine.c) */
	ck_assert_int_eq(d->steps[2].n_fields, 4);
	ck_assert_str_eq(d->steps[2].fields[1].ref, "Inventory.slot");
	ck_assert_str_eq(d->steps[2].fields[1].name, "slot");
	ck_assert_int_eq(d->steps[2].fields[1].step, 1);
	ck_assert_int_eq(d->steps[2].fields[0].step, -1);
	ck_assert(saga_machine_next(d, m.to, SAGA_ON_EVENT, d->steps[m.action_step].failed, &m,
				    &why));
	ck_assert_str_eq(m.from_state, "PendingShipping");
	ck_assert_str_eq(m.to_state, "Compensating");
	ck_assert_str_eq(m.compensation, "Inventory");
	ck_assert_str_eq(m.message, "Release");
	saga_def_free(d);
}
END_TEST

/* ---- migration ---- */

/* order_doc with one replacement (first occurrence of from by to), and a Shipping step. */
static struct saga_def *order_variant(const char *from, const char *to, bool shipping)
{
	char buf[4096];
	const char *at = from ? strstr(order_doc, from) : NULL;
	size_t len;

	if (from)
		ck_assert_ptr_nonnull(at);
	if (at)
		snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - order_doc), order_doc, to,
			 at + strlen(from));
	else
		snprintf(buf, sizeof(buf), "%s", order_doc);
	if (shipping) {
		len = strlen(buf) - 2; /* before "]}" */
		snprintf(buf + len, sizeof(buf) - len,
			 ",{\"name\":\"Shipping\",\"participant\":\"shipping\","
			 "\"command\":\"ShipOrderCommand\",\"fields\":[\"itemId\"],"
			 "\"succeeded\":\"OrderShipped\",\"failed\":\"ShippingFailed\","
			 "\"compensation\":\"CancelShipmentCommand\","
			 "\"compensated\":\"ShipmentCancelled\"}]}");
	}
	return compile(buf);
}

START_TEST(machine_migration)
{
	struct saga_def *a = compile(order_doc);
	struct json_object *input =
		parse("{\"customerId\":\"c1\",\"itemId\":\"i1\",\"qty\":50,\"amount\":100}");
	struct saga_def *b;

	/* a step added after: both running positions move */
	b = order_variant(NULL, NULL, true);
	ck_assert_ptr_null(saga_migrate_check(a, b, running(0), input));
	ck_assert_ptr_null(saga_migrate_check(a, b, running(1), input));
	/* a saga that is finished, or compensating, never moves */
	ck_assert_str_eq(saga_migrate_check(a, b, (struct saga_pos){ SAGA_DONE_COMPLETED, -1 }, input),
			 "moved");
	ck_assert_str_eq(saga_migrate_check(a, b, (struct saga_pos){ SAGA_DONE_FAILED, -1 }, input),
			 "moved");
	ck_assert_str_eq(
		saga_migrate_check(a, b, (struct saga_pos){ SAGA_DONE_COMPENSATED, -1 }, input),
		"moved");
	ck_assert_str_eq(saga_migrate_check(a, b, undoing(0), input), "compensating");
	ck_assert_str_eq(saga_migrate_check(a, b, undoing(1), input), "compensating");
	saga_def_free(b);

	/* fields and deadlines may differ: a begun step is the same without them */
	b = order_variant("\"fields\":[\"customerId\",\"amount\"],",
			  "\"fields\":[\"amount\"],\"deadlineMs\":5,", false);
	ck_assert_ptr_null(saga_migrate_check(a, b, running(1), input));
	saga_def_free(b);

	/* each of a begun step's seven names matters; a step not begun yet does not */
	static const struct {
		const char *from, *to;
	} inv[] = {
		{ "\"name\":\"Inventory\"", "\"name\":\"Stock\"" },
		{ "\"participant\":\"inventory\"", "\"participant\":\"stock\"" },
		{ "\"command\":\"ReserveInventoryCommand\"", "\"command\":\"Reserve\"" },
		{ "\"succeeded\":\"InventoryReserved\"", "\"succeeded\":\"Reserved\"" },
		{ "\"failed\":\"InventoryReservationFailed\"", "\"failed\":\"Rejected\"" },
		{ "\"compensation\":\"ReleaseInventoryCommand\"", "\"compensation\":\"Release\"" },
		{ "\"compensated\":\"InventoryReleased\"", "\"compensated\":\"Released\"" },
	};

	for (size_t i = 0; i < sizeof(inv) / sizeof(inv[0]); i++) {
		b = order_variant(inv[i].from, inv[i].to, false);
		ck_assert_ptr_null(saga_migrate_check(a, b, running(0), input));
		ck_assert_str_eq(saga_migrate_check(a, b, running(1), input), "steps_differ");
		/* compensating comes first */
		ck_assert_str_eq(saga_migrate_check(a, b, undoing(0), input), "compensating");
		saga_def_free(b);
	}
	b = order_variant("\"participant\":\"payment\"", "\"participant\":\"pay\"", false);
	ck_assert_str_eq(saga_migrate_check(a, b, running(0), input), "steps_differ");
	saga_def_free(b);

	/* fewer steps than begun */
	b = compile("{\"name\":\"order\",\"version\":2,\"input\":{},\"steps\":[{\"name\":\"Payment\","
		    "\"participant\":\"payment\",\"command\":\"PayCommand\",\"succeeded\":"
		    "\"PaymentSucceeded\",\"failed\":\"PaymentFailed\",\"compensation\":"
		    "\"RefundPaymentCommand\",\"compensated\":\"PaymentRefunded\"}]}");
	ck_assert_ptr_null(saga_migrate_check(a, b, running(0), input));
	ck_assert_str_eq(saga_migrate_check(a, b, running(1), input), "steps_differ");
	saga_def_free(b);

	/* the input must be valid for b; steps_differ comes first */
	b = order_variant("\"max\":1000}", "\"max\":10}", false);
	ck_assert_str_eq(saga_migrate_check(a, b, running(0), input), "input_invalid");
	saga_def_free(b);
	b = order_variant("\"input\":{", "\"input\":{\"gift\":{\"type\":\"id\"},", false);
	ck_assert_str_eq(saga_migrate_check(a, b, running(1), input), "input_invalid");
	saga_def_free(b);
	b = compile("{\"name\":\"order\",\"version\":2,\"input\":{\"qty\":{\"type\":\"integer\","
		    "\"min\":1,\"max\":10}},\"steps\":[{\"name\":\"Payment\","
		    "\"participant\":\"payment\",\"command\":\"PayCommand\",\"succeeded\":"
		    "\"PaymentSucceeded\",\"failed\":\"PaymentFailed\",\"compensation\":"
		    "\"RefundPaymentCommand\",\"compensated\":\"PaymentRefunded\"}]}");
	ck_assert_str_eq(saga_migrate_check(a, b, running(1), input), "steps_differ");
	ck_assert_str_eq(saga_migrate_check(a, b, running(0), input), "input_invalid");
	saga_def_free(b);
	json_object_put(input);
	saga_def_free(a);
}
END_TEST

Suite *saga_machine_suite(void)
{
	Suite *s = suite_create("saga_machine");
	TCase *tc = tcase_create("machine");

	tcase_add_checked_fixture(tc, load_order, free_order);

	tcase_add_test(tc, machine_success_every_shape);
	tcase_add_test(tc, machine_failure_at_each_step);
	tcase_add_test(tc, machine_deadline_and_cancel_at_each_step);
	tcase_add_test(tc, machine_deadlines_per_step);
	tcase_add_test(tc, machine_expected_is_unique);
	tcase_add_test(tc, machine_positions_round_trip);
	tcase_add_test(tc, machine_order_table);
	tcase_add_test(tc, machine_missing_field_compensates);
	tcase_add_test(tc, machine_migration);
	suite_add_tcase(s, tc);
	return s;
}
