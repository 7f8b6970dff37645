#ifndef REDLOCK_RESP_H
#define REDLOCK_RESP_H

#include <stddef.h>

/* Writes n in decimal at p (no terminator: at most 20 bytes); returns the
 * end. snprintf would be a measurable part of a lock's call; a lock's
 * counts have one or two digits. */
char *redlock_put_decimal(char *p, size_t n);

/* The RESP bytes of one command (argvlen NULL: C strings), written into
 * buf when they fit in cap bytes, else into memory from malloc that the
 * caller frees; *out says which. Returns the length, or -1 when out of
 * memory or when the bytes would pass LONG_MAX (the arguments' lengths are
 * trusted, not their sum). hiredis' own formatter costs more than the rest of a call
 * (sdscatfmt per argument). */
long redlock_encode(char *buf, size_t cap, int argc, const char **argv, const size_t *argvlen,
                    char **out);

#endif
