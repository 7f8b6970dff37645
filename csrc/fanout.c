/* Fan-out: one command to several connections at once (Redlock's parallel
 * requests). Mechanism only; which servers to ask and what the replies mean
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
 * flags[i] is "timeout" when no answer came in time, "stale" when a
 * connection made before this call turned out closed by the server (a retry
 * on a fresh connection is sensible, as conn:command's `stale`), else nil.
 * fanout_eval runs a named script of scripts.h by EVALSHA; a server that
 * answers NOSCRIPT gets one EVAL in the same call, within the same time.
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
#include "fanout.h"

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

#include "conn.h"
#include "proto.h"
#include "resp.h"
#include "reply.h"
#include "scripts.h"
#include "token.h"
#include "wait.h"

#define MAX_CONNS 64
#define READ_CHUNK 16384

enum { S_DONE, S_CONNECTING, S_HANDSHAKE, S_WRITING, S_READING };
enum { RC_OK, RC_CONNECTION, RC_SERVER, RC_CLOSED };
enum { F_NONE, F_TIMEOUT, F_STALE };

static const char *const code_words[] = {"", "connection", "server", "closed"};
static const char *const flag_words[] = {NULL, "timeout", "stale"};

typedef struct {
    redlock_conn *u;
    redlock_conn *owner; /* the Cluster conn u is a node of, or NULL */
    int state, rc, flag;
    int reused;    /* the connection was open before this call */
    int got_bytes; /* something was read from it in this call */
    int setup;     /* AUTH/SELECT replies still due before ours */
    int auth_due;  /* the next of them is AUTH's */
    int evaled;    /* NOSCRIPT was answered with EVAL */
    int skip;      /* WAIT's reply to a NOSCRIPT'd EVALSHA is still due */
    int asking;    /* a Cluster node named by ASK: ASKING goes first */
    int want;      /* S_HANDSHAKE: POLLIN or POLLOUT */
    int limit_ms;  /* its time to answer, from the start of the call */
    redisReply *reply;
    redisReply *wreply; /* WAIT's, when the batch waits */
} slot;

typedef struct {
    int n, timeout_ms;
    slot *slots;
    const char *cmd, *alt; /* EVALSHA (or the command), and EVAL */
    long cmdlen, altlen;
    /* for the EVAL form, made on the first NOSCRIPT only (it carries the
     * whole script): the script and the arguments, prefix slots included */
    const redlock_script *script;
    const char **argv;
    size_t *argvlen;
    int argc;
    /* WAIT after the script (fanout_eval_wait): wlen > 0 */
    char wbuf[REDLOCK_WAIT_BUF];
    long wlen;
    int wait_ms;
} batch;

/* The EVAL form of the batch's script (see batch); 0, or -1 when out of
 * memory. */
