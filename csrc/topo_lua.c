/* The topology core (csrc/topo.h) for a host with its own sockets: nginx's
 * cosockets (lua/redlock/ngx_cluster.lua, ngx_sentinel.lua, cosocket.lua)
 * drive the same decisions as the hiredis paths, the way core.reader serves
 * them the protocol. Verdicts come back as words: "go", "done", "resend",
 * "pause", "reload", "fail" (see topo.h's enum).
 *
 * core.cluster_map({{host=, port=}, ...}) -> map (the seeds)
 *   map:count(), map:node(i) -> host, port, name   (i from 1)
 *   map:forget(), map:loaded(), map:any([after]) -> i
 *   map:attempt(slot, limit_ms, now) -> attempt
 *   map:target(at, now) -> "go", i, asking | "reload" | "pause", ms | "fail", msg, code
 *   map:reply(at, err, now) -> "done" | "resend" | "pause", ms | "fail", msg, code
 *   map:io_failed(at, stale, err, now) -> "resend" | "reload" | "pause", ms | "fail", msg, code
 *   map:load_start() -> load;  map:load_next(load, name) -> i | nil, msg, code
 *   map:load_reply(load, i, reply) -> 0 loaded | 1 next | nil, msg
 *   map:load_failed(load, i, stale, err) -> true (the same node again) | false
 * core.command_slot(arg, ...) -> the slot of the command's key, -1: none
 * core.topo_reply(kind, err) -> whether err is NOSCRIPT ("noscript"), a
 *   Cluster's refusal ("redirect"), a master turned replica ("demoted") or
 *   a blocked command's end forced by the server ("unblocked")
 * core.sentinel_answer(reply, sentinel) -> host, port | false | nil, why
 * core.sentinel_failure(master, unknown, n, why) -> message
 * core.sentinel_switch(payload) -> name, host, port of a +switch-master | nil
 * core.role_verdict(reply, name) -> 1 | 0, msg | -1, msg
 * core.topo_rules: {role_rounds, role_pause} */
#include <string.h>

#include "compat.h"
#include "proto.h"
#include "topo.h"

#define MAP_MT "redlock.cluster_map"
#define ATTEMPT_MT "redlock.attempt"
#define LOAD_MT "redlock.map_load"

static const char *const words[] = {"go", "done", "resend", "pause", "reload", "eval", "fail"};

typedef struct {
    redlock_cluster_map *m;
} map_ud;

static redlock_cluster_map *check_map(lua_State *L) {
    map_ud *u = (map_ud *)luaL_checkudata(L, 1, MAP_MT);
    return u->m;
}

static redlock_attempt *check_attempt(lua_State *L, int idx) {
    return (redlock_attempt *)luaL_checkudata(L, idx, ATTEMPT_MT);
}

static int check_node(lua_State *L, const redlock_cluster_map *m, int idx) {
    lua_Integer i = luaL_checkinteger(L, idx);
    luaL_argcheck(L, i >= 1 && i <= m->n, idx, "no such node");
    return (int)i - 1;
}

/* Pushes a verdict: its word and what goes with it. */
static int push_verdict(lua_State *L, const redlock_attempt *a, int v) {
    lua_pushstring(L, words[v]);
    switch (v) {
    case REDLOCK_GO:
        lua_pushinteger(L, a->node + 1);
        lua_pushboolean(L, a->asking);
        return 3;
    case REDLOCK_PAUSE:
        lua_pushnumber(L, a->wait_ms);
        return 2;
    case REDLOCK_FAIL:
        lua_pushstring(L, a->err);
        lua_pushstring(L, a->code == 2 ? "server" : "connection");
        return 3;
    default:
        return 1;
    }
}

static int map_new(lua_State *L) {
    map_ud *u;
    int n, i;
    luaL_checktype(L, 1, LUA_TTABLE);
    n = (int)lua_rawlen(L, 1);
    luaL_argcheck(L, n >= 1 && n <= 64, 1, "1 to 64 seeds expected");
    u = (map_ud *)lua_newuserdata(L, sizeof *u);
    u->m = NULL;
    luaL_getmetatable(L, MAP_MT);
    lua_setmetatable(L, -2);
    u->m = redlock_map_new();
    if (u->m == NULL)
        return luaL_error(L, "out of memory");
    for (i = 1; i <= n; i++) {
        size_t len;
        const char *host;
        lua_Integer port;
        lua_rawgeti(L, 1, i);
        luaL_argcheck(L, lua_istable(L, -1), 1, "seed tables expected");
        lua_getfield(L, -1, "host");
        lua_getfield(L, -2, "port");
        host = lua_tolstring(L, -2, &len);
        port = lua_tointeger(L, -1);
        luaL_argcheck(L, host != NULL && port >= 1 && port <= 65535, 1, "host and port expected");
        if (redlock_map_node(u->m, host, len, (int)port) < 0)
            return luaL_error(L, "out of memory");
        lua_pop(L, 3);
    }
    return 1;
}

