/* core.defaults: csrc/defaults.h's values for the Lua side. */
#include "defaults.h"

#include "compat.h"

void redlock_defaults_push(lua_State *L) {
    static const struct {
        const char *name;
        int ms;
    } d[] = {
        {"connect_timeout", REDLOCK_DEFAULT_CONNECT_TIMEOUT},
        {"timeout", REDLOCK_DEFAULT_TIMEOUT},
        {"keepalive_timeout", REDLOCK_DEFAULT_KEEPALIVE},
        {"pool_size", REDLOCK_DEFAULT_POOL_SIZE},
        {"sentinel_cap", REDLOCK_DEFAULT_SENTINEL_CAP},
        {"sentinel_check", REDLOCK_DEFAULT_SENTINEL_CHECK},
        {"server_timeout", REDLOCK_DEFAULT_SERVER_TIMEOUT},
        {"replica_timeout", REDLOCK_DEFAULT_REPLICA_TIMEOUT},
    };
    size_t i;
    lua_createtable(L, 0, (int)(sizeof d / sizeof d[0]));
    for (i = 0; i < sizeof d / sizeof d[0]; i++) {
        lua_pushinteger(L, d[i].ms);
        lua_setfield(L, -2, d[i].name);
    }
}
