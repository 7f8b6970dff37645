/* Fan-out: one command to several connections at once (Redlock's parallel
 * requests); this file is the engine, fanout_lua.c the Lua functions.
 * Mechanism only; which servers to ask and what the replies mean
 * is policy, in lua/redlock/quorum.lua.
 *
 * fanout(conns, timeout_ms, arg, ...)              -> values, errs, codes, flags
 * fanout_eval(conns, timeout_ms, name, nkeys, ...) -> values, errs, codes, flags
 *
 * The command is encoded once and appended to every connection's output
 * buffer; a connection that is not open is opened now, non-blocking, with
 * AUTH and SELECT queued ahead of the command (over TLS, after a handshake
 * that the same poll() drives, side by side with the other servers'). Every
 * request is written before any reply is read; then poll() collects the
 * replies until each has answered or its time has passed since the call
 * began: timeout_ms, twice that for a connection made in this call (one
 * more round trip), three times over TLS. The call costs the slowest
 * answer, capped, not the sum of the answers.
 * A connection that did not answer in time is closed: its late reply would
 * otherwise be read as the answer to its next command.
 *
 * For conns[i]: values[i] is the reply (as conn:command gives it), or
 * errs[i] and codes[i] ("connection", "server", "closed") say why not;
 * flags[i] is "timeout" when no answer came in time, else nil.
 * What a reply or a failure means is the topology core's (csrc/topology/topo.h),
 * followed within the call: a connection made before this call that the
 * server had closed is sent again once on a new one; a Cluster node's
 * redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) or failure, and a Sentinel
 * master turned replica, are sent again where and when the core says, within
 * the server's time; fanout_eval runs a named script of scripts.h by
 * EVALSHA, and a server that answers NOSCRIPT gets one EVAL.
 *
 * fanout_eval_wait(conns, timeout_ms, replicas, wait_ms, aof, name, nkeys, ...)
 *   -> values, errs, codes, flags, acks, fsyncs
 * is fanout_eval with WAIT replicas wait_ms (aof: WAITAOF 1 replicas
 * wait_ms) in the same write as the script (wait.h), each server's time
 * limit longer by wait_ms. Where the script answered (values[i]), acks[i] is
 * the number of replicas that acknowledged (fsyncs[i]: WAITAOF's local
 * count), or a message (a string) when WAIT's answer is an error or did
 * not come (the connection failed or timed out after the script's). */
#define _GNU_SOURCE
#include "fanout_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "clock.h"
#include "conn.h"
#include "error.h"
#include "proto.h"
#include "resp.h"
#include "reply.h"
#include "scripts.h"
#include "token.h"
#include "wait.h"

/* argv[0..1]: EVALSHA of script (the topology core's form of a script command). */
void redlock_fanout_evalsha(const redlock_script *script, int argc, const char **argv,
                            size_t *argvlen) {
    redlock_cmd cmd;
    cmd.argc = argc;
    cmd.argv = argv;
    cmd.argvlen = argvlen;
    redlock_cmd_evalsha(&cmd, script->sha, script->source);
}

/* The EVAL form of the batch's script (see batch); 0, or -1 when out of
 * memory. */
static int encode_eval(batch *b) {
    char *alt = NULL;
    redlock_cmd cmd;
    cmd.argc = b->argc;
    cmd.argv = b->argv;
    cmd.argvlen = b->argvlen;
    cmd.source = b->script->source;
    redlock_cmd_use_eval(&cmd); /* (the topology core's EVAL form) */
    b->altlen = redlock_encode(NULL, 0, b->argc, b->argv, b->argvlen, &alt);
    if (b->altlen < 0)
        return -1;
    b->alt = alt;
    return 0;
}

/* Sends s again at `at` (the run loop restarts it): the reply so far is
 * dropped, and so is the connection when a reply is still due on it. */
static void resend_at(slot *s, double at, int drop) {
    if (s->reply != NULL)
        freeReplyObject(s->reply);
    s->reply = NULL;
    if (drop)
        redlock_conn_drop(s->u);
    s->state = S_PAUSED;
    s->resume_at = at;
}

