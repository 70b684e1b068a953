/*
 * stock-first: a saga definition of the tests' own, stock first, then the
 * payment, on the real inventory and payment services
 * (tests/integration/sagas_as_data.c runs it through its steps,
 * admin_api.c lists it). CHARGE_EXTRA is spliced into the Charge step:
 * "" or, say, " \"deadlineMs\": %d," for a printf format.
 */
#ifndef PGSAGA_TEST_STOCK_FIRST_H
#define PGSAGA_TEST_STOCK_FIRST_H

#define STOCK_FIRST(CHARGE_EXTRA)                                                                \
	"{\"name\": \"stock-first\", \"version\": 1,\n"                                           \
	" \"input\": {\"customerId\": {\"type\": \"id\"}, \"itemId\": {\"type\": \"id\"},\n"        \
	"           \"qty\": {\"type\": \"integer\", \"min\": 1, \"max\": 10},\n"                  \
	"           \"amount\": {\"type\": \"integer\", \"min\": 1, \"max\": 100000000},\n"       \
	"           \"note\": {\"type\": \"string\", \"maxLength\": 20}},\n"                       \
	" \"steps\": [\n"                                                                         \
	"  {\"name\": \"Stock\", \"participant\": \"inventory\",\n"                               \
	"   \"command\": \"ReserveInventoryCommand\", \"fields\": [\"itemId\", \"qty\"],\n"        \
	"   \"succeeded\": \"InventoryReserved\", \"failed\": \"InventoryReservationFailed\",\n"   \
	"   \"compensation\": \"ReleaseInventoryCommand\", \"compensated\": \"InventoryReleased\"},\n" \
	"  {\"name\": \"Charge\", \"participant\": \"payment\"," CHARGE_EXTRA "\n"                \
	"   \"command\": \"PayCommand\", \"fields\": [\"customerId\", \"amount\"],\n"              \
	"   \"succeeded\": \"PaymentSucceeded\", \"failed\": \"PaymentFailed\",\n"                 \
	"   \"compensation\": \"RefundPaymentCommand\", \"compensated\": \"PaymentRefunded\"}]}\n"

#endif
