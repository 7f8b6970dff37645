/* Redis Sentinel over hiredis: where a Sentinel-managed conn's master is,
 * the driver of the topology core's Sentinel rules (csrc/topo.c: what a
 * sentinel's answer and ROLE's mean, the rounds). The conn keeps its
 * sentinels (plain conns, each connected lazily and kept for the periodic
 * check) and its master's name; conn.c calls in here to connect and before
 * commands (the periodic check); a master turned replica is the core's
 * verdict on a reply (conn.c, fanout.c).
 * Everything here runs on the thread that owns the conn: the caller's, or
 * the renewal thread with its own clones. */
#define _GNU_SOURCE
#include "sentinel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "clock.h"
#include "conn.h"
#include "topo.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

/* One command on sentinel node i, sent again once on a connection the
 * sentinel had dropped. */
static int ask(redlock_conn *node, int argc, const char **argv, redisReply **out) {
    redlock_attempt a;
    int rc, stale = 0;
    redlock_attempt_start(&a, -1, 0, 0);
    do
        rc = redlock_conn_trip1(node, argc, argv, NULL, out, &stale);
    while (rc != 0 && redlock_stale_verdict(&a, stale, node->err) == REDLOCK_RESEND);
    return rc;
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

/* Asks the sentinels in turn. 0 with the address; -1 with u->err set. */
static int locate(redlock_conn *u, char *host, size_t hostlen, int *port) {
    redlock_sentinels *s = u->sentinels;
    char why[ERRLEN];
    int i, unknown = 0;
    why[0] = '\0';
    for (i = 0; i < s->n; i++) {
        switch (master_from(s, i, host, hostlen, port, why, sizeof why)) {
        case A_ADDRESS:
            if (i > 0)
                to_front(s, i);
            return 0;
        case A_UNKNOWN:
            unknown++;
            break;
        default:
            break;
        }
    }
    redlock_sentinel_failure(u->err, ERRLEN, s->master_name, unknown, s->n, why);
    return -1;
}

static int set_address(redlock_conn *u, const char *host, int port) {
    char *copy;
    if (u->host == NULL || strcmp(u->host, host) != 0) {
        copy = strdup(host);
        if (copy == NULL) {
            snprintf(u->err, ERRLEN, "connection: sentinel:%s: out of memory",
                     u->sentinels->master_name);
            return -1;
        }
        free(u->host);
        u->host = copy;
    }
    u->port = port;
    snprintf(u->name, sizeof u->name, strchr(host, ':') ? "sentinel:%s ([%s]:%d)" : "sentinel:%s (%s:%d)",
             u->sentinels->master_name, host, port);
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
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str, "message") != 0)
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

int redlock_sentinel_sub_fd(const redlock_conn *u) {
    const redlock_sentinels *s = u->sentinels;
    return s != NULL && sub_open(s->sub) ? s->sub->conn->ctx->fd : -1;
}

int redlock_sentinel_moved(redlock_conn *u) { return u->sentinels != NULL && switched(u->sentinels); }

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
    redlock_sentinel_sub *sub = u->sentinels->sub;
    if (sub->port == 0 || set_address(u, sub->host, sub->port) != 0 ||
        redlock_conn_connect_direct(u) != 0)
        return -1;
    u->sentinels->checked_ms = redlock_mono_ms();
    if (is_master(u) == 1)
        return 0;
    redlock_conn_drop(u);
    return -1;
}

int redlock_sentinel_connect(redlock_conn *u) {
    int round, rc = 1;
    redlock_sentinels *s = u->sentinels;
    if (s->sub != NULL) {
        switched(s);
        sub_ensure(s);
        if (s->follow) {
            s->follow = 0;
            if (connect_announced(u) == 0)
                return 0;
        }
    }
    for (round = 0; round < REDLOCK_ROLE_ROUNDS; round++) {
        char host[256];
        int port = 0;
        if (round > 0)
            redlock_pause_ms(REDLOCK_ROLE_PAUSE);
        if (locate(u, host, sizeof host, &port) != 0)
            return 1;
        if (set_address(u, host, port) != 0)
            return 1;
        rc = redlock_conn_connect_direct(u);
        if (rc != 0)
            continue; /* the sentinels may not know yet that it died */
        /* now, so that ROLE's round trip does not check again */
        u->sentinels->checked_ms = redlock_mono_ms();
        if (is_master(u) == 1) {
            sub_ensure(s);
            return 0;
        }
        redlock_conn_drop(u);
        if (strncmp(u->err, "server:", 7) == 0)
            return 2; /* ROLE refused (an ACL without +role): asking again will not help */
        rc = 1; /* not a master yet, or ROLE's round trip failed */
    }
    return rc;
}

void redlock_sentinel_recheck(redlock_conn *u, double max_age_ms) {
    redlock_sentinels *s = u->sentinels;
    double t = redlock_mono_ms();
    char host[256], why[ERRLEN];
    int port = 0;
    enum answer a;
    if (switched(s)) {
        redlock_conn_drop(u); /* the next use connects to the master announced */
        return;
    }
    sub_ensure(s);
    if (max_age_ms > s->check_ms)
        max_age_ms = s->check_ms;
    if (t - s->checked_ms < max_age_ms)
        return;
    /* One question per check, to the first sentinel: the command waits for
     * it, so sentinels that hang must cost one short timeout, not one per
     * sentinel. One that does not answer goes to the back, and the next
     * check comes a whole check_ms later. */
    why[0] = '\0';
    a = master_from(s, 0, host, sizeof host, &port, why, sizeof why);
    if (a == A_FAILED) {
        if (s->n > 1) {
            redlock_conn *first = s->nodes[0];
            memmove(s->nodes, s->nodes + 1, (size_t)(s->n - 1) * sizeof(redlock_conn *));
            s->nodes[s->n - 1] = first;
        }
        s->checked_ms = redlock_mono_ms() + s->check_ms - max_age_ms;
        return;
    }
    s->checked_ms = t;
    /* moved, or no longer known: connect again through the sentinels */
    if (a == A_UNKNOWN || u->host == NULL || strcmp(host, u->host) != 0 || port != u->port)
        redlock_conn_drop(u);
}

redlock_sentinels *redlock_sentinels_copy(const redlock_sentinels *src) {
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

int redlock_sentinels_subscribe(redlock_sentinels *s) {
    s->sub = calloc(1, sizeof *s->sub);
    if (s->sub == NULL)
        return -1;
    s->sub->refs = 1;
    return 0;
}

void redlock_sentinels_share(redlock_sentinels *dst, const redlock_sentinels *src) {
    if (src->sub == NULL || dst->sub != NULL)
        return;
    dst->sub = src->sub;
    dst->sub->refs++;
    dst->seen = src->sub->switches;
}

void redlock_sentinels_free(redlock_sentinels *s) {
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

static void recheck_hook(redlock_conn *u) { redlock_sentinel_recheck(u, u->sentinels->check_ms); }

const redlock_conn_hooks redlock_sentinel_hooks = {redlock_sentinel_connect, recheck_hook,
                                                   redlock_sentinel_sub_fd, redlock_sentinel_moved};
