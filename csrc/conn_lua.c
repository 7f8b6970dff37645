/* The connection userdata (csrc/conn.c's connections, for Lua):
 *
 * conn:command(...)          -> reply | nil, msg, code, stale
 * conn:eval(name, nkeys, ...)-> reply | nil, msg, code, false (a script is
 *                               sent once more on a stale connection here)
 * (and eval_values, eval_wait, grant, close, connected, connects, name,
 * clone, set_timeout, timeout; conn{...} is conn_opts.c's)
 * Errors: code "connection" (could not connect, lost, timed out) or
 * "server" (Redis answered with an error). `stale` (conn:command, conn:grant)
 * is true when the failure came from a connection made before this call that
 * the server had dropped (not a timeout): the caller may retry once on a
 * fresh connection (redlock.util.once_more). The scripts (eval, eval_values,
 * eval_wait) are sent once more here, and never report stale.
 * Messages start with the code word and name the server, never a password.
 * A conn made with sentinels = {...} and master_name finds its server
 * through Redis Sentinel (csrc/sentinel.c) on every connect, checks now and
 * then that it has not moved, and follows a master turned replica (the
 * topology core's verdict: nothing was written, the command goes to the new
 * master). */
#define _GNU_SOURCE
#include "conn_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "proto.h"
#include "resp.h"
#include "reply.h"
#include "scripts.h"
#include "topo.h"
#include "wait.h"

static const char *const code_words[] = {"", "connection", "server"};

redlock_conn *redlock_conn_test(lua_State *L, int idx) {
    return (redlock_conn *)luaL_testudata(L, idx, REDLOCK_CONN_MT);
}

static conn_ud *check_conn(lua_State *L) {
    return (conn_ud *)redlock_checkself(L, REDLOCK_CONN_MT);
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
    rc = redlock_conn_round_trip(u, argc, a.v, a.len, &r, &stale);
    redlock_argv_free(&a);
    return push_outcome(L, u, rc, stale, r, 0);
}

/* EVALSHA of script s with nkeys and the argc keys and args from stack
 * slot first, into *cmd (its EVAL form for NOSCRIPT: redlock_cmd_use_eval);
 * numkeys formatted in nkeys_s rather than as a Lua string per call. -1
 * when out of memory. Never raises. */
static int script_cmd(lua_State *L, int first, int argc, const redlock_script *s, int nkeys,
                      char *nkeys_s, redlock_argv *a, redlock_cmd *cmd) {
    if (redlock_argv_init(L, first, argc, 3, a) != 0)
        return -1;
    *redlock_put_decimal(nkeys_s, (size_t)nkeys) = '\0';
    a->v[2] = nkeys_s;
    a->len[2] = strlen(nkeys_s);
    cmd->argc = argc + 3;
    cmd->argv = a->v;
    cmd->argvlen = a->len;
    redlock_cmd_evalsha(cmd, s->sha, s->source);
    return 0;
}

/* A script's exchange, sent once more when it failed on a connection the
 * server had dropped while idle: nothing ran there, and a script is whole,
 * so the resend is always safe (topo.c's rule, redlock_stale_verdict). A
 * plain command is left to its caller (conn:command reports stale): it may
 * be one of a WATCH..EXEC sequence, which a new connection has forgotten.
 * *stale is 0 on return: no caller sends a script again. */
static int script_exchange(conn_ud *u, redlock_cmd *cmd, const redlock_wait *w, redisReply **r1,
                           redisReply **r2, int *stale) {
    redlock_attempt a;
    int rc;
    redlock_attempt_start(&a, -1, 0, 0);
    do {
        rc = redlock_conn_exchange(u, cmd, w, r1, r2, stale);
    } while (*r1 == NULL && *stale == 1 && redlock_stale_verdict(&a, 1, u->err) == REDLOCK_RESEND);
    *stale = 0;
    return rc;
}

/* conn:eval(name, numkeys, key..., arg...): EVALSHA of a named script from
 * scripts.h; on NOSCRIPT (script cache flushed, restart, failover) one EVAL
 * (csrc/topo.c's rule), which also loads it again for the next EVALSHA. spread: see
 * conn_eval_values. */
