/*
 * fixture: the test environment most suites use, over the harness (the
 * cluster, the services, the HTTP client): one saga_env per test, made by
 * the checked fixture in Check's child and destroyed after it, and the
 * helpers the suites share about it.
 */
#ifndef PGSAGA_TEST_FIXTURE_H
#define PGSAGA_TEST_FIXTURE_H

#include <check.h>
#include <stdbool.h>

#include "harness.h"

/* How long a test waits for the system to get where it must. */
#define WAIT_MS 20000

/* The running test's database and services. */
extern struct saga_env env;

/* The checked fixture: env_create before each test, env_destroy after it. */
void fixture_setup(void);
void fixture_teardown(void);
/* A test case with that fixture and a 120 s timeout. */
TCase *fixture_tcase(const char *name);

/* Puts n of item in inventory.stock. */
void seed_stock(const char *item, int n);
/* Polls the saga's state until it is state; false after WAIT_MS. */
bool wait_state(const char *saga, const char *state);

/* "Authorization: Bearer <env.token>": what the internal endpoints want. */
const char *internal_auth(void);
/* That header alone, a NULL-terminated list for http_do. */
const char *const *internal_headers(void);
/* POSTs body to path on service s with that header; returns the status. */
int post_internal(enum svc s, const char *path, const char *body, struct http_resp *r);
/* Service s's injected faults off (POST /admin/faults): its work goes through from now on. */
void faults_off(enum svc s);

/* A loopback TCP port that was free a moment ago. */
int free_port(void);

#endif
