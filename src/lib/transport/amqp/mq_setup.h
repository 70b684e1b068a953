/*
 * mq_setup: opening one AMQP connection the way pgsaga needs it, for the
 * mq_link thread (every call blocks; each step is bounded by
 * MQ_RPC_TIMEOUT_S): TCP, or TLS for amqps:// (below), a login that
 * advertises the capabilities the link relies on (connection.blocked,
 * consumer_cancel_notify, publisher_confirms, basic.nack), channel
 * MQ_CHANNEL, the topology (docs/protocol.md: exchange pgsaga
 * direct; quorum queues pgsaga.<service> bound by the service's name and
 * dead-lettering to the fanout pgsaga.dead, bound to queue pgsaga.dead),
 * publisher confirms, basic.qos prefetch, and the consumer if asked.
 *
 * Topology and least privilege. What a service needs is declared on
 * MQ_CHANNEL and must succeed: the exchange pgsaga and its own queue with its
 * binding. The rest (the fanout pgsaga.dead with its queue, and the queues of
 * the destinations it sends to, s->queues and those mq_setup_declare_peer
 * adds) is declared on MQ_SPARE_CHANNEL, one
 * declaration at a time: when the broker refuses one (403 ACCESS_REFUSED:
 * the service runs as a RabbitMQ user without configure rights there, see
 * docs/tls.md "One RabbitMQ user per service"), that channel is reopened and the
 * service goes on; each peer declares its own queue, and whoever may declare
 * pgsaga.dead (the orchestrator's user) does. Any other failure to declare
 * pgsaga.dead is logged too, and never keeps a service from its own queue.
 *
 * Why the sender declares its destinations' queues too, when the receiver
 * declares its own anyway: a participant a saga definition names may start
 * after the first command to it was sent. A mandatory publish with no queue
 * bound is returned, a failed attempt retried with backoff, which only
 * delays the loss: after RETRY_MAX_ATTEMPTS it is a dead letter. Declared by
 * the sender, the queue holds the command until the participant comes. Where
 * the sender's broker user may not declare it, the return is what is left:
 * retried, and a dead letter once the attempts run out.
 *
 * A queue that exists already is kept as it is (a passive declaration
 * first): the broker refuses a declaration whose arguments differ from the
 * queue's, e.g. x-quorum-initial-group-size from a longer node list, and the
 * group size only counts when a queue is made.
 *
 * amqps:// (rabbitmq-c's OpenSSL socket; its OpenSSL objects are created,
 * used and freed on the calling thread only): TLS 1.2 or later; the broker's
 * certificate must verify against the CA bundle loaded by mq_tls_load (else
 * the system's trust store) and name the URL's host (OpenSSL's own check,
 * which knows IP addresses too); the client certificate it loaded, if any, is
 * presented. The files are loaded apart from the connection (mq_tls_load), so
 * that the caller can keep the last set that loaded when a file goes bad.
 */
#ifndef PGSAGA_MQ_SETUP_H
#define PGSAGA_MQ_SETUP_H

#include <amqp.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

#define MQ_CHANNEL 1
#define MQ_SPARE_CHANNEL 2 /* optional declarations: a refusal closes only it */
#define MQ_HEARTBEAT_S 10
#define MQ_RPC_TIMEOUT_S 5

struct mq_setup {
	const struct amqp_connection_info *ci;
	const char *service;             /* the connection's name */
	const char *const *queues;       /* the destinations' (pgsaga.<name>), NULL-ended */
	int prefetch;
	const char *consume;             /* the queue to consume, or NULL */
	SSL_CTX *tls;                    /* amqps: from mq_tls_load (borrowed) */
	/*
	 * x-quorum-initial-group-size of the queues: the nodes listed in
	 * AMQP_URL (at most 5). Above 1, pgsaga.dead is a quorum queue too.
	 */
	int group_size;
};

/* A connection ready for use, or NULL with the reason in why. Strings borrowed. */
amqp_connection_state_t mq_setup_open(const struct mq_setup *s, char *why, size_t whylen);

/*
 * A destination's queue pgsaga.<name>, declared on the spare channel of a
 * connection mq_setup_open made, as it declares those of s->queues (skipped
 * when the broker refuses it with 403). Frames that arrive meanwhile for
 * MQ_CHANNEL are kept by the library for the next read. false: the
 * connection is no longer usable, why says why.
 */
bool mq_setup_declare_peer(amqp_connection_state_t c, const struct mq_setup *s, const char *name,
			   char *why, size_t whylen);

/* True when the connection's last RPC succeeded; else why says what failed. */
bool mq_rpc_ok(amqp_connection_state_t c, const char *what, char *why, size_t whylen);

/* A table entry with a string value; both strings borrowed. */
amqp_table_entry_t mq_entry_str(const char *key, const char *value);

/*
 * amqps: the files, loaded completely (CA bundle, else the system's trust
 * store; certificate chain and key, which must match, when both are set)
 * into an SSL_CTX that only holds them for mq_setup_open to copy. NULL with
 * the reason in err, naming the variable and the file. On the calling
 * thread; free with SSL_CTX_free.
 */
SSL_CTX *mq_tls_load(const char *ca, const char *cert, const char *key, char *err,
		     size_t errlen);

#endif