static int eval(lua_State *L, int spread) {
    conn_ud *u = check_conn(L);
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 2));
    int nkeys = (int)luaL_checkinteger(L, 3), top = lua_gettop(L), argc, rc, stale;
    char nkeys_s[16];
    redlock_argv a;
    redlock_cmd cmd;
    redisReply *r = NULL, *none = NULL;
    if (s == NULL)
        return luaL_argerror(L, 2, "unknown script");
    if (nkeys < 0 || nkeys > top - 3)
        return luaL_argerror(L, 3, "numkeys out of range");
    argc = top > 3 ? redlock_check_argv(L, 4, top) : 0; /* keys and args */
    if (u->closed)
        return push_closed(L);
    if (script_cmd(L, 4, argc, s, nkeys, nkeys_s, &a, &cmd) != 0)
        return luaL_error(L, "out of memory");
    rc = script_exchange(u, &cmd, NULL, &r, &none, &stale);
    redlock_argv_free(&a);
    return push_outcome(L, u, rc, stale, r, spread);
}

static int conn_eval(lua_State *L) { return eval(L, 0); }

/* conn:eval_values(...): as eval, but an answer of 1 to 4 integers (what
 * the lock scripts return) comes back as that many values: no table to
 * make and collect on the path of every lock. */
static int conn_eval_values(lua_State *L) { return eval(L, 1); }

/* What the grant's XADD answered (type: a hiredis reply type; str, len: its
 * text): one rule for conn:grant and for the nginx transport's grant, which
 * reads the reply itself (core.grant_fence). The fence (1 or more); -1: the
 * acquire script must take it (a seq over 99, a string counter from before
 * 5.0: WRONGTYPE); -2: no streams (XADD unknown); GRANT_FENCE_FAILED:
 * XADD failed, and err says why (the caller gives the key back). */
#define GRANT_FENCE_FAILED (-100)
static long long grant_fence(int type, const char *str, size_t len, const char *name, char *err,
                             size_t errlen) {
    if (type == REDIS_REPLY_STRING)
        return redlock_fence_of_id(str, len);
    if (type == REDIS_REPLY_ERROR && len >= 9 && strncmp(str, "WRONGTYPE", 9) == 0)
        return -1;
    if (type == REDIS_REPLY_ERROR && strstr(str, "nknown command") != NULL)
        return -2;
    if (type == REDIS_REPLY_ERROR)
        snprintf(err, errlen, "server: %s: %.*s", name, (int)(len > 200 ? 200 : len), str);
    else
        snprintf(err, errlen, "server: %s: unexpected reply to XADD", name);
    return GRANT_FENCE_FAILED;
}

/* core.grant_fence(name, id, err): grant_fence for the nginx transport's
 * grant (redlock.cosocket), which parses XADD's reply in Lua: id, its
 * string reply, or nil and err, its error text (anything else: an
 * unexpected reply); name: the server's, for the message. Returns the
 * fence (or -1, -2 as conn:grant), or false, message. */
static int core_grant_fence(lua_State *L) {
    size_t len = 0;
    const char *name = luaL_checkstring(L, 1);
    const char *str = NULL;
    int type = REDIS_REPLY_NIL;
    char err[ERRLEN];
    long long f;
    if (lua_type(L, 2) == LUA_TSTRING) {
        str = lua_tolstring(L, 2, &len);
        type = REDIS_REPLY_STRING;
    } else if (lua_isnoneornil(L, 2) && lua_type(L, 3) == LUA_TSTRING) {
        str = lua_tolstring(L, 3, &len);
        type = REDIS_REPLY_ERROR;
    }
    f = grant_fence(type, str, len, name, err, sizeof err);
    if (f == GRANT_FENCE_FAILED) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushinteger(L, (lua_Integer)f);
    return 1;
}

