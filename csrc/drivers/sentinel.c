/* Redis Sentinel over hiredis: where a Sentinel-managed conn's master is,
 * the driver of the topology core's Sentinel rules (csrc/topology/topo.c: what a
 * sentinel's answer and ROLE's mean, the rounds). The conn keeps its
 * sentinels (plain conns, each connected lazily and kept for the periodic
 * check) and its master's name; conn.c calls in here to connect and before
 * commands (the periodic check); a master turned replica is the core's
 * verdict on a reply (conn.c, fanout.c).
 * Everything here runs on the thread that owns the conn: the caller's, or
 * the renewal thread with its own clones. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "clock.h"
#include "conn.h"
#include "defaults.h"
#include "error.h"
#include "topo.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

/* A subscription to +switch-master on one sentinel: the sentinels announce
 * a failover there as soon as they made it, so a conn follows it at its
 * next command (and a BLPOP under way is cut short) instead of at the next
 * periodic check. Shared, by count, by a conn and the clones made of it for
 * the same thread (conn:clone(), a waiter's connection); the renewal
 * thread's copies have one of their own, which they read before each
 * round. */
typedef struct redlock_sentinel_sub {
    int refs;
    redlock_conn *conn; /* a sentinel's connection in subscribe mode; NULL: none */
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
    redlock_conn **nodes; /* asked in this order; the last to answer first */
    char *master_name;
    double checked_ms; /* CLOCK_MONOTONIC ms of the last confirmation, 0: never */
    int check_ms;      /* how often a connected conn asks again (a silent switch) */
    redlock_sentinel_sub *sub; /* NULL: the periodic check only */
    unsigned long seen;        /* the sub's switches this conn has followed */
    int follow;                /* a switch was seen: connect to the master it named */
} redlock_sentinels;

/* A Sentinel conn's state (conn.h's kind_data). */
static redlock_sentinels *sentinels_of(const redlock_conn *u) {
    return (redlock_sentinels *)u->kind_data;
}

/* One command on a sentinel's connection (a plain one: sent again once
 * when the sentinel had dropped it). */
static int ask(redlock_conn *node, int argc, const char **argv, redisReply **out) {
    int retry;
    return redlock_command(node, argc, argv, NULL, 0, out, &retry);
}

enum answer { A_ADDRESS = REDLOCK_MASTER_AT, A_UNKNOWN = REDLOCK_MASTER_UNKNOWN,
              A_FAILED = REDLOCK_SENTINEL_FAILED };

/* What sentinel i says of the master: its address (host copied into host),
 * unknown (a null reply: it monitors no master of that name), or a
 * failure (why appended to why). */
static enum answer master_from(redlock_sentinels *s, int i, char *host, size_t hostlen,
                               int *port, char *why, size_t whylen) {
    redlock_conn *node = s->nodes[i];
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", s->master_name};
    redisReply *r = NULL;
    enum answer a;
    if (ask(node, 3, argv, &r) != 0) {
        redlock_append_why(why, whylen, node->err);
        return A_FAILED;
    }
    a = (enum answer)redlock_sentinel_answer(r, node->name, host, hostlen, port, why, whylen);
    freeReplyObject(r);
    return a;
}

/* Moves sentinel i to the front: the next question goes to it first. */
static void to_front(redlock_sentinels *s, int i) {
    redlock_conn *node = s->nodes[i];
    memmove(s->nodes + 1, s->nodes, (size_t)i * sizeof(redlock_conn *));
    s->nodes[0] = node;
}

/* Moves the first sentinel to the back: the next question goes to the next. */
static void to_back(redlock_sentinels *s) {
    redlock_conn *first = s->nodes[0];
    memmove(s->nodes, s->nodes + 1, (size_t)(s->n - 1) * sizeof(redlock_conn *));
    s->nodes[s->n - 1] = first;
}

/* Finds the master as the core's policy says (redlock_sentinel_locate). 0
 * with the address; -1 with u->err set. */
static int locate(redlock_conn *u, char *host, size_t hostlen, int *port) {
    redlock_sentinels *s = u->kind_data;
    char why[ERRLEN];
    int i, unknown = 0;
    why[0] = '\0';
    for (i = 0;; i++) {
        enum answer a = master_from(s, i, host, hostlen, port, why, sizeof why);
        unknown += a == A_UNKNOWN;
        switch (redlock_sentinel_locate(i, s->n, (int)a)) {
        case REDLOCK_DONE:
            to_front(s, i);
            return 0;
        case REDLOCK_RESEND:
            break;
        default:
            redlock_sentinel_failure(u->err, ERRLEN, s->master_name, unknown, s->n, why);
            return -1;
        }
    }
}

