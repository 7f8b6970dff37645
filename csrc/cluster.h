#ifndef REDLOCK_CLUSTER_H
#define REDLOCK_CLUSTER_H

#include <stddef.h>

#include <hiredis/hiredis.h>

struct redlock_conn;

#define REDLOCK_SLOTS 16384

/* A conn that speaks to a Redis Cluster: a plain conn per node (the seeds
 * first, then the nodes the slot map names, each connected lazily), and
 * which node serves each slot. Owned by its conn. */
typedef struct redlock_cluster {
    int n, cap;
    struct redlock_conn **nodes;
    int loaded;                           /* the map is believed current */
    int ask_slot, ask_node;               /* an ASK to follow once (-1: none) */
    int moved_slot, moved_node;           /* the last MOVED, believed over a reload */
    /* The renewal thread's clones: told each node socket before a command
     * waits on it, so that close() can shut it down (csrc/renew.c). */
    void (*track)(void *arg, int fd);
    void *track_arg;
    unsigned short owner[REDLOCK_SLOTS];  /* node index + 1 of a slot's master; 0: unknown */
} redlock_cluster;

/* One command on the node that serves its key (EVAL/EVALSHA: the first
 * key; commands without a key: any node; else the first argument), as
 * conn.c's round trip: MOVED updates the map (then reloaded from CLUSTER
 * SLOTS) and sends again; ASK sends ASKING and the command to the node it
 * names, once; TRYAGAIN and CLUSTERDOWN are retried with a growing pause
 * within the conn's timeout; a node that cannot be reached has the map
 * reloaded from another before one more try. A retry is of a command that
 * was refused, except that last one: a command whose reply was lost may have
 * run, which the lock scripts make safe to repeat (a retry with our own
 * token counts as ours; a second release answers 0) and which the library
 * sends no other command through (its own are GET, SET, BLPOP). Codes as conn.c's (0, 1 connection,
 * 2 server) with u->err set. */
int redlock_cluster_round_trip(struct redlock_conn *u, int argc, const char **argv,
                               const size_t *argvlen, redisReply **out, int *stale);

/* The node conn a command goes to (the map loaded first if need be), for
 * the fan-out and the WAIT round trip, which drive node conns themselves;
 * NULL with u->err set and *rc the conn.c code. *asking: 1 when the command
 * follows an ASK and must go after ASKING on the same connection. */
struct redlock_conn *redlock_cluster_route(struct redlock_conn *u, int argc, const char **argv,
                                           const size_t *argvlen, int *rc, int *asking);

/* After an error reply from a node of u: 1 when it was a redirection or a
 * transient refusal (MOVED, ASK, TRYAGAIN, CLUSTERDOWN), and the command
 * was not carried out: MOVED and CLUSTERDOWN have the map reloaded before
 * the next command, ASK sends the next one for that slot to the node it
 * names (after ASKING), TRYAGAIN changes nothing (the caller waits). u->err
 * says what it was. */
int redlock_cluster_redirected(struct redlock_conn *u, const char *err, size_t len);

/* Before a command of u goes to node: connects it and tells u's track
 * callback its socket, if u has one. */
void redlock_cluster_track(struct redlock_conn *u, struct redlock_conn *node);

/* Sets c's track callback, and makes it every node's on_socket (conn.h),
 * those added later too. */
void redlock_cluster_set_track(redlock_cluster *c, void (*track)(void *arg, int fd), void *arg);

/* ms on CLOCK_MONOTONIC (core.now()'s clock), for deadlines in C. */
double redlock_mono_ms(void);

/* Sleeps ms, the whole time even when signals interrupt it. */
void redlock_pause_ms(double ms);

/* Waits *pause ms before a retry and doubles it (up to 40 ms): 0, or -1
 * without waiting when the pause would pass the deadline (CLOCK_MONOTONIC
 * ms). */
int redlock_cluster_backoff(double *pause, double deadline);

/* Loads the slot map unless it is current: 0, or a conn.c code with u->err. */
int redlock_cluster_ensure(struct redlock_conn *u);

/* The seed nodes' settings (not the map, nor sockets); NULL: no memory. */
redlock_cluster *redlock_cluster_copy(const redlock_cluster *src);
void redlock_cluster_free(redlock_cluster *c);

/* Adds a node (a plain conn, owned from now on); -1: no memory. */
int redlock_cluster_add(redlock_cluster *c, struct redlock_conn *node);

#endif
