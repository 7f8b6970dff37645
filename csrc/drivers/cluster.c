/* Redis Cluster over hiredis: the driver of the topology core's Cluster
 * rules (csrc/topology/topo.c) for a conn. The core decides where each command goes
 * and what a reply means; this file keeps a plain conn per node, sends, and
 * does what the core says (send again, pause, reload the map, give up). The
 * lock scripts touch one slot only (the lock key, its companions and the
 * per-slot fence counter all hash alike: lua/redlock/util.lua), so a
 * script never meets CROSSSLOT. Runs on the thread that owns the conn. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "conn.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

/* A conn that speaks to a Redis Cluster: the slot map and the rules
 * (csrc/topology/topo.c's redlock_cluster_map), and a plain conn per node of the map
 * (same index; each made and connected lazily, with the seeds' credentials,
 * TLS and timeouts). Owned by its conn. This file is the Cluster kind of
 * the hiredis driver (redlock_conn_cluster, conn.h): the node conns, and
 * loading the map as the core says. */
typedef struct redlock_cluster {
    redlock_cluster_map *map;
    int n, cap;
    redlock_conn **nodes;
    /* The renewal thread's clones: told each node socket before a command
     * waits on it, so that close() can shut it down (csrc/drivers/renew.c). */
    void (*track)(void *arg, int fd);
    void *track_arg;
} redlock_cluster;

/* A Cluster conn's state (conn.h's kind_data). */
static redlock_cluster *cluster_of(const redlock_conn *u) {
    return (redlock_cluster *)u->kind_data;
}

/* An empty Cluster (no node); NULL: no memory. */
static redlock_cluster *redlock_cluster_new(void) {
    redlock_cluster *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->map = redlock_map_new();
    if (c->map == NULL) {
        free(c);
        return NULL;
    }
    return c;
}

static int add_conn(redlock_cluster *c, redlock_conn *node) {
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        redlock_conn **nodes = realloc(c->nodes, (size_t)cap * sizeof(redlock_conn *));
        if (nodes == NULL)
            return -1;
        c->nodes = nodes;
        c->cap = cap;
    }
    node->on_socket = c->track; /* a node's new sockets are tracked as they open */
    node->on_socket_arg = c->track_arg;
    c->nodes[c->n++] = node;
    return 0;
}

/* Sets c's track callback, and makes it every node's on_socket (conn.h),
 * those added later too. */
static void redlock_cluster_set_track(redlock_cluster *c, void (*track)(void *arg, int fd), void *arg) {
    int i;
    c->track = track;
    c->track_arg = arg;
    for (i = 0; i < c->n; i++) {
        c->nodes[i]->on_socket = track;
        c->nodes[i]->on_socket_arg = arg;
    }
}

/* Adds a seed node (a plain conn, owned from now on, its host and port
 * set); -1: no memory. */
static int redlock_cluster_add(redlock_cluster *c, redlock_conn *node) {
    if (c->n != c->map->n || add_conn(c, node) != 0)
        return -1;
    if (redlock_map_node(c->map, node->host, strlen(node->host), node->port) != c->n - 1) {
        c->n--;
        return -1;
    }
    return 0;
}

/* The conn of the map's node i, made (with the first node's credentials,
 * TLS and timeouts) for the nodes the map learned since; NULL when out of
 * memory. */
static redlock_conn *node_conn(redlock_conn *u, int i) {
    redlock_cluster *c = u->kind_data;
    while (c->n <= i && c->n < c->map->n) {
        const redlock_topo_node *t = &c->map->nodes[c->n];
        redlock_conn *node = redlock_conn_clone_io(c->nodes[0]);
        if (node == NULL)
            return NULL;
        free(node->host);
        node->host = strdup(t->host);
        node->port = t->port;
        snprintf(node->name, sizeof node->name, "%s", t->name);
        if (node->host == NULL || add_conn(c, node) != 0) {
            redlock_conn_free_io(node);
            return NULL;
        }
    }
    return i < c->n ? c->nodes[i] : NULL;
}

static int no_memory(redlock_conn *u) {
    return redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name, "out of memory");
}

/* Before a command of u goes to node: connects it and tells u's track
 * callback its socket, if u has one. */
static void redlock_cluster_track(redlock_conn *u, redlock_conn *node) {
    redlock_cluster *c = u->kind_data;
    if (c->track != NULL && redlock_conn_ensure_io(node) == 0 && node->ctx != NULL)
        c->track(c->track_arg, node->ctx->fd);
}