static int set_address(redlock_conn *u, const char *host, int port) {
    char *copy;
    if (u->host == NULL || strcmp(u->host, host) != 0) {
        copy = strdup(host);
        if (copy == NULL) {
            redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, NULL,
                              "sentinel:%s: out of memory", sentinels_of(u)->master_name);
            return -1;
        }
        free(u->host);
        u->host = copy;
    }
    u->port = port;
    snprintf(u->name, sizeof u->name,
             strchr(host, ':') ? "sentinel:%s ([%s]:%d)" : "sentinel:%s (%s:%d)",
             sentinels_of(u)->master_name, host, port);
    return 0;
}

/* --- the +switch-master subscription ----------------------------------- */

#define SWITCH_CHANNEL "+switch-master"

static void sub_close(redlock_sentinel_sub *sub) {
    if (sub->conn != NULL) {
        redlock_conn_free_io(sub->conn);
        sub->conn = NULL;
    }
}

static int sub_open(const redlock_sentinel_sub *sub) {
    return sub != NULL && sub->conn != NULL && sub->conn->ctx != NULL;
}

/* A message on the channel (the topology core reads it): one that names
 * our master counts as a switch. */
static void on_message(redlock_sentinels *s, const redisReply *r) {
    redlock_sentinel_sub *sub = s->sub;
    const redisReply *m;
    char name[256], host[sizeof sub->host];
    int port = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "message") != 0)
        return;
    m = r->element[2];
    if (m->type != REDIS_REPLY_STRING ||
        redlock_sentinel_switch(m->str, m->len, name, sizeof name, host, sizeof host, &port) != 0 ||
        strcmp(name, s->master_name) != 0)
        return;
    memcpy(sub->host, host, sizeof sub->host);
    sub->port = port;
    sub->switches++;
}

/* Reads what the subscription has received, without blocking; closes it
 * when the sentinel went away (the next check subscribes again). */
static void sub_drain(redlock_sentinels *s) {
    redlock_sentinel_sub *sub = s->sub;
    char buf[4096];
    if (!sub_open(sub))
        return;
    redlock_conn_before_use(sub->conn); /* a fork: the child subscribes anew */
    while (sub->conn->ctx != NULL) {
        redisContext *c = sub->conn->ctx;
        long n;
        /* What the reader holds already goes first: the read that brought
         * SUBSCRIBE's reply may have brought a +switch-master with it. */
        for (;;) {
            void *reply = NULL;
            if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
                sub_close(sub);
                return;
            }
            if (reply == NULL)
                break;
            on_message(s, (redisReply *)reply);
            freeReplyObject(reply);
        }
        if (sub->conn->ssl != NULL) {
            n = redlock_tls_read(sub->conn, buf, sizeof buf, 1);
        } else {
            do {
                n = (long)recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
            } while (n < 0 && errno == EINTR);
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0 || redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
            sub_close(sub);
            return;
        }
    }
}

/* Subscribes on one sentinel (each try the next one), unless subscribed or
 * a try failed less than check_ms ago: a dead sentinel costs one short
 * timeout per check_ms, as the periodic check does. */
static void sub_ensure(redlock_sentinels *s) {
    redlock_sentinel_sub *sub = s->sub;
    const char *argv[2] = {"SUBSCRIBE", SWITCH_CHANNEL};
    redisReply *r = NULL;
    int stale = 0, ok;
    double t;
    if (sub == NULL || sub_open(sub))
        return;
    t = redlock_mono_ms();
    if (t < sub->retry_at)
        return;
    sub->retry_at = t + s->check_ms;
    sub_close(sub);
    sub->conn = redlock_conn_clone_io(s->nodes[sub->next % s->n]);
    sub->next = (sub->next + 1) % s->n;
    if (sub->conn == NULL)
        return;
    ok = redlock_conn_trip1(sub->conn, 2, argv, NULL, &r, &stale) == 0 &&
         r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
         r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "subscribe") == 0;
    if (r != NULL)
        freeReplyObject(r);
    if (!ok)
        sub_close(sub);
}

