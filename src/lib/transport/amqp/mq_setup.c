/* mq_setup: see mq_setup.h. */
#include "mq_setup.h"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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

static amqp_table_entry_t entry_int(const char *k, int v)
{
	amqp_table_entry_t e;

	e.key = amqp_cstring_bytes(k);
	e.value.kind = AMQP_FIELD_KIND_I32;
	e.value.value.i32 = v;
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

enum declared { DECLARED, REFUSED, LOST };

static bool channel_closed(amqp_rpc_reply_t r)
{
	return r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
	       r.reply.id == AMQP_CHANNEL_CLOSE_METHOD;
}

/* The broker closed channel ch (a refusal): acknowledge it so that ch can be
 * opened again. */
static bool close_ok(amqp_connection_state_t c, amqp_channel_t ch)
{
	amqp_channel_close_ok_t ok = { 0 };

	return amqp_send_method(c, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) == AMQP_STATUS_OK;
}

/* After the last RPC on ch failed: REFUSED (the broker closed ch, which is
 * acknowledged; *code says why) or LOST. */
static enum declared failed(amqp_connection_state_t c, amqp_channel_t ch, int *code)
{
	amqp_rpc_reply_t r = amqp_get_rpc_reply(c);

	if (!channel_closed(r))
		return LOST;
	*code = ((amqp_channel_close_t *)r.reply.decoded)->reply_code;
	return close_ok(c, ch) ? REFUSED : LOST;
}

/*
 * Queue q, declared with args only when it does not exist yet: the broker
 * refuses a declaration whose arguments differ from the queue's (a queue
 * made before x-quorum-initial-group-size was sent, or when AMQP_URL listed
 * fewer nodes), and the group size only counts at creation anyway. A
 * passive declaration of a missing queue closes the channel (404 NOT_FOUND):
 * it is opened again for the real one. Then bound to exchange ex by key, if
 * ex is set.
 */
static enum declared declare_queue(amqp_connection_state_t c, amqp_channel_t ch, const char *q,
				   amqp_table_t args, const char *ex, const char *key, char *why,
				   size_t whylen, int *code)
{
	char what[112];

	snprintf(what, sizeof(what), "declaring queue %s", q);
	amqp_queue_declare(c, ch, amqp_cstring_bytes(q), 1, 1, 0, 0, amqp_empty_table);
	if (!mq_rpc_ok(c, what, why, whylen)) {
		enum declared d = failed(c, ch, code);

		if (d != REFUSED || *code != AMQP_NOT_FOUND)
			return d;
		amqp_channel_open(c, ch);
		if (!mq_rpc_ok(c, "opening a channel again", why, whylen))
			return LOST;
		amqp_queue_declare(c, ch, amqp_cstring_bytes(q), 0, 1, 0, 0, args);
		if (!mq_rpc_ok(c, what, why, whylen))
			return failed(c, ch, code);
	}
	if (!ex)
		return DECLARED;
	snprintf(what, sizeof(what), "binding queue %s", q);
	amqp_queue_bind(c, ch, amqp_cstring_bytes(q), amqp_cstring_bytes(ex), amqp_cstring_bytes(key),
			amqp_empty_table);
	return mq_rpc_ok(c, what, why, whylen) ? DECLARED : failed(c, ch, code);
}

/* A service queue: durable, quorum (a replica on each node listed, at most
 * 5), dead-lettering to pgsaga.dead, bound to pgsaga with the service's name
 * as routing key. */
static enum declared declare_service_queue(amqp_connection_state_t c, amqp_channel_t ch,
					   const struct mq_setup *s, const char *svc, char *why,
					   size_t whylen, int *code)
{
	amqp_table_entry_t qargs[3] = { mq_entry_str("x-queue-type", "quorum"),
					mq_entry_str("x-dead-letter-exchange", "pgsaga.dead"),
					entry_int("x-quorum-initial-group-size", s->group_size) };
	amqp_table_t qt = { 3, qargs };
	char q[80];

	snprintf(q, sizeof(q), "pgsaga.%s", svc);
	return declare_queue(c, ch, q, qt, "pgsaga", svc, why, whylen, code);
}

/*
 * A declaration on the spare channel was refused (the channel is closed and
 * acknowledged): log it and open the channel again; false when the
 * connection is no longer usable. 403 is a RabbitMQ user without configure
 * rights there; anything else (pgsaga.dead, say) is worth a warning, and
 * never keeps the service from its own queue either.
 */
static bool spare_refused(amqp_connection_state_t c, int code, char *why, size_t whylen)
{
	if (code == AMQP_ACCESS_REFUSED)
		log_info("amqp: %s; going on without it (this RabbitMQ user may not declare it)", why);
	else
		log_warn("amqp: %s; going on without it (docs/operations.md)", why);
	amqp_channel_open(c, MQ_SPARE_CHANNEL);
	return mq_rpc_ok(c, "reopening the spare channel", why, whylen);
}

/*
 * A destination's queue, on the open spare channel: skipped when this broker
 * user may not declare it (403); false when it failed otherwise (the
 * connection is not used).
 */
static bool declare_peer(amqp_connection_state_t c, const struct mq_setup *s, const char *svc,
			 char *why, size_t whylen)
{
	int code = 0;
	enum declared d;

	if (strcmp(svc, s->service) == 0)
		return true; /* its own: on MQ_CHANNEL, already */
	d = declare_service_queue(c, MQ_SPARE_CHANNEL, s, svc, why, whylen, &code);
	return d == DECLARED ||
	       (d == REFUSED && code == AMQP_ACCESS_REFUSED && spare_refused(c, code, why, whylen));
}

/* The shared topology on the spare channel, each piece only where permitted. */
static bool declare_shared(amqp_connection_state_t c, const struct mq_setup *s, char *why,
			   size_t whylen)
{
	const amqp_channel_t ch = MQ_SPARE_CHANNEL;
	/* with several nodes, pgsaga.dead is on a majority of them too */
	amqp_table_entry_t dargs[2] = { mq_entry_str("x-queue-type", "quorum"),
					entry_int("x-quorum-initial-group-size", s->group_size) };
	amqp_table_t dt = { 2, dargs };
	enum declared d = DECLARED;
	int code = 0;

	amqp_channel_open(c, ch);
	if (!mq_rpc_ok(c, "opening the spare channel", why, whylen))
		return false;
	amqp_exchange_declare(c, ch, amqp_cstring_bytes("pgsaga.dead"), amqp_cstring_bytes("fanout"),
			      0, 1, 0, 0, amqp_empty_table);
	if (!mq_rpc_ok(c, "declaring exchange pgsaga.dead", why, whylen))
		d = failed(c, ch, &code);
	if (d == DECLARED)
		d = declare_queue(c, ch, "pgsaga.dead", s->group_size > 1 ? dt : amqp_empty_table,
				  "pgsaga.dead", "pgsaga.dead", why, whylen, &code);
	if (d == LOST || (d == REFUSED && !spare_refused(c, code, why, whylen)))
		return false;
	for (const char *const *svc = s->queues; *svc; svc++)
		if (!declare_peer(c, s, *svc, why, whylen))
			return false;
	amqp_channel_close(c, ch, AMQP_REPLY_SUCCESS);
	return mq_rpc_ok(c, "closing the spare channel", why, whylen);
}

bool mq_setup_declare_peer(amqp_connection_state_t c, const struct mq_setup *s, const char *name,
			   char *why, size_t whylen)
{
	amqp_channel_open(c, MQ_SPARE_CHANNEL);
	if (!mq_rpc_ok(c, "opening the spare channel", why, whylen) ||
	    !declare_peer(c, s, name, why, whylen))
		return false;
	amqp_channel_close(c, MQ_SPARE_CHANNEL, AMQP_REPLY_SUCCESS);
	return mq_rpc_ok(c, "closing the spare channel", why, whylen);
}

/* Declared at every start; a queue that exists is kept. See mq_setup.h. */
static bool declare(amqp_connection_state_t c, const struct mq_setup *s, char *why, size_t whylen)
{
	int code = 0;

	amqp_exchange_declare(c, MQ_CHANNEL, amqp_cstring_bytes("pgsaga"), amqp_cstring_bytes("direct"),
			      0, 1, 0, 0, amqp_empty_table);
	if (!mq_rpc_ok(c, "declaring exchange pgsaga", why, whylen))
		return false;
	if (declare_service_queue(c, MQ_CHANNEL, s, s->service, why, whylen, &code) != DECLARED)
		return false;
	why[0] = '\0';
	if (!declare_shared(c, s, why, whylen))
		return false;
	why[0] = '\0';
	return true;
}

static bool is_ip(const char *host)
{
	unsigned char buf[16];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

static bool set(const char *s)
{
	return s && *s;
}

/* The first OpenSSL error on the thread's queue, as text; clears the queue. */
static const char *ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_peek_error();

	snprintf(buf, len, "%s",
		 !e ? "no usable content"
		    : ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "unknown error");
	ERR_clear_error();
	return buf;
}

SSL_CTX *mq_tls_load(const char *ca, const char *cert, const char *key, char *err, size_t errlen)
{
	SSL_CTX *t = SSL_CTX_new(TLS_client_method());
	char why[160];

	if (!t) {
		snprintf(err, errlen, "TLS: %s", ssl_reason(why, sizeof(why)));
		return NULL;
	}
	if (set(ca) ? SSL_CTX_load_verify_locations(t, ca, NULL) != 1
		    : SSL_CTX_set_default_verify_paths(t) != 1) {
		snprintf(err, errlen, "TLS_CA_FILE '%s': %s", set(ca) ? ca : "(system)",
			 ssl_reason(why, sizeof(why)));
		goto fail;
	}
	if (!set(cert) || !set(key))
		return t;
	if (SSL_CTX_use_certificate_chain_file(t, cert) != 1) {
		snprintf(err, errlen, "TLS_CERT_FILE '%s': %s", cert, ssl_reason(why, sizeof(why)));
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(t, key, SSL_FILETYPE_PEM) != 1) {
		snprintf(err, errlen, "TLS_KEY_FILE '%s': %s", key, ssl_reason(why, sizeof(why)));
		goto fail;
	}
	if (SSL_CTX_check_private_key(t) != 1) {
		snprintf(err, errlen, "TLS_KEY_FILE '%s' does not match TLS_CERT_FILE '%s'", key,
			 cert);
		goto fail;
	}
	return t;
fail:
	SSL_CTX_free(t);
	ERR_clear_error();
	return NULL;
}

/*
 * amqps: the socket's OpenSSL context, set up as mq_setup.h says, with what
 * mq_tls_load loaded (shared by reference: the CA store, the certificate,
 * its chain and the key).
 */
static bool tls_setup(amqp_socket_t *sock, const struct mq_setup *s, char *why, size_t whylen)
{
	SSL_CTX *ctx = amqp_ssl_socket_get_context(sock);
	X509 *cert = SSL_CTX_get0_certificate(s->tls);
	STACK_OF(X509) *chain = NULL;
	X509_VERIFY_PARAM *vp;
	int rc;

	if (!ctx) {
		snprintf(why, whylen, "TLS: no OpenSSL context");
		return false;
	}
	/* the library's own host name check knows DNS names only: OpenSSL's below */
	amqp_ssl_socket_set_verify_peer(sock, 1);
	amqp_ssl_socket_set_verify_hostname(sock, 0);
	rc = amqp_ssl_socket_set_ssl_versions(sock, AMQP_TLSv1_2, AMQP_TLSvLATEST);
	if (rc != AMQP_STATUS_OK) {
		snprintf(why, whylen, "TLS: %s", amqp_error_string2(rc));
		return false;
	}
	SSL_CTX_set1_cert_store(ctx, SSL_CTX_get_cert_store(s->tls));
	if (cert && (SSL_CTX_get0_chain_certs(s->tls, &chain) != 1 ||
		     SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_set1_chain(ctx, chain) != 1 ||
		     SSL_CTX_use_PrivateKey(ctx, SSL_CTX_get0_privatekey(s->tls)) != 1)) {
		snprintf(why, whylen, "TLS: cannot use the client certificate");
		return false;
	}
	vp = SSL_CTX_get0_param(ctx);
	rc = is_ip(s->ci->host) ? X509_VERIFY_PARAM_set1_ip_asc(vp, s->ci->host)
				: X509_VERIFY_PARAM_set1_host(vp, s->ci->host, 0);
	if (rc != 1) {
		snprintf(why, whylen, "TLS: cannot check the host name %s", s->ci->host);
		return false;
	}
	ERR_clear_error();
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
	sock = s->ci->ssl ? amqp_ssl_socket_new(c) : amqp_tcp_socket_new(c);
	if (!sock) {
		snprintf(why, whylen, "cannot create a socket");
		goto fail;
	}
	if (s->ci->ssl && !tls_setup(sock, s, why, whylen))
		goto fail;
	amqp_set_handshake_timeout(c, &tv);
	amqp_set_rpc_timeout(c, &tv);
	rc = amqp_socket_open_noblock(sock, s->ci->host, s->ci->port, &tv);
	if (rc != AMQP_STATUS_OK) {
		snprintf(why, whylen, "connecting to %s:%d: %s", s->ci->host, s->ci->port,
			 rc == AMQP_STATUS_SSL_PEER_VERIFY_FAILED
				 ? "certificate verify failed (the broker's certificate is not"
				   " signed by TLS_CA_FILE's authority or does not name this host)"
				 : amqp_error_string2(rc));
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
	ERR_clear_error(); /* this thread's OpenSSL error queue: nothing left behind */
	return NULL;
}
