/* The few Lua 5.1 / LuaJIT shims the core needs, keyed on LUA_VERSION_NUM. */
#ifndef REDLOCK_COMPAT_H
#define REDLOCK_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM < 502
/* LuaJIT 2.1's lauxlib.h already has luaL_setfuncs, luaL_testudata and
 * luaL_newlib (and defines luaL_newlib as a macro); plain 5.1 has none.
 * static inline: a file that does not use a shim must not warn. */
#ifndef luaL_newlib
#define luaL_setfuncs redlock_setfuncs
static inline void redlock_setfuncs(lua_State *L, const luaL_Reg *l, int nup) {
    luaL_checkstack(L, nup + 1, "too many upvalues");
    for (; l->name != NULL; l++) {
        int i;
        for (i = 0; i < nup; i++)
            lua_pushvalue(L, -nup);
        lua_pushcclosure(L, l->func, nup);
        lua_setfield(L, -(nup + 2), l->name);
    }
    lua_pop(L, nup);
}
#define luaL_testudata redlock_testudata
static inline void *redlock_testudata(lua_State *L, int ud, const char *tname) {
    void *p = lua_touserdata(L, ud);
    if (p != NULL && lua_getmetatable(L, ud)) {
        luaL_getmetatable(L, tname);
        if (!lua_rawequal(L, -1, -2))
            p = NULL;
        lua_pop(L, 2);
        return p;
    }
    return NULL;
}
#define luaL_newlibtable(L, l) lua_createtable(L, 0, sizeof(l) / sizeof((l)[0]) - 1)
#define luaL_newlib(L, l) (luaL_newlibtable(L, l), luaL_setfuncs(L, l, 0))
#endif
#define lua_rawlen(L, i) lua_objlen(L, i)
#endif

/* Keeps the value at the top of the stack alive as long as the userdata
 * at idx (its user value), and pops it. */
static inline void redlock_keep(lua_State *L, int idx) {
    int ud = idx < 0 ? lua_gettop(L) + idx : idx;
#if LUA_VERSION_NUM >= 503
    lua_setuservalue(L, ud);
#else
    /* (5.1, LuaJIT, 5.2: a table only) */
    lua_createtable(L, 1, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
#if LUA_VERSION_NUM == 502
    lua_setuservalue(L, ud);
#else
    lua_setfenv(L, ud);
#endif
#endif
}

#endif