/* The slot's message goes to the caller's conn too (a Cluster's, whose
 * node failed): the caller reads it there. */
static void tell_caller(slot *s) {
    if (s->u != s->given)
        memcpy(s->given->err, s->u->err, REDLOCK_CONN_ERRLEN);
}

/* Carries out a verdict of the topology core other than GO, DONE and
 * EVAL: send again (now, after a pause, after the state is reloaded or
 * the master forgotten: the restart asks the core where), or give up with
 * its message. */
static void follow(slot *s, int v, int drop) {
    double t = redlock_mono_ms();
    if (v == REDLOCK_SWITCH) {
        redlock_conn_drop(s->given); /* the master moved: the sentinels are asked again */
        if (s->given->kind->forget != NULL)
            s->given->kind->forget(s->given);
    }
    if (v == REDLOCK_RESEND || v == REDLOCK_RELOAD || v == REDLOCK_SWITCH) {
        resend_at(s, t, drop);
    } else if (v == REDLOCK_PAUSE) {
        resend_at(s, t + s->att.wait_ms, drop);
    } else {
        s->rc = s->att.code ? s->att.code : REDLOCK_E_CONNECTION;
        s->flag = F_NONE;
        s->state = S_DONE;
        snprintf(s->u->err, REDLOCK_CONN_ERRLEN, "%s", s->att.err);
        tell_caller(s);
        if (drop)
            redlock_conn_drop(s->u);
    }
}

/* Ends a slot with a failure; the message goes to the conn's err buffer,
 * as for conn:command. A connection failure closes the socket; one the
 * server had closed while idle, or a Cluster node that may be gone, is
 * sent again as the topology core says (csrc/topology/topo.h). */
static void fail(slot *s, int rc, int flag, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redlock_set_errorv(s->u->err, REDLOCK_CONN_ERRLEN, rc, s->u->name, fmt, ap);
    va_end(ap);
    if (rc == REDLOCK_E_CONNECTION && flag != F_TIMEOUT && s->reply == NULL) {
        int v = redlock_attempt_io_failed(&s->att, flag == F_STALE, s->u->err, redlock_mono_ms());
        if (v != REDLOCK_FAIL) {
            follow(s, v, 1);
            return;
        }
    }
    if (rc == REDLOCK_E_CONNECTION && flag == F_TIMEOUT)
        redlock_attempt_silent(&s->att); /* no time to send again */
    s->rc = rc;
    s->flag = flag;
    s->state = S_DONE;
    tell_caller(s);
    if (rc == REDLOCK_E_CONNECTION)
        redlock_conn_drop(s->u);
}

/* A dropped connection that was open before this call and answered nothing
 * in it: the server closed it while idle (timeout, restart, CLIENT KILL). */
static int stale_flag(const slot *s) {
    int answered = s->got_bytes ? REDLOCK_IO_PART : REDLOCK_IO_NOTHING;
    return redlock_io_stale(s->reused, answered, 0) ? F_STALE : F_NONE; /* (timeouts: F_TIMEOUT) */
}

/* Opens a connection without blocking and queues AUTH and SELECT. */
static void start_connect(slot *s) {
    redlock_conn *u = s->u;
    redisContext *c;
    s->reused = 0;
    c = u->path ? redisConnectUnixNonBlock(u->path) : redisConnectNonBlock(u->host, u->port);
    if (c == NULL) {
        fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not connect (out of memory)");
        return;
    }
    u->ctx = c;
    u->gen = redlock_fork_generation();
    u->answered = 0;
    if (c->err) {
        s->state = S_CONNECTING;
        fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not connect (%s)", c->errstr);
        return;
    }
    if (u->on_socket != NULL)
        u->on_socket(u->on_socket_arg, c->fd);
    if (u->password != NULL) {
        const char *argv[3] = {"AUTH", u->username, u->password};
        int argc = 3;
        if (u->username == NULL) {
            argv[1] = u->password;
            argc = 2;
        }
        if (redisAppendCommandArgv(c, argc, argv, NULL) != REDIS_OK) {
            fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not connect (out of memory)");
            return;
        }
        s->setup++;
        s->auth_due = 1;
    }
    if (u->db != 0) {
        char db[24];
        const char *argv[2] = {"SELECT", db};
        snprintf(db, sizeof db, "%d", u->db);
        if (redisAppendCommandArgv(c, 2, argv, NULL) != REDIS_OK) {
            fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not connect (out of memory)");
            return;
        }
        s->setup++;
    }
    s->state = S_CONNECTING;
}

