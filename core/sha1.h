/* sha1.h -- SHA-1 (FIPS 180-4), only to name Lua scripts as Redis does. */
#ifndef CCAP_SHA1_H
#define CCAP_SHA1_H

#include <stddef.h>

/* The SHA-1 digest of LEN bytes at DATA. */
void ccap_sha1(const void *data, size_t len, unsigned char out[20]);

/* The same as 40 lower-case hex characters and a NUL. */
void ccap_sha1_hex(const void *data, size_t len, char out[41]);

#endif
