/*
 * broker_selftest: proves the throwaway RabbitMQ node wrapper (broker.c over
 * scripts/rabbit-node) does what the broker tests rely on: a node that takes
 * connections, survives kill -9 with its durable data, restarts on the same
 * port, obeys rabbitmqctl, and leaves no process behind when stopped, killed,
 * or when the test that owns it dies.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker.h"
#include "clock.h"

static void publish_ok(const char *url, const char *exchange, const char *key,
		       const struct broker_msg *m)
{
	char err[256];

	if (broker_publish(url, exchange, key, m, err, sizeof(err)) != 0)
		ck_abort_msg("publish to %s/%s: %s", exchange, key, err);
}

START_TEST(test_node_kill_restart_stop)
{
	struct broker b;
	struct broker_msg m = { .message_id = "m-1", .type = "PayCommand", .app_id = "test",
				.body = "{\"n\":1}", .body_len = (size_t)-1 };
	struct broker_got got;
	char out[4096], err[256];
	pid_t pgid;

	broker_start(&b);
	ck_assert(broker_can_connect(b.url));

	/* a persistent, confirmed message in a durable queue */
	broker_declare_queue(b.url, "t.durable");
	publish_ok(b.url, "", "t.durable", &m);
	ck_assert_int_eq(broker_queue_depth(b.url, "t.durable"), 1);
	/* mandatory: an unroutable message comes back */
	ck_assert_int_ne(broker_publish(b.url, "", "t.nowhere", &m, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "returned");

	/*
	 * kill -9: every process of the node ends, connections are refused.
	 * The queue was declared a moment ago: sync first (broker_sync says
	 * why); what is tested is the confirmed message, not Mnesia's
	 * write-back.
	 */
	broker_sync(&b);
	pgid = broker_pgid(&b);
	ck_assert_int_gt(pgid, 0);
	ck_assert_int_gt(broker_group_size(pgid), 0);
	broker_kill(&b);
	ck_assert_int_eq(broker_group_size(pgid), 0);
	ck_assert_int_eq(broker_pgid(&b), 0);
	ck_assert(!broker_can_connect(b.url));

	/* same port, same data: the confirmed message survived */
	broker_restart(&b);
	ck_assert(broker_can_connect(b.url));
	ck_assert_int_eq(broker_queue_depth(b.url, "t.durable"), 1);
	ck_assert_int_eq(broker_get(b.url, "t.durable", &got), 1);
	ck_assert_str_eq(got.body, "{\"n\":1}");
	ck_assert_str_eq(got.message_id, "m-1");
	ck_assert_str_eq(got.type, "PayCommand");
	ck_assert_str_eq(got.routing_key, "t.durable");
	broker_got_free(&got);
	ck_assert_int_eq(broker_get(b.url, "t.durable", &got), 0);

	/* rabbitmqctl on this node */
	publish_ok(b.url, "", "t.durable", &m);
	ck_assert_int_eq(broker_ctl(&b, out, sizeof(out), "list_queues", "name", "messages",
				    NULL), 0);
	ck_assert_msg(strstr(out, "t.durable\t1") != NULL, "list_queues said: %s", out);
	ck_assert_int_eq(broker_ctl(&b, NULL, 0, "set_vm_memory_high_watermark", "0.5", NULL), 0);
	ck_assert_int_eq(broker_ctl(&b, NULL, 0, "delete_queue", "t.durable", NULL), 0);
	ck_assert_int_eq(broker_queue_depth(b.url, "t.durable"), -1);
	ck_assert_int_ne(broker_ctl(&b, NULL, 0, "no_such_command", NULL), 0);

	/* graceful stop: nothing left running */
	pgid = broker_pgid(&b);
	ck_assert_int_gt(pgid, 0);
	broker_stop(&b);
	ck_assert_int_eq(broker_group_size(pgid), 0);
	ck_assert(!broker_can_connect(b.url));
	ck_assert_int_ne(broker_ctl(&b, NULL, 0, "list_queues", NULL), 0);

	broker_destroy(&b);
	ck_assert_int_ne(access(b.dir, F_OK), 0);
}
END_TEST

/* A test process that dies without broker_destroy leaves no node behind. */
START_TEST(test_owner_death_destroys_node)
{
	int pfd[2];
	pid_t child, pgid = 0;
	char dir[PATH_MAX] = "";
	int status, i;

	ck_assert_int_eq(pipe(pfd), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		struct broker b;
		pid_t g;

		close(pfd[0]);
		broker_start(&b);
		g = broker_pgid(&b);
		if (write(pfd[1], &g, sizeof(g)) != sizeof(g) ||
		    write(pfd[1], b.dir, sizeof(b.dir)) != (ssize_t)sizeof(b.dir))
			_exit(1);
		/* dies as a crashed test would: no broker_destroy */
		raise(SIGKILL);
	}
	close(pfd[1]);
	ck_assert_int_eq(read(pfd[0], &pgid, sizeof(pgid)), sizeof(pgid));
	ck_assert_int_eq(read(pfd[0], dir, sizeof(dir)), sizeof(dir));
	close(pfd[0]);
	waitpid(child, &status, 0);
	ck_assert(WIFSIGNALED(status));
	ck_assert_int_gt(pgid, 0);
	for (i = 0; i < 600 && (broker_group_size(pgid) > 0 || access(dir, F_OK) == 0); i++)
		sleep_ms(100);
	ck_assert_int_eq(broker_group_size(pgid), 0);
	ck_assert_msg(access(dir, F_OK) != 0, "%s is still there", dir);
}
END_TEST

static Suite *broker_suite(void)
{
	Suite *s = suite_create("broker");
	TCase *tc = tcase_create("node");

	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, test_node_kill_restart_stop);
	tcase_add_test(tc, test_owner_death_destroys_node);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(broker_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
