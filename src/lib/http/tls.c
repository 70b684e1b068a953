/* tls: see tls.h. */
#include "tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "metrics.h"

struct tls {
	struct tls_files files;
	SSL_CTX *server; /* NULL: plain HTTP listener */
	SSL_CTX *client;
	unsigned gen;    /* bumped by each reload: older sessions are not resumed */
};

struct tls_cache {
	SSL_SESSION *sess;
	unsigned gen;
};

/* What one connection remembers, as the SSL's ex_data (freed with it). */
struct conn {
	struct tls_cache *cache; /* client side, may be NULL */
	unsigned gen;
	int verify_err;          /* client side: why the peer did not verify */
	bool counted;
	bool nodelay;
};

static int conn_idx = -1;
static struct metric_family *handshakes;

static bool set(const char *s)
{
	return s && *s;
}

static void conn_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
		      void *argp)
{
	free(ptr);
}

static struct conn *conn_of(const SSL *ssl)
{
	return SSL_get_ex_data(ssl, conn_idx);
}

/* The first OpenSSL error on the thread's queue, as text; clears the queue. */
static const char *ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_peek_error();

	if (!e)
		snprintf(buf, len, "no usable content");
	else
		snprintf(buf, len, "%s", ERR_reason_error_string(e) ? ERR_reason_error_string(e)
								   : "unknown error");
	ERR_clear_error();
	return buf;
}

/*
 * TCP_NODELAY on the connection's socket, as its handshake starts. Over TLS
 * evhttp's head and body leave as separate records, so separate segments:
 * with Nagle's algorithm the second waits for the ACK of the first, which
 * the peer, waiting for the whole message, delays (40 ms on Linux) - a
 * stall per message each way. Plain HTTP goes out in one write and never
 * meets it. Errors are ignored: not every socket is TCP.
 */
static void set_nodelay(const SSL *ssl, struct conn *c)
{
	int fd = SSL_get_fd(ssl), one = 1;

	if (c->nodelay || fd < 0)
		return;
	c->nodelay = true;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/*
 * TLS 1.3 reports SSL_CB_HANDSHAKE_DONE again for each session ticket it
 * receives: a connection is counted once.
 */
static void info_cb(const SSL *ssl, int where, int ret)
{
	struct conn *c;
	char labels[64];

	if (!(c = conn_of(ssl)))
		return;
	if (where & SSL_CB_HANDSHAKE_START)
		set_nodelay(ssl, c);
	if (!(where & SSL_CB_HANDSHAKE_DONE) || c->counted)
		return;
	c->counted = true;
	snprintf(labels, sizeof(labels), "side=\"%s\",resumed=\"%s\"",
		 SSL_is_server(ssl) ? "server" : "client", SSL_session_reused(ssl) ? "true" : "false");
	metrics_inc(handshakes, labels, 1);
}

/*
 * Server side: the handshake goes on whatever the client's certificate; its
 * verdict stays in SSL_get_verify_result for the routes that need one.
 */
static int accept_any_cb(int ok, X509_STORE_CTX *x)
{
	return 1;
}

/* Client side: remembers the first reason the peer failed, for last_error. */
static int client_verify_cb(int ok, X509_STORE_CTX *x)
{
	SSL *ssl;
	struct conn *c;

	if (ok)
		return ok;
	ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
	if (ssl && (c = conn_of(ssl)) && !c->verify_err)
		c->verify_err = X509_STORE_CTX_get_error(x);
	return ok;
}

/*
 * Keeps the newest session of the connection's peer instance, as a copy:
 * OpenSSL marks the connection's own session not resumable when the
 * connection is freed without a close_notify (how evhttp ends them).
 */
static int new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct conn *c = conn_of(ssl);
	SSL_SESSION *copy;

	if (!c || !c->cache || !(copy = SSL_SESSION_dup(sess)))
		return 0;
	if (c->cache->sess)
		SSL_SESSION_free(c->cache->sess);
	c->cache->sess = copy;
	c->cache->gen = c->gen;
	return 0; /* sess stays the connection's */
}

static int load_cert_key(SSL_CTX *ctx, const struct tls_files *f, char *err, size_t errlen)
{
	char why[160];

	if (SSL_CTX_use_certificate_chain_file(ctx, f->cert) != 1) {
		snprintf(err, errlen, "TLS_CERT_FILE '%s': %s", f->cert, ssl_reason(why, sizeof(why)));
		return -1;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, f->key, SSL_FILETYPE_PEM) != 1) {
		snprintf(err, errlen, "TLS_KEY_FILE '%s': %s", f->key, ssl_reason(why, sizeof(why)));
		return -1;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(err, errlen, "TLS_KEY_FILE '%s' does not match TLS_CERT_FILE '%s'", f->key,
			 f->cert);
		ERR_clear_error();
		return -1;
	}
	return 0;
}

