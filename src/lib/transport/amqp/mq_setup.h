/*
 * mq_setup: opening one AMQP connection the way pgsaga needs it, for the
 * mq_link thread (every call blocks; each step is bounded by
 * MQ_RPC_TIMEOUT_S): TCP, a login that advertises the capabilities the link
 * relies on (connection.blocked, consumer_cancel_notify, publisher_confirms,
 * basic.nack), channel MQ_CHANNEL, the topology of docs/protocol.md (exchange pgsaga
 * direct; quorum queues pgsaga.<service> bound by the service's name and
 * dead-lettering to the fanout pgsaga.dead, bound to queue pgsaga.dead),
 * publisher confirms, basic.qos prefetch, and the consumer if asked.
 */
#ifndef PGSAGA_MQ_SETUP_H
#define PGSAGA_MQ_SETUP_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>

#define MQ_CHANNEL 1
#define MQ_HEARTBEAT_S 10
#define MQ_RPC_TIMEOUT_S 5

struct mq_setup {
	const struct amqp_connection_info *ci;
	const char *service;             /* the connection's name */
	const char *const *queues;       /* services whose queues to declare, NULL-ended */
	int prefetch;
	const char *consume;             /* the queue to consume, or NULL */
};

/* A connection ready for use, or NULL with the reason in why. Strings borrowed. */
amqp_connection_state_t mq_setup_open(const struct mq_setup *s, char *why, size_t whylen);

/* True when the connection's last RPC succeeded; else why says what failed. */
bool mq_rpc_ok(amqp_connection_state_t c, const char *what, char *why, size_t whylen);

/* A table entry with a string value; both strings borrowed. */
amqp_table_entry_t mq_entry_str(const char *key, const char *value);

#endif
