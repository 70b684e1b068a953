/*
 * Integration tests: the three real services on a throwaway PostgreSQL
 * cluster, over real sockets, under the transport SAGA_TEST_TRANSPORT names
 * (meson runs this program twice: integration, integration-amqp). One test
 * per guarantee; each names the mechanism it proves, and fails when that
 * mechanism is taken out.
 *
 * One program for every suite, so one cluster (and under amqp one broker)
 * for the run. One suite alone: CK_RUN_SUITE=http_edges meson test
 * integration.
 */
#include "harness.h"
#include "suites.h"

int main(void)
{
	Suite *const suites[] = {
		saga_flows_suite(), idempotency_suite(), delivery_suite(),
		databases_suite(),  http_edges_suite(),  roles_migrations_suite(),
		admission_suite(),  sagas_as_data_suite(),
	};

	return harness_run_all(suites, sizeof(suites) / sizeof(suites[0]));
}
