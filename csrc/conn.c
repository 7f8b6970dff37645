/* The connection userdata: one hiredis redisContext to one Redis server,
 * connected lazily, with AUTH and SELECT replayed on every (re)connect.
 *
 * conn:command(...)          -> reply | nil, msg, code, stale
 * conn:eval(name, nkeys, ...)-> reply | nil, msg, code, stale
 * Errors: code "connection" (could not connect, lost, timed out) or
 * "server" (Redis answered with an error). `stale` is true when the failure
 * came from a connection made before this call that the server had dropped
 * (not a timeout): the caller may retry once on a fresh connection.
 * Messages start with the code word and name the server, never a password.
 * A conn made with sentinels = {...} and master_name finds its server
 * through Redis Sentinel (csrc/sentinel.c) on every connect, checks now and
 * then that it has not moved, and reports a master turned replica as a stale
 * connection (nothing was written: the retry goes to the new master). */
#define _GNU_SOURCE
#include "conn.h"

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

#include "proto.h"
#include "resp.h"
#include "reply.h"
#include "scripts.h"
#include "token.h"
#include "wait.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

typedef redlock_conn conn_ud;

enum { OK = 0, E_CONNECTION, E_SERVER };

static const char *const code_words[] = {"", "connection", "server"};

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

static void conn_destroy(conn_ud *u) {
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
    redlock_sentinels_free(u->sentinels);
    u->sentinels = NULL;
    redlock_cluster_free(u->cluster);
    u->cluster = NULL;
    u->closed = 1;
}

static struct timeval ms_to_tv(int ms) {
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    return tv;
}

