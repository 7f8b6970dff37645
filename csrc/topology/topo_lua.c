/* The topology core (csrc/topology/topo.h) for Lua hosts with their own sockets:
 * nginx's cosockets (lua/redlock/nginx/: conn.lua's request loop, cluster.lua,
 * sentinel.lua) run the same attempts and the same rules as the hiredis
 * drivers, the way core.reader serves them the protocol. Verdicts come back
 * as words (topo.h's enum).
 *
 * core.topology(kind[, seeds]) -> topo      kind: a name of topo.h's
 *   redlock_topo_kinds: "plain", "sentinel", "cluster"
 * core.topology_kinds() -> {"plain", "sentinel", "cluster"}: those names,
 *   in their order (a host's kinds follow it: nginx/conn.lua's KINDS)
 *   (a Cluster's: its seeds {{host=, port=}, ...}; the topology is its map)
 * topo:attempt(slot, flags, limit_ms, now) -> at
 *   flags: a string of "s" (a script: NOSCRIPT gives EVAL), "k" (a step of
 *   a sequence: never sent again), "c" (sent again by its caller only)
 * at:next(now), at:reply(err, now[, name]), at:io_failed(err, now, reused,
 * timed_out) ->
 *   "go", node, prefix | "eval", prefix | "done" | "resend" | "pause", ms |
 *   "reload" | "switch" | "fail", msg, code, retry
 *   (node: from 1; prefix: what goes before the command in the same write,
 *   ASKING, or nil; retry: true, or "moved")
 * at:silent()
 * A Cluster's topology is its map too:
 *   map:count(), map:node(i) -> host, port, name   (i from 1)
 *   map:loaded(), map:any([after]) -> i
 *   map:load_start() -> load;  map:load_next(load, name) -> i | nil, msg, code
 *   map:load_reply(load, i, reply) -> 0 loaded | 1 next | nil, msg
 *   map:load_failed(load, i, err, reused, timed_out) -> true (the same node again) | false
 * core.command_slot(arg, ...) -> the slot of the command's key, -1: none
 * core.io_stale(reused, answered, timed_out) -> whether a failed exchange
 *   may go once more on a fresh connection (redlock_io_stale; answered:
 *   false nothing came back, true some of the reply, "tail" the command's
 *   reply and not its tail's)
 * core.topo_reply(kind, err) -> whether err is NOSCRIPT ("noscript"), a
 *   Cluster's refusal ("redirect"), a master turned replica ("demoted") or
 *   a blocked command's end forced by the server ("unblocked")
 * core.sentinel_answer(reply, sentinel) -> host, port | false | nil, why
 * core.sentinel_locate(i, n, answer) -> "done" | "resend" | "fail": the
 *   sentinels' policy (redlock_sentinel_locate; i from 1; answer: what
 *   sentinel_answer gave, a host, false or nil)
 * core.sentinel_check_due(now, checked, check_ms, max_age) -> boolean
 * core.sentinel_check(answer, same, now, check_ms, max_age) -> "keep" |
 *   "rotate" | "find", when the check counts as made
 * core.sentinel_failure(master, unknown, n, why) -> message
 * core.sentinel_switch(payload) -> name, host, port of a +switch-master | nil
 * core.role_verdict(reply, name) -> 1 | 0, msg | -1, msg
 * core.sentinel_round(round, outcome) -> "done" | "pause", ms | "fail": what
 *   comes after a round of finding a Sentinel's master (outcome: 1 a master,
 *   0 not one, -1 ROLE refused, -2 not reached)
 * Replica acknowledgement (csrc/topology/wait.h):
 * core.wait_command(replicas, ms, aof) -> the encoded WAIT (WAITAOF), how
 *   much longer the replies may take (ms)
 * core.wait_answer(reply, name, aof) -> acked, fsynced | nil, message
 * core.wait_short(name, what, replicas, ms, aof, acked, fsynced) -> message | nil */
#include <string.h>

#include "compat.h"
#include "error.h"
#include "proto.h"
#include "topo.h"
#include "wait.h"

#define TOPO_MT "redlock.topology"
#define ATTEMPT_MT "redlock.attempt"
#define LOAD_MT "redlock.map_load"

