/* Redis Cluster under a conn: the slot map from CLUSTER SLOTS, the slot of
 * each command's key computed here (CRC16, hash tags: csrc/slot.c), the
 * command sent to the slot's master, and the redirections followed. The
 * lock scripts touch one slot only (the lock key, its companions and the
 * per-slot fence counter all hash alike: lua/redlock/util.lua), so a
 * script never meets CROSSSLOT. Runs on the thread that owns the conn. */
#define _GNU_SOURCE
#include "cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "conn.h"
#include "slot.h"

#define ERRLEN REDLOCK_CONN_ERRLEN
/* Redirections followed at once; past these a command waits a little
 * before each further one (nodes that disagree while a slot changes hands
 * send it back and forth), until the conn's timeout. */
#define QUICK_TRIES 3

double redlock_mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void redlock_pause_ms(double ms) {
    struct timespec req, rem;
    if (ms <= 0)
        return;
    req.tv_sec = (time_t)(ms / 1000);
    req.tv_nsec = (long)((ms - (double)req.tv_sec * 1000) * 1e6);
    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
}

int redlock_cluster_backoff(double *pause, double deadline) {
    if (redlock_mono_ms() + *pause > deadline)
        return -1;
    redlock_pause_ms(*pause);
    if (*pause < 40)
        *pause *= 2;
    return 0;
}