/* Describes the context's I/O error in u->err; 1 if it was a timeout. */
static int io_error(conn_ud *u, int saved_errno, const char *doing) {
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
static int get_reply(conn_ud *u, void **reply) {
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
        flush_obuf(u) != 0 || get_reply(u, &reply) != REDIS_OK || reply == NULL) {
        io_error(u, errno, what);
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

static int conn_connect(conn_ud *u) {
    if (u->sentinels != NULL)
        return redlock_sentinel_connect(u);
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

redlock_conn *redlock_conn_test(lua_State *L, int idx) {
    return (redlock_conn *)luaL_testudata(L, idx, REDLOCK_CONN_MT);
}

void redlock_conn_drop(redlock_conn *u) { free_ctx(u); }

void redlock_conn_before_use(redlock_conn *u) {
    if (u->ctx != NULL && u->gen != redlock_fork_generation())
        free_ctx(u);
    if (u->sentinels != NULL && u->ctx != NULL)
        redlock_sentinel_recheck(u, u->sentinels->check_ms);
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
        int sub = redlock_sentinel_sub_fd(u), nfds = sub >= 0 ? 2 : 1, left = -1, r;
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
        if (r > 0 && nfds == 2 && p[1].revents != 0 && redlock_sentinel_moved(u))
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

/* One round trip. On failure u->err holds the message, the context is
 * dropped (the next call reconnects), and *stale says whether a retry on a
 * fresh connection is sensible. */
static int round_trip(conn_ud *u, int argc, const char **argv, const size_t *argvlen,
                      redisReply **out, int *stale) {
    int reused, saved, timed_out;
    void *reply = NULL;
    char stack[512], *cmd = NULL; /* a lock's commands fit in stack */
    long len;
    if (u->cluster != NULL)
        return redlock_cluster_round_trip(u, argc, argv, argvlen, out, stale);
    *out = NULL;
    *stale = 0;
    redlock_conn_before_use(u);
    reused = u->ctx != NULL;
    if (u->ctx == NULL) {
        int rc = conn_connect(u);
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
    if (flush_obuf(u) != 0 || get_reply(u, &reply) != REDIS_OK) {
        saved = errno;
        timed_out = io_error(u, saved, "waiting for a reply");
        *stale = reused && !timed_out;
        free_ctx(u);
        return E_CONNECTION;
    }
    *out = (redisReply *)reply;
    if (u->sentinels != NULL && (*out)->type == REDIS_REPLY_ERROR &&
        redlock_sentinel_demoted(u, (*out)->str, (*out)->len)) {
        freeReplyObject(*out);
        *out = NULL;
        *stale = 1;
        return E_CONNECTION;
    }
    return OK;
}

static conn_ud *check_conn(lua_State *L) {
    return (conn_ud *)redlock_checkself(L, REDLOCK_CONN_MT);
}

/* The C side of a conn for other C files (the renewal thread): a private
 * copy with the same settings, used by one thread only.
 * Copies src's settings (not its socket) into a zeroed dst; -1 when out of
 * memory (what was copied is freed by conn_destroy). Never raises. */
static int copy_settings(conn_ud *dst, const conn_ud *src) {
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
    if (src->sentinels != NULL && (dst->sentinels = redlock_sentinels_copy(src->sentinels)) == NULL)
        return -1;
    if (src->cluster != NULL && (dst->cluster = redlock_cluster_copy(src->cluster)) == NULL)
        return -1;
    return 0;
}

redlock_conn *redlock_conn_clone(const redlock_conn *src) {
    conn_ud *u = calloc(1, sizeof *u);
    if (u != NULL && copy_settings(u, src) != 0) {
        conn_destroy(u);
        free(u);
        u = NULL;
    }
    return u;
}

void redlock_conn_free(redlock_conn *u) {
    if (u != NULL) {
        conn_destroy(u);
        free(u);
    }
}

int redlock_conn_ensure(redlock_conn *u) {
    if (u->cluster != NULL)
        return redlock_cluster_ensure(u);
    redlock_conn_before_use(u);
    return u->ctx != NULL ? OK : conn_connect(u);
}

int redlock_conn_round_trip(redlock_conn *u, int argc, const char **argv, const size_t *argvlen,
                            redisReply **out, int *stale) {
    return round_trip(u, argc, argv, argvlen, out, stale);
}

static int push_failure(lua_State *L, conn_ud *u, int code, int stale) {
    lua_pushnil(L);
    lua_pushstring(L, u->err);
    lua_pushstring(L, code_words[code]);
    if (stale == 2)
        lua_pushliteral(L, "moved"); /* a Sentinel switch ended a BLPOP (truthy: retry) */
    else
        lua_pushboolean(L, stale);
    return 4;
}

static int push_closed(lua_State *L) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed: the connection is closed");
    lua_pushliteral(L, "closed");
    return 3;
}

/* Pushes the outcome of a round trip. A top-level error reply gets a message
 * that starts with "server:" and names the server. */
static int push_outcome(lua_State *L, conn_ud *u, int rc, int stale, redisReply *r, int spread) {
    if (rc != OK)
        return push_failure(L, u, rc, stale);
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(u->err, ERRLEN, "server: %s: %.*s", u->name,
                 (int)(r->len > 200 ? 200 : r->len), r->str);
        freeReplyObject(r);
        return push_failure(L, u, E_SERVER, 0);
    }
    return redlock_push_reply_free(L, r, spread);
}

/* conn:command(arg, ...) */
static int conn_command(lua_State *L) {
    conn_ud *u = check_conn(L);
    int argc = redlock_check_argv(L, 2, lua_gettop(L)), rc, stale;
    redlock_argv a;
    redisReply *r = NULL;
    if (u->closed)
        return push_closed(L);
    if (redlock_argv_init(L, 2, argc, 0, &a) != 0)
        return luaL_error(L, "out of memory");
    rc = round_trip(u, argc, a.v, a.len, &r, &stale);
    redlock_argv_free(&a);
    return push_outcome(L, u, rc, stale, r, 0);
}

static int is_noscript(const redisReply *r) {
    return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* conn:eval(name, numkeys, key..., arg...): EVALSHA of a named script from
 * scripts.h; on NOSCRIPT (script cache flushed, restart, failover) one EVAL,
 * which also loads it again for the next EVALSHA. spread: see
 * conn_eval_values. */
static int eval(lua_State *L, int spread) {
    conn_ud *u = check_conn(L);
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 2));
    int nkeys = (int)luaL_checkinteger(L, 3), top = lua_gettop(L), argc, rc, stale;
    char nkeys_s[16];
    redlock_argv a;
    const char **argv;
    size_t *argvlen;
    redisReply *r = NULL;
    if (s == NULL)
        return luaL_argerror(L, 2, "unknown script");
    if (nkeys < 0 || nkeys > top - 3)
        return luaL_argerror(L, 3, "numkeys out of range");
    argc = top > 3 ? redlock_check_argv(L, 4, top) : 0; /* keys and args */
    if (u->closed)
        return push_closed(L);
    if (redlock_argv_init(L, 4, argc, 3, &a) != 0)
        return luaL_error(L, "out of memory");
    argv = a.v;
    argvlen = a.len;
    argc++; /* numkeys, formatted here rather than as a Lua string per call */
    *redlock_put_decimal(nkeys_s, (size_t)nkeys) = '\0';
    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = s->sha;
    argvlen[1] = 40;
    argv[2] = nkeys_s;
    argvlen[2] = strlen(nkeys_s);
    rc = round_trip(u, argc + 2, argv, argvlen, &r, &stale);
    if (rc == OK && is_noscript(r)) {
        freeReplyObject(r);
        r = NULL;
        argv[0] = "EVAL";
        argvlen[0] = 4;
        argv[1] = s->source;
        argvlen[1] = strlen(s->source);
        rc = round_trip(u, argc + 2, argv, argvlen, &r, &stale);
    }
    redlock_argv_free(&a);
    return push_outcome(L, u, rc, stale, r, spread);
}

static int conn_eval(lua_State *L) { return eval(L, 0); }

/* conn:eval_values(...): as eval, but an answer of 1 to 4 integers (what
 * the lock scripts return) comes back as that many values: no table to
 * make and collect on the path of every lock. */
static int conn_eval_values(lua_State *L) { return eval(L, 1); }

/* conn:grant(key, token, ttl[, counter]): the uncontended acquire without a
 * script: SET key token NX PX ttl, and with a counter the fence's
 * XADD counter MAXLEN 0 * f 1 (raised to the server's clock by the server
 * itself, see scripts.h), in one write (one round trip, no Lua on the
 * server). Returns
 *   1, fence          set (fence: from XADD's ID; 0 without counter)
 *   1, -1             set, but the fence must come from the acquire
 *                     script (which takes the key as ours): a seq over 99,
 *                     or a string counter (WRONGTYPE, from before 5.0)
 *   1, -2             the same, on a server without streams (XADD unknown)
 *   1, false, msg     set, but XADD failed with msg: the caller releases
 *                     the key
 *   0                 not set: the key exists (XADD ran all the same)
 *   nil, msg, code, stale   as conn:command; stale also when SET was
 *                     answered and XADD's reply lost without a timeout
 *                     (the key may hold our token: the script retries)
 * XADD runs after the SET on the server (one connection's commands run in
 * order); the caller relies on a lock's validity for the rest (see
 * redlock.scripted.grant). Not for Cluster conns (the counter's slot is
 * the key's: the scripts' way). */
static int conn_grant(lua_State *L) {
    conn_ud *u = check_conn(L);
    size_t len[4];
    const char *key = luaL_checklstring(L, 2, &len[0]);
    const char *token = luaL_checklstring(L, 3, &len[1]);
    const char *ttl = luaL_checklstring(L, 4, &len[2]);
    const char *counter = luaL_optlstring(L, 5, NULL, &len[3]);
    const char *set[6] = {"SET", key, token, "NX", "PX", ttl};
    size_t setlen[6] = {3, len[0], len[1], 2, 2, len[2]};
    const char *xadd[7] = {"XADD", counter, "MAXLEN", "0", "*", "f", "1"};
    size_t xaddlen[7] = {4, len[3], 6, 1, 1, 1, 1};
    char stack[512], *cmd = NULL;
    long n;
    int reused, failed, got = 0, nreplies = counter != NULL ? 2 : 1, ret;
    void *replies[2] = {NULL, NULL};
    redisReply *r;
    if (u->cluster != NULL)
        return luaL_argerror(L, 1, "not for a Cluster");
    if (u->closed)
        return push_closed(L);
    redlock_conn_before_use(u);
    reused = u->ctx != NULL;
    if (u->ctx == NULL) {
        int rc = conn_connect(u);
        if (rc != OK)
            return push_failure(L, u, rc, 0);
    }
    n = redlock_encode(stack, sizeof stack, 6, set, setlen, &cmd);
    failed = n < 0 || redisAppendFormattedCommand(u->ctx, cmd, (size_t)n) != REDIS_OK;
    if (n >= 0 && cmd != stack)
        free(cmd);
    if (!failed && counter != NULL) {
        n = redlock_encode(stack, sizeof stack, 7, xadd, xaddlen, &cmd);
        failed = n < 0 || redisAppendFormattedCommand(u->ctx, cmd, (size_t)n) != REDIS_OK;
        if (n >= 0 && cmd != stack)
            free(cmd);
    }
    if (failed) {
        snprintf(u->err, ERRLEN, "connection: %s: could not encode the command (out of memory)",
                 u->name);
        free_ctx(u);
        return push_failure(L, u, E_CONNECTION, 0);
    }
    if (flush_obuf(u) != 0)
        failed = 1;
    while (!failed && got < nreplies) {
        if (get_reply(u, &replies[got]) != REDIS_OK || replies[got] == NULL)
            failed = 1;
        else
            got++;
    }
    if (failed) {
        int timed_out = io_error(u, errno, "waiting for a reply");
        int i;
        for (i = 0; i < got; i++)
            freeReplyObject(replies[i]);
        free_ctx(u);
        /* SET answered and XADD not: the key may be ours, which the
         * script's retry with the same token takes (or, should it fail,
         * the caller gives back). A timeout: its ttl ends it, as for any
         * lost reply. */
        return push_failure(L, u, E_CONNECTION, !timed_out && (reused || got == 1));
    }
    r = (redisReply *)replies[0];
    if (r->type == REDIS_REPLY_ERROR) {
        int stale = u->sentinels != NULL && redlock_sentinel_demoted(u, r->str, r->len);
        if (!stale)
            snprintf(u->err, ERRLEN, "server: %s: %.*s", u->name,
                     (int)(r->len > 200 ? 200 : r->len), r->str);
        freeReplyObject(r);
        if (counter != NULL)
            freeReplyObject(replies[1]);
        return push_failure(L, u, stale ? E_CONNECTION : E_SERVER, stale);
    }
    if (r->type != REDIS_REPLY_STATUS) { /* nil: held */
        freeReplyObject(r);
        if (counter != NULL)
            freeReplyObject(replies[1]);
        lua_pushinteger(L, 0);
        return 1;
    }
    freeReplyObject(r);
    lua_pushinteger(L, 1);
    ret = 2;
    if (counter == NULL) {
        lua_pushinteger(L, 0);
    } else {
        r = (redisReply *)replies[1];
        if (r->type == REDIS_REPLY_STRING) {
            lua_pushinteger(L, (lua_Integer)redlock_fence_of_id(r->str, r->len));
        } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "WRONGTYPE", 9) == 0) {
            lua_pushinteger(L, -1);
        } else if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "nknown command") != NULL) {
            lua_pushinteger(L, -2);
        } else {
            lua_pushboolean(L, 0);
            ret = 3;
            if (r->type == REDIS_REPLY_ERROR)
                snprintf(u->err, ERRLEN, "server: %s: %.*s", u->name,
                         (int)(r->len > 200 ? 200 : r->len), r->str);
            else
                snprintf(u->err, ERRLEN, "server: %s: unexpected reply to XADD", u->name);
            /* freed first: lua_pushstring may raise (out of memory) */
            freeReplyObject(r);
            r = NULL;
            lua_pushstring(L, u->err);
        }
        if (r != NULL)
            freeReplyObject(r);
    }
    return ret;
}

