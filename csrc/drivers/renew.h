#ifndef REDLOCK_RENEW_H
#define REDLOCK_RENEW_H

#include "compat.h"

#define REDLOCK_RENEWER_MT "redlock.renewer"
#define REDLOCK_RENEWAL_MT "redlock.renewal"

/* Adds renewer() and renew_threads() to the table on top of the stack. */
void redlock_renew_open(lua_State *L);

#endif
