/* Lock tokens: 128 bits from the operating system's random source.
 * A weaker token would let two holders collide, so failure is an error. */
#define _GNU_SOURCE
#include "token.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

static int urandom_bytes(unsigned char *buf, size_t n) {
    size_t got = 0;
    int fd;
    do {
        fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return errno;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            close(fd);
            return e;
        }
        got += (size_t)r;
    }
    close(fd);
    return 0;
}

int redlock_random_bytes(unsigned char *buf, size_t n) {
#if defined(__linux__) && defined(SYS_getrandom)
    size_t got = 0;
    while (got < n) {
        long r = syscall(SYS_getrandom, buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ENOSYS)
                return urandom_bytes(buf, n);
            return errno;
        }
        got += (size_t)r;
    }
    return 0;
#else
    return urandom_bytes(buf, n);
#endif
}

int redlock_token_hex(char out[REDLOCK_TOKEN_HEX + 1]) {
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[REDLOCK_TOKEN_BYTES];
    size_t i;
    int err = redlock_random_bytes(raw, sizeof raw);
    if (err != 0)
        return err;
    for (i = 0; i < REDLOCK_TOKEN_BYTES; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[REDLOCK_TOKEN_HEX] = '\0';
    return 0;
}

/* REDLOCK_TOKEN_HEX is written out as a constant; keep it in step. */
typedef char redlock_token_hex_is_twice_the_bytes[(REDLOCK_TOKEN_HEX == 2 * REDLOCK_TOKEN_BYTES) ? 1 : -1];
