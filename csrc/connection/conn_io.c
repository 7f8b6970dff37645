/* One connection to one Redis server over hiredis: connected lazily
 * (directly, or as its kind does: a Sentinel conn's address comes from
 * its sentinels, csrc/drivers/sentinel.c), with AUTH and SELECT replayed on every
 * (re)connect; one round trip (with ASKING before it, WAIT after it). No
 * topology rule here (conn.c's request loop carries those out), so the
 * topology drivers (cluster.c, sentinel.c) drive their node connections
 * through this file. A plain server's kind (conn.h) is here too. */
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
#include "wait.h"

/* A plain server: one node, the conn itself; the core's plain rules. */
const redlock_conn_kind redlock_conn_plain = {.topo = &redlock_kind_plain};

static void free_ctx(conn_ud *u) {
    redlock_tls_free(u);
    if (u->ctx != NULL) {
        redisFree(u->ctx);
        u->ctx = NULL;
    }
}

static void wipe_free(char **p) {
    if (*p != NULL) {
        /* volatile so the compiler keeps the wipe of a freed secret */
        volatile char *q = *p;
        while (*q)
            *q++ = '\0';
        free(*p);
        *p = NULL;
    }
}

void redlock_conn_destroy_io(conn_ud *u) {
    free_ctx(u);
    free(u->grant_xadd);
    free(u->grant_counter);
    u->grant_xadd = u->grant_counter = NULL;
    free(u->host);
    u->host = NULL;
    free(u->path);
    u->path = NULL;
    free(u->username);
    u->username = NULL;
    wipe_free(&u->password);
    if (u->tls != NULL) {
        redlock_tls_settings_free(u->tls);
        free(u->tls);
        u->tls = NULL;
    }
    if (u->sslctx != NULL) {
        SSL_CTX_free(u->sslctx);
        u->sslctx = NULL;
    }
    u->closed = 1;
}

static struct timeval ms_to_tv(int ms) {
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    return tv;
}

/* Describes the context's I/O error in u->err; 1 if it was a timeout. */
int redlock_conn_io_error(conn_ud *u, int saved_errno, const char *doing) {
    int timed_out = u->ctx != NULL && u->ctx->err == REDIS_ERR_IO &&
                    (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK ||
                     saved_errno == ETIMEDOUT);
    if (timed_out)
        redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name, "timed out after %d ms %s",
                          u->timeout_ms, doing);
    else
        redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                          "lost the connection %s (%s%s)", doing,
                          u->ctx ? u->ctx->errstr : "no context",
                          redlock_tls_plain_hint(u, u->ctx != NULL && !u->answered));
    return timed_out;
}

/* Runs one command on a fresh context during connect (AUTH, SELECT). */
static int flush_obuf(conn_ud *u);

/* redisGetReply, but reading through the TLS session when there is one. */
int redlock_conn_get_reply(conn_ud *u, void **reply) {
    char buf[16384];
    if (u->ssl == NULL) {
        int rc = redisGetReply(u->ctx, reply);
        if (rc == REDIS_OK)
            u->answered = 1;
        return rc;
    }
    *reply = NULL;
    for (;;) {
        long n;
        if (redisReaderGetReply(u->ctx->reader, reply) != REDIS_OK) {
            u->ctx->err = REDIS_ERR_PROTOCOL;
            snprintf(u->ctx->errstr, sizeof u->ctx->errstr, "%s", u->ctx->reader->errstr);
            errno = EPROTO;
            return REDIS_ERR;
        }
        if (*reply != NULL)
            return REDIS_OK;
        n = redlock_tls_read(u, buf, sizeof buf, 0);
        if (n == 0) {
            u->ctx->err = REDIS_ERR_EOF;
            snprintf(u->ctx->errstr, sizeof u->ctx->errstr, "Server closed the connection");
            errno = 0;
            return REDIS_ERR;
        }
        if (n < 0)
            return REDIS_ERR;
        if (redisReaderFeed(u->ctx->reader, buf, (size_t)n) != REDIS_OK) {
            errno = EPROTO;
            return REDIS_ERR;
        }
    }
}

/* Through flush_obuf like every other command: redisCommandArgv would
 * write() and so could raise SIGPIPE if the server drops us during AUTH. */
static int setup_command(conn_ud *u, int argc, const char **argv, const char *what) {
    void *reply = NULL;
    redisReply *r;
    int rc = REDLOCK_OK;
    if (redisAppendCommandArgv(u->ctx, argc, argv, NULL) != REDIS_OK ||
        flush_obuf(u) != 0 || redlock_conn_get_reply(u, &reply) != REDIS_OK || reply == NULL) {
        redlock_conn_io_error(u, errno, what);
        return REDLOCK_E_CONNECTION;
    }
    r = (redisReply *)reply;
    if (r->type == REDIS_REPLY_ERROR) {
        redlock_set_error(u->err, ERRLEN, REDLOCK_E_SERVER, u->name, "%s failed: %.*s", what,
                          (int)(r->len > 160 ? 160 : r->len), r->str);
        rc = REDLOCK_E_SERVER;
    }
    freeReplyObject(r);
    return rc;
}

