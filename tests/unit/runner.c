/* Runs every unit suite; the exit status says whether all passed. */
#include <stdlib.h>

#include "suites.h"

int main(void)
{
	Suite *(*const factories[])(void) = {
		backoff_suite, envcfg_suite, jsonx_suite, uuid_suite, breaker_suite, httpd_suite,
		admin_auth_suite, httpc_suite, delivery_policy_suite, mq_nodes_suite, tls_suite, db_params_suite,
		traceparent_suite,
		saga_def_suite, saga_machine_suite, admission_suite, steps_suite,
	};
	SRunner *sr = srunner_create(NULL);
	size_t i;
	int failed;

	for (i = 0; i < sizeof(factories) / sizeof(factories[0]); i++)
		srunner_add_suite(sr, factories[i]());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
