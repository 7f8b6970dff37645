/* One connection to one Redis server over hiredis: connected lazily
 * (directly, or through the hooks of a conn whose address comes from
 * elsewhere: csrc/sentinel.c's), with AUTH and SELECT replayed on every
 * (re)connect; one round trip, and one with WAIT after it. No topology
 * rule here (conn.c's exchange carries those out), so the topology drivers
 * (cluster.c, sentinel.c) drive their node connections through this file
 * without calling back into conn.c. */
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
        snprintf(u->err, ERRLEN, "connection: %s: timed out after %d ms %s",
                 u->name, u->timeout_ms, doing);
    else
        snprintf(u->err, ERRLEN, "connection: %s: lost the connection %s (%s%s)",
                 u->name, doing, u->ctx ? u->ctx->errstr : "no context",
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
    int rc = OK;
    if (redisAppendCommandArgv(u->ctx, argc, argv, NULL) != REDIS_OK ||
        flush_obuf(u) != 0 || redlock_conn_get_reply(u, &reply) != REDIS_OK || reply == NULL) {
        redlock_conn_io_error(u, errno, what);
        return E_CONNECTION;
    }
    r = (redisReply *)reply;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(u->err, ERRLEN, "server: %s: %s failed: %.*s", u->name, what,
                 (int)(r->len > 160 ? 160 : r->len), r->str);
        rc = E_SERVER;
    }
    freeReplyObject(r);
    return rc;
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
        snprintf(u->err, ERRLEN, "connection: %s: could not connect (out of memory)", u->name);
        return E_CONNECTION;
    }
    u->gen = redlock_fork_generation();
    u->answered = 0;
    if (u->ctx->err) {
        if (strstr(u->ctx->errstr, "timed out") != NULL)
            snprintf(u->err, ERRLEN, "connection: %s: could not connect (timed out after %d ms)",
                     u->name, u->connect_timeout_ms);
        else
            snprintf(u->err, ERRLEN, "connection: %s: could not connect (%s)", u->name,
                     u->ctx->errstr);
        free_ctx(u);
        return E_CONNECTION;
    }
    if (u->on_socket != NULL)
        u->on_socket(u->on_socket_arg, u->ctx->fd);
    if (u->timeout_ms > 0 && redisSetTimeout(u->ctx, ms_to_tv(u->timeout_ms)) != REDIS_OK) {
        snprintf(u->err, ERRLEN, "connection: %s: could not set the timeout (%s)", u->name,
                 u->ctx->errstr);
        free_ctx(u);
        return E_CONNECTION;
    }
    if (u->tls != NULL && redlock_tls_handshake(u) != 0) {
        free_ctx(u);
        return E_CONNECTION;
    }
    if (u->password != NULL) {
        const char *argv[3] = {"AUTH", u->username, u->password};
        if (u->username == NULL) {
            argv[1] = u->password;
            rc = setup_command(u, 2, argv, "AUTH");
        } else {
            rc = setup_command(u, 3, argv, "AUTH");
        }
        if (rc != OK) {
            free_ctx(u);
            return rc;
        }
    }
    if (u->db != 0) {
        char db[24];
        const char *argv[2] = {"SELECT", db};
        snprintf(db, sizeof db, "%d", u->db);
        rc = setup_command(u, 2, argv, "SELECT");
        if (rc != OK) {
            free_ctx(u);
            return rc;
        }
    }
    u->connects++;
    return OK;
}

/* Connects u: through its hooks (a Sentinel conn asks its sentinels), or
 * directly. */