/* Replica acknowledgement: the script and WAIT (or WAITAOF) in one write,
 * both replies read (wait.h). The reply timeout grows by the WAIT's own for
 * this call only: WAIT answers after at most w->timeout_ms. *r1 is the
 * script's reply, *r2 WAIT's; on failure (rc != OK) either may be NULL,
 * and *r1 != NULL means the script ran and only WAIT's answer is missing. */
static int round_trip_wait(conn_ud *u, int argc, const char **argv, const size_t *argvlen,
                           const redlock_wait *w, redisReply **r1, redisReply **r2, int *stale) {
    int reused, rc = OK, base = u->timeout_ms;
    void *reply = NULL;
    char stack[512], wbuf[REDLOCK_WAIT_BUF], *cmd = NULL;
    long len, wlen;
    *r1 = *r2 = NULL;
    *stale = 0;
    if (u->cluster != NULL) {
        /* the node of the key's slot; a redirection (both replies read)
         * is followed, a few times, waiting a little from the third on */
        int tries, asking = 0;
        double pause = 5, deadline = redlock_mono_ms() + (base > 0 ? base : 1000);
        for (tries = 0; tries < 8; tries++) {
            if (tries >= 2 && redlock_cluster_backoff(&pause, deadline) != 0)
                break;
            conn_ud *node = redlock_cluster_route(u, argc, argv, argvlen, &rc, &asking);
            if (node == NULL)
                return rc;
            if (asking) { /* ASKING on the connection the script goes on next */
                const char *ask[1] = {"ASKING"};
                redisReply *ok = NULL;
                rc = round_trip(node, 1, ask, NULL, &ok, stale);
                if (rc != OK) {
                    memcpy(u->err, node->err, ERRLEN);
                    return rc;
                }
                freeReplyObject(ok);
            }
            redlock_cluster_track(u, node);
            rc = round_trip_wait(node, argc, argv, argvlen, w, r1, r2, stale);
            if (rc != OK) {
                memcpy(u->err, node->err, ERRLEN);
                return rc;
            }
            if (*r1 == NULL || (*r1)->type != REDIS_REPLY_ERROR ||
                !redlock_cluster_redirected(u, (*r1)->str, (*r1)->len))
                return OK;
            freeReplyObject(*r1);
            if (*r2 != NULL)
                freeReplyObject(*r2);
            *r1 = *r2 = NULL;
        }
        return E_CONNECTION; /* u->err: the last redirection */
    }
    wlen = redlock_wait_encode(w, wbuf, sizeof wbuf);
    redlock_conn_before_use(u);
    reused = u->ctx != NULL;
    /* base 0 is "no timeout": it stays so; WAIT answers after its
     * timeout, plus up to a tick of the server's timer (hz 10: 100 ms) */
    u->timeout_ms = base > 0 ? base + w->timeout_ms + 100 : 0;
    if (u->ctx == NULL)
        rc = conn_connect(u); /* sets the longer timeout */
    else if (base > 0 && redisSetTimeout(u->ctx, ms_to_tv(u->timeout_ms)) != REDIS_OK) {
        free_ctx(u);
        reused = 0;
        rc = conn_connect(u);
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
    if (flush_obuf(u) != 0 || get_reply(u, &reply) != REDIS_OK) {
        int timed_out = io_error(u, errno, "waiting for a reply");
        *stale = reused && !timed_out;
        rc = E_CONNECTION;
    } else {
        *r1 = (redisReply *)reply;
        reply = NULL;
        if (get_reply(u, &reply) != REDIS_OK) {
            io_error(u, errno, w->aof ? "waiting for WAITAOF's reply" : "waiting for WAIT's reply");
            rc = E_CONNECTION;
        } else {
            *r2 = (redisReply *)reply;
        }
    }
    u->timeout_ms = base;
    if (rc == OK && u->sentinels != NULL && (*r1)->type == REDIS_REPLY_ERROR &&
        redlock_sentinel_demoted(u, (*r1)->str, (*r1)->len)) {
        /* a master turned replica refused the script (the connection is
         * dropped, WAIT's reply with it): nothing was written, retry */
        freeReplyObject(*r1);
        if (*r2 != NULL)
            freeReplyObject(*r2);
        *r1 = *r2 = NULL;
        *stale = 1;
        return E_CONNECTION;
    }
    /* (a failed restore: the next call reconnects with the usual timeout) */
    if (rc != OK || (base > 0 && redisSetTimeout(u->ctx, ms_to_tv(base)) != REDIS_OK))
        free_ctx(u);
    return rc;
}

/* conn:eval_wait(name, replicas, replica_timeout, aof, numkeys, key..., arg...):
 * as eval_values, with WAIT replicas replica_timeout (aof: WAITAOF 1
 * replicas replica_timeout) sent in the same write. Returns
 *   acked, fsynced, values...      both answered (fsynced: WAITAOF's local
 *                                  count, -1 for WAIT); values as eval_values
 *   nil, msg, code, stale          the script did not answer, or answered
 *                                  with an error
 *   false, msg, values...          the script answered (values) but WAIT
 *                                  did not: msg starts with the code word,
 *                                  "server" (Redis' error) or "connection"
 * NOSCRIPT: EVAL and WAIT once more, on the same connection. */
int redlock_conn_round_trip_wait(redlock_conn *c, int argc, const char **argv,
                                 const size_t *argvlen, const redlock_wait *w, redisReply **out,
                                 redisReply **wout, int *stale) {
    return round_trip_wait(c, argc, argv, argvlen, w, out, wout, stale);
}

static int conn_eval_wait(lua_State *L) {
    conn_ud *u = check_conn(L);
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 2));
    lua_Integer n = luaL_checkinteger(L, 3), ms = luaL_checkinteger(L, 4);
    int aof = lua_toboolean(L, 5), nkeys = (int)luaL_checkinteger(L, 6), top = lua_gettop(L);
    int argc, rc, stale;
    long long acked = 0, fsynced = -1;
    char nkeys_s[16];
    redlock_argv a;
    redlock_wait w;
    redisReply *r1 = NULL, *r2 = NULL;
    if (s == NULL)
        return luaL_argerror(L, 2, "unknown script");
    luaL_argcheck(L, n >= 0 && n <= 1000000, 3, "out of range (0 to 1000000)");
    luaL_argcheck(L, ms >= 1 && ms <= 86400000, 4, "out of range (1 to 86400000)");
    if (nkeys < 0 || nkeys > top - 6)
        return luaL_argerror(L, 6, "numkeys out of range");
    argc = top > 6 ? redlock_check_argv(L, 7, top) : 0;
    if (u->closed)
        return push_closed(L);
    w.replicas = (int)n;
    w.timeout_ms = (int)ms;
    w.aof = aof;
    if (redlock_argv_init(L, 7, argc, 3, &a) != 0)
        return luaL_error(L, "out of memory");
    *redlock_put_decimal(nkeys_s, (size_t)nkeys) = '\0';
    a.v[0] = "EVALSHA";
    a.len[0] = 7;
    a.v[1] = s->sha;
    a.len[1] = 40;
    a.v[2] = nkeys_s;
    a.len[2] = strlen(nkeys_s);
    rc = round_trip_wait(u, argc + 3, a.v, a.len, &w, &r1, &r2, &stale);
    if (r1 != NULL && is_noscript(r1)) {
        freeReplyObject(r1);
        if (r2 != NULL)
            freeReplyObject(r2);
        a.v[0] = "EVAL";
        a.len[0] = 4;
        a.v[1] = s->source;
        a.len[1] = strlen(s->source);
        rc = round_trip_wait(u, argc + 3, a.v, a.len, &w, &r1, &r2, &stale);
        stale = 0;
    }
    redlock_argv_free(&a);
    if (r1 == NULL)
        return push_failure(L, u, rc, stale);
    if (r1->type == REDIS_REPLY_ERROR) {
        if (r2 != NULL)
            freeReplyObject(r2);
        return push_outcome(L, u, OK, 0, r1, 1);
    }
    if (rc != OK) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, u->err);
    } else if (r2->type == REDIS_REPLY_ERROR) {
        lua_pushboolean(L, 0);
        lua_pushfstring(L, "server: %s: ", u->name);
        lua_pushlstring(L, r2->str, r2->len > 200 ? 200 : r2->len);
        lua_concat(L, 2);
        freeReplyObject(r2);
    } else {
        int bad = redlock_wait_parse(r2, &acked, &fsynced);
        freeReplyObject(r2);
        if (bad) {
            lua_pushboolean(L, 0);
            lua_pushfstring(L, "server: %s: unexpected reply to %s", u->name,
                            aof ? "WAITAOF" : "WAIT");
        } else {
            lua_pushinteger(L, (lua_Integer)acked);
            lua_pushinteger(L, (lua_Integer)fsynced);
        }
    }
    return 2 + redlock_push_reply_free(L, r1, 1);
}

