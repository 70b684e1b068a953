/* fixture: see fixture.h. */
#include "fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

struct saga_env env;

void fixture_setup(void)
{
	env_create(&env);
}

void fixture_teardown(void)
{
	env_destroy(&env);
}

TCase *fixture_tcase(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_add_checked_fixture(tc, fixture_setup, fixture_teardown);
	tcase_set_timeout(tc, 120);
	return tc;
}

void seed_stock(const char *item, int n)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO inventory.stock (item_id, available) VALUES ('%s', %d)", item, n);
	free(env_sql(&env, sql, 0, NULL));
}

bool wait_state(const char *saga, const char *state)
{
	char sql[300];

	snprintf(sql, sizeof(sql),
		 "SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%.36s'", saga);
	return env_wait_sql(&env, sql, state, WAIT_MS);
}

static char auth_header[128];

const char *internal_auth(void)
{
	snprintf(auth_header, sizeof(auth_header), "Authorization: Bearer %s", env.token);
	return auth_header;
}

const char *const *internal_headers(void)
{
	static const char *h[2];

	h[0] = internal_auth();
	h[1] = NULL;
	return h;
}

int post_internal(enum svc s, const char *path, const char *body, struct http_resp *r)
{
	ck_assert_int_eq(http_do(env.port[s], "POST", path, internal_headers(), body, (size_t)-1, r),
			 0);
	return r->status;
}

void faults_off(enum svc s)
{
	struct http_resp r;

	ck_assert_int_eq(post_internal(s, "/admin/faults",
				       "{\"failRate\":0,\"delayMs\":0,\"dropResponseRate\":0}", &r),
			 200);
	http_resp_free(&r);
}

int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}
