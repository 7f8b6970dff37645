/* The protocol without a socket: command encoding and a reply reader, so
 * that a host with its own sockets (nginx cosockets) speaks through the same
 * code as hiredis' blocking connections. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "compat.h"
#include "proto.h"
#include "reply.h"
#include "resp.h"

#define READER_MT "redlock.reader"
#define REPLY_MT "redlock.reply"

static int is_integer_subtype(lua_State *L, int i) {
#if LUA_VERSION_NUM >= 503
    return lua_isinteger(L, i);
#else
    (void)L;
    (void)i;
    return 0;
#endif
}

int redlock_check_argv(lua_State *L, int first, int last) {
    int i;
    if (last < first)
        luaL_argerror(L, first, "command expected");
    for (i = first; i <= last; i++) {
        int t = lua_type(L, i);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            luaL_argerror(L, i, lua_pushfstring(L, "string expected, got %s",
                                                luaL_typename(L, i)));
        /* Numbers become strings now, so redlock_argv_alloc never allocates
         * Lua memory (and so never raises) while it holds C memory. A whole
         * number that is a float (every number on 5.1 and LuaJIT, 1e3 on
         * 5.3+) is written as digits: "%.14g" would give a fence as
         * 1.79551706688e+15, losing digits, and 5.3's "1000.0" is no integer
         * to Redis. */
        if (t == LUA_TNUMBER && !is_integer_subtype(L, i)) {
            lua_Number v = lua_tonumber(L, i);
            if (v >= -9007199254740992.0 && v <= 9007199254740992.0 &&
                v == (lua_Number)(long long)v) {
                char digits[32];
                snprintf(digits, sizeof digits, "%lld", (long long)v);
                lua_pushstring(L, digits);
                lua_replace(L, i);
                continue;
            }
        }
        lua_tolstring(L, i, NULL);
    }
    return last - first + 1;
}

int redlock_argv_alloc(lua_State *L, int first, int argc, int prefix, const char ***argv,
                       size_t **argvlen) {
    int i;
    *argv = malloc(sizeof(char *) * (size_t)(prefix + argc));
    *argvlen = malloc(sizeof(size_t) * (size_t)(prefix + argc));
    if (*argv == NULL || *argvlen == NULL) {
        free((void *)*argv);
        free(*argvlen);
        return -1;
    }
    for (i = 0; i < argc; i++)
        (*argv)[prefix + i] = lua_tolstring(L, first + i, &(*argvlen)[prefix + i]);
    return 0;
}

int redlock_argv_init(lua_State *L, int first, int argc, int prefix, redlock_argv *a) {
    int i;
    if (prefix + argc <= REDLOCK_ARGV_STACK) {
        a->v = a->stack_v;
        a->len = a->stack_len;
        for (i = 0; i < argc; i++)
            a->v[prefix + i] = lua_tolstring(L, first + i, &a->len[prefix + i]);
        return 0;
    }
    return redlock_argv_alloc(L, first, argc, prefix, &a->v, &a->len);
}

void redlock_argv_free(redlock_argv *a) {
    if (a->v != a->stack_v) {
        free((void *)a->v);
        free(a->len);
    }
    a->v = NULL;
    a->len = NULL;
}

