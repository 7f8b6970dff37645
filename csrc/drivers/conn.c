/* A conn with its topology: the one request loop of the hiredis drivers
 * (conn:command and conn:eval, the renewal thread's extends, a sentinel's
 * questions), which carries out the topology core's verdicts (csrc/topology/topo.h)
 * through the conn's kind (conn.h: plain, Sentinel, Cluster), and a conn's
 * copy, lifetime and timeouts with its kind's state. The socket itself is
 * conn_io.c's; the Lua userdata conn_lua.c's, its options conn_opts.c's
 * (conn_int.h).
 * Errors: code REDLOCK_E_CONNECTION (could not connect, lost, timed out) or
 * REDLOCK_E_SERVER (Redis answered with an error) with the message in
 * u->err: it starts with the code word and names the server, never a
 * password. */
#define _GNU_SOURCE
#include "conn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "clock.h"
#include "topo.h"
#include "wait.h"

void redlock_conn_destroy(conn_ud *u) {
    if (u->kind != NULL && u->kind->destroy != NULL)
        u->kind->destroy(u);
    redlock_conn_destroy_io(u);
}

/* The C side of a conn for other C files (the renewal thread): a private
 * copy with the same settings, used by one thread only.
 * Copies src's settings (not its socket) into a zeroed dst; -1 when out of
 * memory (what was copied is freed by redlock_conn_destroy). Never raises. */
int redlock_conn_copy_settings(conn_ud *dst, const conn_ud *src, int share) {
    if (redlock_conn_copy_io(dst, src) != 0)
        return -1;
    dst->kind = src->kind;
    if (src->kind->copy != NULL && src->kind->copy(dst, src, share) != 0)
        return -1;
    return 0;
}

