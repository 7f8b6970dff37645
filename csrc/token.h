#ifndef REDLOCK_TOKEN_H
#define REDLOCK_TOKEN_H

#include <stddef.h>

#define REDLOCK_TOKEN_BYTES 16
#define REDLOCK_TOKEN_HEX 32 /* 2 * REDLOCK_TOKEN_BYTES */

/* Fills buf with n bytes from the OS random source; 0 on success, else an
 * errno value. Never returns a partial buffer as success. */
int redlock_random_bytes(unsigned char *buf, size_t n);

/* Writes REDLOCK_TOKEN_HEX lowercase hex chars plus a NUL into out. */
int redlock_token_hex(char out[REDLOCK_TOKEN_HEX + 1]);

#endif
