/* The topology core (csrc/topology/topo.h): decisions only. No socket, no Lua, no
 * clock: the drivers pass the time and carry out the verdicts. */
#define _GNU_SOURCE
#include "topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "defaults.h"
#include "slot.h"

#define ERRLEN REDLOCK_TOPO_ERRLEN

static int starts(const char *s, size_t len, const char *w) {
    size_t n = strlen(w);
    return len >= n && memcmp(s, w, n) == 0;
}

static int has_word(const char *s, size_t len, const char *word) {
    size_t w = strlen(word), i;
    for (i = 0; i + w <= len; i++)
        if (memcmp(s + i, word, w) == 0)
            return 1;
    return 0;
}

static int is_word(const char *s, size_t len, const char *w) {
    size_t n = strlen(w);
    return len == n && strncasecmp(s, w, n) == 0;
}

void redlock_append_why(char *why, size_t whylen, const char *msg) {
    size_t used = strlen(why);
    if (used + 1 >= whylen)
        return;
    snprintf(why + used, whylen - used, "%s%.150s", used ? "; " : "", msg);
}

void redlock_attempt_start(redlock_attempt *a, const redlock_topo_kind *kind, void *state,
                           const char *name, int slot, unsigned flags, double now_ms,
                           int limit_ms) {
    /* (field by field: no memset of the message buffer on every command) */
    a->kind = kind;
    a->state = state;
    a->name = name;
    a->flags = flags;
    a->slot = slot;
    a->deadline = now_ms + (limit_ms > 0 ? limit_ms : REDLOCK_DEFAULT_TIMEOUT);
    a->pause = REDLOCK_PAUSE_FIRST;
    a->wait_ms = 0;
    a->tries = a->resent = a->reloaded = a->switched = a->evaled = a->doomed = 0;
    a->node = -1;
    a->asking = 0;
    a->failed_node = -1;
    a->code = a->retry = 0;
    a->err[0] = '\0';
}

