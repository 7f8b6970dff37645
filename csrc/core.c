/* redlock.core: the C side of redlock. Mechanism only (connections,
 * protocol, tokens, scripts, clocks); policy lives in lua/redlock*.lua.
 * luaopen_redlock_core is the only exported symbol. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "compat.h"
#include "defaults.h"
#include "conn.h"
#include "fanout.h"
#include "proc.h"
#include "slot.h"
#include "proto.h"
#include "renew.h"
#include "reply.h"
#include "scripts.h"
#include "token.h"
#include "topo_lua.h"

/* token() -> 32 lowercase hex chars of 128 random bits from the OS */
static int core_token(lua_State *L) {
    char hex[REDLOCK_TOKEN_HEX + 1];
    redlock_token_pool *pool = (redlock_token_pool *)lua_touserdata(L, lua_upvalueindex(1));
    int err = redlock_token_hex(pool, hex);
    if (err != 0)
        return luaL_error(L, "no random bytes from the OS: %s", strerror(err));
    lua_pushlstring(L, hex, REDLOCK_TOKEN_HEX);
    return 1;
}

/* random_bytes(n) -> n bytes from the OS random source (n <= 1024) */
static int core_random_bytes(lua_State *L) {
    unsigned char buf[1024];
    lua_Integer n = luaL_checkinteger(L, 1);
    int err;
    luaL_argcheck(L, n >= 1 && n <= (lua_Integer)sizeof buf, 1, "out of range (1 to 1024)");
    err = redlock_random_bytes(buf, (size_t)n);
    if (err != 0)
        return luaL_error(L, "no random bytes from the OS: %s", strerror(err));
    lua_pushlstring(L, (const char *)buf, (size_t)n);
    return 1;
}

/* now() -> ms on the monotonic clock (for elapsed times and validity) */
static int core_now(lua_State *L) {
    lua_pushnumber(L, redlock_mono_ms());
    return 1;
}

/* time() -> ms since the Unix epoch (legacy mode's stored expiries) */
static int core_time(lua_State *L) {
    lua_pushnumber(L, redlock_wall_ms());
    return 1;
}

/* sleep(ms): sleeps the whole time even when signals interrupt it */
static int core_sleep(lua_State *L) {
    lua_Number ms = luaL_checknumber(L, 1);
    if (ms > 86400000)
        ms = 86400000;
    redlock_pause_ms(ms);
    return 0;
}

static void push_scripts(lua_State *L) {
    const redlock_script *s;
    lua_newtable(L);
    for (s = redlock_scripts(); s->name != NULL; s++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, s->source);
        lua_setfield(L, -2, "source");
        lua_pushstring(L, s->sha);
        lua_setfield(L, -2, "sha");
        lua_setfield(L, -2, s->name);
    }
}

/* core.fence_of(id): the fence of a counter stream's ID (legacy mode
 * takes fences with XADD too), or nil when it gives none (seq over 99). */
static int core_fence_of(lua_State *L) {
    size_t len;
    const char *id = luaL_checklstring(L, 1, &len);
    long long f = redlock_fence_of_id(id, len);
    if (f < 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)f);
    return 1;
}

/* core.grant_fence_command(counter): the words of the fence's command in the
 * acquire without a script (scripts.h, REDLOCK_GRANT_FENCE_ARGV), as a
 * list, for a host that sends it itself (nginx's cosockets): one
 * definition for conn:grant and them. */
static int core_grant_fence_command(lua_State *L) {
    const char *counter = luaL_checkstring(L, 1);
    const char *argv[REDLOCK_GRANT_FENCE_ARGC] = REDLOCK_GRANT_FENCE_ARGV(counter);
    int i;
    lua_createtable(L, REDLOCK_GRANT_FENCE_ARGC, 0);
    for (i = 0; i < REDLOCK_GRANT_FENCE_ARGC; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
int luaopen_redlock_core(lua_State *L) {
    static const luaL_Reg funcs[] = {
        {"random_bytes", core_random_bytes},
        {"now", core_now},
        {"time", core_time},
        {"sleep", core_sleep},
        {"fence_of", core_fence_of},
        {"grant_fence_command", core_grant_fence_command},
        {NULL, NULL},
    };
    redlock_token_pool *pool;
    luaL_newlib(L, funcs);
    pool = (redlock_token_pool *)lua_newuserdata(L, sizeof *pool);
    memset(pool, 0, sizeof *pool);
    lua_pushcclosure(L, core_token, 1);
    lua_setfield(L, -2, "token");
    redlock_conn_open(L);
    redlock_fanout_open(L);
    redlock_proto_open(L);
    redlock_renew_open(L);
    redlock_proc_open(L);
    redlock_slot_open(L);
    redlock_topo_open(L);
    redlock_pushnull(L);
    lua_setfield(L, -2, "null");
    redlock_defaults_push(L);
    lua_setfield(L, -2, "defaults");
    push_scripts(L);
    lua_setfield(L, -2, "scripts");
    return 1;
}
