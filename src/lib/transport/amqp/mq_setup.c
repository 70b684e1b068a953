/* mq_setup: see mq_setup.h. */
#include "mq_setup.h"

#include <amqp_tcp_socket.h>
#include <stdio.h>
#include <stdlib.h>

bool mq_rpc_ok(amqp_connection_state_t c, const char *what, char *why, size_t whylen)
{
	amqp_rpc_reply_t r = amqp_get_rpc_reply(c);

	switch (r.reply_type) {
	case AMQP_RESPONSE_NORMAL:
		return true;
	case AMQP_RESPONSE_LIBRARY_EXCEPTION:
		snprintf(why, whylen, "%s: %s", what, amqp_error_string2(r.library_error));
		return false;
	case AMQP_RESPONSE_SERVER_EXCEPTION:
		if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
			amqp_channel_close_t *cc = r.reply.decoded;

			snprintf(why, whylen, "%s: %.*s", what, (int)cc->reply_text.len,
				 (char *)cc->reply_text.bytes);
		} else if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
			amqp_connection_close_t *cc = r.reply.decoded;

			snprintf(why, whylen, "%s: %.*s", what, (int)cc->reply_text.len,
				 (char *)cc->reply_text.bytes);
		} else {
			snprintf(why, whylen, "%s: server error", what);
		}
		return false;
	default:
		snprintf(why, whylen, "%s: no reply", what);
		return false;
	}
}

amqp_table_entry_t mq_entry_str(const char *k, const char *v)
{
	amqp_table_entry_t e;

	e.key = amqp_cstring_bytes(k);
	e.value.kind = AMQP_FIELD_KIND_UTF8;
	e.value.value.bytes = amqp_cstring_bytes(v);
	return e;
}

static amqp_table_entry_t entry_bool(const char *k)
{
	amqp_table_entry_t e;

	e.key = amqp_cstring_bytes(k);
	e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
	e.value.value.boolean = 1;
	return e;
}

/* docs/protocol.md: declared by every service at start; declaring again is harmless. */
static bool declare(amqp_connection_state_t c, const struct mq_setup *s, char *why, size_t whylen)
{
	amqp_table_entry_t qargs[2] = { mq_entry_str("x-queue-type", "quorum"),
					mq_entry_str("x-dead-letter-exchange", "pgsaga.dead") };
	amqp_table_t qt = { 2, qargs };
	char q[48];

	amqp_exchange_declare(c, MQ_CHANNEL, amqp_cstring_bytes("pgsaga"), amqp_cstring_bytes("direct"),
			      0, 1, 0, 0, amqp_empty_table);
	if (!mq_rpc_ok(c, "declaring exchange pgsaga", why, whylen))
		return false;
	amqp_exchange_declare(c, MQ_CHANNEL, amqp_cstring_bytes("pgsaga.dead"),
			      amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
	if (!mq_rpc_ok(c, "declaring exchange pgsaga.dead", why, whylen))
		return false;
	amqp_queue_declare(c, MQ_CHANNEL, amqp_cstring_bytes("pgsaga.dead"), 0, 1, 0, 0,
			   amqp_empty_table);
	if (!mq_rpc_ok(c, "declaring queue pgsaga.dead", why, whylen))
		return false;
	amqp_queue_bind(c, MQ_CHANNEL, amqp_cstring_bytes("pgsaga.dead"),
			amqp_cstring_bytes("pgsaga.dead"), amqp_empty_bytes, amqp_empty_table);
	if (!mq_rpc_ok(c, "binding queue pgsaga.dead", why, whylen))
		return false;
	for (const char *const *svc = s->queues; *svc; svc++) {
		snprintf(q, sizeof(q), "pgsaga.%s", *svc);
		amqp_queue_declare(c, MQ_CHANNEL, amqp_cstring_bytes(q), 0, 1, 0, 0, qt);
		if (!mq_rpc_ok(c, "declaring a service queue", why, whylen))
			return false;
		amqp_queue_bind(c, MQ_CHANNEL, amqp_cstring_bytes(q), amqp_cstring_bytes("pgsaga"),
				amqp_cstring_bytes(*svc), amqp_empty_table);
		if (!mq_rpc_ok(c, "binding a service queue", why, whylen))
			return false;
	}
	return true;
}

amqp_connection_state_t mq_setup_open(const struct mq_setup *s, char *why, size_t whylen)
{
	struct timeval tv = { MQ_RPC_TIMEOUT_S, 0 };
	amqp_connection_state_t c = amqp_new_connection();
	amqp_socket_t *sock;
	amqp_table_entry_t caps[4] = { entry_bool("connection.blocked"),
				       entry_bool("consumer_cancel_notify"),
				       entry_bool("publisher_confirms"), entry_bool("basic.nack") };
	amqp_table_entry_t props[2];
	amqp_table_t pt = { 2, props };
	amqp_rpc_reply_t r;
	int rc;

	if (!c)
		abort();
	props[0].key = amqp_cstring_bytes("capabilities");
	props[0].value.kind = AMQP_FIELD_KIND_TABLE;
	props[0].value.value.table = (amqp_table_t){ 4, caps };
	props[1] = mq_entry_str("connection_name", s->service);
	sock = amqp_tcp_socket_new(c);
	if (!sock) {
		snprintf(why, whylen, "cannot create a socket");
		goto fail;
	}
	amqp_set_handshake_timeout(c, &tv);
	amqp_set_rpc_timeout(c, &tv);
	rc = amqp_socket_open_noblock(sock, s->ci->host, s->ci->port, &tv);
	if (rc != AMQP_STATUS_OK) {
		snprintf(why, whylen, "connecting to %s:%d: %s", s->ci->host, s->ci->port,
			 amqp_error_string2(rc));
		goto fail;
	}
	r = amqp_login_with_properties(c, s->ci->vhost, 0, 131072, MQ_HEARTBEAT_S, &pt,
				       AMQP_SASL_METHOD_PLAIN, s->ci->user, s->ci->password);
	if (r.reply_type != AMQP_RESPONSE_NORMAL) {
		snprintf(why, whylen, "login to %s:%d refused or failed", s->ci->host, s->ci->port);
		goto fail;
	}
	amqp_channel_open(c, MQ_CHANNEL);
	if (!mq_rpc_ok(c, "opening a channel", why, whylen) || !declare(c, s, why, whylen))
		goto fail;
	amqp_confirm_select(c, MQ_CHANNEL);
	if (!mq_rpc_ok(c, "confirm.select", why, whylen))
		goto fail;
	amqp_basic_qos(c, MQ_CHANNEL, 0, (uint16_t)s->prefetch, 0);
	if (!mq_rpc_ok(c, "basic.qos", why, whylen))
		goto fail;
	if (s->consume) {
		amqp_basic_consume(c, MQ_CHANNEL, amqp_cstring_bytes(s->consume), amqp_empty_bytes, 0,
				   0, 0, amqp_empty_table);
		if (!mq_rpc_ok(c, "basic.consume", why, whylen))
			goto fail;
	}
	return c;
fail:
	amqp_destroy_connection(c);
	return NULL;
}