int redlock_conn_self_connected(int fd) {
    struct sockaddr_storage me, peer;
    socklen_t lme = sizeof me, lpeer = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&me, &lme) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &lpeer) != 0)
        return 0;
    return lme == lpeer && memcmp(&me, &peer, lme) == 0;
}

int redlock_conn_connect_direct(conn_ud *u) {
    struct timeval ctv = ms_to_tv(u->connect_timeout_ms);
    int rc;
    free_ctx(u);
    if (u->path != NULL)
        u->ctx = redisConnectUnixWithTimeout(u->path, ctv);
    else
        u->ctx = redisConnectWithTimeout(u->host, u->port, ctv);
    if (u->ctx == NULL) {
        redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                          "could not connect (out of memory)");
        return REDLOCK_E_CONNECTION;
    }
    u->gen = redlock_fork_generation();
    u->answered = 0;
    if (u->ctx->err) {
        if (strstr(u->ctx->errstr, "timed out") != NULL)
            redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                              "could not connect (timed out after %d ms)", u->connect_timeout_ms);
        else
            redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                              "could not connect (%s)", u->ctx->errstr);
        free_ctx(u);
        return REDLOCK_E_CONNECTION;
    }
    if (u->path == NULL && redlock_conn_self_connected(u->ctx->fd)) {
        redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                          "could not connect (" REDLOCK_SELF_CONNECTED ")");
        free_ctx(u);
        return REDLOCK_E_CONNECTION;
    }
    if (u->on_socket != NULL)
        u->on_socket(u->on_socket_arg, u->ctx->fd);
    if (u->timeout_ms > 0 && redisSetTimeout(u->ctx, ms_to_tv(u->timeout_ms)) != REDIS_OK) {
        redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                          "could not set the timeout (%s)", u->ctx->errstr);
        free_ctx(u);
        return REDLOCK_E_CONNECTION;
    }
    if (u->tls != NULL && redlock_tls_handshake(u) != 0) {
        free_ctx(u);
        return REDLOCK_E_CONNECTION;
    }
    if (u->password != NULL) {
        const char *argv[3] = {"AUTH", u->username, u->password};
        if (u->username == NULL) {
            argv[1] = u->password;
            rc = setup_command(u, 2, argv, "AUTH");
        } else {
            rc = setup_command(u, 3, argv, "AUTH");
        }
        if (rc != REDLOCK_OK) {
            free_ctx(u);
            return rc;
        }
    }
    if (u->db != 0) {
        char db[24];
        const char *argv[2] = {"SELECT", db};
        snprintf(db, sizeof db, "%d", u->db);
        rc = setup_command(u, 2, argv, "SELECT");
        if (rc != REDLOCK_OK) {
            free_ctx(u);
            return rc;
        }
    }
    u->connects++;
    return REDLOCK_OK;
}

/* Connects u: as its kind does (a Sentinel conn asks its sentinels), or
 * directly. */
int redlock_conn_connect(conn_ud *u) {
    if (u->kind->connect != NULL)
        return u->kind->connect(u);
    return redlock_conn_connect_direct(u);
}

/* Writes the output buffer with MSG_NOSIGNAL: hiredis 0.14 uses write(),
 * which raises SIGPIPE on a dropped connection and kills a host that did not
 * ignore it. Returns 0, 1 (would block, nonblock only), or -1 with errno set. */
int redlock_conn_flush(redlock_conn *u, int nonblock) {
    redisContext *c = u->ctx;
    int flags = MSG_NOSIGNAL | (nonblock ? MSG_DONTWAIT : 0);
    if (u->ssl != NULL)
        return redlock_tls_flush(u);
    while (sdslen(c->obuf) > 0) {
        ssize_t n = send(c->fd, c->obuf, sdslen(c->obuf), flags);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (nonblock && (errno == EAGAIN || errno == EWOULDBLOCK))
                return 1;
            c->err = REDIS_ERR_IO;
            snprintf(c->errstr, sizeof c->errstr, "%s", strerror(errno));
            return -1;
        }
        sdsrange(c->obuf, (int)n, -1);
    }
    return 0;
}

static int flush_obuf(conn_ud *u) { return redlock_conn_flush(u, 0); }

void redlock_conn_drop(redlock_conn *u) { free_ctx(u); }