int redlock_cluster_add(redlock_cluster *c, redlock_conn *node) {
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

/* The index of the node at host:port, added (with the first node's
 * credentials, TLS and timeouts) when new; -1 when out of memory. */
static int node_at(redlock_cluster *c, const char *host, size_t hostlen, int port) {
    redlock_conn *node;
    int i;
    for (i = 0; i < c->n; i++) {
        redlock_conn *k = c->nodes[i];
        if (k->port == port && k->host != NULL && strlen(k->host) == hostlen &&
            memcmp(k->host, host, hostlen) == 0)
            return i;
    }
    node = redlock_conn_clone(c->nodes[0]);
    if (node == NULL)
        return -1;
    free(node->host);
    node->host = strndup(host, hostlen);
    node->port = port;
    if (node->host == NULL || redlock_cluster_add(c, node) != 0) {
        redlock_conn_free(node);
        return -1;
    }
    snprintf(node->name, sizeof node->name, memchr(host, ':', hostlen) ? "[%s]:%d" : "%s:%d",
             node->host, port);
    return c->n - 1;
}

/* Reads CLUSTER SLOTS' answer from the node at index from. 0, or -1. */
static int read_map(redlock_cluster *c, int from, const redisReply *r) {
    size_t i;
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    memset(c->owner, 0, sizeof c->owner);
    for (i = 0; i < r->elements; i++) {
        const redisReply *range = r->element[i], *master;
        const char *host;
        size_t hostlen;
        long long lo, hi, s;
        int idx;
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
            range->element[0]->type != REDIS_REPLY_INTEGER ||
            range->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        master = range->element[2];
        if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 ||
            master->element[0]->type != REDIS_REPLY_STRING ||
            master->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        lo = range->element[0]->integer;
        hi = range->element[1]->integer;
        if (lo < 0 || hi >= REDLOCK_SLOTS || lo > hi)
            return -1;
        host = master->element[0]->str;
        hostlen = master->element[0]->len;
        /* "" or "?": the node we asked, at the address we asked it on */
        if (hostlen == 0 || (hostlen == 1 && host[0] == '?')) {
            host = c->nodes[from]->host;
            hostlen = strlen(host);
        }
        idx = node_at(c, host, hostlen, (int)master->element[1]->integer);
        if (idx < 0)
            return -1;
        for (s = lo; s <= hi; s++)
            c->owner[s] = (unsigned short)(idx + 1);
    }
    return 0;
}

void redlock_cluster_track(redlock_conn *u, redlock_conn *node) {
    redlock_cluster *c = u->cluster;
    if (c->track != NULL && redlock_conn_ensure(node) == 0 && node->ctx != NULL)
        c->track(c->track_arg, node->ctx->fd);
}

/* A round trip to one node, its socket told to the track callback first. */
static int node_round_trip(redlock_conn *u, redlock_conn *node, int argc, const char **argv,
                           const size_t *argvlen, redisReply **out, int *stale) {
    redlock_cluster_track(u, node);
    return redlock_conn_round_trip(node, argc, argv, argvlen, out, stale);
}

static int load_map(redlock_conn *u) {
    redlock_cluster *c = u->cluster;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    char why[ERRLEN], refused[ERRLEN];
    int i, n = c->n;
    size_t used = 0;
    why[0] = refused[0] = '\0';
    for (i = 0; i < n; i++) {
        redisReply *r = NULL;
        redlock_conn *node = c->nodes[i];
        int stale = 0, rc = node_round_trip(u, node, 2, argv, NULL, &r, &stale);
        if (rc != 0 && stale)
            rc = node_round_trip(u, node, 2, argv, NULL, &r, &stale);
        if (rc != 0) {
            used += (size_t)snprintf(why + used, sizeof why - used, "%s%.150s", used ? "; " : "",
                                     node->err);
            if (used >= sizeof why)
                used = sizeof why - 1;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            /* not a cluster node, or one that cannot answer now (LOADING
             * after a restart, NOPERM): another node may */
            if (refused[0] == '\0')
                snprintf(refused, sizeof refused,
                         "server: %s: not a cluster node (CLUSTER SLOTS: %.120s)", node->name,
                         r->str);
            freeReplyObject(r);
            continue;
        }
        rc = read_map(c, i, r);
        freeReplyObject(r);
        if (rc != 0) {
            snprintf(u->err, ERRLEN, "server: %s: unexpected answer to CLUSTER SLOTS", node->name);
            return 2;
        }
        /* believe the last MOVED for its slot: the node asked may lag */
        if (c->moved_slot >= 0)
            c->owner[c->moved_slot] = (unsigned short)(c->moved_node + 1);
        c->moved_slot = -1;
        c->loaded = 1;
        return 0;
    }
    if (refused[0] != '\0') {
        memcpy(u->err, refused, ERRLEN);
        return 2;
    }
    snprintf(u->err, ERRLEN, "connection: %s: no cluster node reachable (%.300s)", u->name, why);
    return 1;
}

int redlock_cluster_ensure(redlock_conn *u) {
    return u->cluster->loaded ? 0 : load_map(u);
}

static int is_word(const char *s, size_t len, const char *w) {
    size_t n = strlen(w);
    return len == n && strncasecmp(s, w, n) == 0;
}

/* The slot a command's key hashes to, or -1 when it has no key. */
static int command_slot(int argc, const char **argv, const size_t *argvlen) {
    size_t len0 = argvlen ? argvlen[0] : strlen(argv[0]);
    static const char *const keyless[] = {"PING", "INFO", "TIME", "SCRIPT", "ROLE", "CLUSTER",
                                          "ASKING", "AUTH", "SELECT", "MULTI", "EXEC",
                                          "DISCARD", "UNWATCH", "PUBLISH", "SUBSCRIBE", "WAIT",
                                          "WAITAOF", "HELLO", "CLIENT", "COMMAND", NULL};
    int i, k = 1;
    if (is_word(argv[0], len0, "EVALSHA") || is_word(argv[0], len0, "EVAL")) {
        if (argc < 4 || strtol(argv[2], NULL, 10) < 1)
            return -1;
        k = 3;
    } else {
        for (i = 0; keyless[i] != NULL; i++)
            if (is_word(argv[0], len0, keyless[i]))
                return -1;
    }
    if (argc <= k)
        return -1;
    return (int)redlock_keyslot(argv[k], argvlen ? argvlen[k] : strlen(argv[k]));
}

/* The node for slot (any node for -1), or NULL with u->err set and *rc
 * the conn.c code. */
static redlock_conn *node_for(redlock_conn *u, int slot, int *rc) {
    redlock_cluster *c = u->cluster;
    int i;
    if (slot < 0) {
        for (i = 0; i < c->n; i++)
            if (c->nodes[i]->ctx != NULL)
                return c->nodes[i];
        return c->nodes[0];
    }
    if (!c->loaded && (*rc = load_map(u)) != 0)
        return NULL;
    if (c->owner[slot] == 0) {
        snprintf(u->err, ERRLEN, "server: %s: no node serves slot %d (CLUSTERDOWN?)", u->name, slot);
        *rc = 2;
        return NULL;
    }
    return c->nodes[c->owner[slot] - 1];
}

redlock_conn *redlock_cluster_route(redlock_conn *u, int argc, const char **argv,
                                    const size_t *argvlen, int *rc, int *asking) {
    redlock_cluster *c = u->cluster;
    int slot = command_slot(argc, argv, argvlen);
    *asking = 0;
    if (slot >= 0 && slot == c->ask_slot && c->ask_node >= 0 && c->ask_node < c->n) {
        int node = c->ask_node;
        c->ask_slot = c->ask_node = -1;
        *asking = 1;
        return c->nodes[node];
    }
    return node_for(u, slot, rc);
}

static int starts(const char *s, size_t len, const char *w) {
    size_t n = strlen(w);
    return len >= n && memcmp(s, w, n) == 0;
}

/* "MOVED 3999 host:port" / "ASK ..." into the slot and the node's index;
 * -1 when it does not parse (or no memory). */
static int redirect_target(redlock_cluster *c, const char *err, size_t len, int *slot) {
    char buf[300];
    char *sp1, *sp2, *colon, *end;
    long s, port;
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, err, len);
    buf[len] = '\0';
    sp1 = strchr(buf, ' ');
    if (sp1 == NULL)
        return -1;
    s = strtol(sp1 + 1, &sp2, 10);
    if (*sp2 != ' ' || s < 0 || s >= REDLOCK_SLOTS)
        return -1;
    colon = strrchr(sp2 + 1, ':');
    if (colon == NULL)
        return -1;
    port = strtol(colon + 1, &end, 10);
    if (port < 1 || port > 65535)
        return -1;
    *slot = (int)s;
    return node_at(c, sp2 + 1, (size_t)(colon - (sp2 + 1)), (int)port);
}

