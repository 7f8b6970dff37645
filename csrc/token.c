/* Lock tokens: 128 bits from the operating system's random source.
 * A weaker token would let two holders collide, so failure is an error. */
#define _GNU_SOURCE
#include "token.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
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

/* Bumped in the child of every fork(): a pool drawn before the fork is
 * then stale in the child. */
static volatile unsigned fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) { fork_generation++; }
static void register_atfork(void) { (void)pthread_atfork(NULL, NULL, on_fork_child); }

unsigned redlock_fork_generation(void) {
    (void)pthread_once(&atfork_once, register_atfork);
    return fork_generation;
}

int redlock_token_hex(redlock_token_pool *pool, char out[REDLOCK_TOKEN_HEX + 1]) {
    static const char hex[] = "0123456789abcdef";
    unsigned char *raw;
    size_t i;
    (void)pthread_once(&atfork_once, register_atfork);
    if (pool->left == 0 || pool->generation != fork_generation) {
        int err;
        pool->left = 0;
        pool->generation = fork_generation;
        err = redlock_random_bytes(pool->bytes, sizeof pool->bytes);
        if (err != 0)
            return err;
        pool->left = REDLOCK_POOL_TOKENS;
    }
    pool->left--;
    raw = pool->bytes + pool->left * REDLOCK_TOKEN_BYTES;
    for (i = 0; i < REDLOCK_TOKEN_BYTES; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    memset(raw, 0, REDLOCK_TOKEN_BYTES); /* a used token's bytes are not kept */
    out[REDLOCK_TOKEN_HEX] = '\0';
    return 0;
}

/* REDLOCK_TOKEN_HEX is written out as a constant; keep it in step. */
typedef char
    redlock_token_hex_is_twice_the_bytes[(REDLOCK_TOKEN_HEX == 2 * REDLOCK_TOKEN_BYTES) ? 1 : -1];