void redlock_conn_before_use(redlock_conn *u) {
    if (u->ctx != NULL && u->gen != redlock_fork_generation())
        free_ctx(u);
    if (u->kind->recheck != NULL && u->ctx != NULL)
        u->kind->recheck(u, -1);
}

/* Waits until u's reply can be read, with poll(): precise to the ms, where
 * SO_RCVTIMEO's timer, for a wait of seconds, may fire tens of ms late (a
 * waiter's last block ends at its deadline), and watching the +switch-master
 * subscription of a Sentinel-managed conn too. 1: readable; 0: u's reply
 * timeout passed; -1: the master moved. */
static int await_reply(conn_ud *u) {
    double deadline = u->timeout_ms > 0 ? redlock_mono_ms() + u->timeout_ms : -1;
    if (u->ssl != NULL && SSL_pending(u->ssl) > 0)
        return 1;
    for (;;) {
        struct pollfd p[2];
        int sub = u->kind->sub_fd != NULL ? u->kind->sub_fd(u) : -1, nfds = sub >= 0 ? 2 : 1,
            left = -1, r;
        if (deadline >= 0) {
            left = (int)ceil(deadline - redlock_mono_ms());
            if (left <= 0)
                return 0;
        }
        p[0].fd = u->ctx->fd;
        p[0].events = POLLIN;
        p[0].revents = 0;
        p[1].fd = sub;
        p[1].events = POLLIN;
        p[1].revents = 0;
        r = poll(p, (nfds_t)nfds, left);
        if (r < 0 && errno != EINTR)
            return 1; /* the read says what failed */
        if (r > 0 && p[0].revents != 0)
            return 1;
        if (r > 0 && nfds == 2 && p[1].revents != 0 && u->kind->moved(u))
            return -1;
    }
}

/* Whether the command blocks on the server until an element comes (a
 * waiter's BLPOP). */
static int is_blocking(int argc, const char **argv, const size_t *argvlen) {
    size_t len = argvlen != NULL ? argvlen[0] : strlen(argv[0]);
    return argc > 0 && len == 5 && (strncasecmp(argv[0], "BLPOP", 5) == 0 ||
                                    strncasecmp(argv[0], "BRPOP", 5) == 0);
}

/* Reads a reply into *out: 0, or -1 (errno says why). */
static inline int read_reply(conn_ud *u, redisReply **out) {
    void *reply = NULL;
    if (redlock_conn_get_reply(u, &reply) != REDIS_OK || reply == NULL)
        return -1;
    *out = (redisReply *)reply;
    return 0;
}

/* The reply timeout for this call: base, longer by the tail's wait. 0 is
 * "no timeout": it stays so. */
static int set_call_timeout(conn_ud *u, int base, int extra) {
    if (base <= 0 || extra <= 0)
        return 0; /* (XADD's: no longer) */
    u->timeout_ms = base + extra;
    if (u->ctx != NULL && redisSetTimeout(u->ctx, ms_to_tv(u->timeout_ms)) != REDIS_OK) {
        free_ctx(u); /* the connect below sets it */
        return 1;
    }
    return 0;
}

