/* redisReply to Lua values. */
#include "reply.h"

#include <limits.h>

static void push_value(lua_State *L, const redisReply *r, int depth);

static void push_array(lua_State *L, const redisReply *r, int depth) {
    size_t i;
    int n = r->elements > INT_MAX ? INT_MAX : (int)r->elements;
    luaL_checkstack(L, 3, "redis reply nested too deep");
    if (depth > 64)
        luaL_error(L, "redis reply nested too deep");
    lua_createtable(L, n, 0);
    for (i = 0; i < r->elements; i++) {
        push_value(L, r->element[i], depth + 1);
        lua_rawseti(L, -2, (int)(i + 1));
    }
}

static void push_value(lua_State *L, const redisReply *r, int depth) {
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        lua_pushlstring(L, r->str, r->len);
        break;
    case REDIS_REPLY_INTEGER:
        lua_pushinteger(L, (lua_Integer)r->integer);
        break;
    case REDIS_REPLY_ARRAY:
        push_array(L, r, depth);
        break;
    case REDIS_REPLY_ERROR:
        lua_createtable(L, 0, 1);
        lua_pushlstring(L, r->str, r->len);
        lua_setfield(L, -2, "err");
        break;
    default: /* REDIS_REPLY_NIL and anything newer than this hiredis */
        redlock_pushnull(L);
        break;
    }
}

int redlock_push_reply(lua_State *L, const redisReply *r) {
    if (r->type == REDIS_REPLY_ERROR) {
        lua_pushnil(L);
        lua_pushlstring(L, r->str, r->len);
        lua_pushliteral(L, "server");
        return 3;
    }
    push_value(L, r, 0);
    return 1;
}

static int push_protected(lua_State *L) {
    const redisReply *r = (const redisReply *)lua_touserdata(L, 1);
    return redlock_push_reply(L, r);
}

/* The replies of the lock scripts (an integer, or a short array of
 * integers) are copied out and freed before anything is pushed: nothing can
 * then leak, so they skip the protected call of the general path. */
static int push_ints_free(lua_State *L, redisReply *r, int spread) {
    long long v[4];
    size_t i, n;
    if (r->type == REDIS_REPLY_INTEGER) {
        v[0] = r->integer;
        freeReplyObject(r);
        lua_pushinteger(L, (lua_Integer)v[0]);
        return 1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements > 4 || (spread && r->elements == 0))
        return -1;
    n = r->elements;
    for (i = 0; i < n; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return -1;
        v[i] = r->element[i]->integer;
    }
    freeReplyObject(r);
    if (spread) {
        for (i = 0; i < n; i++)
            lua_pushinteger(L, (lua_Integer)v[i]);
        return (int)n;
    }
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)v[i]);
        lua_rawseti(L, -2, (int)(i + 1));
    }
    return 1;
}

int redlock_push_reply_free(lua_State *L, redisReply *r, int spread) {
    int top = lua_gettop(L), status, n = push_ints_free(L, r, spread);
    if (n >= 0)
        return n;
    lua_pushcfunction(L, push_protected);
    lua_pushlightuserdata(L, r);
    status = lua_pcall(L, 1, LUA_MULTRET, 0);
    freeReplyObject(r);
    if (status != 0)
        lua_error(L); /* r is freed: raising no longer leaks it */
    n = lua_gettop(L) - top;
    return n;
}
