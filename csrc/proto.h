#ifndef REDLOCK_PROTO_H
#define REDLOCK_PROTO_H

#include <stddef.h>

#include "compat.h"

/* Raises unless stack slots first..last are strings or numbers; returns the
 * count. Called before any C memory is taken. */
int redlock_check_argv(lua_State *L, int first, int last);

/* Allocates argv/argvlen with prefix+argc entries (caller frees both) and
 * points entries prefix.. at the Lua strings in slots first..first+argc-1,
 * which redlock_check_argv has made strings. The first prefix entries are the
 * caller's to fill. Returns -1 when out of memory. Never raises. */
int redlock_argv_alloc(lua_State *L, int first, int argc, int prefix, const char ***argv,
                       size_t **argvlen);

/* Adds encode() and reader() to the table on top of the stack. */
void redlock_proto_open(lua_State *L);

#endif
