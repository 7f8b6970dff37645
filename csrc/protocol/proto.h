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

/* An argument vector for hiredis: on the stack for the short commands a
 * lock sends (no malloc per call), on the heap for longer ones. */
#define REDLOCK_ARGV_STACK 16
typedef struct {
    const char **v;
    size_t *len;
    const char *stack_v[REDLOCK_ARGV_STACK];
    size_t stack_len[REDLOCK_ARGV_STACK];
} redlock_argv;

/* As redlock_argv_alloc, into a (stack arrays when prefix+argc fits).
 * Returns -1 when out of memory. Never raises. */
int redlock_argv_init(lua_State *L, int first, int argc, int prefix, redlock_argv *a);
void redlock_argv_free(redlock_argv *a);

/* Creates the metatable `name` once (luaL_newmetatable), with the
 * metamethods in meta and the methods in methods as its __index. */
void redlock_newtype(lua_State *L, const char *name, const luaL_Reg *meta,
                     const luaL_Reg *methods);

/* The reply a redlock.reply at idx holds (reader:get(true)); raises if it
 * is not one. */
struct redisReply;
const struct redisReply *redlock_check_raw_reply(lua_State *L, int idx);

/* The userdata self (argument 1) of a method or metamethod registered by
 * redlock_newtype for `name`, else raises as luaL_checkudata. Compares the
 * metatable with the function's upvalue: luaL_checkudata looks the name up
 * in the registry, most of a cheap method's cost on the lock's hot path. */
void *redlock_checkself(lua_State *L, const char *name);

/* Adds encode() and reader() to the table on top of the stack. */
void redlock_proto_open(lua_State *L);

#endif