int redlock_command_slot(int argc, const char **argv, const size_t *argvlen) {
    static const char *const keyless[] = {"PING", "INFO", "TIME", "SCRIPT", "ROLE", "CLUSTER",
                                          "ASKING", "AUTH", "SELECT", "MULTI", "EXEC",
                                          "DISCARD", "UNWATCH", "PUBLISH", "SUBSCRIBE", "WAIT",
                                          "WAITAOF", "HELLO", "CLIENT", "COMMAND", "SENTINEL",
                                          NULL};
    size_t len0;
    int i, k = 1;
    if (argc < 1)
        return -1;
    len0 = argvlen ? argvlen[0] : strlen(argv[0]);
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

void redlock_cmd_evalsha(redlock_cmd *c, const char *sha, const char *source) {
    c->argv[0] = "EVALSHA";
    c->argvlen[0] = 7;
    c->argv[1] = sha;
    c->argvlen[1] = 40;
    c->source = source;
}

void redlock_cmd_use_eval(redlock_cmd *c) {
    c->argv[0] = "EVAL";
    c->argvlen[0] = 4;
    c->argv[1] = c->source;
    c->argvlen[1] = strlen(c->source);
}

int redlock_reply_noscript(const char *err, size_t len) { return starts(err, len, "NOSCRIPT"); }

int redlock_reply_redirect(const char *err, size_t len) {
    return starts(err, len, "MOVED ") || starts(err, len, "ASK ") || starts(err, len, "TRYAGAIN") ||
           starts(err, len, "CLUSTERDOWN");
}

int redlock_reply_demoted(const char *err, size_t len) {
    return has_word(err, len, "READONLY") || has_word(err, len, "replica instance");
}

int redlock_reply_unblocked(const char *err, size_t len) { return has_word(err, len, "UNBLOCKED"); }

static int fail(redlock_attempt *a, int code, const char *err) {
    if (err != a->err)
        snprintf(a->err, ERRLEN, "%s", err);
    a->code = code;
    return REDLOCK_FAIL;
}

int redlock_attempt_next(redlock_attempt *a, double now_ms) {
    if (a->doomed)
        return REDLOCK_FAIL;
    return a->kind->target(a, now_ms);
}

int redlock_attempt_reply(redlock_attempt *a, const char *err, size_t len, double now_ms) {
    if ((a->flags & REDLOCK_AT_SCRIPT) && !a->evaled && redlock_reply_noscript(err, len)) {
        /* the script cache was flushed (restart, failover, SCRIPT FLUSH):
         * EVAL runs it and loads it for the next EVALSHA (to the same node,
         * after ASKING again if it was an ASK) */
        a->evaled = 1;
        return REDLOCK_EVAL;
    }
    return a->kind->reply(a, err, len, now_ms);
}

/* A connection failure the kind does not route: a stale one (nothing was
 * sent) goes once more on a fresh connection; anything else is final. */
static int resend_once(redlock_attempt *a, int stale, const char *err) {
    fail(a, REDLOCK_E_CONNECTION, err);
    if (!stale)
        return REDLOCK_FAIL;
    if (a->flags & REDLOCK_AT_CALLER) {
        a->retry = 1;
        return REDLOCK_FAIL;
    }
    return a->resent++ ? REDLOCK_FAIL : REDLOCK_RESEND;
}

int redlock_attempt_io_failed(redlock_attempt *a, int stale, const char *err, double now_ms) {
    if (stale == 2) { /* a BLPOP ended by +switch-master: the caller asks again, there */
        fail(a, REDLOCK_E_CONNECTION, err);
        a->retry = 2;
        return REDLOCK_FAIL;
    }
    if (a->flags & REDLOCK_AT_KEPT)
        return fail(a, REDLOCK_E_CONNECTION, err); /* a new connection knows nothing of the sequence */
    return a->kind->io_failed(a, stale, err, now_ms);
}

int redlock_io_stale(int reused, int answered, int timed_out) {
    if (timed_out)
        return 0;
    return answered == REDLOCK_IO_TAIL || (reused && answered == REDLOCK_IO_NOTHING);
}

void redlock_attempt_silent(redlock_attempt *a) {
    if (a->kind->silent != NULL)
        a->kind->silent(a);
}

const char *redlock_attempt_prefix(const redlock_attempt *a, size_t *len) {
    if (!a->asking)
        return NULL;
    *len = REDLOCK_ASKING_LEN;
    return REDLOCK_ASKING;
}

/* --- plain and Sentinel servers ----------------------------------------- */

static int one_node(redlock_attempt *a, double now_ms) {
    (void)now_ms;
    a->node = 0;
    return REDLOCK_GO;
}

static int plain_reply(redlock_attempt *a, const char *err, size_t len, double now_ms) {
    (void)a, (void)err, (void)len, (void)now_ms;
    return REDLOCK_DONE;
}

static int plain_io_failed(redlock_attempt *a, int stale, const char *err, double now_ms) {
    (void)now_ms;
    return resend_once(a, stale, err);
}

/* A write refused by a Sentinel master turned replica: nothing was
 * written; the sentinels are asked again (SWITCH) and the command goes to
 * the new master, once. Not a step of a sequence (the new master knows
 * nothing of its WATCH and MULTI: it would run there unguarded), nor a
 * command its caller sends again itself (a->retry). */
static int sentinel_reply(redlock_attempt *a, const char *err, size_t len, double now_ms) {
    (void)now_ms;
    if (!redlock_reply_demoted(err, len))
        return REDLOCK_DONE;
    redlock_set_error(a->err, ERRLEN, REDLOCK_E_CONNECTION, a->name,
                      "the master became a replica (%.*s)", (int)(len > 80 ? 80 : len), err);
    a->code = REDLOCK_E_CONNECTION;
    if (a->flags & REDLOCK_AT_CALLER)
        a->retry = 1;
    if (a->flags & (REDLOCK_AT_KEPT | REDLOCK_AT_CALLER) || a->switched++)
        a->doomed = 1;
    return REDLOCK_SWITCH;
}

const redlock_topo_kind redlock_kind_plain = {"plain", 0, one_node, plain_reply, plain_io_failed,
                                              NULL};
const redlock_topo_kind redlock_kind_sentinel = {"sentinel", 0, one_node, sentinel_reply,
                                                 plain_io_failed, NULL};

/* --- Cluster ----------------------------------------------------------- */

redlock_cluster_map *redlock_map_new(void) {
    redlock_cluster_map *m = calloc(1, sizeof *m);
    if (m != NULL)
        m->ask_slot = m->ask_node = m->moved_slot = m->moved_node = -1;
    return m;
}

void redlock_map_free(redlock_cluster_map *m) {
    int i;
    if (m == NULL)
        return;
    for (i = 0; i < m->n; i++)
        free(m->nodes[i].host);
    free(m->nodes);
    free(m);
}

int redlock_map_node(redlock_cluster_map *m, const char *host, size_t hostlen, int port) {
    redlock_topo_node *k;
    int i;
    for (i = 0; i < m->n; i++) {
        k = &m->nodes[i];
        if (k->port == port && strlen(k->host) == hostlen && memcmp(k->host, host, hostlen) == 0)
            return i;
    }
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        redlock_topo_node *nodes = realloc(m->nodes, (size_t)cap * sizeof *nodes);
        if (nodes == NULL)
            return -1;
        m->nodes = nodes;
        m->cap = cap;
    }
    k = &m->nodes[m->n];
    k->host = strndup(host, hostlen);
    if (k->host == NULL)
        return -1;
    k->port = port;
    snprintf(k->name, sizeof k->name, memchr(host, ':', hostlen) ? "[%s]:%d" : "%s:%d", k->host,
             port);
    return m->n++;
}

