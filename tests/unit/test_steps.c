/* steps: PARTICIPANT_COMMANDS as saga-participant reads it. */
#include <check.h>
#include <string.h>

#include "steps.h"
#include "suites.h"

static const char shipping[] = "ShipOrderCommand=ship_order(OrderShipped|ShippingFailed)/"
			       "CancelShipmentCommand=cancel_shipment(ShipmentCancelled)";

START_TEST(one_step)
{
	struct steps s;
	char err[256];

	ck_assert_int_eq(steps_parse(shipping, &s, err, sizeof(err)), 0);
	ck_assert_uint_eq(s.n, 1);
	ck_assert_str_eq(s.step[0].command, "ShipOrderCommand");
	ck_assert_str_eq(s.step[0].function, "ship_order");
	ck_assert_str_eq(s.step[0].succeeded, "OrderShipped");
	ck_assert_str_eq(s.step[0].failed, "ShippingFailed");
	ck_assert_str_eq(s.step[0].compensation, "CancelShipmentCommand");
	ck_assert_str_eq(s.step[0].undo, "cancel_shipment");
	ck_assert_str_eq(s.step[0].compensated, "ShipmentCancelled");
}
END_TEST

START_TEST(two_steps_with_blanks)
{
	struct steps s;
	char err[256];

	ck_assert_int_eq(steps_parse(" A = f_1 ( B | C ) / D = _g ( E ) ,\n H=i(J|K)/L=m(N) ", &s, err,
				     sizeof(err)),
			 0);
	ck_assert_uint_eq(s.n, 2);
	ck_assert_str_eq(s.step[0].function, "f_1");
	ck_assert_str_eq(s.step[0].undo, "_g");
	ck_assert_str_eq(s.step[1].compensated, "N");
	ck_assert_str_eq(s.step[0].key, "");
}
END_TEST

/* [key]: the field whose value orders the commands committed together */
START_TEST(key_field)
{
	struct steps s;
	char err[256];

	ck_assert_int_eq(steps_parse("ReserveInventoryCommand [ item_Id2 ]=reserve(R|F)/"
				     "ReleaseInventoryCommand=release(X)",
				     &s, err, sizeof(err)),
			 0);
	ck_assert_str_eq(s.step[0].command, "ReserveInventoryCommand");
	ck_assert_str_eq(s.step[0].key, "item_Id2");
	ck_assert_str_eq(s.step[0].function, "reserve");
}
END_TEST

START_TEST(refused)
{
	static const struct {
		const char *text, *err;
	} bad[] = {
		{ "", "at 1: expected a command type" },
		{ "A=f(B|C)", "at 9: expected '/'" },
		{ "A=F(B|C)/D=g(E)", "at 3: expected a function name" },
		{ "A=9f(B|C)/D=g(E)", "at 3: expected a function name" },
		{ "A=f(B,C)/D=g(E)", "at 6: expected '|'" },
		{ "A=f(B|C)/D=g(E);", "at 16: expected ','" },
		{ "A=f(B|C)/D=g(E),", "at 17: expected a command type" },
		{ "A-1=f(B|C)/D=g(E)", "at 2: expected '='" },
		{ "A=f(B|C)/D=g(B)", "the message type B appears twice" },
		{ "A=f(B|C)/D=g(E),A=h(F|G)/H=i(J)", "the message type A appears twice" },
		{ "A[]=f(B|C)/D=g(E)", "at 3: expected a field name in [ ]" },
		{ "A[x-y]=f(B|C)/D=g(E)", "at 4: expected ']'" },
		{ "A[x]y=f(B|C)/D=g(E)", "at 5: expected '='" },
		{ "A=f(B|C)/D[x]=g(E)", "at 11: expected '='" },
	};
	struct steps s;
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(steps_parse(bad[i].text, &s, err, sizeof(err)), -1);
		ck_assert_msg(strstr(err, bad[i].err) != NULL, "%s: %s, want %s", bad[i].text, err,
			      bad[i].err);
	}
}
END_TEST

START_TEST(names)
{
	ck_assert(steps_name_valid("shipping"));
	ck_assert(steps_name_valid("a1_b"));
	ck_assert(!steps_name_valid(""));
	ck_assert(!steps_name_valid("1a"));
	ck_assert(!steps_name_valid("Shipping"));
	ck_assert(!steps_name_valid("ship-ping"));
	ck_assert(steps_name_valid("a234567890123456789012345678901234567890123456789012345678"));
	ck_assert(!steps_name_valid("a2345678901234567890123456789012345678901234567890123456789"));
}
END_TEST

Suite *steps_suite(void)
{
	Suite *s = suite_create("steps");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, one_step);
	tcase_add_test(tc, two_steps_with_blanks);
	tcase_add_test(tc, key_field);
	tcase_add_test(tc, refused);
	tcase_add_test(tc, names);
	suite_add_tcase(s, tc);
	return s;
}
