#ifndef REDLOCK_SHA1_H
#define REDLOCK_SHA1_H

#include <stddef.h>

/* SHA-1 of data as 40 lowercase hex chars: the name EVALSHA knows a script by. */
void redlock_sha1_hex(const char *data, size_t len, char out[41]);

#endif
