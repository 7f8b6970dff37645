/* WAIT / WAITAOF for the lock scripts (see wait.h). */
#include "wait.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

long redlock_wait_encode(const redlock_wait *w, char *buf, size_t cap) {
    char n[16], t[16];
    const char *argv[4];
    size_t len[4];
    int argc = 0;
    char *out = NULL;
    long r;
    snprintf(n, sizeof n, "%d", w->replicas);
    snprintf(t, sizeof t, "%d", w->timeout_ms);
    if (w->aof) {
        argv[argc++] = "WAITAOF";
        argv[argc++] = "1";
    } else {
        argv[argc++] = "WAIT";
    }
    argv[argc++] = n;
    argv[argc++] = t;
    for (r = 0; r < argc; r++)
        len[r] = strlen(argv[r]);
    r = redlock_encode(buf, cap, argc, argv, len, &out);
    if (r >= 0 && out != buf) { /* not with REDLOCK_WAIT_BUF bytes */
        free(out);
        return -1;
    }
    return r;
}

int redlock_wait_parse(const redisReply *r, long long *acked, long long *fsynced) {
    if (r->type == REDIS_REPLY_INTEGER) {
        *acked = r->integer;
        *fsynced = -1;
        return 0;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        *fsynced = r->element[0]->integer;
        *acked = r->element[1]->integer;
        return 0;
    }
    return -1;
}
