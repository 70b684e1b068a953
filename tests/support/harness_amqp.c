/*
 * harness_amqp: the transport under test. See harness.h.
 */
#define _GNU_SOURCE
#include "harness.h"

#include "broker.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct broker node; /* started by the runner, inherited by each test */

bool harness_amqp(void)
{
	const char *t = getenv("SAGA_TEST_TRANSPORT");

	return t && strcmp(t, "amqp") == 0;
}

const char *harness_transport(void)
{
	return harness_amqp() ? "amqp" : "http";
}

void harness_broker_start(void)
{
	if (harness_amqp())
		broker_start(&node);
}

void harness_broker_stop(void)
{
	if (harness_amqp())
		broker_destroy(&node);
}

int harness_run(Suite *s)
{
	return harness_run_all(&s, 1);
}

int harness_run_all(Suite *const suites[], size_t n)
{
	SRunner *sr;
	int failed;

	harness_cluster_start();
	harness_broker_start();
	sr = srunner_create(NULL);
	for (size_t i = 0; i < n; i++)
		srunner_add_suite(sr, suites[i]);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	harness_broker_stop();
	harness_cluster_stop();
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

struct broker *harness_broker(void)
{
	return &node;
}

const char *harness_amqp_url(void)
{
	return node.url;
}

/* One blocking connection on channel 1 for the helpers below. */
static amqp_connection_state_t mq_open(void)
{
	char url[256];
	struct amqp_connection_info ci;
	amqp_connection_state_t c = amqp_new_connection();
	amqp_socket_t *s = amqp_tcp_socket_new(c);
	struct timeval tv = { 10, 0 };

	snprintf(url, sizeof(url), "%s", node.url);
	if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK)
		ck_abort_msg("bad AMQP URL %s", node.url);
	if (!s || amqp_socket_open_noblock(s, ci.host, ci.port, &tv) != AMQP_STATUS_OK)
		ck_abort_msg("cannot connect to %s", node.url);
	if (amqp_login(c, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password)
		    .reply_type != AMQP_RESPONSE_NORMAL)
		ck_abort_msg("login to %s failed", node.url);
	amqp_channel_open(c, 1);
	if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
		ck_abort_msg("channel.open on %s failed", node.url);
	return c;
}

static void mq_close(amqp_connection_state_t c)
{
	amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
	amqp_connection_close(c, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(c);
}

void harness_broker_reset(void)
{
	static const char *const queues[] = { "pgsaga.orchestrator", "pgsaga.payment",
					      "pgsaga.inventory", "pgsaga.shipping",
					      "pgsaga.dead", "tap" };
	amqp_connection_state_t c;

	if (!harness_amqp())
		return;
	c = mq_open();
	for (size_t i = 0; i < sizeof(queues) / sizeof(queues[0]); i++) {
		amqp_queue_delete(c, 1, amqp_cstring_bytes(queues[i]), 0, 0);
		if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
			ck_abort_msg("queue.delete %s failed", queues[i]);
	}
	mq_close(c);
}

void harness_broker_delete_queue(const char *queue)
{
	amqp_connection_state_t c = mq_open();

	amqp_queue_delete(c, 1, amqp_cstring_bytes(queue), 0, 0);
	if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
		ck_abort_msg("queue.delete %s failed", queue);
	mq_close(c);
}

void harness_broker_tap(const char *queue, const char *routing_key)
{
	amqp_connection_state_t c = mq_open();

	amqp_queue_declare(c, 1, amqp_cstring_bytes(queue), 0, 0, 0, 0, amqp_empty_table);
	if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
		ck_abort_msg("queue.declare %s failed", queue);
	amqp_queue_bind(c, 1, amqp_cstring_bytes(queue), amqp_cstring_bytes("pgsaga"),
			amqp_cstring_bytes(routing_key), amqp_empty_table);
	if (amqp_get_rpc_reply(c).reply_type != AMQP_RESPONSE_NORMAL)
		ck_abort_msg("queue.bind %s to pgsaga/%s failed", queue, routing_key);
	mq_close(c);
}
