/* What conn.c, conn_lua.c and conn_opts.c share (internal to them). */
#ifndef REDLOCK_CONN_INT_H
#define REDLOCK_CONN_INT_H

#include "conn.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

typedef redlock_conn conn_ud;

enum { OK = 0, E_CONNECTION, E_SERVER };

/* conn.c: with the topology */
void redlock_conn_destroy(redlock_conn *u); /* frees all but the struct; closed */
int redlock_conn_copy_settings(redlock_conn *dst, const redlock_conn *src); /* -1: no memory */

/* conn_io.c: the connection alone */
void redlock_conn_destroy_io(redlock_conn *u);
int redlock_conn_copy_io(redlock_conn *dst, const redlock_conn *src); /* -1: no memory */
int redlock_conn_connect(redlock_conn *u);   /* through the hooks (the sentinels), if any */
int redlock_conn_get_reply(redlock_conn *u, void **reply); /* redisGetReply over TLS too */
int redlock_conn_io_error(redlock_conn *u, int saved_errno, const char *doing); /* 1: timed out */

/* conn_opts.c: conn{...} */
int redlock_conn_new(lua_State *L);

#endif