/* (topo.h's enum order) */
static const char *const words[] = {"go", "done", "resend", "pause", "reload", "eval", "fail",
                                    "switch"};

/* A topology: its kind and state (a Cluster's map, else NULL). */
typedef struct {
    const redlock_topo_kind *kind;
    redlock_cluster_map *m;
} topo_ud;

/* An attempt keeps its topology alive (the state it points at) in its
 * user value. */
typedef struct {
    redlock_attempt a;
} attempt_ud;

static topo_ud *check_topo(lua_State *L) { return (topo_ud *)luaL_checkudata(L, 1, TOPO_MT); }

static redlock_cluster_map *check_map(lua_State *L) {
    topo_ud *u = check_topo(L);
    if (u->m == NULL)
        luaL_argerror(L, 1, "not a Cluster");
    return u->m;
}

static redlock_attempt *check_attempt(lua_State *L) {
    return &((attempt_ud *)redlock_checkself(L, ATTEMPT_MT))->a;
}

static int check_node(lua_State *L, const redlock_cluster_map *m, int idx) {
    lua_Integer i = luaL_checkinteger(L, idx);
    luaL_argcheck(L, i >= 1 && i <= m->n, idx, "no such node");
    return (int)i - 1;
}

/* Pushes a verdict: its word and what goes with it. */
static int push_verdict(lua_State *L, const redlock_attempt *a, int v) {
    size_t len = 0;
    const char *prefix;
    lua_pushstring(L, words[v]);
    switch (v) {
    case REDLOCK_GO:
    case REDLOCK_EVAL:
        if (v == REDLOCK_GO)
            lua_pushinteger(L, a->node + 1);
        prefix = redlock_attempt_prefix(a, &len);
        if (prefix != NULL)
            lua_pushlstring(L, prefix, len);
        else
            lua_pushnil(L);
        return v == REDLOCK_GO ? 3 : 2;
    case REDLOCK_PAUSE:
        lua_pushnumber(L, a->wait_ms);
        return 2;
    case REDLOCK_FAIL:
        lua_pushstring(L, a->err);
        lua_pushstring(L, redlock_code_word(a->code ? a->code : REDLOCK_E_CONNECTION));
        if (a->retry == 2)
            lua_pushliteral(L, "moved");
        else
            lua_pushboolean(L, a->retry);
        return 4;
    default:
        return 1;
    }
}

/* The seeds at index 2 into m. */
static void add_seeds(lua_State *L, redlock_cluster_map *m) {
    int n, i;
    luaL_checktype(L, 2, LUA_TTABLE);
    n = (int)lua_rawlen(L, 2);
    luaL_argcheck(L, n >= 1 && n <= 64, 2, "1 to 64 seeds expected");
    for (i = 1; i <= n; i++) {
        size_t len;
        const char *host;
        lua_Integer port;
        lua_rawgeti(L, 2, i);
        luaL_argcheck(L, lua_istable(L, -1), 2, "seed tables expected");
        lua_getfield(L, -1, "host");
        lua_getfield(L, -2, "port");
        host = lua_tolstring(L, -2, &len);
        port = lua_tointeger(L, -1);
        luaL_argcheck(L, host != NULL && port >= 1 && port <= 65535, 2, "host and port expected");
        if (redlock_map_node(m, host, len, (int)port) < 0)
            luaL_error(L, "out of memory");
        lua_pop(L, 3);
    }
}

/* core.topology(kind[, seeds]) */
static int topo_new(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    const redlock_topo_kind *kind = NULL;
    topo_ud *u;
    int i;
    for (i = 0; redlock_topo_kinds[i] != NULL; i++)
        if (strcmp(redlock_topo_kinds[i]->name, name) == 0)
            kind = redlock_topo_kinds[i];
    if (kind == NULL) {
        luaL_Buffer b; /* "plain, sentinel or cluster expected" */
        luaL_buffinit(L, &b);
        for (i = 0; redlock_topo_kinds[i] != NULL; i++) {
            if (i > 0)
                luaL_addstring(&b, redlock_topo_kinds[i + 1] != NULL ? ", " : " or ");
            luaL_addstring(&b, redlock_topo_kinds[i]->name);
        }
        luaL_addstring(&b, " expected");
        luaL_pushresult(&b);
        return luaL_argerror(L, 1, lua_tostring(L, -1));
    }
    u = (topo_ud *)lua_newuserdata(L, sizeof *u);
    u->kind = kind;
    u->m = NULL;
    luaL_getmetatable(L, TOPO_MT);
    lua_setmetatable(L, -2);
    if (kind->routed) {
        u->m = redlock_map_new();
        if (u->m == NULL)
            return luaL_error(L, "out of memory");
        add_seeds(L, u->m); /* (raising: __gc frees the map) */
    }
    return 1;
}