/* A pause before the next try, if it ends before the deadline: PAUSE, with
 * the pause doubled for the next one; else FAIL with a->err as it is. */
static int pause_or_fail(redlock_attempt *a, double now_ms) {
    if (now_ms + a->pause > a->deadline)
        return fail(a, a->code ? a->code : REDLOCK_E_SERVER, a->err);
    a->wait_ms = a->pause;
    if (a->pause < REDLOCK_PAUSE_MAX)
        a->pause *= 2;
    return REDLOCK_PAUSE;
}

static int map_target(redlock_attempt *a, double now_ms) {
    redlock_cluster_map *m = (redlock_cluster_map *)a->state;
    int slot = a->slot;
    a->asking = 0;
    if (slot >= 0 && slot == m->ask_slot && m->ask_node >= 0 && m->ask_node < m->n) {
        a->node = m->ask_node;
        a->asking = 1;
        m->ask_slot = m->ask_node = -1;
        return REDLOCK_GO;
    }
    if (slot < 0) {
        if (m->n == 0)
            return fail(a, REDLOCK_E_CONNECTION, "connection: cluster: no node known");
        a->node = m->any >= 0 && m->any < m->n ? m->any : 0;
        return REDLOCK_GO;
    }
    if (!m->loaded)
        return REDLOCK_RELOAD;
    if (now_ms >= a->deadline && m->owner[slot] - 1 == a->failed_node)
        return fail(a, a->code, a->err); /* the map reloaded past the deadline: same node */
    if (m->owner[slot] == 0) {
        /* A map without the slot: loaded while the slot had no master (a
         * failover, DELSLOTS/ADDSLOTS) or from a node that dropped it. That
         * passes: pause and load the map again, until the deadline. */
        redlock_set_error(a->err, ERRLEN, REDLOCK_E_SERVER, m->n > 0 ? m->nodes[0].name : "cluster",
                          "no node serves slot %d (CLUSTERDOWN?)", slot);
        a->code = REDLOCK_E_SERVER;
        m->loaded = 0;
        return pause_or_fail(a, now_ms);
    }
    a->node = m->owner[slot] - 1;
    return REDLOCK_GO;
}

/* "MOVED 3999 host:port" / "ASK ..." into the slot and the node's index;
 * -1 when it does not parse (or no memory). */