static int map_gc(lua_State *L) {
    map_ud *u = (map_ud *)luaL_checkudata(L, 1, MAP_MT);
    redlock_map_free(u->m);
    u->m = NULL;
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

static int map_forget(lua_State *L) {
    check_map(L)->loaded = 0;
    return 0;
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

static int map_attempt(lua_State *L) {
    lua_Integer slot = luaL_checkinteger(L, 2);
    lua_Number limit = luaL_checknumber(L, 3), now = luaL_checknumber(L, 4);
    redlock_attempt *a;
    check_map(L);
    luaL_argcheck(L, slot >= -1 && slot < REDLOCK_SLOTS, 2, "not a slot");
    a = (redlock_attempt *)lua_newuserdata(L, sizeof *a);
    luaL_getmetatable(L, ATTEMPT_MT);
    lua_setmetatable(L, -2);
    redlock_attempt_start(a, (int)slot, now, (int)limit);
    return 1;
}

static int map_target(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    redlock_attempt *a = check_attempt(L, 2);
    return push_verdict(L, a, redlock_map_target(m, a, luaL_checknumber(L, 3)));
}

static int map_reply(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    redlock_attempt *a = check_attempt(L, 2);
    size_t len;
    const char *err = luaL_checklstring(L, 3, &len);
    /* (NOSCRIPT: the cosocket driver sends EVAL itself, on the same connection) */
    return push_verdict(L, a, redlock_map_reply(m, a, 0, err, len, luaL_checknumber(L, 4)));
}

static int map_io_failed(lua_State *L) {
    redlock_cluster_map *m = check_map(L);
    redlock_attempt *a = check_attempt(L, 2);
    int stale = lua_toboolean(L, 3);
    const char *err = luaL_checkstring(L, 4);
    return push_verdict(L, a, redlock_map_io_failed(m, a, stale, err, luaL_checknumber(L, 5)));
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
    lua_pushboolean(L, redlock_map_load_failed(m, l, i, lua_toboolean(L, 4), luaL_checkstring(L, 5)));
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

void redlock_topo_open(lua_State *L) {
    static const luaL_Reg map_methods[] = {
        {"count", map_count},
        {"node", map_node},
        {"forget", map_forget},
        {"loaded", map_loaded},
        {"any", map_any},
        {"attempt", map_attempt},
        {"target", map_target},
        {"reply", map_reply},
        {"io_failed", map_io_failed},
        {"load_start", map_load_start},
        {"load_next", map_load_next},
        {"load_reply", map_load_reply},
        {"load_failed", map_load_failed},
        {NULL, NULL},
    };
    static const luaL_Reg map_meta[] = {{"__gc", map_gc}, {NULL, NULL}};
    static const luaL_Reg none[] = {{NULL, NULL}};
    static const luaL_Reg funcs[] = {
        {"cluster_map", map_new},
        {"command_slot", command_slot},
        {"topo_reply", topo_reply},
        {"sentinel_answer", sentinel_answer},
        {"sentinel_failure", sentinel_failure},
        {"sentinel_switch", sentinel_switch},
        {"role_verdict", role_verdict},
        {NULL, NULL},
    };
    redlock_newtype(L, MAP_MT, map_meta, map_methods);
    redlock_newtype(L, ATTEMPT_MT, none, none);
    redlock_newtype(L, LOAD_MT, none, none);
    luaL_setfuncs(L, funcs, 0);
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, REDLOCK_ROLE_ROUNDS);
    lua_setfield(L, -2, "role_rounds");
    lua_pushinteger(L, REDLOCK_ROLE_PAUSE);
    lua_setfield(L, -2, "role_pause");
    lua_setfield(L, -2, "topo_rules");
}
