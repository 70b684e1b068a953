/*
 * sha256: SHA-256 and HMAC-SHA256 for the admin session cookie and the
 * token comparison, from OpenSSL's libcrypto (linked for TLS anyway). The
 * unit tests check them against the published test vectors.
 */
#ifndef PGSAGA_SHA256_H
#define PGSAGA_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

/* The digest of len bytes. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);

/* HMAC-SHA256 of msg under key (any length). */
void hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
		 uint8_t out[SHA256_LEN]);

/* Lowercase hex of n bytes into out (2n + 1 bytes with the NUL). */
void sha256_hex(const uint8_t *bytes, size_t n, char *out);

#endif