static int redirect_target(redlock_cluster_map *m, const char *err, size_t len, int *slot) {
    char buf[300];
    char *sp1, *sp2, *colon, *end, *host;
    long s, port;
    size_t hostlen;
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
    host = sp2 + 1;
    hostlen = (size_t)(colon - host);
    if (hostlen >= 2 && host[0] == '[' && host[hostlen - 1] == ']') { /* [v6]:port */
        host++;
        hostlen -= 2;
    }
    return redlock_map_node(m, host, hostlen, (int)port);
}

static int map_reply(redlock_attempt *a, const char *err, size_t len, double now_ms) {
    redlock_cluster_map *m = (redlock_cluster_map *)a->state;
    const char *node;
    int transient = 0;
    if (starts(err, len, "ASK ")) {
        int slot = -1, idx = redirect_target(m, err, len, &slot);
        m->ask_slot = idx >= 0 ? slot : -1;
        m->ask_node = idx;
    } else if (starts(err, len, "MOVED ")) {
        /* a resharding moves many slots: the whole map is reloaded, but
         * this MOVED is believed for its slot (the node asked may lag) */
        int slot = -1, idx = redirect_target(m, err, len, &slot);
        m->moved_slot = idx >= 0 ? slot : -1;
        m->moved_node = idx;
        if (idx >= 0)
            m->owner[slot] = (unsigned short)(idx + 1);
        m->loaded = 0;
    } else if (starts(err, len, "CLUSTERDOWN")) {
        m->loaded = 0; /* the map may change with the failover */
        transient = 1;
    } else if (starts(err, len, "TRYAGAIN")) {
        transient = 1;
    } else {
        return REDLOCK_DONE;
    }
    /* (read only now: a redirection to a node not known yet grows m->nodes) */
    node = a->node >= 0 && a->node < m->n ? m->nodes[a->node].name : "cluster";
    redlock_set_error(a->err, ERRLEN, REDLOCK_E_SERVER, node, "%.*s", (int)(len > 120 ? 120 : len),
                      err);
    a->code = REDLOCK_E_SERVER;
    /* Refused, not run. TRYAGAIN (a slot half migrated) and CLUSTERDOWN (a
     * failover under way) pass on their own: sent again after a pause until
     * the deadline, not a count; past REDLOCK_QUICK_TRIES redirections a
     * command waits before each further one too. */
    if (transient || ++a->tries > REDLOCK_QUICK_TRIES)
        return pause_or_fail(a, now_ms);
    return REDLOCK_RESEND;
}

static void map_silent(redlock_attempt *a) {
    a->failed_node = a->node;
    ((redlock_cluster_map *)a->state)->loaded = 0;
}

static int map_io_failed(redlock_attempt *a, int stale, const char *err, double now_ms) {
    redlock_cluster_map *m = (redlock_cluster_map *)a->state;
    if (resend_once(a, stale, err) == REDLOCK_RESEND)
        return REDLOCK_RESEND; /* a dropped idle connection: nothing was sent; once */
    if (a->slot < 0) {
        /* no key: any node answers; each once */
        if (++a->tries >= m->n)
            return REDLOCK_FAIL;
        m->any = (a->node + 1) % m->n;
        return REDLOCK_RESEND;
    }
    /* The node may be gone (a failover, or cut off: its connects and
     * reads time out). Load the map from another node and send again: at
     * once the first time, also past the deadline (a read that timed out
     * spent it all; without a reload every later command would go to the
     * dead node again and never see the promoted replica), but then only
     * to another node (map_target); then after pauses until the
     * deadline (nodes learn a promotion one after another). A command
     * whose reply was lost may have run: the lock scripts make that safe
     * to repeat (our own token counts as ours; a second release answers
     * 0), and the library sends no other command through here. */
    map_silent(a);
    if (!a->reloaded++)
        return REDLOCK_RELOAD;
    return pause_or_fail(a, now_ms);
}

const redlock_topo_kind redlock_kind_cluster = {"cluster", 1, map_target, map_reply,
                                                map_io_failed, map_silent};