static int encode_eval(batch *b) {
    char *alt = NULL;
    b->argv[0] = "EVAL";
    b->argvlen[0] = 4;
    b->argv[1] = b->script->source;
    b->argvlen[1] = strlen(b->script->source);
    b->altlen = redlock_encode(NULL, 0, b->argc, b->argv, b->argvlen, &alt);
    if (b->altlen < 0)
        return -1;
    b->alt = alt;
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Ends a slot with a failure; the message goes to the conn's err buffer,
 * as for conn:command. A connection failure closes the socket. */
static void fail(slot *s, int rc, int flag, const char *fmt, ...) {
    int len;
    va_list ap;
    va_start(ap, fmt);
    len = snprintf(s->u->err, REDLOCK_CONN_ERRLEN, "%s: %s: ", code_words[rc], s->u->name);
    if (len > 0 && len < REDLOCK_CONN_ERRLEN)
        /* clang 14's analyzer does not see va_start on this path */
        vsnprintf(s->u->err + len, (size_t)(REDLOCK_CONN_ERRLEN - len), fmt, ap); /* NOLINT(clang-analyzer-valist.Uninitialized) */
    va_end(ap);
    if (s->owner != NULL && rc == RC_CONNECTION) {
        /* a Cluster node that failed may be gone (a failover): the map is
         * reloaded on the next use, and a connect that failed sent nothing,
         * so the caller's one retry may go to the new owner now */
        s->owner->cluster->loaded = 0;
        if (flag == F_NONE && s->state == S_CONNECTING)
            flag = F_STALE;
    }
    s->rc = rc;
    s->flag = flag;
    s->state = S_DONE;
    if (s->owner != NULL) /* the caller reads the Cluster conn's message */
        memcpy(s->owner->err, s->u->err, REDLOCK_CONN_ERRLEN);
    if (rc == RC_CONNECTION)
        redlock_conn_drop(s->u);
}

/* A dropped connection that was open before this call and answered nothing
 * in it: the server closed it while idle (timeout, restart, CLIENT KILL). */
static int stale_flag(const slot *s) { return s->reused && !s->got_bytes ? F_STALE : F_NONE; }

/* Opens a connection without blocking and queues AUTH and SELECT. */
static void start_connect(slot *s) {
    redlock_conn *u = s->u;
    redisContext *c;
    s->reused = 0;
    c = u->path ? redisConnectUnixNonBlock(u->path) : redisConnectNonBlock(u->host, u->port);
    if (c == NULL) {
        fail(s, RC_CONNECTION, F_NONE, "could not connect (out of memory)");
        return;
    }
    u->ctx = c;
    u->gen = redlock_fork_generation();
    u->answered = 0;
    if (c->err) {
        s->state = S_CONNECTING; /* (nothing sent: see fail) */
        fail(s, RC_CONNECTION, F_NONE, "could not connect (%s)", c->errstr);
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
            fail(s, RC_CONNECTION, F_NONE, "could not connect (out of memory)");
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
            fail(s, RC_CONNECTION, F_NONE, "could not connect (out of memory)");
            return;
        }
        s->setup++;
    }
    s->state = S_CONNECTING;
}

