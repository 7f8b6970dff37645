/* The floor for bench/redlock.lua: plain hiredis doing the same round trips
 * as a lock cycle (the acquire script, then the release script, by EVALSHA),
 * on 1 server, and on N servers with every request written before any reply
 * is read. No Lua, no policy: what the machine costs.
 *
 *   redlock_floor CYCLES SHA_ACQUIRE SHA_RELEASE HOST PORT [PORT...]
 * prints "1 <us per cycle>" and "N <us per cycle>". The scripts must be
 * loaded on every server already (the Lua bench runs its cycles first). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define MAX 16

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int step(redisContext **c, int n, int argc, const char **argv) {
    int i;
    for (i = 0; i < n; i++)
        if (redisAppendCommandArgv(c[i], argc, argv, NULL) != REDIS_OK)
            return -1;
    for (i = 0; i < n; i++) {
        int done = 0;
        while (!done)
            if (redisBufferWrite(c[i], &done) != REDIS_OK)
                return -1;
    }
    for (i = 0; i < n; i++) {
        void *r = NULL;
        if (redisGetReply(c[i], &r) != REDIS_OK || r == NULL)
            return -1;
        freeReplyObject(r);
    }
    return 0;
}

static double run(redisContext **c, int n, int cycles, const char *acq, const char *rel) {
    const char *a[7] = {"EVALSHA", acq, "2", "floor", "redlock:fences", "tok", "10000"};
    const char *r[5] = {"EVALSHA", rel, "1", "floor", "tok"};
    double t0 = now_us();
    int k;
    for (k = 0; k < cycles; k++)
        if (step(c, n, 7, a) != 0 || step(c, n, 5, r) != 0) {
            fprintf(stderr, "redlock_floor: %s\n", c[0]->errstr);
            exit(1);
        }
    return (now_us() - t0) / cycles;
}

int main(int argc, char **argv) {
    redisContext *c[MAX];
    int n = argc - 5, i, cycles;
    if (n < 1 || n > MAX) {
        fprintf(stderr, "usage: redlock_floor CYCLES SHA_ACQUIRE SHA_RELEASE HOST PORT...\n");
        return 2;
    }
    cycles = atoi(argv[1]);
    for (i = 0; i < n; i++) {
        c[i] = redisConnect(argv[4], atoi(argv[5 + i]));
        if (c[i] == NULL || c[i]->err) {
            fprintf(stderr, "redlock_floor: could not connect\n");
            return 1;
        }
    }
    printf("1 %.1f\n", run(c, 1, cycles, argv[2], argv[3]));
    printf("%d %.1f\n", n, run(c, n, cycles, argv[2], argv[3]));
    for (i = 0; i < n; i++)
        redisFree(c[i]);
    return 0;
}