/* CLUSTER SLOTS from the nodes in turn, as the core says. */
static int load_map(redlock_conn *u) {
    redlock_cluster_map *m = cluster_of(u)->map;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    redlock_map_load l;
    redlock_map_load_start(&l);
    for (;;) {
        redisReply *r = NULL;
        int code = REDLOCK_E_CONNECTION, stale = 0, rc,
            i = redlock_map_load_next(m, &l, u->name, u->err, &code);
        redlock_conn *node;
        if (i < 0)
            return code;
        node = node_conn(u, i);
        if (node == NULL)
            return no_memory(u);
        redlock_cluster_track(u, node);
        rc = redlock_conn_trip1(node, 2, argv, NULL, &r, &stale);
        if (rc != 0) {
            redlock_map_load_failed(m, &l, i, stale, node->err);
            continue;
        }
        rc = redlock_map_load_reply(m, &l, i, r, u->err);
        freeReplyObject(r);
        if (rc <= 0)
            return rc < 0 ? REDLOCK_E_SERVER : REDLOCK_OK;
    }
}

static int ensure(redlock_conn *u) { return cluster_of(u)->map->loaded ? REDLOCK_OK : load_map(u); }

static void *state(redlock_conn *u) { return cluster_of(u)->map; }

/* GO: node i's conn. */
static redlock_conn *node_for(redlock_conn *u, int i) {
    redlock_conn *node = node_conn(u, i);
    if (node == NULL)
        no_memory(u);
    return node;
}

static void redlock_cluster_free(redlock_cluster *c) {
    int i;
    if (c == NULL)
        return;
    for (i = 0; i < c->n; i++)
        redlock_conn_free_io(c->nodes[i]);
    free(c->nodes);
    redlock_map_free(c->map);
    free(c);
}

/* The seed nodes' settings (not the map, nor sockets); NULL: no memory. */
static redlock_cluster *redlock_cluster_copy(const redlock_cluster *src) {
    redlock_cluster *c = redlock_cluster_new();
    int i;
    if (c == NULL)
        return NULL;
    for (i = 0; i < src->map->n && i < src->n; i++) {
        /* the seeds (and nodes learned since: the map is loaded afresh) */
        redlock_conn *node = redlock_conn_clone_io(src->nodes[i]);
        if (node == NULL || redlock_cluster_add(c, node) != 0) {
            redlock_conn_free_io(node);
            redlock_cluster_free(c);
            return NULL;
        }
    }
    return c;
}

static int copy(redlock_conn *dst, const redlock_conn *src, int share) {
    (void)share;
    dst->kind_data = redlock_cluster_copy(src->kind_data);
    return dst->kind_data != NULL ? 0 : -1;
}

static void destroy(redlock_conn *u) {
    redlock_cluster_free(u->kind_data);
    u->kind_data = NULL;
}

static void on_socket(redlock_conn *u, void (*fn)(void *arg, int fd), void *arg) {
    redlock_cluster_set_track(u->kind_data, fn, arg);
}

static void set_timeouts(redlock_conn *u, int connect_ms, int reply_ms) {
    int i;
    for (i = 0; i < cluster_of(u)->n; i++)
        redlock_conn_set_timeouts_io(cluster_of(u)->nodes[i], connect_ms, reply_ms);
}

/* conn{cluster = {{host=, port=}, ...}, ...}: u speaks to a Redis Cluster
 * whose seed nodes these are; each node a plain conn with u's credentials,
 * TLS and timeouts. */
static int options(lua_State *L, redlock_conn *u) {
    redlock_cluster *c;
    int n, i;
    lua_getfield(L, 1, "cluster");
    n = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
    if (n < 1 || n > 64)
        return luaL_error(L, "bad option 'cluster' to 'conn' (1 to 64 tables expected)");
    c = redlock_cluster_new();
    u->kind_data = c;
    if (c == NULL)
        return luaL_error(L, "out of memory");
    u->kind = &redlock_conn_cluster;
    for (i = 1; i <= n; i++) {
        redlock_conn *node;
        const char *host;
        int t, port;
        lua_rawgeti(L, -1, i);
        if (!lua_istable(L, -1))
            return luaL_error(L, "bad option 'cluster' to 'conn' (table expected at %d)", i);
        t = lua_gettop(L);
        host = redlock_opt_string(L, t, "host", 1);
        port = redlock_opt_int(L, t, "port", 6379, 1, 65535);
        node = redlock_conn_clone_io(u); /* a plain conn with u's settings: not a Cluster */
        if (node != NULL) {
            free(node->host);
            node->host = strdup(host);
            node->port = port;
            snprintf(node->name, sizeof node->name, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
                     node->port);
        }
        if (node == NULL || node->host == NULL || redlock_cluster_add(c, node) != 0) {
            redlock_conn_free_io(node);
            return luaL_error(L, "out of memory");
        }
        if (i == 1)
            snprintf(u->name, sizeof u->name, "cluster:%.110s", node->name);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

const redlock_conn_kind redlock_conn_cluster = {
    .topo = &redlock_kind_cluster,
    .option = "cluster",
    .options = options,
    .state = state,
    .node = node_for,
    .waiting = redlock_cluster_track,
    .reload = load_map,
    .ensure = ensure,
    .copy = copy,
    .destroy = destroy,
    .set_timeouts = set_timeouts,
    .on_socket = on_socket,
};
