/*
 * sha256: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the admin
 * session cookie. A hundred lines of our own instead of linking libcrypto:
 * the project's dependencies stay libpq, libevent and json-c, and the unit
 * tests check it against the published test vectors.
 */
#ifndef PGSAGA_SHA256_H
#define PGSAGA_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

struct sha256 {
	uint32_t h[8];
	uint64_t bytes;    /* message length so far */
	uint8_t buf[64];   /* a partial block */
	size_t nbuf;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
void sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN]);

/* One-shot digest. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* HMAC-SHA256 of msg under key (any length). */
void hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
		 uint8_t out[SHA256_LEN]);

/* Lowercase hex of n bytes into out (2n + 1 bytes with the NUL). */
void sha256_hex(const uint8_t *bytes, size_t n, char *out);

#endif
