#ifndef REDLOCK_SENTINEL_H
#define REDLOCK_SENTINEL_H

#include <stddef.h>

struct redlock_conn;

/* A conn whose address comes from Redis Sentinel: the sentinels to ask (each
 * a plain conn with the sentinels' own credentials and TLS), the master's
 * name, and when the address was last confirmed. Owned by its conn. */
typedef struct redlock_sentinels {
    int n;
    struct redlock_conn **nodes; /* asked in this order; the last to answer first */
    char *master_name;
    double checked_ms; /* CLOCK_MONOTONIC ms of the last confirmation, 0: never */
    int check_ms;      /* how often a connected conn asks again (a silent switch) */
} redlock_sentinels;

/* Connects u to the master its sentinels name, as the Sentinel client
 * guidelines say: the sentinels in turn (short timeouts) until one names
 * it, ROLE to confirm that it is a master (else start over after a pause),
 * the sentinel that answered moved to the front; a bounded number of
 * rounds. Sets u->host, u->port and u->name. 0, or the conn.c error code
 * with u->err set ("no sentinel reachable" and "master name unknown" are
 * different messages). */
int redlock_sentinel_connect(struct redlock_conn *u);

/* Before a command on a connected conn: once max_age_ms (at most check_ms)
 * have passed since the last confirmation, asks the first sentinel that answers where the master
 * is, and drops the connection when it moved (the next use connects to the
 * new master). A failover leaves the old master writable for seconds: an
 * error would come too late. No sentinel answering keeps the connection. */
void redlock_sentinel_recheck(struct redlock_conn *u, double max_age_ms);

/* A deep copy (the nodes' settings, not their sockets); NULL: no memory. */
redlock_sentinels *redlock_sentinels_copy(const redlock_sentinels *src);
void redlock_sentinels_free(redlock_sentinels *s);

#endif