/* A TLS handshake failed: u->err already says why, with the code word. */
static void failed_tls(slot *s) {
    s->rc = RC_CONNECTION;
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
        fail(s, RC_CONNECTION, F_NONE, "could not connect (%s)", strerror(err));
        return;
    }
    fl = fcntl(c->fd, F_GETFL);
    if (fl == -1 || fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        fail(s, RC_CONNECTION, F_NONE, "could not connect (fcntl: %s)", strerror(errno));
        return;
    }
    c->flags |= REDIS_BLOCK;
    if (s->u->timeout_ms > 0) {
        struct timeval tv;
        tv.tv_sec = s->u->timeout_ms / 1000;
        tv.tv_usec = (suseconds_t)(s->u->timeout_ms % 1000) * 1000;
        if (redisSetTimeout(c, tv) != REDIS_OK) {
            fail(s, RC_CONNECTION, F_NONE, "could not set the timeout (%s)", c->errstr);
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
        fail(s, RC_CONNECTION, stale_flag(s), "lost the connection sending (%s)",
             strerror(errno));
}

static int is_noscript(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* ASKING, as RESP: sent before a command that follows an ASK redirection. */
static const char ASKING[] = "*1\r\n$6\r\nASKING\r\n";

/* Takes the complete replies out of the reader. */
static void take_replies(batch *b, slot *s) {
    redisContext *c = s->u->ctx;
    while (s->state == S_READING) {
        void *p = NULL;
        redisReply *r;
        if (redisReaderGetReply(c->reader, &p) != REDIS_OK) {
            fail(s, RC_CONNECTION, F_NONE, "protocol error (%s)", c->reader->errstr);
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
                fail(s, RC_SERVER, F_NONE, "%s failed: %.*s", what,
                     (int)(r->len > 160 ? 160 : r->len), r->str);
                freeReplyObject(r);
                redlock_conn_drop(s->u);
                return;
            }
            freeReplyObject(r);
            continue;
        }
        if (b->script != NULL && !s->evaled && is_noscript(r)) {
            freeReplyObject(r);
            s->evaled = 1;
            s->skip = b->wlen > 0;
            if (s->asking) { /* the EVAL goes to an ASK's node too */
                if (redisAppendFormattedCommand(c, ASKING, sizeof ASKING - 1) != REDIS_OK) {
                    fail(s, RC_CONNECTION, F_NONE, "could not encode the command");
                    return;
                }
                s->setup++;
            }
            if ((b->alt == NULL && encode_eval(b) != 0) ||
                redisAppendFormattedCommand(c, b->alt, (size_t)b->altlen) != REDIS_OK ||
                (b->wlen > 0 &&
                 redisAppendFormattedCommand(c, b->wbuf, (size_t)b->wlen) != REDIS_OK)) {
                fail(s, RC_CONNECTION, F_NONE, "could not encode the command");
                return;
            }
            s->state = S_WRITING;
            do_write(s);
            return;
        }
        if (s->reply == NULL && r->type == REDIS_REPLY_ERROR && s->owner != NULL &&
            redlock_cluster_redirected(s->owner, r->str, r->len)) {
            /* refused, nothing written: the map is reloaded on the retry */
            snprintf(s->u->err, REDLOCK_CONN_ERRLEN, "%s", s->owner->err);
            freeReplyObject(r);
            if (b->wlen > 0)
                redlock_conn_drop(s->u); /* WAIT's reply is still on its way */
            s->rc = RC_CONNECTION;
            s->flag = F_STALE;
            s->state = S_DONE;
            return;
        }
        if (s->reply == NULL && r->type == REDIS_REPLY_ERROR && s->u->sentinels != NULL &&
            redlock_sentinel_demoted(s->u, r->str, r->len)) {
            /* nothing written: as a stale connection, the caller may retry */
            freeReplyObject(r);
            s->rc = RC_CONNECTION;
            s->flag = F_STALE;
            s->state = S_DONE;
            return;
        }
        if (s->reply == NULL) {
            s->reply = r;
            if (b->wlen > 0)
                continue; /* WAIT's comes next */
        } else {
            s->wreply = r;
        }
        s->rc = RC_OK;
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
            fail(s, RC_CONNECTION, stale_flag(s), "lost the connection waiting for a reply (%s%s)",
                 why, redlock_tls_plain_hint(s->u, !s->reused && !s->got_bytes));
        return 0;
    }
    if (n == 0) {
        fail(s, RC_CONNECTION, stale_flag(s),
             "lost the connection waiting for a reply (closed by the server%s)",
             redlock_tls_plain_hint(s->u, !s->reused && !s->got_bytes));
        return 0;
    }
    s->got_bytes = 1;
    s->u->answered = 1;
    if (redisReaderFeed(s->u->ctx->reader, buf, (size_t)n) != REDIS_OK) {
        fail(s, RC_CONNECTION, F_NONE, "protocol error (%s)", s->u->ctx->reader->errstr);
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

static void start(batch *b, slot *s) {
    redlock_conn *u = s->u;
    if (u == NULL) { /* not reached: every slot has its conn (for the analyzer) */
        s->state = S_DONE;
        s->rc = RC_CLOSED;
        return;
    }
    if (!u->closed && u->cluster != NULL) {
        /* a Cluster: the node that serves the key, from the slot map */
        int rc = 0;
        redlock_conn *node = redlock_cluster_route(u, b->argc, b->argv, b->argvlen, &rc, &s->asking);
        if (node == NULL) {
            s->rc = rc == 2 ? RC_SERVER : RC_CONNECTION;
            s->flag = F_NONE;
            s->state = S_DONE;
            return;
        }
        s->owner = u;
        s->u = u = node;
    }
    if (u->closed) {
        s->rc = RC_CLOSED;
        s->state = S_DONE;
        snprintf(u->err, REDLOCK_CONN_ERRLEN, "closed: the connection is closed");
        return;
    }
    redlock_conn_before_use(u); /* may drop it: a fork, a master that moved */
    if (u->ctx == NULL && u->sentinels != NULL) {
        /* Sentinel: the sentinels asked, the master connected (and its
         * TLS handshake made) one server at a time, within its connect
         * timeout (conn.c); the round trips still go in parallel */
        int rc = redlock_conn_ensure(u);
        s->reused = 0;
        if (rc != 0) {
            s->rc = rc == 2 ? RC_SERVER : RC_CONNECTION;
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
    if (s->asking) {
        /* after an ASK: ASKING just before the command, its reply skipped
         * as a setup reply */
        if (redisAppendFormattedCommand(u->ctx, ASKING, sizeof ASKING - 1) != REDIS_OK) {
            fail(s, RC_CONNECTION, F_NONE, "could not encode the command");
            return;
        }
        s->setup++;
    }
    if (redisAppendFormattedCommand(u->ctx, b->cmd, (size_t)b->cmdlen) != REDIS_OK ||
        (b->wlen > 0 &&
         redisAppendFormattedCommand(u->ctx, b->wbuf, (size_t)b->wlen) != REDIS_OK)) {
        fail(s, RC_CONNECTION, F_NONE, "could not encode the command");
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
    fail(s, RC_CONNECTION, F_TIMEOUT, "timed out after %d ms %s", s->limit_ms,
         s->state == S_CONNECTING ? "connecting"
         : s->state == S_WRITING  ? "sending"
         : s->reply != NULL       ? "waiting for WAIT's reply"
                                  : "waiting for a reply");
}

static int is_tls(const slot *s) { return s->u != NULL && s->u->tls != NULL; }

static void run(batch *b, struct pollfd *pfds, int *which) {
    double t0 = now_ms();
    int i;
    for (i = 0; i < b->n; i++) {
        slot *s = &b->slots[i];
        start(b, s);
        /* A connection made now needs one more round trip (the TCP
         * handshake, with AUTH and SELECT queued ahead of the command), and
         * one more for TLS's (TLS 1.3; the servers' handshakes run side by
         * side, each within its own limit). WAIT answers after wait_ms,
         * plus up to a tick of the server's timer (hz 10: 100 ms). */
        s->limit_ms = (s->reused ? b->timeout_ms : (is_tls(s) ? 3 : 2) * b->timeout_ms) +
                      (b->wait_ms > 0 ? b->wait_ms + 100 : 0);
    }
    for (;;) {
        int k = 0, r, j;
        double t = now_ms(), left = -1;
        for (i = 0; i < b->n; i++) {
            slot *s = &b->slots[i];
            double mine;
            if (s->state == S_DONE)
                continue;
            mine = t0 + s->limit_ms - t;
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
        if (k == 0)
            break;
        r = poll(pfds, (nfds_t)k, (int)left + 1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            for (j = 0; j < k; j++)
                fail(&b->slots[which[j]], RC_CONNECTION, F_NONE, "poll failed (%s)",
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

/* acks[i] and fsyncs[i] (the tables at -2 and -1) of a waiting batch's
 * slot whose script answered (see fanout_eval_wait). */
static void push_ack(lua_State *L, const slot *s, int i) {
    long long acked, fsynced;
    const redisReply *w = s->wreply;
    if (s->rc != RC_OK) {
        lua_pushstring(L, s->u->err);
    } else if (w->type == REDIS_REPLY_ERROR) {
        lua_pushfstring(L, "server: %s: ", s->u->name);
        lua_pushlstring(L, w->str, w->len > 200 ? 200 : w->len);
        lua_concat(L, 2);
    } else if (redlock_wait_parse(w, &acked, &fsynced) != 0) {
        lua_pushfstring(L, "server: %s: unexpected reply to WAIT", s->u->name);
    } else {
        lua_pushinteger(L, (lua_Integer)acked);
        lua_rawseti(L, -3, i + 1);
        lua_pushinteger(L, (lua_Integer)fsynced);
        lua_rawseti(L, -2, i + 1);
        return;
    }
    lua_rawseti(L, -3, i + 1);
}

/* Runs protected: builds the four result tables from the slots (six for a
 * waiting batch). */
static int push_results(lua_State *L) {
    batch *b = (batch *)lua_touserdata(L, 1);
    int i, w = b->wlen > 0 ? 2 : 0;
    lua_createtable(L, b->n, 0);
    lua_createtable(L, b->n, 0);
    lua_createtable(L, b->n, 0);
    lua_createtable(L, b->n, 0);
    if (w) {
        lua_createtable(L, b->n, 0);
        lua_createtable(L, b->n, 0);
    }
    for (i = 0; i < b->n; i++) {
        slot *s = &b->slots[i];
        redisReply *r = s->reply;
        if (w && r != NULL && r->type != REDIS_REPLY_ERROR) {
            /* the script answered: WAIT's part goes to acks */
            redlock_push_reply(L, r);
            lua_rawseti(L, -7, i + 1);
            push_ack(L, s, i);
            continue;
        }
        if (s->rc == RC_OK && r != NULL && r->type != REDIS_REPLY_ERROR) {
            redlock_push_reply(L, r);
            lua_rawseti(L, -5 - w, i + 1);
            continue;
        }
        /* (a script's error whose WAIT reply did not come: the connection's
         * failure is the news) */
        if (s->rc == RC_OK && r != NULL) {
            lua_pushfstring(L, "server: %s: ", s->u->name);
            lua_pushlstring(L, r->str, r->len > 200 ? 200 : r->len);
            lua_concat(L, 2);
            lua_rawseti(L, -4 - w, i + 1);
            lua_pushstring(L, code_words[RC_SERVER]);
        } else {
            lua_pushstring(L, s->u->err);
            lua_rawseti(L, -4 - w, i + 1);
            lua_pushstring(L, code_words[s->rc]);
        }
        lua_rawseti(L, -3 - w, i + 1);
        if (s->flag != F_NONE) {
            lua_pushstring(L, flag_words[s->flag]);
            lua_rawseti(L, -2 - w, i + 1);
        }
    }
    return 4 + w;
}

static void free_batch(batch *b, const char **argv, size_t *argvlen) {
    int i;
    if (b->slots != NULL)
        for (i = 0; i < b->n; i++) {
            if (b->slots[i].reply != NULL)
                freeReplyObject(b->slots[i].reply);
            if (b->slots[i].wreply != NULL)
                freeReplyObject(b->slots[i].wreply);
        }
    free(b->slots);
    free((void *)b->cmd);
    free((void *)b->alt);
    free((void *)argv);
    free(argvlen);
}

/* Checks conns (arg 1) and timeout (arg 2); returns the count. */
static int check_conns(lua_State *L, redlock_conn **conns) {
    int n, i, j;
    lua_Integer ms;
    luaL_checktype(L, 1, LUA_TTABLE);
    n = (int)lua_rawlen(L, 1);
    luaL_argcheck(L, n >= 1 && n <= MAX_CONNS, 1, "1 to 64 conns expected");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        conns[i] = redlock_conn_test(L, -1);
        lua_pop(L, 1); /* the table keeps the userdata alive */
        if (conns[i] == NULL)
            return luaL_argerror(L, 1, lua_pushfstring(L, "conn expected at index %d", i + 1));
        for (j = 0; j < i; j++)
            if (conns[j] == conns[i])
                return luaL_argerror(L, 1, lua_pushfstring(L, "conn at index %d twice", i + 1));
    }
    ms = luaL_checkinteger(L, 2);
    luaL_argcheck(L, ms >= 1 && ms <= 86400000, 2, "out of range (1 to 86400000 ms)");
    return n;
}

/* name: the stack index of the script's name (nkeys follows), 0 for a
 * plain command (from index 3); w: WAIT after the script, or NULL. */
static int fanout_common(lua_State *L, const redlock_script *script, int name,
                         const redlock_wait *w) {
    redlock_conn *conns[MAX_CONNS] = {NULL}; /* set by check_conns; zeroed for the analyzer */
    struct pollfd pfds[MAX_CONNS];
    int which[MAX_CONNS];
    int n = check_conns(L, conns), first, argc, prefix, status, i, nres = w != NULL ? 6 : 4;
    const char **argv = NULL;
    size_t *argvlen = NULL;
    char *cmd = NULL;
    batch b;
    if (n < 1)
        return 0; /* not reached: check_conns raised (for the analyzer) */
    memset(&b, 0, sizeof b);
    b.n = n;
    b.timeout_ms = (int)lua_tointeger(L, 2);
    if (w != NULL) {
        b.wlen = redlock_wait_encode(w, b.wbuf, sizeof b.wbuf);
        b.wait_ms = w->timeout_ms;
        if (b.wlen < 0)
            return luaL_error(L, "out of memory");
    }
    if (script != NULL) {
        lua_Integer nkeys = luaL_checkinteger(L, name + 1);
        int top = lua_gettop(L);
        if (nkeys < 0 || nkeys > top - (name + 1))
            return luaL_argerror(L, name + 1, "numkeys out of range");
        first = name + 1; /* numkeys, keys and args */
        prefix = 2;
    } else {
        first = 3;
        prefix = 0;
    }
    argc = redlock_check_argv(L, first, lua_gettop(L));
    /* Everything that may raise comes before the C memory. */
    lua_pushcfunction(L, push_results);
    if (redlock_argv_alloc(L, first, argc, prefix, &argv, &argvlen) != 0)
        return luaL_error(L, "out of memory");
    b.slots = (slot *)calloc((size_t)n, sizeof(slot));
    if (script != NULL) {
        argv[0] = "EVALSHA";
        argvlen[0] = 7;
        argv[1] = script->sha;
        argvlen[1] = 40;
    }
    b.cmdlen = redlock_encode(NULL, 0, argc + prefix, argv, argvlen, &cmd);
    b.cmd = b.cmdlen < 0 ? NULL : cmd;
    b.script = script;
    b.argv = argv;
    b.argvlen = argvlen;
    b.argc = argc + prefix;
    if (b.slots == NULL || b.cmd == NULL) {
        free_batch(&b, argv, argvlen);
        return luaL_error(L, "out of memory");
    }
    for (i = 0; i < n; i++)
        b.slots[i].u = conns[i];
    run(&b, pfds, which);
    lua_pushlightuserdata(L, &b);
    status = lua_pcall(L, 1, nres, 0);
    free_batch(&b, argv, argvlen);
    if (status != 0)
        return lua_error(L); /* everything is freed */
    return nres;
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
        b.wlen = redlock_wait_encode(w, b.wbuf, sizeof b.wbuf);
        b.wait_ms = w->timeout_ms;
        if (b.wlen < 0)
            return -1;
    }
    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = script->sha;
    argvlen[1] = 40;
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
    run(&b, pfds, which);
    for (i = 0; i < n; i++) {
        slot *sl = &b.slots[i];
        if (w != NULL) {
            /* the caller's now; the script's reply even if WAIT's is missing */
            replies[i] = sl->reply;
            wreplies[i] = sl->rc == RC_OK ? sl->wreply : NULL;
            if (sl->rc != RC_OK && sl->wreply != NULL)
                freeReplyObject(sl->wreply);
        } else {
            replies[i] = sl->rc == RC_OK ? sl->reply : NULL; /* the caller's now */
            if (sl->rc != RC_OK && sl->reply != NULL)
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

/* fanout(conns, timeout_ms, arg, ...) */
static int core_fanout(lua_State *L) { return fanout_common(L, NULL, 0, NULL); }

/* fanout_eval(conns, timeout_ms, name, numkeys, key..., arg...) */
static int core_fanout_eval(lua_State *L) {
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 3));
    if (s == NULL)
        return luaL_argerror(L, 3, "unknown script");
    return fanout_common(L, s, 3, NULL);
}

/* fanout_eval_wait(conns, timeout_ms, replicas, wait_ms, aof, name,
 * numkeys, key..., arg...) */
static int core_fanout_eval_wait(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 3), ms = luaL_checkinteger(L, 4);
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 6));
    redlock_wait w;
    /* (returns rather than luaL_argcheck: the analyzer then sees the end) */
    if (n < 0 || n > 1000000)
        return luaL_argerror(L, 3, "out of range (0 to 1000000)");
    if (ms < 1 || ms > 86400000)
        return luaL_argerror(L, 4, "out of range (1 to 86400000)");
    if (s == NULL)
        return luaL_argerror(L, 6, "unknown script");
    w.replicas = (int)n;
    w.timeout_ms = (int)ms;
    w.aof = lua_toboolean(L, 5);
    return fanout_common(L, s, 6, &w);
}

void redlock_fanout_open(lua_State *L) {
    lua_pushcfunction(L, core_fanout);
    lua_setfield(L, -2, "fanout");
    lua_pushcfunction(L, core_fanout_eval);
    lua_setfield(L, -2, "fanout_eval");
    lua_pushcfunction(L, core_fanout_eval_wait);
    lua_setfield(L, -2, "fanout_eval_wait");
}