/* Whether the subscription has announced a switch this conn has not
 * followed yet (it is followed now: the caller connects again). */
static int switched(redlock_sentinels *s) {
    if (s->sub == NULL)
        return 0;
    sub_drain(s);
    if (s->seen == s->sub->switches)
        return 0;
    s->seen = s->sub->switches;
    s->follow = 1;
    return 1;
}

/* For a wait on u's socket (a BLPOP): the socket of u's +switch-master
 * subscription, to watch too, or -1 (none open, or u is no Sentinel conn);
 * and, once that socket is readable, whether it announced that u's master
 * moved (1: drop u, the command went to the old master). */
static int redlock_sentinel_sub_fd(const redlock_conn *u) {
    const redlock_sentinels *s = u->kind_data;
    return s != NULL && sub_open(s->sub) ? s->sub->conn->ctx->fd : -1;
}

static int redlock_sentinel_moved(redlock_conn *u) {
    return u->kind_data != NULL && switched(sentinels_of(u));
}

/* 1 when ROLE says master, 0 when not (u->err says what), -1 when ROLE
 * failed (u->err: "server:" when refused). */
static int is_master(redlock_conn *u) {
    const char *argv[1] = {"ROLE"};
    redisReply *r = NULL;
    int stale = 0, v;
    if (redlock_conn_trip1(u, 1, argv, NULL, &r, &stale) != 0)
        return -1;
    v = redlock_role_verdict(r, u->name, u->err, ERRLEN);
    freeReplyObject(r);
    return v;
}

/* After a +switch-master: the master it named, before asking the
 * sentinels (another sentinel than the one that announced it may not know
 * yet). 0 when connected to it and it is a master. */
static int connect_announced(redlock_conn *u) {
    redlock_sentinel_sub *sub = sentinels_of(u)->sub;
    if (sub->port == 0 || set_address(u, sub->host, sub->port) != 0 ||
        redlock_conn_connect_direct(u) != 0)
        return -1;
    sentinels_of(u)->checked_ms = redlock_mono_ms();
    if (is_master(u) == 1)
        return 0;
    redlock_conn_drop(u);
    return -1;
}

/* Connects u to the master its sentinels name, as the Sentinel client
 * guidelines say: the sentinels in turn (short timeouts) until one names
 * it, ROLE to confirm that it is a master (else start over after a pause),
 * the sentinel that answered moved to the front; a bounded number of
 * rounds. Sets u->host, u->port and u->name. 0, or the conn.c error code
 * with u->err set ("no sentinel reachable" and "master name unknown" are
 * different messages). */
static int redlock_sentinel_connect(redlock_conn *u) {
    int round, rc;
    redlock_sentinels *s = u->kind_data;
    if (s->sub != NULL) {
        switched(s);
        sub_ensure(s);
        if (s->follow) {
            s->follow = 0;
            if (connect_announced(u) == 0)
                return 0;
        }
    }
    for (round = 1;; round++) {
        char host[256];
        int port = 0, outcome, m;
        if (locate(u, host, sizeof host, &port) != 0 || set_address(u, host, port) != 0)
            return REDLOCK_E_CONNECTION;
        rc = redlock_conn_connect_direct(u);
        if (rc != 0) {
            outcome = REDLOCK_ROUND_UNREACHABLE;
        } else {
            /* now, so that ROLE's round trip does not check again */
            sentinels_of(u)->checked_ms = redlock_mono_ms();
            m = is_master(u);
            outcome = m == 1 ? REDLOCK_ROUND_MASTER
                      : m == 0 ? REDLOCK_ROUND_NOT_MASTER
                      /* ROLE refused (an ACL without +role), or its round trip failed */
                      : strncmp(u->err, "server:", 7) == 0 ? REDLOCK_ROUND_REFUSED
                                                           : REDLOCK_ROUND_UNREACHABLE;
            if (outcome != REDLOCK_ROUND_MASTER)
                redlock_conn_drop(u);
            rc = outcome == REDLOCK_ROUND_REFUSED ? REDLOCK_E_SERVER : REDLOCK_E_CONNECTION;
        }
        switch (redlock_sentinel_round(round, outcome)) {
        case REDLOCK_DONE:
            sub_ensure(s);
            return REDLOCK_OK;
        case REDLOCK_FAIL:
            return rc;
        default:
            redlock_pause_ms(REDLOCK_ROLE_PAUSE);
        }
    }
}

