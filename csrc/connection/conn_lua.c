/* The connection userdata (csrc/drivers/conn.c's connections, for Lua):
 *
 * conn:command(...)          -> reply | nil, msg, code[, retry]
 * conn:command_kept(...)     -> the same, never sent again
 * conn:eval(name, nkeys, ...)-> reply | nil, msg, code
 * (and eval_values, eval_wait, grant, close, connected, connects, name,
 * clone, set_timeout, timeout; conn{...} is conn_opts.c's)
 * Every request goes through the one request loop (conn.c): a stale
 * connection (one the server had dropped while idle) is sent again once
 * on a fresh one, NOSCRIPT answered with EVAL, a Sentinel master turned
 * replica left for the new one, a Cluster's redirections followed, as the
 * topology core says (csrc/topology/topo.h); a step of a WATCH..EXEC
 * (command_kept) is never sent again.
 * Errors: code "connection" (could not connect, lost, timed out) or
 * "server" (Redis answered with an error); the fourth value "moved" when
 * a Sentinel switch ended a BLPOP (the caller asks again, on the new
 * master), and conn:grant's true when its caller may send it again.
 * Messages start with the code word and name the server, never a password.
 * A conn made with sentinels = {...} and master_name finds its server
 * through Redis Sentinel (csrc/drivers/sentinel.c) on every connect and checks now
 * and then that it has not moved. */
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

redlock_conn *redlock_conn_test(lua_State *L, int idx) {
    return (redlock_conn *)luaL_testudata(L, idx, REDLOCK_CONN_MT);
}

static conn_ud *check_conn(lua_State *L) {
    return (conn_ud *)redlock_checkself(L, REDLOCK_CONN_MT);
}

static int push_failure(lua_State *L, conn_ud *u, int code, int stale) {
    lua_pushnil(L);
    lua_pushstring(L, u->err);
    lua_pushstring(L, redlock_code_word(code));
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
    if (rc != REDLOCK_OK)
        return push_failure(L, u, rc, stale);
    if (r->type == REDIS_REPLY_ERROR) {
        redlock_set_error(u->err, ERRLEN, REDLOCK_E_SERVER, u->name, "%.*s",
                          (int)(r->len > 200 ? 200 : r->len), r->str);
        freeReplyObject(r);
        return push_failure(L, u, REDLOCK_E_SERVER, 0);
    }
    return redlock_push_reply_free(L, r, spread);
}

/* conn:command(arg, ...); kept: conn:command_kept's */
static int command(lua_State *L, int kept) {
    conn_ud *u = check_conn(L);
    int argc = redlock_check_argv(L, 2, lua_gettop(L)), rc, stale;
    redlock_argv a;
    redisReply *r = NULL;
    if (u->closed)
        return push_closed(L);
    if (redlock_argv_init(L, 2, argc, 0, &a) != 0)
        return luaL_error(L, "out of memory");
    u->kept = kept; /* (nothing raises until it is reset) */
    rc = redlock_command(u, argc, a.v, a.len, kept ? REDLOCK_AT_KEPT : 0, &r, &stale);
    u->kept = 0;
    redlock_argv_free(&a);
    return push_outcome(L, u, rc, stale, r, 0);
}

static int conn_command(lua_State *L) { return command(L, 0); }

/* conn:command_kept(arg, ...): as conn:command, but only on the connection
 * open now; with none (the last one was lost, or the Sentinel check moves
 * the conn to a new master) it fails without sending, never stale. Legacy
 * mode's steps after WATCH: a new connection knows nothing of the WATCH and
 * MULTI, and the command would run there unguarded. */
static int conn_command_kept(lua_State *L) { return command(L, 1); }

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

