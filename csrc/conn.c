/* A conn with its topology: the exchange that carries out the topology
 * core's verdicts for a command (csrc/topo.h: NOSCRIPT, a master turned
 * replica, a Cluster's rules through csrc/cluster.c), and a conn's copy,
 * lifetime and timeouts with its Sentinel or Cluster state. The socket
 * itself is conn_io.c's; the Lua userdata conn_lua.c's, its options
 * conn_opts.c's (conn_int.h).
 * Errors: code 1 "connection" (could not connect, lost, timed out) or 2
 * "server" (Redis answered with an error); `stale` when the failure came
 * from a connection made before this call that the server had dropped (not
 * a timeout): the caller may retry once on a fresh connection. Messages
 * start with the code word and name the server, never a password. */
#define _GNU_SOURCE
#include "conn_int.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <openssl/ssl.h>

#include "clock.h"
#include "resp.h"
#include "token.h"
#include "topo.h"
#include "wait.h"

void redlock_conn_destroy(conn_ud *u) {
    redlock_sentinels_free(u->sentinels);
    u->sentinels = NULL;
    u->hooks = NULL;
    redlock_cluster_free(u->cluster);
    u->cluster = NULL;
    redlock_conn_destroy_io(u);
}

/* The C side of a conn for other C files (the renewal thread): a private
 * copy with the same settings, used by one thread only.
 * Copies src's settings (not its socket) into a zeroed dst; -1 when out of
 * memory (what was copied is freed by redlock_conn_destroy). Never raises. */
int redlock_conn_copy_settings(conn_ud *dst, const conn_ud *src) {
    if (redlock_conn_copy_io(dst, src) != 0)
        return -1;
    if (src->sentinels != NULL) {
        if ((dst->sentinels = redlock_sentinels_copy(src->sentinels)) == NULL)
            return -1;
        dst->hooks = src->hooks;
    }
    if (src->cluster != NULL && (dst->cluster = redlock_cluster_copy(src->cluster)) == NULL)
        return -1;
    return 0;
}

redlock_conn *redlock_conn_clone(const redlock_conn *src) {
    conn_ud *u = calloc(1, sizeof *u);
    if (u != NULL && redlock_conn_copy_settings(u, src) != 0) {
        redlock_conn_destroy(u);
        free(u);
        u = NULL;
    }
    return u;
}

void redlock_conn_free(redlock_conn *u) {
    if (u != NULL) {
        redlock_conn_destroy(u);
        free(u);
    }
}

int redlock_conn_ensure(redlock_conn *u) {
    if (u->cluster != NULL)
        return redlock_cluster_ensure(u);
    return redlock_conn_ensure_io(u);
}

static int round_trip(conn_ud *u, int argc, const char **argv, const size_t *argvlen,
                      redisReply **out, int *stale);

int redlock_conn_round_trip(redlock_conn *u, int argc, const char **argv, const size_t *argvlen,
                            redisReply **out, int *stale) {
    return round_trip(u, argc, argv, argvlen, out, stale);
}

int redlock_conn_exchange(redlock_conn *u, redlock_cmd *cmd, const redlock_wait *w,
                          redisReply **r1, redisReply **r2, int *stale) {
    redlock_attempt a;
    if (u->cluster != NULL) {
        *stale = 0;
        return redlock_cluster_exchange(u, cmd, w, r1, r2);
    }
    redlock_attempt_start(&a, -1, 0, 0);
    for (;;) {
        int v, rc = redlock_conn_trip(u, cmd, w, r1, r2, stale);
        if (*r1 == NULL || (*r1)->type != REDIS_REPLY_ERROR)
            return rc;
        v = redlock_server_reply(&a, u->name, cmd->source != NULL, u->sentinels != NULL,
                                 (*r1)->str, (*r1)->len);
        if (v == REDLOCK_DONE)
            return rc;
        freeReplyObject(*r1);
        if (*r2 != NULL)
            freeReplyObject(*r2);
        *r1 = *r2 = NULL;
        *stale = 0;
        if (v == REDLOCK_EVAL) {
            redlock_cmd_use_eval(cmd);
            continue;
        }
        /* the master became a replica: the next try asks the sentinels */
        redlock_conn_drop(u);
        u->sentinels->checked_ms = 0;
        if (v != REDLOCK_RELOAD) {
            snprintf(u->err, ERRLEN, "%s", a.err);
            return E_CONNECTION;
        }
        if (cmd->source == NULL) {
            /* a plain command is not sent on by itself: it may be one of a
             * MULTI..EXEC (legacy mode), which the new master knows nothing
             * of, so it would run there unguarded. Reported as a stale
             * connection: a caller that may send it again does (the first
             * command of a sequence, a single command: util.once_more) */
            snprintf(u->err, ERRLEN, "%s", a.err);
            *stale = 1;
            return E_CONNECTION;
        }
    }
}

/* A command without a script: as redlock_conn_exchange. */
static int round_trip(conn_ud *u, int argc, const char **argv, const size_t *argvlen,
                      redisReply **out, int *stale) {
    redlock_cmd cmd;
    redisReply *none = NULL;
    cmd.argc = argc;
    cmd.argv = argv;
    cmd.argvlen = (size_t *)argvlen; /* (written only for a script's EVAL form) */
    cmd.source = NULL;
    return redlock_conn_exchange(u, &cmd, NULL, out, &none, stale);
}

/* conn:set_timeout(ms): the reply timeout from now on, for a blocking
 * command that must wait longer than the usual one. */
void redlock_conn_set_timeouts(redlock_conn *u, int connect_ms, int reply_ms) {
    redlock_conn_set_timeouts_io(u, connect_ms, reply_ms);
    if (u->cluster != NULL) { /* the nodes carry the Cluster conn's commands */
        int i;
        for (i = 0; i < u->cluster->n; i++)
            redlock_conn_set_timeouts(u->cluster->nodes[i], connect_ms, reply_ms);
    }
}


