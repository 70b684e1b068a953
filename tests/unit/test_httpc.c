/* Peer base URLs: what httpc_peer_new accepts and refuses at start. */
#include <check.h>
#include <event2/event.h>
#include <stdbool.h>
#include <string.h>

#include "httpc.h"
#include "suites.h"

static bool accepted(const char *urls)
{
	const struct httpc_opts o = { .max_in_flight = 1, .timeout_ms = 1000,
				      .breaker_failures = 5, .breaker_open_ms = 1000 };
	struct event_base *base = event_base_new();
	char err[300] = "";
	struct httpc_peer *p;

	ck_assert_ptr_nonnull(base);
	p = httpc_peer_new(base, "payment", urls, &o, err, sizeof(err));
	ck_assert_msg(p != NULL || strstr(err, "URL") != NULL, "%s: %s", urls, err);
	if (p)
		httpc_peer_free(p);
	event_base_free(base);
	return p != NULL;
}

START_TEST(base_urls)
{
	ck_assert(accepted("http://127.0.0.1:8081"));
	ck_assert(accepted("http://localhost:8081/"));
	ck_assert(accepted("http://10.0.0.1,http://10.0.0.2:81"));
	/* an empty host used to start and fail every delivery */
	ck_assert(!accepted("http://"));
	ck_assert(!accepted("http://:8081"));
	/* a path, query or user part would be dropped without a word */
	ck_assert(!accepted("http://127.0.0.1:8081/some/path"));
	ck_assert(!accepted("http://127.0.0.1:8081/?a=1"));
	ck_assert(!accepted("http://u:p@127.0.0.1:8081"));
	ck_assert(!accepted("ftp://127.0.0.1"));
	ck_assert(!accepted("http://127.0.0.1:8081,http://"));
}
END_TEST

Suite *httpc_suite(void)
{
	Suite *s = suite_create("httpc");
	TCase *tc = tcase_create("urls");

	tcase_add_test(tc, base_urls);
	suite_add_tcase(s, tc);
	return s;
}