static SSL_CTX *server_ctx(const struct tls_files *f, char *err, size_t errlen)
{
	static const unsigned char sid_ctx[] = "pgsaga";
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	char why[160];

	if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		snprintf(err, errlen, "TLS: %s", ssl_reason(why, sizeof(why)));
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (load_cert_key(ctx, f, err, errlen) != 0)
		goto fail;
	/* resumed sessions keep their client certificate's verdict */
	SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
	if (set(f->client_ca)) {
		STACK_OF(X509_NAME) *names;

		if (SSL_CTX_load_verify_locations(ctx, f->client_ca, NULL) != 1 ||
		    !(names = SSL_load_client_CA_file(f->client_ca))) {
			snprintf(err, errlen, "TLS_CLIENT_CA_FILE '%s': %s", f->client_ca,
				 ssl_reason(why, sizeof(why)));
			goto fail;
		}
		SSL_CTX_set_client_CA_list(ctx, names);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, accept_any_cb);
	}
	/* an idle connection keeps no record buffers (about 34 KiB) */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_info_callback(ctx, info_cb);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

static SSL_CTX *client_ctx(const struct tls_files *f, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char why[160];

	if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		snprintf(err, errlen, "TLS: %s", ssl_reason(why, sizeof(why)));
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (set(f->ca) ? SSL_CTX_load_verify_locations(ctx, f->ca, NULL) != 1
		       : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		snprintf(err, errlen, "TLS_CA_FILE '%s': %s", set(f->ca) ? f->ca : "(system)",
			 ssl_reason(why, sizeof(why)));
		goto fail;
	}
	if (set(f->cert) && load_cert_key(ctx, f, err, errlen) != 0)
		goto fail;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, client_verify_cb);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
	/* an idle connection keeps no record buffers (about 34 KiB) */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_info_callback(ctx, info_cb);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* Both contexts from the files, or neither. */
static int load(const struct tls_files *f, SSL_CTX **server, SSL_CTX **client, char *err,
		size_t errlen)
{
	*server = NULL;
	if (set(f->cert) != set(f->key)) {
		snprintf(err, errlen, "TLS_CERT_FILE and TLS_KEY_FILE: set both or neither");
		return -1;
	}
	if (set(f->client_ca) && !set(f->cert)) {
		snprintf(err, errlen, "TLS_CLIENT_CA_FILE needs TLS_CERT_FILE and TLS_KEY_FILE");
		return -1;
	}
	if (set(f->cert) && !(*server = server_ctx(f, err, errlen)))
		return -1;
	if (!(*client = client_ctx(f, err, errlen))) {
		SSL_CTX_free(*server);
		*server = NULL;
		return -1;
	}
	return 0;
}

struct tls *tls_new(const struct tls_files *files, char *err, size_t errlen)
{
	struct tls *t = calloc(1, sizeof(*t));

	if (!t)
		abort();
	if (conn_idx < 0)
		conn_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, conn_free);
	handshakes = metrics_family("saga_tls_handshakes_total",
				    "TLS handshakes completed, by side and whether a session was resumed",
				    METRIC_COUNTER);
	t->files = *files;
	if (load(&t->files, &t->server, &t->client, err, errlen) != 0) {
		free(t);
		return NULL;
	}
	return t;
}

int tls_reload(struct tls *t, char *err, size_t errlen)
{
	SSL_CTX *server, *client;

	if (load(&t->files, &server, &client, err, errlen) != 0)
		return -1;
	/* connections still open hold their own references */
	SSL_CTX_free(t->server);
	SSL_CTX_free(t->client);
	t->server = server;
	t->client = client;
	t->gen++;
	return 0;
}

void tls_free(struct tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->server);
	SSL_CTX_free(t->client);
	free(t);
}

bool tls_server_on(const struct tls *t)
{
	return t && t->server;
}

bool tls_client_certs_on(const struct tls *t)
{
	return t && t->server && set(t->files.client_ca);
}

/* A new SSL of ctx with its conn attached; NULL when out of memory. */
static SSL *new_ssl(SSL_CTX *ctx, struct tls_cache *cache, unsigned gen)
{
	SSL *ssl = SSL_new(ctx);
	struct conn *c = calloc(1, sizeof(*c));

	if (!ssl || !c || !SSL_set_ex_data(ssl, conn_idx, c)) {
		SSL_free(ssl);
		free(c);
		return NULL;
	}
	c->cache = cache;
	c->gen = gen;
	return ssl;
}