/* conn:eval(name, numkeys, key..., arg...): EVALSHA of a named script from
 * scripts.h; on NOSCRIPT (script cache flushed, restart, failover) one EVAL
 * (csrc/topology/topo.c's rule), which also loads it again for the next EVALSHA. spread: see
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
    rc = redlock_request(u, &cmd, NULL, 0, &r, &none, &stale);
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
        redlock_set_error(err, errlen, REDLOCK_E_SERVER, name, "%.*s", (int)(len > 200 ? 200 : len),
                          str);
    else
        redlock_set_error(err, errlen, REDLOCK_E_SERVER, name, "unexpected reply to XADD");
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
/* u's grant XADD for counter (REDLOCK_GRANT_FENCE_ARGV), encoded when the
 * counter is not the one of the last call (one per server, or per slot):
 * 0, or -1 when out of memory. */
static int grant_xadd(conn_ud *u, const char *counter, size_t len) {
    const char *argv[REDLOCK_GRANT_FENCE_ARGC] = REDLOCK_GRANT_FENCE_ARGV(counter);
    size_t argvlen[REDLOCK_GRANT_FENCE_ARGC];
    char *enc = NULL, *copy;
    long n;
    int i;
    if (u->grant_counter != NULL && u->grant_counter_len == len &&
        memcmp(u->grant_counter, counter, len) == 0)
        return 0;
    for (i = 0; i < REDLOCK_GRANT_FENCE_ARGC; i++)
        argvlen[i] = i == 1 ? len : strlen(argv[i]);
    n = redlock_encode(NULL, 0, REDLOCK_GRANT_FENCE_ARGC, argv, argvlen, &enc);
    copy = malloc(len + 1);
    if (n < 0 || copy == NULL) {
        if (n >= 0)
            free(enc);
        free(copy);
        return -1;
    }
    memcpy(copy, counter, len);
    copy[len] = '\0';
    free(u->grant_xadd);
    free(u->grant_counter);
    u->grant_xadd = enc;
    u->grant_xadd_len = n;
    u->grant_counter = copy;
    u->grant_counter_len = len;
    return 0;
}

