#ifndef REDLOCK_CONN_H
#define REDLOCK_CONN_H

#include "compat.h"

#define REDLOCK_CONN_MT "redlock.conn"

typedef struct redlock_conn redlock_conn;
struct redisReply;

/* For C users of a conn (the renewal thread): these never touch a
 * lua_State nor raise, and a clone belongs to the one thread that uses it.
 * Error codes: 0 ok, 1 connection, 2 server. */
redlock_conn *redlock_conn_clone(const redlock_conn *src); /* NULL: out of memory */
void redlock_conn_free(redlock_conn *c);
int redlock_conn_ensure(redlock_conn *c); /* connects unless connected */
int redlock_conn_fd(const redlock_conn *c); /* -1 when not connected */
int redlock_conn_round_trip(redlock_conn *c, int argc, const char **argv, const size_t *argvlen,
                            struct redisReply **out, int *stale);
const char *redlock_conn_error(const redlock_conn *c); /* the last failure */
const char *redlock_conn_name(const redlock_conn *c);  /* "host:port" or "unix:path" */
int redlock_conn_closed(const redlock_conn *c);

/* Adds conn() to the table on top of the stack and creates the metatable. */
void redlock_conn_open(lua_State *L);

#endif