redlock_conn *redlock_conn_clone(const redlock_conn *src) {
    conn_ud *u = calloc(1, sizeof *u);
    if (u != NULL && redlock_conn_copy_settings(u, src, 0) != 0) {
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
    if (u->kind->ensure != NULL)
        return u->kind->ensure(u);
    return redlock_conn_ensure_io(u);
}

/* The time now, for the kinds whose rules read it (a Cluster's pauses and
 * deadline): the other kinds spare the clock. */
static double now_for(const redlock_topo_kind *k) { return k->routed ? redlock_mono_ms() : 0; }

/* Starts u's attempt for cmd. */
static void start(redlock_attempt *a, redlock_conn *u, const redlock_cmd *cmd, unsigned flags) {
    const redlock_conn_kind *k = u->kind;
    const redlock_topo_kind *t = k->topo;
    redlock_attempt_start(a, t, k->state != NULL ? k->state(u) : NULL, u->name,
                          t->routed ? redlock_command_slot(cmd->argc, cmd->argv, cmd->argvlen) : -1,
                          flags, now_for(t), u->timeout_ms);
}

int redlock_request(redlock_conn *u, redlock_cmd *cmd, const redlock_tail *tail, unsigned flags,
                    redisReply **r1, redisReply **r2, int *retry) {
    const redlock_conn_kind *k = u->kind;
    const redlock_topo_kind *t = k->topo;
    redlock_conn *node = u;
    redlock_attempt a;
    /* A kind that is not routed sends to its one node, nothing before it
     * (REDLOCK_ONE_NODE): the first try goes before the attempt starts,
     * which is when an outcome is not the answer (the usual command costs
     * no attempt). */
    int v = REDLOCK_GO, rc, started = !REDLOCK_ONE_NODE(t);
    if (cmd->source != NULL)
        flags |= REDLOCK_AT_SCRIPT;
    *r1 = *r2 = NULL;
    *retry = 0;
    if (started) {
        start(&a, u, cmd, flags);
        v = redlock_attempt_next(&a, now_for(t));
    }
    for (;;) {
        switch (v) {
        case REDLOCK_GO:
        case REDLOCK_EVAL: {
            size_t plen = 0;
            const char *prefix = started ? redlock_attempt_prefix(&a, &plen) : NULL;
            int stale = 0;
            if (v == REDLOCK_EVAL)
                redlock_cmd_use_eval(cmd); /* (to the same node) */
            else if (started && k->node != NULL && (node = k->node(u, a.node)) == NULL)
                return REDLOCK_E_CONNECTION; /* (out of memory: u->err) */
            if (started && k->waiting != NULL)
                k->waiting(u, node);
            rc = redlock_conn_trip(node, prefix, plen, cmd, tail, r1, r2, &stale);
            if (*r1 == NULL && rc == REDLOCK_E_SERVER) { /* AUTH or SELECT refused: final */
                if (node != u)
                    memcpy(u->err, node->err, ERRLEN);
                return rc;
            }
            if (*r1 != NULL && (*r1)->type != REDIS_REPLY_ERROR) {
                /* the answer; on failure the tail's reply did not come */
                if (rc != REDLOCK_OK) {
                    *retry = stale;
                    if (node != u)
                        memcpy(u->err, node->err, ERRLEN);
                }
                return rc;
            }
            if (!started) {
                start(&a, u, cmd, flags);
                started = 1;
            }
            if (*r1 == NULL) {
                v = redlock_attempt_io_failed(&a, stale, node->err, now_for(t));
                break;
            }
            v = redlock_attempt_reply(&a, (*r1)->str, (*r1)->len, now_for(t));
            if (v == REDLOCK_DONE) { /* an error reply that is the answer */
                if (rc != REDLOCK_OK) {
                    *retry = stale;
                    if (node != u)
                        memcpy(u->err, node->err, ERRLEN);
                }
                return rc;
            }
            freeReplyObject(*r1);
            if (*r2 != NULL)
                freeReplyObject(*r2);
            *r1 = *r2 = NULL;
            break;
        }
        case REDLOCK_PAUSE:
            redlock_pause_ms(a.wait_ms);
            v = redlock_attempt_next(&a, now_for(t));
            break;
        case REDLOCK_RELOAD:
            rc = k->reload(u);
            if (rc != REDLOCK_OK)
                return rc;
            v = redlock_attempt_next(&a, now_for(t));
            break;
        case REDLOCK_SWITCH:
            redlock_conn_drop(u);
            if (k->forget != NULL)
                k->forget(u);
            v = redlock_attempt_next(&a, now_for(t));
            break;
        case REDLOCK_RESEND:
            v = redlock_attempt_next(&a, now_for(t));
            break;
        default: /* REDLOCK_FAIL (DONE comes with a reply, above) */
            snprintf(u->err, ERRLEN, "%s", a.err);
            *retry = a.retry;
            return a.code ? a.code : REDLOCK_E_CONNECTION;
        }
    }
}

int redlock_command(redlock_conn *u, int argc, const char **argv, const size_t *argvlen,
                    unsigned flags, redisReply **out, int *retry) {
    redlock_cmd cmd;
    redisReply *none = NULL;
    cmd.argc = argc;
    cmd.argv = argv;
    cmd.argvlen = (size_t *)argvlen; /* (written only for a script's EVAL form) */
    cmd.source = NULL;
    return redlock_request(u, &cmd, NULL, flags, out, &none, retry);
}

void redlock_conn_on_socket(redlock_conn *u, void (*fn)(void *arg, int fd), void *arg) {
    u->on_socket = fn;
    u->on_socket_arg = arg;
    if (u->kind->on_socket != NULL)
        u->kind->on_socket(u, fn, arg);
}

/* conn:set_timeout(ms): the reply timeout from now on, for a blocking
 * command that must wait longer than the usual one. */
void redlock_conn_set_timeouts(redlock_conn *u, int connect_ms, int reply_ms) {
    redlock_conn_set_timeouts_io(u, connect_ms, reply_ms);
    if (u->kind->set_timeouts != NULL) /* (a Cluster's nodes carry its commands) */
        u->kind->set_timeouts(u, connect_ms, reply_ms);
}
