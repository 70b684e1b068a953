/* sha256: see sha256.h. */
#include "sha256.h"

#include <limits.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>

/* Both fail only without memory or without the algorithm: nothing to answer. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
	if (!EVP_Digest(data, len, out, NULL, EVP_sha256(), NULL))
		abort();
}

void hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
		 uint8_t out[SHA256_LEN])
{
	if (keylen > INT_MAX || !HMAC(EVP_sha256(), key, (int)keylen, msg, msglen, out, NULL))
		abort();
}

void sha256_hex(const uint8_t *bytes, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[bytes[i] >> 4];
		out[2 * i + 1] = hex[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}
