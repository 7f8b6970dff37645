#ifndef REDLOCK_CLUSTER_H
#define REDLOCK_CLUSTER_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "topo.h"

struct redlock_conn;
struct redlock_cmd;
struct redlock_wait;

/* A conn that speaks to a Redis Cluster: the slot map and the rules
 * (csrc/topo.c's redlock_cluster_map), and a plain conn per node of the map
 * (same index; each made and connected lazily, with the seeds' credentials,
 * TLS and timeouts). Owned by its conn. This file is the hiredis driver of
 * the topology core: it carries out the core's verdicts. */
typedef struct redlock_cluster {
    redlock_cluster_map *map;
    int n, cap;
    struct redlock_conn **nodes;
    /* The renewal thread's clones: told each node socket before a command
     * waits on it, so that close() can shut it down (csrc/renew.c). */
    void (*track)(void *arg, int fd);
    void *track_arg;
} redlock_cluster;

/* One command (and WAIT after it when w) on the Cluster, as the topology
 * core decides (csrc/topo.h): the node of the key's slot; MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN, NOSCRIPT, a slot without a node and an
 * unreachable node followed within the conn's timeout. Codes as conn.c's
 * (0, 1 connection, 2 server) with u->err set; *r2: WAIT's reply. */
int redlock_cluster_exchange(struct redlock_conn *u, struct redlock_cmd *cmd,
                             const struct redlock_wait *w, redisReply **r1, redisReply **r2);

/* The node conn a command goes to (the map loaded first if need be), for
 * the fan-out, which drives node conns itself: REDLOCK_GO with *node, or
 * REDLOCK_PAUSE (a->wait_ms), or REDLOCK_FAIL with a->err (a->code).
 * a->asking: ASKING goes first. */
int redlock_cluster_target(struct redlock_conn *u, redlock_attempt *a, struct redlock_conn **node);

/* Before a command of u goes to node: connects it and tells u's track
 * callback its socket, if u has one. */
void redlock_cluster_track(struct redlock_conn *u, struct redlock_conn *node);

/* Sets c's track callback, and makes it every node's on_socket (conn.h),
 * those added later too. */
void redlock_cluster_set_track(redlock_cluster *c, void (*track)(void *arg, int fd), void *arg);

/* Loads the slot map unless it is current: 0, or a conn.c code with u->err. */
int redlock_cluster_ensure(struct redlock_conn *u);

/* An empty Cluster (no node); NULL: no memory. */
redlock_cluster *redlock_cluster_new(void);
/* The seed nodes' settings (not the map, nor sockets); NULL: no memory. */
redlock_cluster *redlock_cluster_copy(const redlock_cluster *src);
void redlock_cluster_free(redlock_cluster *c);

/* Adds a seed node (a plain conn, owned from now on, its host and port
 * set); -1: no memory. */
int redlock_cluster_add(redlock_cluster *c, struct redlock_conn *node);

#endif
