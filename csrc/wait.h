#ifndef REDLOCK_WAIT_H
#define REDLOCK_WAIT_H

#include <hiredis/hiredis.h>

/* Replica acknowledgement: the WAIT (or WAITAOF) command sent in the same
 * write as a lock script, and its answer. Mechanism only: how many replicas
 * are enough, and what to do when they are not, is policy (Lua). */

/* What to wait for: replicas >= 0 (0: WAITAOF for the master's own fsync); timeout_ms >= 1; aof: WAITAOF 1 N T
 * (the master's AOF and N replicas' AOF fsynced, Redis 7.2+) instead of
 * WAIT N T (N replicas have the write in memory). */
typedef struct redlock_wait {
    int replicas, timeout_ms, aof;
} redlock_wait;

/* Encodes the command into buf (cap bytes; REDLOCK_WAIT_BUF always
 * fit). Returns its length, or -1 when it did not fit. */
#define REDLOCK_WAIT_BUF 256
long redlock_wait_encode(const redlock_wait *w, char *buf, size_t cap);

/* Reads WAIT's answer (an integer) or WAITAOF's ([local, replicas]) into
 * *acked (replicas) and *fsynced (WAITAOF's local count; -1 for WAIT).
 * 0, or -1 for any other reply (an error reply included). */
int redlock_wait_parse(const redisReply *r, long long *acked, long long *fsynced);

#endif
