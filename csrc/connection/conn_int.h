/* What conn.c, conn_io.c, conn_lua.c and conn_opts.c share (internal to them). */
#ifndef REDLOCK_CONN_INT_H
#define REDLOCK_CONN_INT_H

#include "conn.h"
#include "error.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

typedef redlock_conn conn_ud;

/* conn.c: with the topology */
void redlock_conn_destroy(redlock_conn *u); /* frees all but the struct; closed */
/* src's settings and kind's state into a zeroed dst (share: the same
 * thread's copy); -1: no memory */
int redlock_conn_copy_settings(redlock_conn *dst, const redlock_conn *src, int share);

/* conn_io.c: the connection alone */
void redlock_conn_destroy_io(redlock_conn *u);
int redlock_conn_copy_io(redlock_conn *dst, const redlock_conn *src); /* -1: no memory */
int redlock_conn_connect(redlock_conn *u);   /* as its kind does (the sentinels), or directly */
int redlock_conn_get_reply(redlock_conn *u, void **reply); /* redisGetReply over TLS too */
int redlock_conn_io_error(redlock_conn *u, int saved_errno, const char *doing); /* 1: timed out */

/* conn_opts.c: conn{...} (at index 1, a table) made a conn of kind */
int redlock_conn_new(lua_State *L, const redlock_conn_kind *kind);

#endif
