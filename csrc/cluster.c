/* Redis Cluster over hiredis: the driver of the topology core's Cluster
 * rules (csrc/topo.c) for a conn. The core decides where each command goes
 * and what a reply means; this file keeps a plain conn per node, sends, and
 * does what the core says (send again, pause, reload the map, give up). The
 * lock scripts touch one slot only (the lock key, its companions and the
 * per-slot fence counter all hash alike: lua/redlock/util.lua), so a
 * script never meets CROSSSLOT. Runs on the thread that owns the conn. */
#define _GNU_SOURCE
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "conn.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

redlock_cluster *redlock_cluster_new(void) {
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

void redlock_cluster_set_track(redlock_cluster *c, void (*track)(void *arg, int fd), void *arg) {
    int i;
    c->track = track;
    c->track_arg = arg;
    for (i = 0; i < c->n; i++) {
        c->nodes[i]->on_socket = track;
        c->nodes[i]->on_socket_arg = arg;
    }
}

int redlock_cluster_add(redlock_cluster *c, redlock_conn *node) {
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
    redlock_cluster *c = u->cluster;
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
    snprintf(u->err, ERRLEN, "connection: %s: out of memory", u->name);
    return 1;
}

void redlock_cluster_track(redlock_conn *u, redlock_conn *node) {
    redlock_cluster *c = u->cluster;
    if (c->track != NULL && redlock_conn_ensure_io(node) == 0 && node->ctx != NULL)
        c->track(c->track_arg, node->ctx->fd);
}

/* One command on one node, its socket told to the track callback first. */
static int node_trip(redlock_conn *u, redlock_conn *node, redlock_cmd *cmd,
                     const redlock_wait *w, redisReply **r1, redisReply **r2, int *stale) {
    redlock_cluster_track(u, node);
    return redlock_conn_trip(node, cmd, w, r1, r2, stale);
}

/* CLUSTER SLOTS from the nodes in turn, as the core says. */
static int load_map(redlock_conn *u) {
    redlock_cluster_map *m = u->cluster->map;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    size_t argvlen[2] = {7, 5};
    redlock_cmd cmd = {2, argv, argvlen, NULL};
    redlock_map_load l;
    redlock_map_load_start(&l);
    for (;;) {
        redisReply *r = NULL, *none = NULL;
        int code = 1, stale = 0, rc, i = redlock_map_load_next(m, &l, u->name, u->err, &code);
        redlock_conn *node;
        if (i < 0)
            return code;
        node = node_conn(u, i);
        if (node == NULL)
            return no_memory(u);
        rc = node_trip(u, node, &cmd, NULL, &r, &none, &stale);
        if (rc != 0) {
            redlock_map_load_failed(m, &l, i, stale, node->err);
            continue;
        }
        rc = redlock_map_load_reply(m, &l, i, r, u->err);
        freeReplyObject(r);
        if (rc <= 0)
            return rc < 0 ? 2 : 0;
    }
}

int redlock_cluster_ensure(redlock_conn *u) {
    return u->cluster->map->loaded ? 0 : load_map(u);
}

/* REDLOCK_GO/PAUSE/FAIL after following RELOAD verdicts (the map loaded). */
static int target(redlock_conn *u, redlock_attempt *a) {
    for (;;) {
        int v = redlock_map_target(u->cluster->map, a, redlock_mono_ms()), rc;
        if (v != REDLOCK_RELOAD)
            return v;
        rc = load_map(u);
        if (rc != 0) {
            snprintf(a->err, sizeof a->err, "%s", u->err);
            a->code = rc;
            return REDLOCK_FAIL;
        }
    }
}

int redlock_cluster_target(redlock_conn *u, redlock_attempt *a, redlock_conn **node) {
    int v = target(u, a);
    if (v == REDLOCK_GO && (*node = node_conn(u, a->node)) == NULL) {
        a->code = no_memory(u);
        snprintf(a->err, sizeof a->err, "%s", u->err);
        return REDLOCK_FAIL;
    }
    return v;
}

int redlock_cluster_exchange(redlock_conn *u, redlock_cmd *cmd, const redlock_wait *w,
                             redisReply **r1, redisReply **r2) {
    redlock_cluster_map *m = u->cluster->map;
    redlock_attempt a;
    redlock_conn *node = NULL;
    int v, same = 0;
    redlock_attempt_start(&a, redlock_command_slot(cmd->argc, cmd->argv, cmd->argvlen),
                          redlock_mono_ms(), u->timeout_ms);
    *r1 = *r2 = NULL;
    for (;;) {
        int rc, stale = 0;
        if (!same) {
            v = redlock_cluster_target(u, &a, &node);
            if (v == REDLOCK_PAUSE) {
                redlock_pause_ms(a.wait_ms);
                continue;
            }
            if (v == REDLOCK_FAIL)
                break;
        }
        same = 0;
        if (node == NULL) /* (not reached: GO names a node; for the analyzer) */
            break;
        if (a.asking) { /* ASKING on the connection the command goes on next */
            const char *ask[1] = {"ASKING"};
            size_t asklen[1] = {6};
            redlock_cmd asking = {1, ask, asklen, NULL};
            redisReply *ok = NULL, *none = NULL;
            rc = node_trip(u, node, &asking, NULL, &ok, &none, &stale);
            if (ok != NULL)
                freeReplyObject(ok);
        } else {
            rc = 0;
        }
        if (rc == 0)
            rc = node_trip(u, node, cmd, w, r1, r2, &stale);
        if (rc == 2 && *r1 == NULL) { /* AUTH or SELECT refused: final */
            snprintf(u->err, ERRLEN, "%s", node->err);
            return rc;
        }
        if (rc != 0 && *r1 == NULL) {
            v = redlock_map_io_failed(m, &a, stale, node->err, redlock_mono_ms());
        } else if (*r1 != NULL && (*r1)->type == REDIS_REPLY_ERROR) {
            v = redlock_map_reply(m, &a, cmd->source != NULL, (*r1)->str, (*r1)->len,
                                  redlock_mono_ms());
            if (v == REDLOCK_DONE) {
                if (rc != 0)
                    snprintf(u->err, ERRLEN, "%s", node->err);
                return rc;
            }
            freeReplyObject(*r1);
            if (*r2 != NULL)
                freeReplyObject(*r2);
            *r1 = *r2 = NULL;
        } else {
            if (rc != 0) /* the command answered; WAIT's reply did not come */
                snprintf(u->err, ERRLEN, "%s", node->err);
            return rc;
        }
        switch (v) {
        case REDLOCK_EVAL:
            redlock_cmd_use_eval(cmd);
            same = 1; /* the same node, after ASKING again if it was an ASK */
            break;
        case REDLOCK_PAUSE:
            redlock_pause_ms(a.wait_ms);
            break;
        case REDLOCK_RESEND:
        case REDLOCK_RELOAD: /* (target() loads the map) */
            break;
        default:
            goto failed;
        }
    }
failed:
    snprintf(u->err, ERRLEN, "%s", a.err);
    return a.code ? a.code : 1;
}

redlock_cluster *redlock_cluster_copy(const redlock_cluster *src) {
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

void redlock_cluster_free(redlock_cluster *c) {
    int i;
    if (c == NULL)
        return;
    for (i = 0; i < c->n; i++)
        redlock_conn_free_io(c->nodes[i]);
    free(c->nodes);
    redlock_map_free(c->map);
    free(c);
}