/* A TLS handshake failed: u->err already says why, with the code word. */
static void failed_tls(slot *s) {
    s->rc = REDLOCK_E_CONNECTION;
    s->flag = F_NONE;
    s->state = S_DONE;
    redlock_conn_drop(s->u);
}

static void do_write(slot *s);

/* The handshake goes on as far as it can without blocking; once done, the
 * queued AUTH/SELECT and the command are written. */
static void step_handshake(slot *s) {
    int r = redlock_tls_continue(s->u);
    if (r < 0) {
        failed_tls(s);
    } else if (r > 0) {
        s->want = r;
    } else {
        s->state = S_WRITING;
        do_write(s);
    }
}

/* The socket became writable: the connect finished, well or not. The
 * connection is then made what conn.c expects: blocking, with its timeout
 * (this file reads and writes with MSG_DONTWAIT, whatever the mode). */
static void finish_connect(slot *s) {
    redisContext *c = s->u->ctx;
    int err = 0, fl;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0) {
        fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not connect (%s)", strerror(err));
        return;
    }
    if (s->u->path == NULL && redlock_conn_self_connected(c->fd)) {
        fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not connect (" REDLOCK_SELF_CONNECTED ")");
        return;
    }
    fl = fcntl(c->fd, F_GETFL);
    if (fl == -1 || fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not connect (fcntl: %s)", strerror(errno));
        return;
    }
    c->flags |= REDIS_BLOCK;
    if (s->u->timeout_ms > 0) {
        struct timeval tv;
        tv.tv_sec = s->u->timeout_ms / 1000;
        tv.tv_usec = (suseconds_t)(s->u->timeout_ms % 1000) * 1000;
        if (redisSetTimeout(c, tv) != REDIS_OK) {
            fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not set the timeout (%s)", c->errstr);
            return;
        }
    }
    if (s->u->tls != NULL) {
        /* the handshake, side by side with the other servers' */
        if (redlock_tls_begin(s->u) != 0) {
            failed_tls(s);
            return;
        }
        s->state = S_HANDSHAKE;
        step_handshake(s);
        return;
    }
    s->state = S_WRITING;
}

static void do_write(slot *s) {
    int r = redlock_conn_flush(s->u, 1);
    if (r == 0)
        s->state = S_READING;
    else if (r < 0)
        fail(s, REDLOCK_E_CONNECTION, stale_flag(s), "lost the connection sending (%s)",
             strerror(errno));
}

/* Queues what the core puts before the command (ASKING after an ASK), its
 * reply skipped as a setup reply. 0, or -1 when out of memory. */
static int queue_prefix(slot *s) {
    size_t len = 0;
    const char *prefix = redlock_attempt_prefix(&s->att, &len);
    if (prefix == NULL)
        return 0;
    if (redisAppendFormattedCommand(s->u->ctx, prefix, len) != REDIS_OK)
        return -1;
    s->asking = 1;
    s->setup++;
    return 0;
}

