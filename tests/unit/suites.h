/* One Check suite factory per module; runner.c collects them. */
#ifndef PGSAGA_TEST_SUITES_H
#define PGSAGA_TEST_SUITES_H

#include <check.h>

Suite *backoff_suite(void);
Suite *envcfg_suite(void);
Suite *jsonx_suite(void);
Suite *uuid_suite(void);
Suite *breaker_suite(void);
Suite *httpd_suite(void);
Suite *admin_auth_suite(void);
Suite *httpc_suite(void);
Suite *delivery_policy_suite(void);
Suite *mq_nodes_suite(void);
Suite *tls_suite(void);
Suite *db_params_suite(void);
Suite *traceparent_suite(void);
Suite *saga_def_suite(void);
Suite *saga_machine_suite(void);
Suite *admission_suite(void);
Suite *steps_suite(void);

/* The text of src/orchestrator/definitions/<file> (malloc'd), for the saga suites. */
char *saga_test_definition(const char *file);

#endif