static int conn_close(lua_State *L) {
    conn_ud *u = check_conn(L);
    conn_destroy(u);
    return 0;
}

/* conn:connected() -> whether a socket is open now (no I/O is done). */
static int conn_connected(lua_State *L) {
    conn_ud *u = check_conn(L);
    lua_pushboolean(L, u->ctx != NULL);
    return 1;
}

/* conn:connects() -> how many connections this conn has made (a new one
 * since the last look: the server may have restarted with other settings). */
static int conn_connects(lua_State *L) {
    conn_ud *u = check_conn(L);
    lua_pushnumber(L, (lua_Number)u->connects);
    return 1;
}

static int conn_name(lua_State *L) {
    conn_ud *u = check_conn(L);
    lua_pushstring(L, u->name);
    return 1;
}

static int conn_tostring(lua_State *L) {
    conn_ud *u = check_conn(L);
    if (u->closed)
        lua_pushliteral(L, "redlock.conn (closed)");
    else
        lua_pushfstring(L, "redlock.conn (%s)", u->name);
    return 1;
}

static char *opt_string(lua_State *L, int t, const char *field, int required) {
    const char *s;
    lua_getfield(L, t, field);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        if (required)
            luaL_error(L, "bad option '%s' to 'conn' (string expected, got nil)", field);
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "bad option '%s' to 'conn' (string expected, got %s)", field,
                   luaL_typename(L, -1));
    s = lua_tostring(L, -1);
    lua_pop(L, 1); /* the string stays alive: it is still in the options table */
    return (char *)s;
}