/* conn:grant(key, token, ttl[, counter[, on]]): the uncontended acquire without a
 * script: SET key token NX PX ttl, and with a counter the fence's
 * XADD of REDLOCK_GRANT_FENCE_ARGV (raised to the server's clock by the
 * server itself, see scripts.h), in one write (one round trip, no Lua on the
 * server). Returns
 *   1, fence          set (fence: from XADD's ID; 0 without counter)
 *   1, -1             set, but the fence must come from the acquire
 *                     script (which takes the key as ours): a seq over 99,
 *                     or a string counter (WRONGTYPE, from before 5.0)
 *   1, -2             the same, on a server without streams (XADD unknown)
 *   1, false, msg     set, but XADD failed with msg: the caller releases
 *                     the key
 *   0                 not set: the key exists (XADD ran all the same)
 *   -3                nothing sent: the connection is not the one `on`
 *                     (a connects() count) names, or there is none
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
    const char *xadd[REDLOCK_GRANT_FENCE_ARGC] = REDLOCK_GRANT_FENCE_ARGV(counter);
    size_t xaddlen[REDLOCK_GRANT_FENCE_ARGC];
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
    /* Only on the connection a script ran on (its connects() count, as
     * the caller recorded it): a new one may reach a server that refuses
     * scripting now, which would refuse this lock's release. */
    if (!lua_isnoneornil(L, 6) &&
        (u->ctx == NULL || luaL_checknumber(L, 6) != (lua_Number)u->connects)) {
        lua_pushinteger(L, -3);
        return 1;
    }
    reused = u->ctx != NULL;
    if (u->ctx == NULL) {
        int rc = redlock_conn_connect(u);
        if (rc != OK)
            return push_failure(L, u, rc, 0);
    }
    n = redlock_encode(stack, sizeof stack, 6, set, setlen, &cmd);
    failed = n < 0 || redisAppendFormattedCommand(u->ctx, cmd, (size_t)n) != REDIS_OK;
    if (n >= 0 && cmd != stack)
        free(cmd);
    if (!failed && counter != NULL) {
        int i;
        for (i = 0; i < REDLOCK_GRANT_FENCE_ARGC; i++)
            xaddlen[i] = i == 1 ? len[3] : strlen(xadd[i]);
        n = redlock_encode(stack, sizeof stack, REDLOCK_GRANT_FENCE_ARGC, xadd, xaddlen, &cmd);
        failed = n < 0 || redisAppendFormattedCommand(u->ctx, cmd, (size_t)n) != REDIS_OK;
        if (n >= 0 && cmd != stack)
            free(cmd);
    }
    if (failed) {
        snprintf(u->err, ERRLEN, "connection: %s: could not encode the command (out of memory)",
                 u->name);
        redlock_conn_drop(u);
        return push_failure(L, u, E_CONNECTION, 0);
    }
    if (redlock_conn_flush(u, 0) != 0)
        failed = 1;
    while (!failed && got < nreplies) {
        if (redlock_conn_get_reply(u, &replies[got]) != REDIS_OK || replies[got] == NULL)
            failed = 1;
        else
            got++;
    }
    if (failed) {
        int timed_out = redlock_conn_io_error(u, errno, "waiting for a reply");
        int i;
        for (i = 0; i < got; i++)
            freeReplyObject(replies[i]);
        redlock_conn_drop(u);
        /* SET answered and XADD not: the key may be ours, which the
         * script's retry with the same token takes (or, should it fail,
         * the caller gives back). A timeout: its ttl ends it, as for any
         * lost reply. */
        return push_failure(L, u, E_CONNECTION, !timed_out && (reused || got == 1));
    }
    r = (redisReply *)replies[0];
    if (r->type == REDIS_REPLY_ERROR) {
        redlock_attempt a;
        int stale;
        redlock_attempt_start(&a, -1, 0, 0);
        /* a master turned replica (the topology core's verdict): nothing was
         * written; reported as a stale connection, sent once more */
        stale = redlock_server_reply(&a, u->name, 0, u->sentinels != NULL, r->str, r->len) ==
                REDLOCK_RELOAD;
        if (stale) {
            snprintf(u->err, ERRLEN, "%s", a.err);
            redlock_conn_drop(u);
            u->sentinels->checked_ms = 0;
        } else {
            snprintf(u->err, ERRLEN, "server: %s: %.*s", u->name,
                     (int)(r->len > 200 ? 200 : r->len), r->str);
        }
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
        long long f;
        r = (redisReply *)replies[1];
        f = grant_fence(r->type, r->str, r->len, u->name, u->err, ERRLEN);
        /* freed first: lua_pushstring may raise (out of memory) */
        freeReplyObject(r);
        if (f != GRANT_FENCE_FAILED) {
            lua_pushinteger(L, (lua_Integer)f);
        } else {
            lua_pushboolean(L, 0);
            lua_pushstring(L, u->err);
            ret = 3;
        }
    }
    return ret;
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
static int conn_eval_wait(lua_State *L) {
    conn_ud *u = check_conn(L);
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 2));
    lua_Integer n = luaL_checkinteger(L, 3), ms = luaL_checkinteger(L, 4);
    int aof = lua_toboolean(L, 5), nkeys = (int)luaL_checkinteger(L, 6), top = lua_gettop(L);
    int argc, rc, stale, outcome, base, nvals;
    long long acked = 0, fsynced = -1;
    char nkeys_s[16], errtext[200];
    size_t errlen = 0;
    redlock_argv a;
    redlock_wait w;
    redlock_cmd cmd;
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
    if (script_cmd(L, 7, argc, s, nkeys, nkeys_s, &a, &cmd) != 0)
        return luaL_error(L, "out of memory");
    rc = script_exchange(u, &cmd, &w, &r1, &r2, &stale);
    redlock_argv_free(&a);
    if (r1 == NULL)
        return push_failure(L, u, rc, stale);
    if (r1->type == REDIS_REPLY_ERROR) {
        if (r2 != NULL)
            freeReplyObject(r2);
        return push_outcome(L, u, OK, 0, r1, 1);
    }
    /* r2's outcome is read and r2 freed, and r1 pushed (which frees it
     * even when Lua runs out of memory), before anything else is pushed:
     * a push that raises leaks no reply. */
    if (rc != OK) {
        outcome = 0;
    } else if (r2->type == REDIS_REPLY_ERROR) {
        outcome = 1;
        errlen = r2->len > sizeof errtext ? sizeof errtext : r2->len;
        memcpy(errtext, r2->str, errlen);
    } else {
        outcome = redlock_wait_parse(r2, &acked, &fsynced) ? 2 : 3;
    }
    if (r2 != NULL)
        freeReplyObject(r2);
    base = lua_gettop(L);
    nvals = redlock_push_reply_free(L, r1, 1);
    luaL_checkstack(L, 3, "eval_wait");
    if (outcome == 3) {
        lua_pushinteger(L, (lua_Integer)acked);
        lua_insert(L, base + 1);
        lua_pushinteger(L, (lua_Integer)fsynced);
    } else {
        lua_pushboolean(L, 0);
        lua_insert(L, base + 1);
        if (outcome == 0) {
            lua_pushstring(L, u->err);
        } else if (outcome == 1) {
            lua_pushfstring(L, "server: %s: ", u->name);
            lua_pushlstring(L, errtext, errlen);
            lua_concat(L, 2);
        } else {
            lua_pushfstring(L, "server: %s: unexpected reply to %s", u->name,
                            aof ? "WAITAOF" : "WAIT");
        }
    }
    lua_insert(L, base + 2);
    return 2 + nvals;
}

static int conn_close(lua_State *L) {
    conn_ud *u = check_conn(L);
    redlock_conn_destroy(u);
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
    if (redlock_conn_copy_settings(u, src) != 0)
        return luaL_error(L, "out of memory"); /* __gc frees the partial copy */
    if (src->sentinels != NULL) /* same thread: the same +switch-master subscription */
        redlock_sentinels_share(u->sentinels, src->sentinels);
    return 1;
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
    redlock_conn_destroy(check_conn(L));
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
    lua_pushcfunction(L, redlock_conn_new);
    lua_setfield(L, -2, "conn");
    lua_pushcfunction(L, core_grant_fence);
    lua_setfield(L, -2, "grant_fence");
}