#define KIND_ENTRY(name) &redlock_kind_##name,
const redlock_topo_kind *const redlock_topo_kinds[] = {REDLOCK_KINDS(KIND_ENTRY) NULL};

void redlock_map_load_start(redlock_map_load *l) { memset(l, 0, sizeof *l); }

int redlock_map_load_next(redlock_cluster_map *m, redlock_map_load *l, const char *name, char *err,
                          int *code) {
    if (l->again) {
        l->again = 0;
        return l->next - 1;
    }
    l->resent = 0;
    if (l->next < m->n)
        return l->next++;
    if (l->refused[0] != '\0') {
        snprintf(err, ERRLEN, "%s", l->refused);
        *code = REDLOCK_E_SERVER;
    } else {
        redlock_set_error(err, ERRLEN, REDLOCK_E_CONNECTION, name,
                          "no cluster node reachable (%.300s)", l->why);
        *code = REDLOCK_E_CONNECTION;
    }
    return -1;
}

/* Reads CLUSTER SLOTS' answer from node from into m's owner table. 0, or -1. */
static int read_map(redlock_cluster_map *m, int from, const redisReply *r) {
    size_t i;
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    memset(m->owner, 0, sizeof m->owner);
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
            host = m->nodes[from].host;
            hostlen = strlen(host);
        }
        idx = redlock_map_node(m, host, hostlen, (int)master->element[1]->integer);
        if (idx < 0)
            return -1;
        for (s = lo; s <= hi; s++)
            m->owner[s] = (unsigned short)(idx + 1);
    }
    return 0;
}

int redlock_map_load_reply(redlock_cluster_map *m, redlock_map_load *l, int node,
                           const redisReply *r, char *err) {
    if (r->type == REDIS_REPLY_ERROR) {
        /* not a cluster node, or one that cannot answer now (LOADING after
         * a restart, NOPERM): another node may */
        if (l->refused[0] == '\0')
            redlock_set_error(l->refused, ERRLEN, REDLOCK_E_SERVER, m->nodes[node].name,
                              "not a cluster node (CLUSTER SLOTS: %.120s)", r->str);
        return 1;
    }
    if (read_map(m, node, r) != 0) {
        redlock_set_error(err, ERRLEN, REDLOCK_E_SERVER, m->nodes[node].name,
                          "unexpected answer to CLUSTER SLOTS");
        m->loaded = 0;
        return -1;
    }
    /* believe the last MOVED for its slot: the node asked may lag */
    if (m->moved_slot >= 0)
        m->owner[m->moved_slot] = (unsigned short)(m->moved_node + 1);
    m->moved_slot = -1;
    m->loaded = 1;
    m->any = node; /* commands without a key go to a node known to answer */
    return 0;
}

int redlock_map_load_failed(redlock_cluster_map *m, redlock_map_load *l, int node, int stale,
                            const char *err) {
    (void)m;
    (void)node;
    if (stale && !l->resent) {
        l->resent = l->again = 1; /* the same node again, once */
        return 1;
    }
    redlock_append_why(l->why, sizeof l->why, err);
    return 0;
}

/* --- Sentinel ---------------------------------------------------------- */

int redlock_sentinel_answer(const redisReply *r, const char *sentinel, char *host, size_t hostlen,
                            int *port, char *why, size_t whylen) {
    char msg[200];
    if (r->type == REDIS_REPLY_NIL)
        return REDLOCK_MASTER_UNKNOWN;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[0]->len < hostlen) {
        long p = strtol(r->element[1]->str, NULL, 10);
        if (p >= 1 && p <= 65535) {
            memcpy(host, r->element[0]->str, r->element[0]->len);
            host[r->element[0]->len] = '\0';
            *port = (int)p;
            return REDLOCK_MASTER_AT;
        }
    }
    if (r->type == REDIS_REPLY_ERROR)
        redlock_set_error(msg, sizeof msg, REDLOCK_E_SERVER, sentinel, "%.*s",
                          (int)(r->len > 120 ? 120 : r->len), r->str);
    else
        snprintf(msg, sizeof msg, "%s: not a sentinel's answer", sentinel);
    redlock_append_why(why, whylen, msg);
    return REDLOCK_SENTINEL_FAILED;
}