static int opt_int(lua_State *L, int t, const char *field, int dflt, int lo, int hi) {
    lua_Number n;
    lua_getfield(L, t, field);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return dflt;
    }
    if (lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "bad option '%s' to 'conn' (number expected, got %s)", field,
                   luaL_typename(L, -1));
    n = lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (!(n >= lo && n <= hi) || n != (lua_Number)(int)n)
        luaL_error(L, "bad option '%s' to 'conn' (integer from %d to %d expected)", field, lo, hi);
    return (int)n;
}

static char *dup_or_null(lua_State *L, const char *s) {
    char *d;
    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        luaL_error(L, "out of memory"); /* the userdata owns what is copied so far */
    return d;
}

/* The tls = {...} table of conn's options into t (borrowed strings, alive
 * while the options table is); 0 when there is none. Raises on bad fields. */
static int opt_tls(lua_State *L, int from, const char *field, redlock_tls *t) {
    int idx;
    memset(t, 0, sizeof *t);
    lua_getfield(L, from, field);
    if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
        lua_pop(L, 1);
        return 0;
    }
    if (lua_type(L, -1) != LUA_TTABLE)
        luaL_error(L, "bad option 'tls' to 'conn' (table expected, got %s)", luaL_typename(L, -1));
    idx = lua_gettop(L);
    t->ca_file = opt_string(L, idx, "ca_file", 0);
    t->ca_path = opt_string(L, idx, "ca_path", 0);
    t->cert_file = opt_string(L, idx, "cert_file", 0);
    t->key_file = opt_string(L, idx, "key_file", 0);
    t->server_name = opt_string(L, idx, "server_name", 0);
    lua_getfield(L, idx, "verify");
    if (lua_isnil(L, -1))
        t->verify = 1;
    else if (lua_type(L, -1) == LUA_TBOOLEAN)
        t->verify = lua_toboolean(L, -1);
    else
        luaL_error(L, "bad option 'tls.verify' to 'conn' (boolean expected, got %s)",
                   luaL_typename(L, -1));
    lua_pop(L, 2); /* the strings stay alive: the table is still in the options */
    if ((t->cert_file == NULL) != (t->key_file == NULL))
        luaL_error(L, "bad option 'tls' to 'conn' (cert_file and key_file go together)");
    return 1;
}