/* core.topology_kinds() */
static int topo_kinds(lua_State *L) {
    int i;
    lua_newtable(L);
    for (i = 0; redlock_topo_kinds[i] != NULL; i++) {
        lua_pushstring(L, redlock_topo_kinds[i]->name);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int topo_gc(lua_State *L) {
    topo_ud *u = check_topo(L);
    redlock_map_free(u->m);
    u->m = NULL;
    return 0;
}

static int topo_kind(lua_State *L) {
    lua_pushstring(L, check_topo(L)->kind->name);
    return 1;
}

/* topo:attempt(slot, flags, limit_ms, now) */
static int topo_attempt(lua_State *L) {
    topo_ud *t = check_topo(L);
    lua_Integer slot = luaL_checkinteger(L, 2);
    const char *f = luaL_optstring(L, 3, "");
    lua_Number limit = luaL_checknumber(L, 4), now = luaL_checknumber(L, 5);
    unsigned flags = 0;
    attempt_ud *u;
    luaL_argcheck(L, slot >= -1 && slot < REDLOCK_SLOTS, 2, "not a slot");
    for (; *f != '\0'; f++)
        flags |= *f == 's' ? REDLOCK_AT_SCRIPT : *f == 'k' ? REDLOCK_AT_KEPT
                 : *f == 'c' ? REDLOCK_AT_CALLER : 0;
    u = (attempt_ud *)lua_newuserdata(L, sizeof *u);
    luaL_getmetatable(L, ATTEMPT_MT);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1);
    redlock_keep(L, -2); /* the topology, while the attempt lives */
    /* (the name for messages: a Sentinel's switch says the master's in
     * the driver's own words; the core's name is the kind's) */
    redlock_attempt_start(&u->a, t->kind, t->m, "", t->kind->routed ? (int)slot : -1, flags, now,
                          (int)limit);
    return 1;
}

static int at_next(lua_State *L) {
    redlock_attempt *a = check_attempt(L);
    return push_verdict(L, a, redlock_attempt_next(a, luaL_checknumber(L, 2)));
}

/* at:reply(err, now[, name]): name: the server's, for the message */
static int at_reply(lua_State *L) {
    redlock_attempt *a = check_attempt(L);
    size_t len;
    const char *err = luaL_checklstring(L, 2, &len);
    lua_Number now = luaL_checknumber(L, 3);
    int v;
    a->name = luaL_optstring(L, 4, ""); /* (read within this call only) */
    v = redlock_attempt_reply(a, err, len, now);
    a->name = "";
    return push_verdict(L, a, v);
}

/* at:io_failed(err, now, reused, timed_out): reused: the connection was
 * made before this call; timed_out: the reply did not come in time */
static int at_io_failed(lua_State *L) {
    redlock_attempt *a = check_attempt(L);
    const char *err = luaL_checkstring(L, 2);
    lua_Number now = luaL_checknumber(L, 3);
    int stale = redlock_io_stale(lua_toboolean(L, 4), REDLOCK_IO_NOTHING, lua_toboolean(L, 5));
    return push_verdict(L, a, redlock_attempt_io_failed(a, stale, err, now));
}

static int at_silent(lua_State *L) {
    redlock_attempt_silent(check_attempt(L));
    return 0;
}

static int map_count(lua_State *L) {
    lua_pushinteger(L, check_map(L)->n);
    return 1;
}

static int map_node(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    const redlock_topo_node *k = &m->nodes[check_node(L, m, 2)];
    lua_pushstring(L, k->host);
    lua_pushinteger(L, k->port);
    lua_pushstring(L, k->name);
    return 3;
}

static int map_loaded(lua_State *L) {
    lua_pushboolean(L, check_map(L)->loaded);
    return 1;
}

static int map_any(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    if (!lua_isnoneornil(L, 2))
        m->any = (check_node(L, m, 2) + 1) % m->n;
    lua_pushinteger(L, (m->any >= 0 && m->any < m->n ? m->any : 0) + 1);
    return 1;
}

static redlock_map_load *check_load(lua_State *L, int idx) {
    return (redlock_map_load *)luaL_checkudata(L, idx, LOAD_MT);
}

static int map_load_start(lua_State *L) {
    redlock_map_load *l;
    check_map(L);
    l = (redlock_map_load *)lua_newuserdata(L, sizeof *l);
    luaL_getmetatable(L, LOAD_MT);
    lua_setmetatable(L, -2);
    redlock_map_load_start(l);
    return 1;
}

static int map_load_next(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    redlock_map_load *l = check_load(L, 2);
    char err[REDLOCK_TOPO_ERRLEN];
    int code = 1, i = redlock_map_load_next(m, l, luaL_checkstring(L, 3), err, &code);
    if (i < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        lua_pushstring(L, code == 2 ? "server" : "connection");
        return 3;
    }
    lua_pushinteger(L, i + 1);
    return 1;
}

static int map_load_reply(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    redlock_map_load *l = check_load(L, 2);
    int i = check_node(L, m, 3), rc;
    const redisReply *r = redlock_check_raw_reply(L, 4);
    char err[REDLOCK_TOPO_ERRLEN];
    rc = redlock_map_load_reply(m, l, i, r, err);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushinteger(L, rc);
    return 1;
}

static int map_load_failed(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    redlock_map_load *l = check_load(L, 2);
    int i = check_node(L, m, 3);
    int stale = redlock_io_stale(lua_toboolean(L, 5), REDLOCK_IO_NOTHING, lua_toboolean(L, 6));
    lua_pushboolean(L, redlock_map_load_failed(m, l, i, stale, luaL_checkstring(L, 4)));
    return 1;
}

/* command_slot(arg, ...) -> the slot of the command's key, -1: none */
static int command_slot(lua_State *L) {
    const char *argv[4];
    size_t len[4];
    int n = lua_gettop(L), i;
    if (n > 4)
        n = 4; /* (the key is at most the fourth: EVAL sha numkeys key) */
    for (i = 0; i < n; i++) {
        argv[i] = lua_tolstring(L, i + 1, &len[i]);
        if (argv[i] == NULL) {
            lua_pushinteger(L, -1);
            return 1;
        }
    }
    lua_pushinteger(L, n > 0 ? redlock_command_slot(n, argv, len) : -1);
    return 1;
}

/* io_stale(reused, answered, timed_out) */
static int io_stale(lua_State *L) {
    int answered = lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "tail") == 0
                       ? REDLOCK_IO_TAIL
                   : lua_toboolean(L, 2) ? REDLOCK_IO_PART
                                         : REDLOCK_IO_NOTHING;
    lua_pushboolean(L, redlock_io_stale(lua_toboolean(L, 1), answered, lua_toboolean(L, 3)));
    return 1;
}