void redlock_sentinel_failure(char *err, size_t errlen, const char *master, int unknown, int n,
                              const char *why) {
    if (unknown > 0)
        snprintf(err, errlen,
                 "connection: sentinel:%.60s: master name unknown: %d of %d sentinels monitor "
                 "no master of that name%s%.300s%s",
                 master, unknown, n, why[0] ? " (" : "", why, why[0] ? ")" : "");
    else
        snprintf(err, errlen, "connection: sentinel:%.60s: no sentinel reachable (%.400s)", master,
                 why);
}

int redlock_sentinel_switch(const char *msg, size_t len, char *name, size_t namelen, char *host,
                            size_t hostlen, int *port) {
    const char *w[5], *p = msg, *end = msg + len;
    size_t wl[5];
    long v = 0;
    size_t i;
    int k;
    for (k = 0; k < 5; k++) {
        while (p < end && *p == ' ')
            p++;
        w[k] = p;
        while (p < end && *p != ' ')
            p++;
        wl[k] = (size_t)(p - w[k]);
        if (wl[k] == 0)
            return -1;
    }
    while (p < end && *p == ' ')
        p++;
    if (p != end || wl[0] >= namelen || wl[3] >= hostlen || wl[4] > 5)
        return -1;
    for (i = 0; i < wl[4]; i++) {
        if (w[4][i] < '0' || w[4][i] > '9')
            return -1;
        v = v * 10 + (w[4][i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    memcpy(name, w[0], wl[0]);
    name[wl[0]] = '\0';
    memcpy(host, w[3], wl[3]);
    host[wl[3]] = '\0';
    *port = (int)v;
    return 0;
}

int redlock_sentinel_locate(int i, int n, int answer) {
    if (answer == REDLOCK_MASTER_AT)
        return REDLOCK_DONE;
    return i + 1 < n ? REDLOCK_RESEND : REDLOCK_FAIL;
}

static double check_age(double check_ms, double max_age) {
    return max_age < 0 || max_age > check_ms ? check_ms : max_age;
}

int redlock_sentinel_check_due(double now, double checked, double check_ms, double max_age) {
    return now - checked >= check_age(check_ms, max_age);
}

int redlock_sentinel_check(int answer, int same, double now, double check_ms, double max_age,
                           double *checked) {
    if (answer == REDLOCK_SENTINEL_FAILED) {
        *checked = now + check_ms - check_age(check_ms, max_age);
        return REDLOCK_CHECK_ROTATE;
    }
    *checked = now;
    return answer == REDLOCK_MASTER_AT && same ? REDLOCK_CHECK_KEEP : REDLOCK_CHECK_FIND;
}

int redlock_sentinel_round(int round, int outcome) {
    if (outcome == REDLOCK_ROUND_MASTER)
        return REDLOCK_DONE;
    if (outcome == REDLOCK_ROUND_REFUSED || round >= REDLOCK_ROLE_ROUNDS)
        return REDLOCK_FAIL;
    return REDLOCK_PAUSE;
}

int redlock_role_verdict(const redisReply *r, const char *name, char *err, size_t errlen) {
    const redisReply *role =
        r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? r->element[0] : NULL;
    if (role != NULL && role->type != REDIS_REPLY_STRING)
        role = NULL;
    if (role != NULL && role->len == 6 && memcmp(role->str, "master", 6) == 0)
        return 1;
    if (r->type == REDIS_REPLY_ERROR) { /* NOPERM: the ACL user needs +role */
        redlock_set_error(err, errlen, REDLOCK_E_SERVER, name, "ROLE failed: %.*s",
                          (int)(r->len > 120 ? 120 : r->len), r->str);
        return -1;
    }
    redlock_set_error(err, errlen, REDLOCK_E_CONNECTION, name,
                      "the sentinels name a server that is not a master (ROLE: %.*s)",
                      role ? (int)(role->len > 40 ? 40 : role->len) : 7,
                      role ? role->str : "no role");
    return 0;
}
