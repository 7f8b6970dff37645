#ifndef REDLOCK_CONN_H
#define REDLOCK_CONN_H

#include "compat.h"

#define REDLOCK_CONN_MT "redlock.conn"

/* Adds conn() to the table on top of the stack and creates the metatable. */
void redlock_conn_open(lua_State *L);

#endif