static int topo_reply(lua_State *L) {
    const char *kind = luaL_checkstring(L, 1);
    size_t len;
    const char *err = lua_tolstring(L, 2, &len);
    if (err == NULL)
        lua_pushboolean(L, 0);
    else if (strcmp(kind, "noscript") == 0)
        lua_pushboolean(L, redlock_reply_noscript(err, len));
    else if (strcmp(kind, "redirect") == 0)
        lua_pushboolean(L, redlock_reply_redirect(err, len));
    else if (strcmp(kind, "demoted") == 0)
        lua_pushboolean(L, redlock_reply_demoted(err, len));
    else if (strcmp(kind, "unblocked") == 0)
        lua_pushboolean(L, redlock_reply_unblocked(err, len));
    else
        return luaL_argerror(L, 1, "noscript, redirect, demoted or unblocked expected");
    return 1;
}

static int sentinel_answer(lua_State *L) {
    const redisReply *r = redlock_check_raw_reply(L, 1);
    const char *name = luaL_checkstring(L, 2);
    char host[256], why[REDLOCK_TOPO_ERRLEN];
    int port = 0;
    why[0] = '\0';
    switch (redlock_sentinel_answer(r, name, host, sizeof host, &port, why, sizeof why)) {
    case REDLOCK_MASTER_AT:
        lua_pushstring(L, host);
        lua_pushinteger(L, port);
        return 2;
    case REDLOCK_MASTER_UNKNOWN:
        lua_pushboolean(L, 0);
        return 1;
    default:
        lua_pushnil(L);
        lua_pushstring(L, why);
        return 2;
    }
}