/* One sentinel of conn{sentinels = {...}}: the table at the top of the
 * stack into node (owned by the conn being made: raising frees it). */
static int sentinel_node(lua_State *L, conn_ud *node, int cto, int to) {
    int t = lua_gettop(L), has_tls;
    const char *host = opt_string(L, t, "host", 1);
    redlock_tls tls;
    node->port = opt_int(L, t, "port", 26379, 1, 65535);
    node->connect_timeout_ms = cto;
    node->timeout_ms = to;
    snprintf(node->name, sizeof node->name, strchr(host, ':') ? "sentinel [%s]:%d" : "sentinel %s:%d",
             host, node->port);
    node->host = dup_or_null(L, host);
    node->username = dup_or_null(L, opt_string(L, t, "username", 0));
    node->password = dup_or_null(L, opt_string(L, t, "password", 0));
    if (node->username != NULL && node->password == NULL)
        return luaL_error(L, "bad option 'sentinels' to 'conn' (a username needs a password)");
    has_tls = opt_tls(L, t, "tls", &tls);
    if (has_tls) {
        node->tls = calloc(1, sizeof *node->tls);
        if (node->tls == NULL || redlock_tls_settings_copy(node->tls, &tls) != 0)
            return luaL_error(L, "out of memory");
    }
    return 0;
}

