#ifndef REDLOCK_PROC_H
#define REDLOCK_PROC_H

#include "compat.h"

/* Sets field "proc" of the table on top of the stack: child processes for
 * the redlock command (spawn, wait, kill, signal forwarding). POSIX only. */
void redlock_proc_open(lua_State *L);

#endif