int redlock_conn_trip(redlock_conn *u, const char *prefix, size_t prefixlen, redlock_cmd *cmd,
                      const redlock_tail *tail, redisReply **r1, redisReply **r2, int *stale) {
    int reused, timed_out = 0, rc = REDLOCK_OK, base = u->timeout_ms;
    char stack[512], *enc = NULL; /* a lock's commands fit in stack */
    long len;
    redisReply *skipped = NULL;
    *r1 = *r2 = NULL;
    *stale = 0;
    redlock_conn_before_use(u);
    if (u->kept && u->ctx == NULL)
        /* (lost, or the Sentinel check moved the conn): a new connection
         * knows nothing of the sequence's WATCH and MULTI */
        return redlock_set_error(
            u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
            "the connection of this WATCH..EXEC was lost (not sent on a new one)");
    reused = u->ctx != NULL;
    if (tail != NULL && tail->extra_ms > 0 && set_call_timeout(u, base, tail->extra_ms))
        reused = 0;
    if (u->ctx == NULL && (rc = redlock_conn_connect(u)) != REDLOCK_OK) {
        u->timeout_ms = base;
        return rc;
    }
    len = redlock_encode(stack, sizeof stack, cmd->argc, cmd->argv, cmd->argvlen, &enc);
    if (len < 0 ||
        (prefix != NULL && redisAppendFormattedCommand(u->ctx, prefix, prefixlen) != REDIS_OK) ||
        redisAppendFormattedCommand(u->ctx, enc, (size_t)len) != REDIS_OK ||
        (tail != NULL &&
         redisAppendFormattedCommand(u->ctx, tail->buf, (size_t)tail->len) != REDIS_OK)) {
        if (len >= 0 && enc != stack)
            free(enc);
        free_ctx(u);
        u->timeout_ms = base;
        return redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                                 "could not encode the command (out of memory)");
    }
    if (enc != stack)
        free(enc);
    if (tail == NULL && is_blocking(cmd->argc, cmd->argv, cmd->argvlen) && flush_obuf(u) == 0) {
        /* BLPOP: ends at its time exactly, and, on a Sentinel-managed
         * master, at once when the sentinels announce a failover (the
         * caller asks again, on the new master) */
        int w = await_reply(u);
        if (w <= 0) {
            if (w < 0)
                redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                                  "the master moved (+switch-master) during the wait");
            else
                redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                                  "timed out after %d ms waiting for a reply", u->timeout_ms);
            *stale = w < 0 ? 2 : 0;
            free_ctx(u);
            return REDLOCK_E_CONNECTION;
        }
    }
    if (flush_obuf(u) != 0 || (prefix != NULL && read_reply(u, &skipped) != 0) ||
        read_reply(u, r1) != 0) {
        timed_out = redlock_conn_io_error(u, errno, "waiting for a reply");
        *stale = redlock_io_stale(reused, REDLOCK_IO_NOTHING, timed_out);
        rc = REDLOCK_E_CONNECTION;
    } else if (tail != NULL && read_reply(u, r2) != 0) {
        /* the command answered: its tail's did not come */
        timed_out = redlock_conn_io_error(u, errno, tail->what);
        *stale = redlock_io_stale(reused, REDLOCK_IO_TAIL, timed_out);
        rc = REDLOCK_E_CONNECTION;
    }
    if (skipped != NULL) /* (ASKING's +OK: an error shows in the command's reply) */
        freeReplyObject(skipped);
    u->timeout_ms = base;
    /* (a failed restore: the next call reconnects with the usual timeout) */
    if (rc != REDLOCK_OK || (tail != NULL && base > 0 && tail->extra_ms > 0 &&
                             redisSetTimeout(u->ctx, ms_to_tv(base)) != REDIS_OK))
        free_ctx(u);
    return rc;
}

int redlock_conn_trip1(redlock_conn *u, int argc, const char **argv, const size_t *argvlen,
                       redisReply **out, int *stale) {
    redlock_cmd c;
    redisReply *none;
    c.argc = argc;
    c.argv = argv;
    c.argvlen = (size_t *)argvlen; /* (not written: no EVAL form) */
    c.source = NULL;
    return redlock_conn_trip(u, NULL, 0, &c, NULL, out, &none, stale);
}

/* Copies src's connection settings (not its socket, not a topology) into a
 * zeroed dst; -1 when out of memory (what was copied is freed by
 * redlock_conn_destroy_io). Never raises. */
int redlock_conn_copy_io(conn_ud *dst, const conn_ud *src) {
    dst->kind = &redlock_conn_plain;
    dst->port = src->port;
    dst->db = src->db;
    dst->connect_timeout_ms = src->connect_timeout_ms;
    dst->timeout_ms = src->timeout_ms;
    memcpy(dst->name, src->name, sizeof dst->name);
#define DUP(f) if (src->f != NULL && (dst->f = strdup(src->f)) == NULL) return -1
    DUP(host);
    DUP(path);
    DUP(username);
    DUP(password);
#undef DUP
    if (src->tls != NULL) {
        dst->tls = calloc(1, sizeof *dst->tls);
        if (dst->tls == NULL || redlock_tls_settings_copy(dst->tls, src->tls) != 0)
            return -1;
    }
    return 0;
}

redlock_conn *redlock_conn_clone_io(const redlock_conn *src) {
    conn_ud *u = calloc(1, sizeof *u);
    if (u != NULL && redlock_conn_copy_io(u, src) != 0) {
        redlock_conn_destroy_io(u);
        free(u);
        u = NULL;
    }
    return u;
}

void redlock_conn_free_io(redlock_conn *u) {
    if (u != NULL) {
        redlock_conn_destroy_io(u);
        free(u);
    }
}

int redlock_conn_ensure_io(redlock_conn *u) {
    redlock_conn_before_use(u);
    return u->ctx != NULL ? REDLOCK_OK : redlock_conn_connect(u);
}

void redlock_conn_set_timeouts_io(redlock_conn *u, int connect_ms, int reply_ms) {
    if (connect_ms > 0)
        u->connect_timeout_ms = connect_ms;
    if (reply_ms >= 0) {
        u->timeout_ms = reply_ms;
        if (u->ctx != NULL && reply_ms > 0 &&
            redisSetTimeout(u->ctx, ms_to_tv(reply_ms)) != REDIS_OK)
            free_ctx(u); /* the next call reconnects with the new timeout */
    }
}