/*
 * One message, one record. evhttp adds a message's head and its body to the
 * output as separate chunks, and libevent's OpenSSL layer makes a record -
 * and, with TCP_NODELAY, a write() and a segment - of each chunk: the peer
 * then reads a record header and a record twice per message, and is woken
 * twice. Pulling a small output up into one chunk as it is added (the write
 * itself waits for the event loop, by then the message is whole) halves
 * both. Bigger outputs are left alone: a record holds 16 KiB at most.
 */
static void coalesce_cb(struct evbuffer *out, const struct evbuffer_cb_info *info, void *arg)
{
	size_t len = evbuffer_get_length(out);

	(void)arg;
	if (info->n_added && len <= SSL3_RT_MAX_PLAIN_LENGTH &&
	    evbuffer_get_contiguous_space(out) < len)
		(void)evbuffer_pullup(out, (ev_ssize_t)len);
}

/* What every connection's bufferevent gets; bev may be NULL (then NULL). */
static struct bufferevent *finish_bev(struct bufferevent *bev)
{
	if (!bev)
		return NULL;
	/* evhttp ends connections without a close_notify */
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	if (!evbuffer_add_cb(bufferevent_get_output(bev), coalesce_cb, NULL)) {
		bufferevent_free(bev);
		return NULL;
	}
	return bev;
}

struct bufferevent *tls_accept_bev(struct tls *t, struct event_base *base)
{
	SSL *ssl = new_ssl(t->server, NULL, t->gen);
	struct bufferevent *bev;

	if (!ssl)
		return NULL;
	/* frees ssl itself when it fails */
	bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
					     BEV_OPT_CLOSE_ON_FREE);
	return finish_bev(bev);
}

struct tls_cache *tls_cache_new(void)
{
	struct tls_cache *c = calloc(1, sizeof(*c));

	if (!c)
		abort();
	return c;
}

void tls_cache_free(struct tls_cache *c)
{
	if (!c)
		return;
	if (c->sess)
		SSL_SESSION_free(c->sess);
	free(c);
}

struct bufferevent *tls_connect_bev(struct tls *t, struct event_base *base, const char *host,
				    struct tls_cache *cache)
{
	SSL *ssl = new_ssl(t->client, cache, t->gen);
	struct in6_addr a6;
	struct in_addr a4;
	struct bufferevent *bev;

	if (!ssl)
		return NULL;
	if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1) {
		/* an address is matched against the IP addresses of the certificate */
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
			goto fail;
	} else if (SSL_set1_host(ssl, host) != 1 ||
		   /* SSL_set_tlsext_host_name() without its macro's const-dropping
		    * cast, which clang reports; OpenSSL copies the name */
		   SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
			    (void *)(uintptr_t)host) != 1) {
		goto fail;
	}
	if (cache && cache->sess && cache->gen == t->gen && SSL_SESSION_is_resumable(cache->sess))
		SSL_set_session(ssl, cache->sess);
	bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
					     BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	return finish_bev(bev);
fail:
	SSL_free(ssl);
	ERR_clear_error();
	return NULL;
}

bool tls_is_tls(struct bufferevent *bev)
{
	return bev && bufferevent_openssl_get_ssl(bev) != NULL;
}

const char *tls_failure(struct bufferevent *bev, char *buf, size_t len)
{
	SSL *ssl = bev ? bufferevent_openssl_get_ssl(bev) : NULL;
	struct conn *c = ssl ? conn_of(ssl) : NULL;
	unsigned long e, first = 0;

	if (!ssl)
		return NULL;
	while ((e = bufferevent_get_openssl_error(bev)) != 0)
		first = e; /* they come newest first */
	if (c && c->verify_err) {
		snprintf(buf, len, "certificate verify failed (%s)",
			 X509_verify_cert_error_string(c->verify_err));
		return buf;
	}
	if (!first)
		return NULL;
	snprintf(buf, len, "TLS: %s",
		 ERR_reason_error_string(first) ? ERR_reason_error_string(first) : "error");
	return buf;
}

bool tls_client_verified(struct bufferevent *bev)
{
	SSL *ssl = bev ? bufferevent_openssl_get_ssl(bev) : NULL;

	return ssl && SSL_get0_peer_certificate(ssl) && SSL_get_verify_result(ssl) == X509_V_OK;
}
