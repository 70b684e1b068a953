/*
 * The integration suites, one factory per subject, collected by runner.c
 * into one program (one PostgreSQL cluster for all of them).
 */
#ifndef PGSAGA_INTEGRATION_SUITES_H
#define PGSAGA_INTEGRATION_SUITES_H

#include <check.h>

Suite *saga_flows_suite(void);       /* saga_flows.c */
Suite *idempotency_suite(void);      /* idempotency.c */
Suite *delivery_suite(void);         /* delivery.c */
Suite *databases_suite(void);        /* databases.c */
Suite *http_edges_suite(void);       /* http_edges.c */
Suite *roles_migrations_suite(void); /* roles_migrations.c */
Suite *admission_suite(void);        /* admission.c */
Suite *sagas_as_data_suite(void);    /* sagas_as_data.c */

#endif
