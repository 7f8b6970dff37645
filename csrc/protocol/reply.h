#ifndef REDLOCK_REPLY_H
#define REDLOCK_REPLY_H

#include <hiredis/hiredis.h>

#include "compat.h"

/* The shared Redis nil: a NULL light userdata, the same value as ngx.null
 * and cjson.null. */
#define redlock_pushnull(L) lua_pushlightuserdata(L, NULL)

/* Pushes a reply as Lua values: string, integer, status string, array
 * table, null; a top-level error reply pushes nil, message, "server".
 * Returns the number of values pushed. Nested errors become {err = msg}.
 * Does not free the reply; raises only on stack exhaustion (the caller must
 * own no other C memory than the reply, which it frees in a protected way:
 * see redlock_push_reply_free). */
int redlock_push_reply(lua_State *L, const redisReply *r);

/* Same, but frees r even if pushing raises (nested arrays deep enough to
 * exhaust the stack, or out of memory). spread: an array of 1 to 4 integers
 * (a lock script's answer) is pushed as that many values, not a table. */
int redlock_push_reply_free(lua_State *L, redisReply *r, int spread);

#endif