/* Before a command on a connected conn: once max_age_ms (at most check_ms)
 * have passed since the last confirmation, the core's check
 * (redlock_sentinel_check: one question, to the first sentinel); drops the
 * connection when the master moved (the next use connects to the new
 * master). A failover leaves the old master writable for seconds: an error
 * would come too late. A sentinel failing keeps the connection. */
static void redlock_sentinel_recheck(redlock_conn *u, double max_age_ms) {
    redlock_sentinels *s = u->kind_data;
    char host[256], why[ERRLEN];
    int port = 0, same;
    enum answer a;
    if (switched(s)) {
        redlock_conn_drop(u); /* the next use connects to the master announced */
        return;
    }
    sub_ensure(s);
    if (!redlock_sentinel_check_due(redlock_mono_ms(), s->checked_ms, s->check_ms, max_age_ms))
        return;
    why[0] = '\0';
    a = master_from(s, 0, host, sizeof host, &port, why, sizeof why);
    same = a == A_ADDRESS && u->host != NULL && strcmp(host, u->host) == 0 && port == u->port;
    switch (redlock_sentinel_check((int)a, same, redlock_mono_ms(), s->check_ms, max_age_ms,
                                   &s->checked_ms)) {
    case REDLOCK_CHECK_ROTATE:
        to_back(s);
        break;
    case REDLOCK_CHECK_FIND:
        redlock_conn_drop(u); /* the next use finds the master through the sentinels */
        break;
    default:
        break;
    }
}

static void redlock_sentinels_free(redlock_sentinels *s) {
    int i;
    if (s == NULL)
        return;
    if (s->sub != NULL && --s->sub->refs == 0) {
        sub_close(s->sub);
        free(s->sub);
    }
    for (i = 0; i < s->n; i++)
        redlock_conn_free_io(s->nodes[i]);
    free(s->nodes);
    free(s->master_name);
    free(s);
}

/* A deep copy (the nodes' settings, not their sockets), without a
 * subscription; NULL: no memory. */
static redlock_sentinels *redlock_sentinels_copy(const redlock_sentinels *src) {
    redlock_sentinels *s = calloc(1, sizeof *s);
    int i;
    if (s == NULL)
        return NULL;
    s->check_ms = src->check_ms;
    s->master_name = strdup(src->master_name);
    s->nodes = calloc((size_t)src->n, sizeof(redlock_conn *));
    if (s->master_name == NULL || s->nodes == NULL) {
        redlock_sentinels_free(s);
        return NULL;
    }
    for (i = 0; i < src->n; i++) {
        s->nodes[i] = redlock_conn_clone_io(src->nodes[i]);
        if (s->nodes[i] == NULL) {
            redlock_sentinels_free(s);
            return NULL;
        }
        s->n = i + 1;
    }
    return s;
}

/* Gives s a subscription of its own (not yet open); -1: no memory. */
static int redlock_sentinels_subscribe(redlock_sentinels *s) {
    s->sub = calloc(1, sizeof *s->sub);
    if (s->sub == NULL)
        return -1;
    s->sub->refs = 1;
    return 0;
}

/* dst shares src's subscription (dst: a copy of src for the same thread). */
static void redlock_sentinels_share(redlock_sentinels *dst, const redlock_sentinels *src) {
    if (src->sub == NULL || dst->sub != NULL)
        return;
    dst->sub = src->sub;
    dst->sub->refs++;
    dst->seen = src->sub->switches;
}

/* --- the Sentinel kind of the hiredis driver (conn.h) -------------------- */

static void recheck(redlock_conn *u, double max_age_ms) {
    redlock_sentinel_recheck(u, max_age_ms < 0 ? sentinels_of(u)->check_ms : max_age_ms);
}

/* SWITCH: the next connect asks the sentinels (the connection is dropped). */
static void forget(redlock_conn *u) { sentinels_of(u)->checked_ms = 0; }

/* A copy for the same thread shares the +switch-master subscription;
 * another thread's (the renewal's) gets one of its own: the caller's is
 * read on the caller's thread. */
static int copy(redlock_conn *dst, const redlock_conn *src, int share) {
    redlock_sentinels *s = redlock_sentinels_copy(src->kind_data);
    dst->kind_data = s;
    if (s == NULL)
        return -1;
    if (share)
        redlock_sentinels_share(s, src->kind_data);
    else if (redlock_sentinels_subscribe(s) != 0)
        return -1;
    return 0;
}