static int conn_grant(lua_State *L) {
    conn_ud *u = check_conn(L);
    size_t len[4];
    const char *key = luaL_checklstring(L, 2, &len[0]);
    const char *token = luaL_checklstring(L, 3, &len[1]);
    const char *ttl = luaL_checklstring(L, 4, &len[2]);
    const char *counter = luaL_optlstring(L, 5, NULL, &len[3]);
    const char *set[6] = {"SET", key, token, "NX", "PX", ttl};
    size_t setlen[6] = {3, len[0], len[1], 2, 2, len[2]};
    redlock_cmd cmd = {6, set, setlen, NULL};
    redlock_tail tail = {NULL, 0, 0, "waiting for a reply"};
    redisReply *r = NULL, *r2 = NULL;
    int rc, retry = 0, ret;
    if (u->kind->topo->routed)
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
    if (counter != NULL) {
        if (grant_xadd(u, counter, len[3]) != 0) {
            redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name,
                              "could not encode the command (out of memory)");
            return push_failure(L, u, REDLOCK_E_CONNECTION, 0);
        }
        tail.buf = u->grant_xadd;
        tail.len = u->grant_xadd_len;
    }
    /* the caller sends it again (as the script): a failure says whether
     * it may (a stale connection; SET answered and XADD's reply lost: the
     * key may hold our token, which the script takes; a master turned
     * replica: nothing was written) */
    rc = redlock_request(u, &cmd, counter != NULL ? &tail : NULL, REDLOCK_AT_CALLER, &r, &r2,
                         &retry);
    if (rc != REDLOCK_OK) {
        if (r != NULL)
            freeReplyObject(r);
        if (r2 != NULL)
            freeReplyObject(r2);
        return push_failure(L, u, rc, retry);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (r2 != NULL)
            freeReplyObject(r2);
        return push_outcome(L, u, REDLOCK_OK, 0, r, 0);
    }
    if (r->type != REDIS_REPLY_STATUS) { /* nil: held (XADD ran all the same) */
        freeReplyObject(r);
        if (r2 != NULL)
            freeReplyObject(r2);
        lua_pushinteger(L, 0);
        return 1;
    }
    freeReplyObject(r);
    lua_pushinteger(L, 1);
    ret = 2;
    if (counter == NULL) {
        lua_pushinteger(L, 0);
    } else {
        long long f = grant_fence(r2->type, r2->str, r2->len, u->name, u->err, ERRLEN);
        /* freed first: lua_pushstring may raise (out of memory) */
        freeReplyObject(r2);
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
 *   nil, msg, code, false          the script did not answer, or answered
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
    int argc, rc, stale, acked_ok, base, nvals;
    long long acked = 0, fsynced = -1;
    char nkeys_s[16];
    redlock_argv a;
    redlock_wait w;
    redlock_tail tail;
    char wbuf[REDLOCK_WAIT_BUF];
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
    if (redlock_wait_tail(&w, wbuf, &tail) != 0 ||
        script_cmd(L, 7, argc, s, nkeys, nkeys_s, &a, &cmd) != 0)
        return luaL_error(L, "out of memory");
    rc = redlock_request(u, &cmd, &tail, 0, &r1, &r2, &stale);
    redlock_argv_free(&a);
    if (r1 == NULL)
        return push_failure(L, u, rc, stale);
    if (r1->type == REDIS_REPLY_ERROR) {
        if (r2 != NULL)
            freeReplyObject(r2);
        return push_outcome(L, u, REDLOCK_OK, 0, r1, 1);
    }
    /* r2's outcome is read and r2 freed, and r1 pushed (which frees it
     * even when Lua runs out of memory), before anything else is pushed:
     * a push that raises leaks no reply. (u->err: the connection's message,
     * or what WAIT's answer says) */
    acked_ok = rc == REDLOCK_OK &&
               redlock_wait_answer(&w, r2, u->name, &acked, &fsynced, u->err, ERRLEN) == 0;
    if (r2 != NULL)
        freeReplyObject(r2);
    base = lua_gettop(L);
    nvals = redlock_push_reply_free(L, r1, 1);
    luaL_checkstack(L, 3, "eval_wait");
    if (acked_ok) {
        lua_pushinteger(L, (lua_Integer)acked);
        lua_insert(L, base + 1);
        lua_pushinteger(L, (lua_Integer)fsynced);
    } else {
        lua_pushboolean(L, 0);
        lua_insert(L, base + 1);
        lua_pushstring(L, u->err);
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
    /* (the same thread: a Sentinel conn's +switch-master subscription shared) */
    if (redlock_conn_copy_settings(u, src, 1) != 0)
        return luaL_error(L, "out of memory"); /* __gc frees the partial copy */
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

/* The kinds a conn{...} option makes, in topo.h's REDLOCK_KINDS order. */
#define KIND_ENTRY(name) &redlock_conn_##name,
static const redlock_conn_kind *const kinds[] = {REDLOCK_KINDS(KIND_ENTRY) NULL};

/* conn{...}: a conn of the first kind whose option it has, plain without
 * one (conn_opts.c reads the options). */
static int conn_new(lua_State *L) {
    int i;
    luaL_checktype(L, 1, LUA_TTABLE);
    for (i = 0; kinds[i] != NULL; i++) {
        int has;
        if (kinds[i]->option == NULL)
            continue;
        lua_getfield(L, 1, kinds[i]->option);
        has = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (has)
            return redlock_conn_new(L, kinds[i]);
    }
    return redlock_conn_new(L, &redlock_conn_plain);
}

void redlock_conn_open(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"command", conn_command},
        {"eval", conn_eval},
        {"eval_values", conn_eval_values},
        {"eval_wait", conn_eval_wait},
        {"grant", conn_grant},
        {"connects", conn_connects},
        {"command_kept", conn_command_kept},
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
    lua_pushcfunction(L, core_grant_fence);
    lua_setfield(L, -2, "grant_fence");
}