void redlock_newtype(lua_State *L, const char *name, const luaL_Reg *meta,
                     const luaL_Reg *methods) {
    if (luaL_newmetatable(L, name)) {
        /* the metatable as upvalue 1 of each function: redlock_checkself */
        lua_pushvalue(L, -1);
        luaL_setfuncs(L, meta, 1);
        lua_newtable(L); /* luaL_newlib needs an array, not a pointer */
        lua_pushvalue(L, -2);
        luaL_setfuncs(L, methods, 1);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
}

void *redlock_checkself(lua_State *L, const char *name) {
    void *p = lua_touserdata(L, 1);
    if (p != NULL && lua_getmetatable(L, 1)) {
        int same = lua_rawequal(L, -1, lua_upvalueindex(1));
        lua_pop(L, 1);
        if (same)
            return p;
    }
    return luaL_checkudata(L, 1, name); /* raises, in Lua's words */
}

/* encode(arg, ...) -> RESP bytes of one command */
static int proto_encode(lua_State *L) {
    int argc = redlock_check_argv(L, 1, lua_gettop(L));
    long len;
    char stack[512];
    const char **argv;
    size_t *argvlen;
    char *out = NULL;
    if (redlock_argv_alloc(L, 1, argc, 0, &argv, &argvlen) != 0)
        return luaL_error(L, "out of memory");
    len = redlock_encode(stack, sizeof stack, argc, argv, argvlen, &out);
    free((void *)argv);
    free(argvlen);
    if (len < 0)
        return luaL_error(L, "out of memory");
    lua_pushlstring(L, out, (size_t)len);
    if (out != stack)
        free(out);
    return 1;
}

typedef struct {
    redisReader *reader;
} reader_ud;

static reader_ud *check_reader(lua_State *L) {
    reader_ud *u = (reader_ud *)luaL_checkudata(L, 1, READER_MT);
    if (u->reader == NULL)
        luaL_argerror(L, 1, "reader is closed");
    return u;
}

static int reader_new(lua_State *L) {
    reader_ud *u = (reader_ud *)lua_newuserdata(L, sizeof *u);
    u->reader = NULL;
    luaL_getmetatable(L, READER_MT);
    lua_setmetatable(L, -2);
    u->reader = redisReaderCreate();
    if (u->reader == NULL)
        return luaL_error(L, "out of memory");
    return 1;
}

/* reader:feed(bytes) -> true, or nil, message, "server" on a protocol error */
static int reader_feed(lua_State *L) {
    reader_ud *u = check_reader(L);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    if (redisReaderFeed(u->reader, s, len) != REDIS_OK) {
        lua_pushnil(L);
        lua_pushfstring(L, "protocol error: %s", u->reader->errstr);
        lua_pushliteral(L, "connection");
        return 3;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* A reply kept as hiredis made it, for the topology core (csrc/topology/topo_lua.c):
 * what reader:get(true) gives. */
typedef struct {
    redisReply *r;
} reply_ud;

const redisReply *redlock_check_raw_reply(lua_State *L, int idx) {
    reply_ud *u = (reply_ud *)luaL_checkudata(L, idx, REPLY_MT);
    if (u->r == NULL)
        luaL_argerror(L, idx, "reply is freed");
    return u->r;
}

static int reply_gc(lua_State *L) {
    reply_ud *u = (reply_ud *)luaL_checkudata(L, 1, REPLY_MT);
    if (u->r != NULL) {
        freeReplyObject(u->r);
        u->r = NULL;
    }
    return 0;
}

/* reader:get([raw]) -> false (need more bytes) | reply values | nil, msg,
 * code; raw: the reply as a redlock.reply for the topology core, error
 * replies included */
static int reader_get(lua_State *L) {
    reader_ud *u = check_reader(L);
    void *reply = NULL;
    reply_ud *raw = NULL;
    if (lua_toboolean(L, 2)) { /* made first: nothing to free if it raises */
        raw = (reply_ud *)lua_newuserdata(L, sizeof *raw);
        raw->r = NULL;
        luaL_getmetatable(L, REPLY_MT);
        lua_setmetatable(L, -2);
    }
    if (redisReaderGetReply(u->reader, &reply) != REDIS_OK) {
        lua_pushnil(L);
        lua_pushfstring(L, "protocol error: %s", u->reader->errstr);
        lua_pushliteral(L, "connection");
        return 3;
    }
    if (reply == NULL) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (raw != NULL) {
        raw->r = (redisReply *)reply;
        return 1;
    }
    return redlock_push_reply_free(L, (redisReply *)reply, 0);
}

static int reader_gc(lua_State *L) {
    reader_ud *u = (reader_ud *)luaL_checkudata(L, 1, READER_MT);
    if (u->reader != NULL) {
        redisReaderFree(u->reader);
        u->reader = NULL;
    }
    return 0;
}

static int reader_tostring(lua_State *L) {
    reader_ud *u = (reader_ud *)luaL_checkudata(L, 1, READER_MT);
    lua_pushstring(L, u->reader ? "redlock.reader" : "redlock.reader (closed)");
    return 1;
}

void redlock_proto_open(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"feed", reader_feed}, {"get", reader_get}, {"close", reader_gc}, {NULL, NULL}};
    static const luaL_Reg meta[] = {
        {"__gc", reader_gc}, {"__close", reader_gc}, {"__tostring", reader_tostring}, {NULL, NULL}};
    static const luaL_Reg reply_meta[] = {{"__gc", reply_gc}, {NULL, NULL}};
    static const luaL_Reg reply_methods[] = {{"free", reply_gc}, {NULL, NULL}};
    redlock_newtype(L, READER_MT, meta, methods);
    redlock_newtype(L, REPLY_MT, reply_meta, reply_methods);
    lua_pushcfunction(L, proto_encode);
    lua_setfield(L, -2, "encode");
    lua_pushcfunction(L, reader_new);
    lua_setfield(L, -2, "reader");
}