/* conn{sentinels = {{host=, port=, username=, password=, tls=}, ...},
 * master_name =, sentinel_check =, ...}: u finds its master through these.
 * Sentinels are asked with short timeouts (at most 500 ms): a dead one must
 * not cost the whole connect timeout when others can answer. */
static int opt_sentinels(lua_State *L, conn_ud *u) {
    const char *master = opt_string(L, 1, "master_name", 1);
    int n, i, cto = u->connect_timeout_ms < 500 ? u->connect_timeout_ms : 500;
    int to = u->timeout_ms > 0 && u->timeout_ms < 500 ? u->timeout_ms : 500;
    redlock_sentinels *s;
    lua_getfield(L, 1, "sentinels");
    n = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
    if (n < 1 || n > 64)
        return luaL_error(L, "bad option 'sentinels' to 'conn' (1 to 64 tables expected)");
    s = u->sentinels = calloc(1, sizeof *u->sentinels);
    if (s == NULL)
        return luaL_error(L, "out of memory");
    s->check_ms = opt_int(L, 1, "sentinel_check", 1000, 1, 86400000);
    if (redlock_sentinels_subscribe(s) != 0)
        return luaL_error(L, "out of memory");
    s->master_name = dup_or_null(L, master);
    s->nodes = calloc((size_t)n, sizeof(redlock_conn *));
    if (s->nodes == NULL)
        return luaL_error(L, "out of memory");
    for (i = 1; i <= n; i++) {
        conn_ud *node = calloc(1, sizeof *node);
        if (node == NULL)
            return luaL_error(L, "out of memory");
        s->nodes[i - 1] = node;
        s->n = i;
        lua_rawgeti(L, -1, i);
        if (!lua_istable(L, -1))
            return luaL_error(L, "bad option 'sentinels' to 'conn' (table expected at %d)", i);
        sentinel_node(L, node, cto, to);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    snprintf(u->name, sizeof u->name, "sentinel:%s", master);
    return 0;
}

/* conn{cluster = {{host=, port=}, ...}, ...}: u speaks to a Redis Cluster
 * whose seed nodes these are; each node a plain conn with u's credentials,
 * TLS and timeouts (csrc/cluster.c). */
static int opt_cluster(lua_State *L, conn_ud *u) {
    int n, i;
    lua_getfield(L, 1, "cluster");
    n = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
    if (n < 1 || n > 64)
        return luaL_error(L, "bad option 'cluster' to 'conn' (1 to 64 tables expected)");
    u->cluster = calloc(1, sizeof *u->cluster);
    if (u->cluster == NULL)
        return luaL_error(L, "out of memory");
    u->cluster->ask_slot = u->cluster->ask_node = -1;
    u->cluster->moved_slot = u->cluster->moved_node = -1;
    for (i = 1; i <= n; i++) {
        conn_ud *node;
        const char *host;
        int t;
        lua_rawgeti(L, -1, i);
        if (!lua_istable(L, -1))
            return luaL_error(L, "bad option 'cluster' to 'conn' (table expected at %d)", i);
        t = lua_gettop(L);
        host = opt_string(L, t, "host", 1);
        node = calloc(1, sizeof *node);
        if (node != NULL) {
            /* a node is a plain conn with u's settings: not a Cluster */
            redlock_cluster *c = u->cluster;
            int failed;
            u->cluster = NULL;
            failed = copy_settings(node, u);
            u->cluster = c;
            if (failed) {
                conn_destroy(node);
                free(node);
                node = NULL;
            }
        }
        if (node == NULL || redlock_cluster_add(u->cluster, node) != 0) {
            if (node != NULL) {
                conn_destroy(node);
                free(node);
            }
            return luaL_error(L, "out of memory");
        }
        free(node->host);
        node->host = dup_or_null(L, host);
        node->port = opt_int(L, t, "port", 6379, 1, 65535);
        snprintf(node->name, sizeof node->name, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
                 node->port);
        if (i == 1)
            snprintf(u->name, sizeof u->name, "cluster:%.110s", node->name);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

/* conn{host=, port=, path=, username=, password=, db=, connect_timeout=,
 * timeout=, tls=} -> an unconnected conn; or with sentinels = {...} and
 * master_name = instead of host (see opt_sentinels). Checks the
 * server's own settings before allocating. */
static int conn_new(lua_State *L) {
    const char *host, *path, *username, *password;
    int port, db, cto, to, has_tls, sentinels, cluster;
    redlock_tls tls;
    conn_ud *u;
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "sentinels");
    sentinels = !lua_isnil(L, -1);
    lua_getfield(L, 1, "cluster");
    cluster = !lua_isnil(L, -1);
    lua_pop(L, 2);
    path = sentinels || cluster ? NULL : opt_string(L, 1, "path", 0);
    host = path || sentinels || cluster ? NULL : opt_string(L, 1, "host", 1);
    username = opt_string(L, 1, "username", 0);
    password = opt_string(L, 1, "password", 0);
    port = opt_int(L, 1, "port", 6379, 1, 65535);
    db = opt_int(L, 1, "db", 0, 0, 1 << 20);
    cto = opt_int(L, 1, "connect_timeout", 1000, 1, 86400000);
    to = opt_int(L, 1, "timeout", 1000, 0, 86400000);
    if (username != NULL && password == NULL)
        return luaL_error(L, "bad option 'username' to 'conn' (needs a password)");
    has_tls = opt_tls(L, 1, "tls", &tls);

    u = (conn_ud *)lua_newuserdata(L, sizeof *u);
    memset(u, 0, sizeof *u);
    luaL_getmetatable(L, REDLOCK_CONN_MT);
    lua_setmetatable(L, -2);
    u->port = port;
    u->db = db;
    u->connect_timeout_ms = cto;
    u->timeout_ms = to;
    if (path != NULL)
        snprintf(u->name, sizeof u->name, "unix:%s", path);
    else if (host == NULL)
        u->name[0] = '\0'; /* opt_sentinels names it */
    else if (strchr(host, ':') != NULL)
        snprintf(u->name, sizeof u->name, "[%s]:%d", host, port);
    else
        snprintf(u->name, sizeof u->name, "%s:%d", host, port);
    u->host = dup_or_null(L, host);
    u->path = dup_or_null(L, path);
    u->username = dup_or_null(L, username);
    u->password = dup_or_null(L, password);
    if (has_tls) {
        u->tls = calloc(1, sizeof *u->tls);
        if (u->tls == NULL || redlock_tls_settings_copy(u->tls, &tls) != 0)
            return luaL_error(L, "out of memory"); /* __gc frees the partial copy */
    }
    if (sentinels)
        opt_sentinels(L, u); /* raising here: __gc frees what was made */
    else if (cluster)
        opt_cluster(L, u);
    return 1;
}

/* conn:clone() -> an unconnected conn with the same settings (a waiter's
 * own connection for blocking commands). The password stays in C. */
static int conn_clone(lua_State *L) {
    conn_ud *src = check_conn(L), *u;
    if (src->closed)
        return push_closed(L);
    u = (conn_ud *)lua_newuserdata(L, sizeof *u);
    memset(u, 0, sizeof *u);
    luaL_getmetatable(L, REDLOCK_CONN_MT);
    lua_setmetatable(L, -2);
    if (copy_settings(u, src) != 0)
        return luaL_error(L, "out of memory"); /* __gc frees the partial copy */
    if (src->sentinels != NULL) /* same thread: the same +switch-master subscription */
        redlock_sentinels_share(u->sentinels, src->sentinels);
    return 1;
}

/* conn:set_timeout(ms): the reply timeout from now on, for a blocking
 * command that must wait longer than the usual one. */
void redlock_conn_set_timeouts(redlock_conn *u, int connect_ms, int reply_ms) {
    if (connect_ms > 0)
        u->connect_timeout_ms = connect_ms;
    if (reply_ms >= 0) {
        u->timeout_ms = reply_ms;
        if (u->ctx != NULL && reply_ms > 0 && redisSetTimeout(u->ctx, ms_to_tv(reply_ms)) != REDIS_OK)
            free_ctx(u); /* the next call reconnects with the new timeout */
    }
    if (u->cluster != NULL) { /* the nodes carry the Cluster conn's commands */
        int i;
        for (i = 0; i < u->cluster->n; i++)
            redlock_conn_set_timeouts(u->cluster->nodes[i], connect_ms, reply_ms);
    }
}

static int conn_set_timeout(lua_State *L) {
    conn_ud *u = check_conn(L);
    lua_Integer ms = luaL_checkinteger(L, 2);
    luaL_argcheck(L, ms >= 1 && ms <= 86400000, 2, "out of range (1 to 86400000)");
    redlock_conn_set_timeouts(u, -1, (int)ms);
    return 0;
}

/* conn:timeout() -> the reply timeout in ms */
static int conn_timeout(lua_State *L) {
    lua_pushinteger(L, check_conn(L)->timeout_ms);
    return 1;
}

static int conn_gc(lua_State *L) {
    conn_destroy(check_conn(L));
    return 0;
}

void redlock_conn_open(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"command", conn_command},
        {"eval", conn_eval},
        {"eval_values", conn_eval_values},
        {"eval_wait", conn_eval_wait},
        {"grant", conn_grant},
        {"connects", conn_connects},
        {"close", conn_close},
        {"connected", conn_connected},
        {"name", conn_name},
        {"clone", conn_clone},
        {"set_timeout", conn_set_timeout},
        {"timeout", conn_timeout},
        {NULL, NULL},
    };
    static const luaL_Reg meta[] = {
        {"__gc", conn_gc},
        {"__close", conn_gc},
        {"__tostring", conn_tostring},
        {NULL, NULL},
    };
    redlock_newtype(L, REDLOCK_CONN_MT, meta, methods);
    lua_pushcfunction(L, conn_new);
    lua_setfield(L, -2, "conn");
}