/* sentinel_answer's first value as an answer */
static int answer_arg(lua_State *L, int arg) {
    if (lua_type(L, arg) == LUA_TSTRING)
        return REDLOCK_MASTER_AT;
    return lua_isboolean(L, arg) && !lua_toboolean(L, arg) ? REDLOCK_MASTER_UNKNOWN
                                                           : REDLOCK_SENTINEL_FAILED;
}

static int sentinel_locate(lua_State *L) {
    int i = (int)luaL_checkinteger(L, 1) - 1, n = (int)luaL_checkinteger(L, 2);
    lua_pushstring(L, words[redlock_sentinel_locate(i, n, answer_arg(L, 3))]);
    return 1;
}

static int sentinel_check_due(lua_State *L) {
    lua_pushboolean(L, redlock_sentinel_check_due(luaL_checknumber(L, 1), luaL_checknumber(L, 2),
                                                  luaL_checknumber(L, 3), luaL_checknumber(L, 4)));
    return 1;
}

static int sentinel_check(lua_State *L) {
    static const char *const checks[] = {"keep", "rotate", "find"};
    double checked = 0;
    int v = redlock_sentinel_check(answer_arg(L, 1), lua_toboolean(L, 2), luaL_checknumber(L, 3),
                                   luaL_checknumber(L, 4), luaL_checknumber(L, 5), &checked);
    lua_pushstring(L, checks[v]);
    lua_pushnumber(L, checked);
    return 2;
}

static int sentinel_failure(lua_State *L) {
    char err[REDLOCK_TOPO_ERRLEN];
    redlock_sentinel_failure(err, sizeof err, luaL_checkstring(L, 1), (int)luaL_checkinteger(L, 2),
                             (int)luaL_checkinteger(L, 3), luaL_checkstring(L, 4));
    lua_pushstring(L, err);
    return 1;
}

/* sentinel_switch(payload) -> name, host, port | nil */
static int sentinel_switch(lua_State *L) {
    size_t len;
    const char *msg = luaL_checklstring(L, 1, &len);
    char name[256], host[256];
    int port = 0;
    if (redlock_sentinel_switch(msg, len, name, sizeof name, host, sizeof host, &port) != 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, name);
    lua_pushstring(L, host);
    lua_pushinteger(L, port);
    return 3;
}

/* sentinel_round(round, outcome) -> "done" | "pause", ms | "fail"
 * (outcome: 1 a master, 0 not one, -1 ROLE refused, -2 not reached) */
static int sentinel_round(lua_State *L) {
    int v = redlock_sentinel_round((int)luaL_checkinteger(L, 1), (int)luaL_checkinteger(L, 2));
    lua_pushstring(L, words[v]);
    if (v != REDLOCK_PAUSE)
        return 1;
    lua_pushinteger(L, REDLOCK_ROLE_PAUSE);
    return 2;
}

static int role_verdict(lua_State *L) {
    char err[REDLOCK_TOPO_ERRLEN];
    int v = redlock_role_verdict(redlock_check_raw_reply(L, 1), luaL_checkstring(L, 2), err,
                                 sizeof err);
    lua_pushinteger(L, v);
    if (v == 1)
        return 1;
    lua_pushstring(L, err);
    return 2;
}

/* --- replica acknowledgement (csrc/topology/wait.h) ------------------------------- */

