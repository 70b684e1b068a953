/*
 * tls: the process's TLS settings on OpenSSL, for libevent's OpenSSL
 * bufferevents: one context for the connections the HTTP server accepts and
 * one for the connections it makes to peers, both replaced as a whole by
 * tls_reload (SIGHUP) while the connections already open keep theirs
 * (OpenSSL counts an SSL_CTX's references: each connection holds one).
 *
 * Server side (TLS_CERT_FILE + TLS_KEY_FILE): every accepted connection is
 * TLS; with TLS_CLIENT_CA_FILE the server asks for a client certificate but
 * lets the handshake finish without one, or with one that does not verify,
 * so that the route can answer (tls_client_verified). Client side: the peer
 * is verified against TLS_CA_FILE (the system's trust store when unset) and
 * the host name or IP address of its URL; the service's own certificate is
 * presented as client certificate when it has one. Sessions are resumed per
 * peer instance (tls_cache), so a reconnection costs no full handshake.
 *
 * Handshakes are counted in saga_tls_handshakes_total{side,resumed}. Used
 * from the event loop's thread only (the counters are not thread-safe).
 */
#ifndef PGSAGA_TLS_H
#define PGSAGA_TLS_H

#include <stdbool.h>
#include <stddef.h>

struct bufferevent;
struct event_base;
struct tls;
struct tls_cache;

/* File names; NULL or "" is unset. Borrowed: they must outlive the tls. */
struct tls_files {
	const char *cert, *key; /* TLS_CERT_FILE, TLS_KEY_FILE: both or neither */
	const char *ca;         /* TLS_CA_FILE */
	const char *client_ca;  /* TLS_CLIENT_CA_FILE */
};

/* Loads every file. NULL with why in err (naming the variable and file). */
struct tls *tls_new(const struct tls_files *files, char *err, size_t errlen);
/*
 * Re-reads every file and, when all load, puts the new contexts in use for
 * new connections. -1 with why in err when one does not: the old ones stay.
 */
__attribute__((warn_unused_result)) int tls_reload(struct tls *t, char *err, size_t errlen);
/* Connections still open keep their context until they close. */
void tls_free(struct tls *t);

/* The listener speaks TLS (a certificate and key are set). */
bool tls_server_on(const struct tls *t);
/* The listener asks for client certificates (TLS_CLIENT_CA_FILE is set). */
bool tls_client_certs_on(const struct tls *t);

/* A bufferevent for evhttp_set_bevcb: TLS server side, fd set later. */
struct bufferevent *tls_accept_bev(struct tls *t, struct event_base *base);

/* A session cache for one peer instance. */
struct tls_cache *tls_cache_new(void);
void tls_cache_free(struct tls_cache *c);

/*
 * A bufferevent for evhttp_connection_base_bufferevent_new: TLS client side
 * to host (a name, or an IP address), resuming cache's session when it has
 * one. cache must outlive the bufferevent's handshakes (free the connection
 * first). NULL when out of memory.
 */
struct bufferevent *tls_connect_bev(struct tls *t, struct event_base *base, const char *host,
				    struct tls_cache *cache);

/* Whether bev is one of libevent's OpenSSL bufferevents. */
bool tls_is_tls(struct bufferevent *bev);

/*
 * Why bev's TLS connection failed, e.g. "certificate verify failed
 * (unable to get local issuer certificate)", written to buf; NULL when no
 * TLS error is known. Takes the errors off bev.
 */
const char *tls_failure(struct bufferevent *bev, char *buf, size_t len);

/* The client of this server-side bev presented a certificate that verified. */
bool tls_client_verified(struct bufferevent *bev);

#endif
