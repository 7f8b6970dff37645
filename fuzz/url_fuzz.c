/* libFuzzer target: arbitrary strings as a server URL given to the option
 * parser (lua/redlock/addresses.lua). A URL either parses into a well-formed
 * server table or raises "bad option 'servers' to 'new' (...)"; any other
 * error, or an error message that shows the URL's password, aborts. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <lualib.h>

#include "../csrc/compat.h"
#include "../csrc/defaults.h"

#ifndef REDLOCK_LUA_DIR
#define REDLOCK_LUA_DIR "lua"
#endif

static const char check[] =
    "local addresses = require 'redlock.addresses'\n"
    "local find, match = string.find, string.match\n"
    "return function(s)\n"
    "  local ok, res = pcall(addresses.parse, { s })\n"
    "  if ok then\n"
    "    local t = res[1]\n"
    "    assert(type(t.host) == 'string' or type(t.path) == 'string', 'no host or path')\n"
    "    assert(t.host == nil or not find(t.host, '[@/]'), 'host with @ or /')\n"
    "    assert(t.port == nil or (t.port >= 1 and t.port <= 65535 and t.port % 1 == 0), 'port')\n"
    "    assert(t.db == nil or (t.db >= 0 and t.db % 1 == 0), 'db')\n"
    "    return\n"
    "  end\n"
    "  assert(type(res) == 'string', 'error is not a string')\n"
    "  assert(find(res, \"bad option 'servers' to 'new' (\", 1, true), 'unexpected error: ' .. res)\n"
    "  local userinfo = match(s, '^%a+://(.*)@')\n"
    "  if userinfo and #userinfo >= 6 then\n"
    "    local shown = match(res, '%((.*)%)') or res\n"
    "    assert(not find(shown, userinfo, 1, true), 'password shown: ' .. res)\n"
    "  end\n"
    "end\n";

/* options.lua reads its defaults from redlock.core: the same table,
 * from csrc/defaults.c, without the rest of the core. */
static int open_defaults(lua_State *L) {
    lua_newtable(L);
    redlock_defaults_push(L);
    lua_setfield(L, -2, "defaults");
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lua_State *L = NULL;
    if (L == NULL) {
        L = luaL_newstate();
        luaL_openlibs(L);
        lua_getglobal(L, "package");
        lua_pushstring(L, REDLOCK_LUA_DIR "/?.lua");
        lua_setfield(L, -2, "path");
        lua_getfield(L, -1, "preload");
        lua_pushcfunction(L, open_defaults);
        lua_setfield(L, -2, "redlock.core");
        lua_pop(L, 2);
        if (luaL_loadstring(L, check) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
            fprintf(stderr, "fuzz setup: %s\n", lua_tostring(L, -1));
            abort();
        }
        lua_setfield(L, LUA_REGISTRYINDEX, "redlock.fuzz.check");
    }
    lua_getfield(L, LUA_REGISTRYINDEX, "redlock.fuzz.check");
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, 0) != 0) {
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        abort();
    }
    lua_settop(L, 0);
    return 0;
}