static void check_wait(lua_State *L, int idx, redlock_wait *w) {
    lua_Integer n = luaL_checkinteger(L, idx), ms = luaL_checkinteger(L, idx + 1);
    luaL_argcheck(L, n >= 0 && n <= 1000000, idx, "out of range (0 to 1000000)");
    luaL_argcheck(L, ms >= 1 && ms <= 86400000, idx + 1, "out of range (1 to 86400000)");
    w->replicas = (int)n;
    w->timeout_ms = (int)ms;
    w->aof = lua_toboolean(L, idx + 2);
}

/* wait_command(replicas, ms, aof) -> the encoded command, extra ms */
static int wait_command(lua_State *L) {
    redlock_wait w;
    redlock_tail t;
    char buf[REDLOCK_WAIT_BUF];
    check_wait(L, 1, &w);
    if (redlock_wait_tail(&w, buf, &t) != 0)
        return luaL_error(L, "out of memory");
    lua_pushlstring(L, t.buf, (size_t)t.len);
    lua_pushinteger(L, t.extra_ms);
    return 2;
}

/* wait_answer(reply, name, aof) -> acked, fsynced | nil, message */
static int wait_answer(lua_State *L) {
    const redisReply *r = redlock_check_raw_reply(L, 1);
    redlock_wait w = {0, 1, 0};
    long long acked, fsynced;
    char err[REDLOCK_TOPO_ERRLEN];
    w.aof = lua_toboolean(L, 3);
    if (redlock_wait_answer(&w, r, luaL_checkstring(L, 2), &acked, &fsynced, err, sizeof err) !=
        0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushinteger(L, (lua_Integer)acked);
    lua_pushinteger(L, (lua_Integer)fsynced);
    return 2;
}

/* wait_short(name, what, replicas, ms, aof, acked, fsynced) -> message | nil */
static int wait_short(lua_State *L) {
    const char *name = luaL_checkstring(L, 1), *what = luaL_checkstring(L, 2);
    redlock_wait w;
    char err[REDLOCK_TOPO_ERRLEN];
    check_wait(L, 3, &w);
    if (!redlock_wait_short(&w, name, what, (long long)luaL_checknumber(L, 6),
                            (long long)luaL_optnumber(L, 7, -1), err, sizeof err)) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, err);
    return 1;
}

void redlock_topo_open(lua_State *L) {
    static const luaL_Reg topo_methods[] = {
        {"kind", topo_kind},
        {"attempt", topo_attempt},
        {"count", map_count},
        {"node", map_node},
        {"loaded", map_loaded},
        {"any", map_any},
        {"load_start", map_load_start},
        {"load_next", map_load_next},
        {"load_reply", map_load_reply},
        {"load_failed", map_load_failed},
        {NULL, NULL},
    };
    static const luaL_Reg topo_meta[] = {{"__gc", topo_gc}, {NULL, NULL}};
    static const luaL_Reg at_methods[] = {
        {"next", at_next},
        {"reply", at_reply},
        {"io_failed", at_io_failed},
        {"silent", at_silent},
        {NULL, NULL},
    };
    static const luaL_Reg none[] = {{NULL, NULL}};
    static const luaL_Reg funcs[] = {
        {"topology", topo_new},
        {"topology_kinds", topo_kinds},
        {"command_slot", command_slot},
        {"io_stale", io_stale},
        {"topo_reply", topo_reply},
        {"sentinel_answer", sentinel_answer},
        {"sentinel_failure", sentinel_failure},
        {"sentinel_locate", sentinel_locate},
        {"sentinel_check_due", sentinel_check_due},
        {"sentinel_check", sentinel_check},
        {"sentinel_switch", sentinel_switch},
        {"role_verdict", role_verdict},
        {"sentinel_round", sentinel_round},
        {"wait_command", wait_command},
        {"wait_answer", wait_answer},
        {"wait_short", wait_short},
        {NULL, NULL},
    };
    redlock_newtype(L, TOPO_MT, topo_meta, topo_methods);
    redlock_newtype(L, ATTEMPT_MT, none, at_methods);
    redlock_newtype(L, LOAD_MT, none, none);
    luaL_setfuncs(L, funcs, 0);
}