/* Takes the complete replies out of the reader. */
static void take_replies(batch *b, slot *s) {
    redisContext *c = s->u->ctx;
    while (s->state == S_READING) {
        void *p = NULL;
        redisReply *r;
        int v;
        if (redisReaderGetReply(c->reader, &p) != REDIS_OK) {
            fail(s, REDLOCK_E_CONNECTION, F_NONE, "protocol error (%s)", c->reader->errstr);
            return;
        }
        if (p == NULL)
            return;
        r = (redisReply *)p;
        if (s->skip) {
            freeReplyObject(r);
            s->skip = 0;
            continue;
        }
        if (s->setup > 0) {
            const char *what = s->auth_due ? "AUTH" : s->asking ? "ASKING" : "SELECT";
            s->setup--;
            s->auth_due = 0;
            if (r->type == REDIS_REPLY_ERROR) {
                /* the connection is useless: close it, as conn.c does */
                fail(s, REDLOCK_E_SERVER, F_NONE, "%s failed: %.*s", what,
                     (int)(r->len > 160 ? 160 : r->len), r->str);
                freeReplyObject(r);
                redlock_conn_drop(s->u);
                return;
            }
            freeReplyObject(r);
            continue;
        }
        if (s->reply == NULL && r->type == REDIS_REPLY_ERROR)
            v = redlock_attempt_reply(&s->att, r->str, r->len, redlock_mono_ms());
        else
            v = REDLOCK_DONE;
        if (v == REDLOCK_EVAL) {
            freeReplyObject(r);
            s->skip = b->wlen > 0;
            if (queue_prefix(s) != 0 || /* (the EVAL goes to an ASK's node too) */
                (b->alt == NULL && encode_eval(b) != 0) ||
                redisAppendFormattedCommand(c, b->alt, (size_t)b->altlen) != REDIS_OK ||
                (b->wlen > 0 &&
                 redisAppendFormattedCommand(c, b->wbuf, (size_t)b->wlen) != REDIS_OK)) {
                fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not encode the command");
                return;
            }
            s->state = S_WRITING;
            do_write(s);
            return;
        }
        if (v != REDLOCK_DONE) {
            /* refused, nothing written: sent again as the core says (WAIT's
             * reply, still on its way, goes with the connection; a master
             * turned replica's too: the sentinels are asked again) */
            freeReplyObject(r);
            follow(s, v, b->wlen > 0 || v == REDLOCK_SWITCH);
            return;
        }
        if (s->reply == NULL) {
            s->reply = r;
            if (b->wlen > 0)
                continue; /* WAIT's comes next */
        } else {
            s->wreply = r;
        }
        s->rc = REDLOCK_OK;
        s->state = S_DONE;
    }
}

/* What one read gave (n bytes, 0 at end of stream, < 0 with errno set;
 * why: the text of that errno): fed to the reader and the replies taken.
 * 1 when the slot may read on, 0 when it is done, failed, or has nothing to
 * read now. */
static int absorb(batch *b, slot *s, const char *buf, long n, const char *why) {
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            fail(s, REDLOCK_E_CONNECTION, stale_flag(s),
                 "lost the connection waiting for a reply (%s%s)", why,
                 redlock_tls_plain_hint(s->u, !s->reused && !s->got_bytes));
        return 0;
    }
    if (n == 0) {
        fail(s, REDLOCK_E_CONNECTION, stale_flag(s),
             "lost the connection waiting for a reply (closed by the server%s)",
             redlock_tls_plain_hint(s->u, !s->reused && !s->got_bytes));
        return 0;
    }
    s->got_bytes = 1;
    s->u->answered = 1;
    if (redisReaderFeed(s->u->ctx->reader, buf, (size_t)n) != REDIS_OK) {
        fail(s, REDLOCK_E_CONNECTION, F_NONE, "protocol error (%s)", s->u->ctx->reader->errstr);
        return 0;
    }
    take_replies(b, s);
    return s->state == S_READING;
}

/* Over TLS: reads until the session has nothing more, so that no
 * decrypted byte waits in OpenSSL's buffer (SSL_pending) while poll()
 * sleeps on a socket that has nothing new. */
static void do_read_tls(batch *b, slot *s) {
    char buf[READ_CHUNK];
    long n;
    do {
        n = redlock_tls_read(s->u, buf, sizeof buf, 1);
    } while (absorb(b, s, buf, n, s->u->ctx->errstr));
}

