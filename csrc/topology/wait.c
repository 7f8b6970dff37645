/* Replica acknowledgement: WAIT / WAITAOF for the lock scripts (see wait.h). */
#include "wait.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
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

int redlock_wait_tail(const redlock_wait *w, char *buf, redlock_tail *t) {
    t->len = redlock_wait_encode(w, buf, REDLOCK_WAIT_BUF);
    t->buf = buf;
    t->extra_ms = REDLOCK_WAIT_EXTRA_MS(w);
    t->what = w->aof ? "waiting for WAITAOF's reply" : "waiting for WAIT's reply";
    return t->len < 0 ? -1 : 0;
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

int redlock_wait_answer(const redlock_wait *w, const redisReply *r, const char *name,
                        long long *acked, long long *fsynced, char *err, size_t errlen) {
    const char *cmd = w->aof ? "WAITAOF" : "WAIT";
    if (redlock_wait_parse(r, acked, fsynced) == 0)
        return 0;
    if (r->type != REDIS_REPLY_ERROR)
        redlock_set_error(err, errlen, REDLOCK_E_SERVER, name, "unexpected reply to %s", cmd);
    else if (strstr(r->str, "unknown command") != NULL)
        /* (worded without "unknown command": mode "auto" would read that
         * as a server without scripting, redlock.detect) */
        redlock_set_error(err, errlen, REDLOCK_E_SERVER, name,
                          "%s needs Redis %s+ (option %s; this server does not know the command)",
                          cmd, w->aof ? "7.2" : "3.0", w->aof ? "aof" : "replicas");
    else
        redlock_set_error(err, errlen, REDLOCK_E_SERVER, name, "%.*s",
                          (int)(r->len > 200 ? 200 : r->len), r->str);
    return -1;
}

int redlock_wait_short(const redlock_wait *w, const char *name, const char *what,
                       long long acked, long long fsynced, char *err, size_t errlen) {
    if (w->aof) {
        if (acked >= w->replicas && fsynced >= 1)
            return 0;
        snprintf(err, errlen,
                 "replicas: %s: %s reached the AOF of %lld of %d replicas%s within %d ms", name,
                 what, acked, w->replicas, fsynced >= 1 ? "" : " and not the master's",
                 w->timeout_ms);
        return 1;
    }
    if (acked >= w->replicas)
        return 0;
    snprintf(err, errlen, "replicas: %s: %lld of %d replicas acknowledged %s within %d ms", name,
             acked, w->replicas, what, w->timeout_ms);
    return 1;
}
