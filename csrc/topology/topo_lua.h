#ifndef REDLOCK_TOPO_LUA_H
#define REDLOCK_TOPO_LUA_H

#include "compat.h"

/* Adds the topology core's Lua face (csrc/topology/topo_lua.c) to the table on top
 * of the stack. */
void redlock_topo_open(lua_State *L);

#endif
