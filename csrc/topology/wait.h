#ifndef REDLOCK_WAIT_H
#define REDLOCK_WAIT_H

#include <stddef.h>

#include <hiredis/hiredis.h>

/* Replica acknowledgement, the one place of its rules: the WAIT (or
 * WAITAOF) command sent in the same write as a lock script, how long its
 * answer may take, what the answer says, and whether it is enough. What to
 * do when it is not (give the lock back, fail) is the caller's. */

/* What to wait for: replicas >= 0 (0: WAITAOF for the master's own fsync);
 * timeout_ms >= 1; aof: WAITAOF 1 N T (the master's AOF and N replicas'
 * AOF fsynced, Redis 7.2+) instead of WAIT N T (N replicas have the write
 * in memory). */
typedef struct redlock_wait {
    int replicas, timeout_ms, aof;
} redlock_wait;

/* WAIT answers after its timeout, plus up to a tick of the server's timer
 * (hz 10: 100 ms): a reply may take this much longer than the command's. */
#define REDLOCK_WAIT_SLACK 100
#define REDLOCK_WAIT_EXTRA_MS(w) ((w)->timeout_ms + REDLOCK_WAIT_SLACK)

/* A command sent in the same write after a request's, its reply read after
 * the request's: WAIT or WAITAOF, the grant's XADD. */
typedef struct redlock_tail {
    const char *buf;  /* encoded */
    long len;
    int extra_ms;     /* how much longer than the command's the replies may take */
    const char *what; /* the message's "waiting for WAIT's reply" when its reply does not come */
} redlock_tail;

/* Encodes the command into buf (cap bytes; REDLOCK_WAIT_BUF always
 * fit). Returns its length, or -1 when it did not fit. */
#define REDLOCK_WAIT_BUF 256
long redlock_wait_encode(const redlock_wait *w, char *buf, size_t cap);

/* w's WAIT as a tail, encoded into buf (REDLOCK_WAIT_BUF bytes). 0, or -1
 * when it did not fit. */
int redlock_wait_tail(const redlock_wait *w, char *buf, redlock_tail *t);

/* Reads WAIT's answer (an integer) or WAITAOF's ([local, replicas]) into
 * *acked (replicas) and *fsynced (WAITAOF's local count; -1 for WAIT).
 * 0, or -1 for any other reply (an error reply included). */
int redlock_wait_parse(const redisReply *r, long long *acked, long long *fsynced);

/* What w's answer r from server name says: 0 with the counts (as
 * redlock_wait_parse), or -1 with err: Redis' error ("server: name: ...";
 * a server that does not know the command says which Redis it needs), or
 * an unexpected reply. */
int redlock_wait_answer(const redlock_wait *w, const redisReply *r, const char *name,
                        long long *acked, long long *fsynced, char *err, size_t errlen);

/* Whether acked replicas (and fsynced local fsyncs, WAITAOF) are enough
 * for w: 0; else 1 with err "replicas: name: ..." (what: "the lock", "the
 * renewal", ...). */
int redlock_wait_short(const redlock_wait *w, const char *name, const char *what,
                       long long acked, long long fsynced, char *err, size_t errlen);

#endif
