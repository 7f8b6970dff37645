/* RESP command encoding: plain C, no Lua, so that the size check can be
 * tested on its own (spec/c/encode_bound.c). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

char *redlock_put_decimal(char *p, size_t n) {
    if (n < 10) {
        *p++ = (char)('0' + n);
    } else if (n < 100) {
        *p++ = (char)('0' + n / 10);
        *p++ = (char)('0' + n % 10);
    } else {
        char tmp[24];
        size_t i = 0;
        do {
            tmp[i++] = (char)('0' + n % 10);
            n /= 10;
        } while (n > 0);
        while (i > 0)
            *p++ = tmp[--i];
    }
    return p;
}

/* n in decimal and "\r\n"; returns the end */
static char *put_count(char *p, size_t n) {
    p = redlock_put_decimal(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* the most bytes one argument of len bytes takes: "$", 20 digits at most,
 * CRLF, the bytes, CRLF */
#define ARG_MAX_BYTES(len) ((len) + 25)

long redlock_encode(char *buf, size_t cap, int argc, const char **argv, const size_t *argvlen,
                    char **out) {
    size_t bound = ARG_MAX_BYTES(0), len;
    char *start, *p;
    int i;
    for (i = 0; i < argc; i++) {
        /* bound never passes LONG_MAX (the length is returned as a long),
         * so room cannot wrap; nor can bound, even where size_t is 32 bits */
        size_t room = (size_t)LONG_MAX - bound;
        len = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        if (room < ARG_MAX_BYTES(0) || len > room - ARG_MAX_BYTES(0))
            return -1;
        bound += ARG_MAX_BYTES(len);
    }
    /* one pass into room for the longest encoding, rather than a pass to
     * size it exactly */
    start = bound <= cap ? buf : (char *)malloc(bound);
    if (start == NULL)
        return -1;
    *out = start;
    p = start;
    *p++ = '*';
    p = put_count(p, (size_t)argc);
    for (i = 0; i < argc; i++) {
        len = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        *p++ = '$';
        p = put_count(p, len);
        memcpy(p, argv[i], len);
        p += len;
        *p++ = '\r';
        *p++ = '\n';
    }
    return (long)(p - start);
}