int redlock_conn_connect(conn_ud *u) {
    if (u->hooks != NULL)
        return u->hooks->connect(u);
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
    if (u->hooks != NULL && u->ctx != NULL)
        u->hooks->recheck(u);
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
        int sub = u->hooks != NULL ? u->hooks->sub_fd(u) : -1, nfds = sub >= 0 ? 2 : 1, left = -1, r;
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
        if (r > 0 && nfds == 2 && p[1].revents != 0 && u->hooks->moved(u))
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

/* One round trip on a plain or Sentinel conn, no topology rule. On
 * failure u->err holds the message, the context is dropped (the next call
 * reconnects), and *stale says whether a retry on a fresh connection is
 * sensible. */
static int trip_one(conn_ud *u, int argc, const char **argv, const size_t *argvlen,
                    redisReply **out, int *stale) {
    int reused, saved, timed_out;
    void *reply = NULL;
    char stack[512], *cmd = NULL; /* a lock's commands fit in stack */
    long len;
    *out = NULL;
    *stale = 0;
    redlock_conn_before_use(u);
    if (u->kept && u->ctx == NULL) {
        /* (lost, or the Sentinel check moved the conn): a new connection
         * knows nothing of the sequence's WATCH and MULTI */
        snprintf(u->err, ERRLEN,
                 "connection: %s: the connection of this WATCH..EXEC was lost (not sent on a new one)",
                 u->name);
        return E_CONNECTION;
    }
    reused = u->ctx != NULL;
    if (u->ctx == NULL) {
        int rc = redlock_conn_connect(u);
        if (rc != OK)
            return rc;
    }
    len = redlock_encode(stack, sizeof stack, argc, argv, argvlen, &cmd);
    if (len < 0 || redisAppendFormattedCommand(u->ctx, cmd, (size_t)len) != REDIS_OK) {
        if (len >= 0 && cmd != stack)
            free(cmd);
        snprintf(u->err, ERRLEN, "connection: %s: could not encode the command (out of memory)",
                 u->name);
        free_ctx(u);
        return E_CONNECTION;
    }
    if (cmd != stack)
        free(cmd);
    if (is_blocking(argc, argv, argvlen) && flush_obuf(u) == 0) {
        /* BLPOP: ends at its time exactly, and, on a Sentinel-managed
         * master, at once when the sentinels announce a failover (the
         * caller asks again, on the new master) */
        int w = await_reply(u);
        if (w <= 0) {
            if (w < 0)
                snprintf(u->err, ERRLEN,
                         "connection: %s: the master moved (+switch-master) during the wait",
                         u->name);
            else
                snprintf(u->err, ERRLEN, "connection: %s: timed out after %d ms waiting for a reply",
                         u->name, u->timeout_ms);
            *stale = w < 0 ? 2 : 0;
            free_ctx(u);
            return E_CONNECTION;
        }
    }
    if (flush_obuf(u) != 0 || redlock_conn_get_reply(u, &reply) != REDIS_OK) {
        saved = errno;
        timed_out = redlock_conn_io_error(u, saved, "waiting for a reply");
        *stale = reused && !timed_out;
        free_ctx(u);
        return E_CONNECTION;
    }
    *out = (redisReply *)reply;
    return OK;
}

int redlock_conn_trip1(redlock_conn *u, int argc, const char **argv, const size_t *argvlen,
                       redisReply **out, int *stale) {
    return trip_one(u, argc, argv, argvlen, out, stale);
}

/* Copies src's connection settings (not its socket, not a topology) into a
 * zeroed dst; -1 when out of memory (what was copied is freed by
 * redlock_conn_destroy_io). Never raises. */
int redlock_conn_copy_io(conn_ud *dst, const conn_ud *src) {
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
    return u->ctx != NULL ? OK : redlock_conn_connect(u);
}

/* Replica acknowledgement: the script and WAIT (or WAITAOF) in one write,
 * both replies read (wait.h). The reply timeout grows by the WAIT's own for
 * this call only: WAIT answers after at most w->timeout_ms. *r1 is the
 * script's reply, *r2 WAIT's; on failure (rc != OK) either may be NULL,
 * and *r1 != NULL means the script ran and only WAIT's answer is missing. */
static int trip_wait_one(conn_ud *u, int argc, const char **argv, const size_t *argvlen,
                         const redlock_wait *w, redisReply **r1, redisReply **r2, int *stale) {
    int reused, rc = OK, base = u->timeout_ms;
    void *reply = NULL;
    char stack[512], wbuf[REDLOCK_WAIT_BUF], *cmd = NULL;
    long len, wlen;
    *r1 = *r2 = NULL;
    *stale = 0;
    wlen = redlock_wait_encode(w, wbuf, sizeof wbuf);
    redlock_conn_before_use(u);
    reused = u->ctx != NULL;
    /* base 0 is "no timeout": it stays so; WAIT answers after its
     * timeout, plus up to a tick of the server's timer (hz 10: 100 ms) */
    u->timeout_ms = base > 0 ? base + w->timeout_ms + 100 : 0;
    if (u->ctx == NULL)
        rc = redlock_conn_connect(u); /* sets the longer timeout */
    else if (base > 0 && redisSetTimeout(u->ctx, ms_to_tv(u->timeout_ms)) != REDIS_OK) {
        free_ctx(u);
        reused = 0;
        rc = redlock_conn_connect(u);
    }
    if (rc != OK) {
        u->timeout_ms = base;
        return rc;
    }
    len = redlock_encode(stack, sizeof stack, argc, argv, argvlen, &cmd);
    if (len < 0 || wlen < 0 || redisAppendFormattedCommand(u->ctx, cmd, (size_t)len) != REDIS_OK ||
        redisAppendFormattedCommand(u->ctx, wbuf, (size_t)wlen) != REDIS_OK) {
        if (len >= 0 && cmd != stack)
            free(cmd);
        snprintf(u->err, ERRLEN, "connection: %s: could not encode the command (out of memory)",
                 u->name);
        free_ctx(u);
        u->timeout_ms = base;
        return E_CONNECTION;
    }
    if (cmd != stack)
        free(cmd);
    if (flush_obuf(u) != 0 || redlock_conn_get_reply(u, &reply) != REDIS_OK) {
        int timed_out = redlock_conn_io_error(u, errno, "waiting for a reply");
        *stale = reused && !timed_out;
        rc = E_CONNECTION;
    } else {
        *r1 = (redisReply *)reply;
        reply = NULL;
        if (redlock_conn_get_reply(u, &reply) != REDIS_OK) {
            redlock_conn_io_error(u, errno, w->aof ? "waiting for WAITAOF's reply" : "waiting for WAIT's reply");
            rc = E_CONNECTION;
        } else {
            *r2 = (redisReply *)reply;
        }
    }
    u->timeout_ms = base;
    /* (a failed restore: the next call reconnects with the usual timeout) */
    if (rc != OK || (base > 0 && redisSetTimeout(u->ctx, ms_to_tv(base)) != REDIS_OK))
        free_ctx(u);
    return rc;
}

int redlock_conn_trip(redlock_conn *u, redlock_cmd *cmd, const redlock_wait *w, redisReply **r1,
                      redisReply **r2, int *stale) {
    if (w != NULL)
        return trip_wait_one(u, cmd->argc, cmd->argv, cmd->argvlen, w, r1, r2, stale);
    *r2 = NULL;
    return trip_one(u, cmd->argc, cmd->argv, cmd->argvlen, r1, stale);
}


void redlock_conn_set_timeouts_io(redlock_conn *u, int connect_ms, int reply_ms) {
    if (connect_ms > 0)
        u->connect_timeout_ms = connect_ms;
    if (reply_ms >= 0) {
        u->timeout_ms = reply_ms;
        if (u->ctx != NULL && reply_ms > 0 && redisSetTimeout(u->ctx, ms_to_tv(reply_ms)) != REDIS_OK)
            free_ctx(u); /* the next call reconnects with the new timeout */
    }
}
