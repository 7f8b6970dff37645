#ifndef REDLOCK_SENTINEL_H
#define REDLOCK_SENTINEL_H

#include <stddef.h>

struct redlock_conn;

/* A subscription to +switch-master on one sentinel: the sentinels announce
 * a failover there as soon as they made it, so a conn follows it at its
 * next command (and a BLPOP under way is cut short) instead of at the next
 * periodic check. Shared, by count, by a conn and the clones made of it for
 * the same thread (conn:clone(), a waiter's connection); the renewal
 * thread's copies have none (the periodic check serves them). */
typedef struct redlock_sentinel_sub {
    int refs;
    struct redlock_conn *conn; /* a sentinel's connection in subscribe mode; NULL: none */
    unsigned long switches;    /* +switch-master messages naming our master */
    char host[256];            /* the master the last of them named */
    int port;
    int next;                  /* the sentinel to subscribe to next (index in nodes) */
    double retry_at;           /* no new subscription before this (mono ms) */
} redlock_sentinel_sub;

/* A conn whose address comes from Redis Sentinel: the sentinels to ask (each
 * a plain conn with the sentinels' own credentials and TLS), the master's
 * name, and when the address was last confirmed. Owned by its conn. */
typedef struct redlock_sentinels {
    int n;
    struct redlock_conn **nodes; /* asked in this order; the last to answer first */
    char *master_name;
    double checked_ms; /* CLOCK_MONOTONIC ms of the last confirmation, 0: never */
    int check_ms;      /* how often a connected conn asks again (a silent switch) */
    redlock_sentinel_sub *sub; /* NULL: the periodic check only */
    unsigned long seen;        /* the sub's switches this conn has followed */
    int follow;                /* a switch was seen: connect to the master it named */
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

/* For a wait on u's socket (a BLPOP): the socket of u's +switch-master
 * subscription, to watch too, or -1 (none open, or u is no Sentinel conn);
 * and, once that socket is readable, whether it announced that u's master
 * moved (1: drop u, the command went to the old master). */
int redlock_sentinel_sub_fd(const struct redlock_conn *u);
int redlock_sentinel_moved(struct redlock_conn *u);

/* A deep copy (the nodes' settings, not their sockets), without a
 * subscription; NULL: no memory. */
redlock_sentinels *redlock_sentinels_copy(const redlock_sentinels *src);
/* Gives s a subscription of its own (not yet open); -1: no memory. */
int redlock_sentinels_subscribe(redlock_sentinels *s);
/* dst shares src's subscription (dst: a copy of src for the same thread). */
void redlock_sentinels_share(redlock_sentinels *dst, const redlock_sentinels *src);
void redlock_sentinels_free(redlock_sentinels *s);

/* A Sentinel conn's hooks (conn.h): connect through the sentinels, the
 * periodic re-check, the +switch-master socket. */
struct redlock_conn_hooks;
extern const struct redlock_conn_hooks redlock_sentinel_hooks;

#endif
