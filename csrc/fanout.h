#ifndef REDLOCK_FANOUT_H
#define REDLOCK_FANOUT_H

#include "compat.h"

/* Adds fanout() and fanout_eval() to the table on top of the stack. */
void redlock_fanout_open(lua_State *L);

#endif
