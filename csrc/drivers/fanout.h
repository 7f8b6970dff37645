#ifndef REDLOCK_FANOUT_H
#define REDLOCK_FANOUT_H

#include "compat.h"
#include "conn.h"
#include "scripts.h"

#include <hiredis/hiredis.h>

/* Adds fanout() and fanout_eval() to the table on top of the stack. */
void redlock_fanout_open(lua_State *L);

/* The fan-out for C callers (the renewal thread, which has no lua_State):
 * runs `script` on conns[0..n) at once, each within timeout_ms (twice that
 * on a connection made now), with one EVAL where the server answers
 * NOSCRIPT. argv/argvlen: argc entries whose first two are filled here
 * (EVALSHA and the script's name), then numkeys, keys and args. replies[i]:
 * the reply, error replies included (the caller frees it), or NULL when the
 * connection failed (conns[i]->err says why); stale[i]: the connection was
 * found closed by the server while idle, worth one retry. 0, or -1 when out
 * of memory (nothing was sent). */
int redlock_fanout_eval_c(redlock_conn **conns, int n, int timeout_ms, const redlock_script *script,
                          const char **argv, size_t *argvlen, int argc, redisReply **replies,
                          int *stale);

/* The same with WAIT (w) after the script on each connection: replies[i]
 * is the script's reply whenever it came (also when WAIT's did not), and
 * wreplies[i] WAIT's, or NULL when it did not come (conns[i]->err says
 * why). The caller frees both. */
int redlock_fanout_eval_wait_c(redlock_conn **conns, int n, int timeout_ms,
                               const redlock_script *script, const redlock_wait *w,
                               const char **argv, size_t *argvlen, int argc, redisReply **replies,
                               redisReply **wreplies, int *stale);

#endif