int redlock_cluster_redirected(redlock_conn *u, const char *err, size_t len) {
    redlock_cluster *c = u->cluster;
    if (c == NULL)
        return 0;
    if (starts(err, len, "ASK ")) {
        int slot = -1, idx = redirect_target(c, err, len, &slot);
        c->ask_slot = idx >= 0 ? slot : -1;
        c->ask_node = idx;
    } else if (starts(err, len, "MOVED ")) {
        /* a resharding moves many slots: the whole map is reloaded */
        int slot = -1, idx = redirect_target(c, err, len, &slot);
        c->moved_slot = idx >= 0 ? slot : -1;
        c->moved_node = idx;
        c->loaded = 0;
    } else if (starts(err, len, "CLUSTERDOWN")) {
        c->loaded = 0; /* the map may change with the failover */
    } else if (!starts(err, len, "TRYAGAIN")) {
        return 0;
    }
    snprintf(u->err, ERRLEN, "connection: %s: %.*s", u->name, (int)(len > 120 ? 120 : len), err);
    return 1;
}

int redlock_cluster_round_trip(redlock_conn *u, int argc, const char **argv,
                               const size_t *argvlen, redisReply **out, int *stale) {
    redlock_cluster *c = u->cluster;
    int slot = command_slot(argc, argv, argvlen), tries = 0, reloaded = 0, resent = 0;
    double deadline = redlock_mono_ms() + (u->timeout_ms > 0 ? u->timeout_ms : 1000), pause = 5;
    *out = NULL;
    *stale = 0;
    for (;;) {
        int rc = 0, st = 0, asking = 0;
        redlock_conn *node = redlock_cluster_route(u, argc, argv, argvlen, &rc, &asking);
        redisReply *r = NULL;
        if (node == NULL)
            return rc;
        if (asking) {
            const char *ask[1] = {"ASKING"};
            rc = node_round_trip(u, node, 1, ask, NULL, &r, &st);
            if (rc == 0)
                freeReplyObject(r);
            r = NULL;
        }
        rc = node_round_trip(u, node, argc, argv, argvlen, &r, &st);
        if (rc != 0) {
            snprintf(u->err, ERRLEN, "%s", node->err);
            if (st && !resent++)
                continue; /* a dropped idle connection: nothing was sent; once */
            if (rc == 1 && !reloaded && slot >= 0) {
                /* the node may be gone (failover): ask another for the map */
                c->loaded = 0;
                reloaded = 1;
                if (load_map(u) == 0 && c->owner[slot] != 0 && c->nodes[c->owner[slot] - 1] != node)
                    continue;
                snprintf(u->err, ERRLEN, "%s", node->err);
            }
            return rc;
        }
        if (r->type == REDIS_REPLY_ERROR && redlock_cluster_redirected(u, r->str, r->len)) {
            /* refused, not run (redlock_cluster_redirected says what the
             * next try does). TRYAGAIN (a slot half migrated) and
             * CLUSTERDOWN (a failover under way) pass on their own: retried
             * until the timeout, not a count; past QUICK_TRIES redirections
             * a command waits before each further one too. */
            int transient = starts(r->str, r->len, "TRYAGAIN") || starts(r->str, r->len, "CLUSTERDOWN");
            snprintf(u->err, ERRLEN, "server: %s: %.*s", node->name,
                     (int)(r->len > 120 ? 120 : r->len), r->str);
            freeReplyObject(r);
            if ((transient || ++tries > QUICK_TRIES) && redlock_cluster_backoff(&pause, deadline) != 0)
                return 2;
            continue;
        }
        *out = r;
        return 0;
    }
}

redlock_cluster *redlock_cluster_copy(const redlock_cluster *src) {
    redlock_cluster *c = calloc(1, sizeof *c);
    int i;
    if (c == NULL)
        return NULL;
    c->ask_slot = c->ask_node = c->moved_slot = c->moved_node = -1;
    for (i = 0; i < src->n; i++) {
        redlock_conn *node = redlock_conn_clone(src->nodes[i]);
        if (node == NULL || redlock_cluster_add(c, node) != 0) {
            redlock_conn_free(node);
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
        redlock_conn_free(c->nodes[i]);
    free(c->nodes);
    free(c);
}