static void do_read(batch *b, slot *s) {
    char buf[READ_CHUNK];
    ssize_t n;
    if (s->u->ssl != NULL) {
        do_read_tls(b, s);
        return;
    }
    do {
        n = recv(s->u->ctx->fd, buf, sizeof buf, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    absorb(b, s, buf, (long)n, n < 0 ? strerror(errno) : "");
}

/* Where the core sends the slot's command now (a RELOAD done at once,
 * blocking: once per change of a Cluster's map): GO with s->u the node's
 * conn, or another verdict. */
static int target(slot *s) {
    redlock_conn *g = s->given;
    for (;;) {
        int v = redlock_attempt_next(&s->att, redlock_mono_ms()), rc;
        if (v == REDLOCK_GO && g->kind->node != NULL) {
            s->u = g->kind->node(g, s->att.node);
            if (s->u == NULL) { /* out of memory: g->err */
                s->u = g;
                snprintf(s->att.err, sizeof s->att.err, "%s", g->err);
                s->att.code = REDLOCK_E_CONNECTION;
                return REDLOCK_FAIL;
            }
        }
        if (v != REDLOCK_RELOAD)
            return v;
        rc = g->kind->reload(g);
        if (rc != REDLOCK_OK) {
            snprintf(s->att.err, sizeof s->att.err, "%s", g->err);
            s->att.code = rc;
            return REDLOCK_FAIL;
        }
    }
}

static void start(batch *b, slot *s) {
    redlock_conn *u = s->given;
    int v;
    if (u == NULL) { /* not reached: every slot has its conn (for the analyzer) */
        s->state = S_DONE;
        s->rc = REDLOCK_E_CLOSED;
        return;
    }
    s->u = u;
    if (u->closed) {
        s->rc = REDLOCK_E_CLOSED;
        s->state = S_DONE;
        redlock_set_error(u->err, REDLOCK_CONN_ERRLEN, REDLOCK_E_CLOSED, NULL,
                          "the connection is closed");
        return;
    }
    v = target(s);
    if (v != REDLOCK_GO) {
        follow(s, v, 0);
        return;
    }
    u = s->u;
    redlock_conn_before_use(u); /* may drop it: a fork, a master that moved */
    if (u->ctx == NULL && u->kind->connect != NULL) {
        /* Sentinel: the sentinels asked, the master connected (and its
         * TLS handshake made) one server at a time, within its connect
         * timeout (conn.c); the round trips still go in parallel */
        int rc = redlock_conn_ensure(u);
        s->reused = 0;
        if (rc != 0) {
            s->rc = rc;
            s->flag = F_NONE;
            s->state = S_DONE;
            return;
        }
        s->state = S_WRITING;
    } else if (u->ctx == NULL) {
        start_connect(s);
        if (s->state == S_DONE)
            return;
    } else {
        s->reused = 1;
        s->state = S_WRITING;
    }
    if (queue_prefix(s) != 0 || /* (after an ASK: ASKING just before the command) */
        redisAppendFormattedCommand(u->ctx, b->cmd, (size_t)b->cmdlen) != REDIS_OK ||
        (b->wlen > 0 &&
         redisAppendFormattedCommand(u->ctx, b->wbuf, (size_t)b->wlen) != REDIS_OK)) {
        fail(s, REDLOCK_E_CONNECTION, F_NONE, "could not encode the command");
        return;
    }
    if (s->state == S_WRITING)
        do_write(s);
}

static void time_out(slot *s) {
    if (s->state == S_HANDSHAKE) {
        redlock_tls_timed_out(s->u, s->limit_ms);
        failed_tls(s);
        s->flag = F_TIMEOUT;
        return;
    }
    fail(s, REDLOCK_E_CONNECTION, F_TIMEOUT, "timed out after %d ms %s", s->limit_ms,
         s->state == S_CONNECTING ? "connecting"
         : s->state == S_WRITING  ? "sending"
         : s->reply != NULL       ? "waiting for WAIT's reply"
                                  : "waiting for a reply");
}

static int is_tls(const slot *s) { return s->u != NULL && s->u->tls != NULL; }

/* A connection made now needs one more round trip (the TCP handshake, with
 * AUTH and SELECT queued ahead of the command), and one more for TLS's (TLS
 * 1.3; the servers' handshakes run side by side, each within its own
 * limit). WAIT's answer may take longer (wait.h). */
static int limit_of(const batch *b, const slot *s) {
    return (s->reused ? b->timeout_ms : (is_tls(s) ? 3 : 2) * b->timeout_ms) +
           b->wait_extra;
}

/* A slot sent again (a verdict of the topology core): from the caller's
 * conn, as new, with the time it needs from now. */
static void restart(batch *b, slot *s, double t0, double t) {
    s->u = s->given;
    s->reply = s->wreply = NULL;
    s->reused = s->got_bytes = s->setup = s->auth_due = s->skip = s->asking = 0;
    s->flag = F_NONE;
    start(b, s);
    if (s->state != S_DONE && s->state != S_PAUSED)
        s->limit_ms = (int)(t - t0) + limit_of(b, s);
}

/* Sentinel-managed conns not connected: the sentinels asked and the master
 * connected (and its TLS handshake made) one server at a time, blocking,
 * before the servers' time limits start: a sentinel that hangs costs its
 * own short timeout (csrc/defaults.h), not a voter's limit. */
static void locate_masters(batch *b) {
    int i;
    for (i = 0; i < b->n; i++) {
        redlock_conn *u = b->slots[i].u;
        if (u == NULL || u->closed || u->kind->connect == NULL)
            continue;
        redlock_conn_before_use(u); /* may drop it: a fork, a master that moved */
        if (u->ctx == NULL)
            (void)redlock_conn_ensure(u); /* (a failure: start() says so) */
    }
}

int redlock_fanout_wait(batch *b, const redlock_wait *w) {
    redlock_tail t;
    b->wait = *w;
    if (redlock_wait_tail(w, b->wbuf, &t) != 0)
        return -1;
    b->wlen = t.len;
    b->wait_extra = t.extra_ms;
    return 0;
}

void redlock_fanout_run(batch *b, struct pollfd *pfds, int *which) {
    double t0;
    int i;
    locate_masters(b);
    t0 = redlock_mono_ms();
    for (i = 0; i < b->n; i++) {
        slot *s = &b->slots[i];
        const redlock_conn_kind *k = s->u->kind;
        s->given = s->u;
        redlock_attempt_start(
            &s->att, k->topo, k->state != NULL ? k->state(s->u) : NULL, s->u->name,
            k->topo->routed ? redlock_command_slot(b->argc, b->argv, b->argvlen) : -1,
            b->script != NULL ? REDLOCK_AT_SCRIPT : 0, t0, b->timeout_ms);
        start(b, s);
        s->limit_ms = limit_of(b, s);
        s->att.deadline = t0 + s->limit_ms;
    }
    for (;;) {
        int k = 0, r, j;
        double t = redlock_mono_ms(), left = -1;
        for (i = 0; i < b->n; i++) {
            slot *s = &b->slots[i];
            double mine;
            if (s->state == S_PAUSED && t >= s->resume_at)
                restart(b, s, t0, t);
            if (s->state == S_DONE)
                continue;
            mine = t0 + s->limit_ms - t;
            if (s->state == S_PAUSED) {
                if (mine <= 0) {
                    s->att.code = s->att.code ? s->att.code : REDLOCK_E_CONNECTION;
                    follow(s, REDLOCK_FAIL, 0);
                    continue;
                }
                mine = s->resume_at - t;
                if (left < 0 || mine < left)
                    left = mine;
                continue;
            }
            if (mine <= 0) {
                time_out(s);
                continue;
            }
            if (left < 0 || mine < left)
                left = mine;
            pfds[k].fd = s->u->ctx->fd;
            pfds[k].events = (short)(s->state == S_READING     ? POLLIN
                                     : s->state == S_HANDSHAKE ? s->want
                                                               : POLLOUT);
            pfds[k].revents = 0;
            which[k++] = i;
        }
        if (k == 0 && left < 0)
            break;
        r = poll(pfds, (nfds_t)k, (int)left + 1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            for (j = 0; j < k; j++)
                fail(&b->slots[which[j]], REDLOCK_E_CONNECTION, F_NONE, "poll failed (%s)",
                     strerror(errno));
            break;
        }
        for (j = 0; j < k; j++) {
            slot *s = &b->slots[which[j]];
            if (pfds[j].revents == 0)
                continue;
            if (s->state == S_CONNECTING)
                finish_connect(s);
            else if (s->state == S_HANDSHAKE)
                step_handshake(s);
            if (s->state == S_WRITING)
                do_write(s);
            else if (s->state == S_READING)
                do_read(b, s);
        }
    }
}

static int fanout_c(redlock_conn **conns, int n, int timeout_ms, const redlock_script *script,
                    const redlock_wait *w, const char **argv, size_t *argvlen, int argc,
                    redisReply **replies, redisReply **wreplies, int *stale) {
    struct pollfd pfds[MAX_CONNS];
    int which[MAX_CONNS], i;
    char *cmd = NULL;
    batch b;
    if (n < 1 || n > MAX_CONNS)
        return -1;
    memset(&b, 0, sizeof b);
    b.n = n;
    b.timeout_ms = timeout_ms;
    if (w != NULL) {
        if (redlock_fanout_wait(&b, w) != 0)
            return -1;
    }
    redlock_fanout_evalsha(script, argc, argv, argvlen);
    b.cmdlen = redlock_encode(NULL, 0, argc, argv, argvlen, &cmd);
    b.cmd = b.cmdlen < 0 ? NULL : cmd;
    b.script = script;
    b.argv = argv;
    b.argvlen = argvlen;
    b.argc = argc;
    b.slots = (slot *)calloc((size_t)n, sizeof(slot));
    if (b.slots == NULL || b.cmd == NULL) {
        free(b.slots);
        free((void *)b.cmd);
        return -1;
    }
    for (i = 0; i < n; i++)
        b.slots[i].u = conns[i];
    redlock_fanout_run(&b, pfds, which);
    for (i = 0; i < n; i++) {
        slot *sl = &b.slots[i];
        if (w != NULL) {
            /* the caller's now; the script's reply even if WAIT's is missing */
            replies[i] = sl->reply;
            wreplies[i] = sl->rc == REDLOCK_OK ? sl->wreply : NULL;
            if (sl->rc != REDLOCK_OK && sl->wreply != NULL)
                freeReplyObject(sl->wreply);
        } else {
            replies[i] = sl->rc == REDLOCK_OK ? sl->reply : NULL; /* the caller's now */
            if (sl->rc != REDLOCK_OK && sl->reply != NULL)
                freeReplyObject(sl->reply);
        }
        stale[i] = sl->flag == F_STALE && sl->reply == NULL;
    }
    free(b.slots);
    free((void *)b.cmd);
    free((void *)b.alt);
    return 0;
}

int redlock_fanout_eval_c(redlock_conn **conns, int n, int timeout_ms, const redlock_script *script,
                          const char **argv, size_t *argvlen, int argc, redisReply **replies,
                          int *stale) {
    return fanout_c(conns, n, timeout_ms, script, NULL, argv, argvlen, argc, replies, NULL, stale);
}

int redlock_fanout_eval_wait_c(redlock_conn **conns, int n, int timeout_ms,
                               const redlock_script *script, const redlock_wait *w,
                               const char **argv, size_t *argvlen, int argc, redisReply **replies,
                               redisReply **wreplies, int *stale) {
    return fanout_c(conns, n, timeout_ms, script, w, argv, argvlen, argc, replies, wreplies, stale);
}