static void destroy(redlock_conn *u) {
    redlock_sentinels_free(u->kind_data);
    u->kind_data = NULL;
}

/* --- conn{sentinels = ...} ---------------------------------------------- */

/* One sentinel of conn{sentinels = {...}}: the table at the top of the
 * stack into node (owned by the conn being made: raising frees it). */
static int sentinel_node(lua_State *L, redlock_conn *node, int cto, int to) {
    int t = lua_gettop(L), has_tls;
    const char *host = redlock_opt_string(L, t, "host", 1);
    redlock_tls tls;
    node->port = redlock_opt_int(L, t, "port", 26379, 1, 65535);
    node->connect_timeout_ms = cto;
    node->timeout_ms = to;
    snprintf(node->name, sizeof node->name,
             strchr(host, ':') ? "sentinel [%s]:%d" : "sentinel %s:%d", host, node->port);
    node->host = redlock_opt_dup(L, host);
    node->username = redlock_opt_dup(L, redlock_opt_string(L, t, "username", 0));
    node->password = redlock_opt_dup(L, redlock_opt_string(L, t, "password", 0));
    if (node->username != NULL && node->password == NULL)
        return luaL_error(L, "bad option 'sentinels' to 'conn' (a username needs a password)");
    has_tls = redlock_opt_tls(L, t, "tls", &tls);
    if (has_tls) {
        node->tls = calloc(1, sizeof *node->tls);
        if (node->tls == NULL || redlock_tls_settings_copy(node->tls, &tls) != 0)
            return luaL_error(L, "out of memory");
    }
    return 0;
}

/* conn{sentinels = {{host=, port=, username=, password=, tls=}, ...},
 * master_name =, sentinel_check =, ...}: u finds its master through these.
 * Sentinels are asked with short timeouts (at most 500 ms): a dead one must
 * not cost the whole connect timeout when others can answer. */
static int options(lua_State *L, redlock_conn *u) {
    const char *master = redlock_opt_string(L, 1, "master_name", 1);
    int n, i, cap = REDLOCK_DEFAULT_SENTINEL_CAP;
    int cto = u->connect_timeout_ms < cap ? u->connect_timeout_ms : cap;
    int to = u->timeout_ms > 0 && u->timeout_ms < cap ? u->timeout_ms : cap;
    redlock_sentinels *s;
    lua_getfield(L, 1, "sentinels");
    n = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
    if (n < 1 || n > 64)
        return luaL_error(L, "bad option 'sentinels' to 'conn' (1 to 64 tables expected)");
    s = calloc(1, sizeof *s);
    u->kind_data = s;
    if (s == NULL)
        return luaL_error(L, "out of memory");
    u->kind = &redlock_conn_sentinel; /* its connection finds the master through them */
    s->check_ms =
        redlock_opt_int(L, 1, "sentinel_check", REDLOCK_DEFAULT_SENTINEL_CHECK, 1, 86400000);
    if (redlock_sentinels_subscribe(s) != 0)
        return luaL_error(L, "out of memory");
    s->master_name = redlock_opt_dup(L, master);
    s->nodes = calloc((size_t)n, sizeof(redlock_conn *));
    if (s->nodes == NULL)
        return luaL_error(L, "out of memory");
    for (i = 1; i <= n; i++) {
        redlock_conn *node = calloc(1, sizeof *node);
        if (node == NULL)
            return luaL_error(L, "out of memory");
        node->kind = &redlock_conn_plain;
        s->nodes[i - 1] = node;
        s->n = i;
        lua_rawgeti(L, -1, i);
        if (!lua_istable(L, -1))
            return luaL_error(L, "bad option 'sentinels' to 'conn' (table expected at %d)", i);
        sentinel_node(L, node, cto, to);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    snprintf(u->name, sizeof u->name, "sentinel:%s", master);
    return 0;
}

const redlock_conn_kind redlock_conn_sentinel = {
    .topo = &redlock_kind_sentinel,
    .option = "sentinels",
    .options = options,
    .forget = forget,
    .connect = redlock_sentinel_connect,
    .recheck = recheck,
    .sub_fd = redlock_sentinel_sub_fd,
    .moved = redlock_sentinel_moved,
    .copy = copy,
    .destroy = destroy,
};
