/* Background renewal (the watchdog). A renewer owns one thread and, for each
 * server of its client, a connection of its own (a copy of the client's
 * settings): the thread never touches a lua_State nor the client's
 * connections. Every ttl/3 it runs the token-checked extend script for each
 * registered lock on every server, and counts a renewal only when a quorum
 * of servers extended it within the validity (Redlock; 1 of 1 for one
 * server). What Lua reads (expiry, lost) lives in C memory under a mutex, so
 * lock:lost() and lock:remaining() answer without any I/O.
 *
 * core.renewer({conn, ...} [, timeout_ms [, {legacy, ...}]]) -> renewer
 *   (copies each conn's settings; timeout_ms caps their connect and reply
 *   timeouts, and with several servers the renewal asks them all at once,
 *   each within timeout_ms: the fan-out of csrc/fanout.c; legacy[i] true:
 *   server i has no scripting, and is extended with WATCH/GET/MULTI/SET/
 *   PEXPIRE/EXEC as lua/redlock/legacy.lua does, the servers then asked
 *   one after another; legacy[i] "expire": the same with EXPIRE in whole
 *   seconds rounded up, for a server without PEXPIRE, before Redis 2.6)
 * renewer:add(key, token, ttl, expires, hold_until, quorum, drift_factor
 *             [, replicas, replica_timeout, aof [, {legacy, ...}]])  -> renewal, id
 *   ({legacy, ...}: this lock's servers' flags, as for core.renewer; by
 *   default the renewer's)
 *   (replicas >= 1 or aof: each extend waits for that many replicas, WAIT
 *   or WAITAOF in the same write as the script, and counts on a server only
 *   when they acknowledged: a lock that asked for replicas keeps no
 *   validity they did not acknowledge)
 * renewer:take_lost() -> {id, ...} | nil     (newly lost since the last call)
 * renewer:stats() -> entries renewing, renewals made, thread running,
 *                    entries in the list (stopped ones not yet unlinked too)
 * renewer:close()                            (stops and joins the thread)
 * renewal:state() -> phase, expires, renewals, failures, lost|nil, error|nil
 * renewal:expires() -> when the validity ends (0 once lost)
 * renewal:lost() -> reason | nil             ("gone", "expired", "max_hold")
 * renewal:update(ttl, expires)               (after an extend done from Lua)
 * renewal:stop()                             (release; also its __gc)
 * core.renew_threads() -> renewal threads running in this process
 * Times are ms on CLOCK_MONOTONIC, the clock of core.now().
 *
 * Lifetimes: the renewer struct is counted by its userdata and by each
 * renewal userdata; an entry by the renewer's list and by its renewal
 * userdata. A stopped entry leaves the list at once (stop, __gc), except
 * the one the thread works on without the mutex (r->busy): the thread
 * unlinks that one itself, so it stays allocated while in use. close()
 * and __gc shut the thread's sockets down (through dup'ed descriptors that
 * only the mutex holder closes) so that the join never waits for a reply.
 *
 * Cost per lock: add and stop take the mutex and do not wake the thread
 * unless the new lock is due before the thread's own wake-up (r->wake_at),
 * so a with_lock loop does not ping-pong with it. */
#define _GNU_SOURCE
#include "proto.h"
#include "renew.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "conn.h"
#include "fanout.h"
#include "scripts.h"
#include "token.h"

#define MAX_SERVERS 64
#define ERRLEN REDLOCK_CONN_ERRLEN
#define MAX_TAKE 32
#define MIN_RETRY_MS 10.0

enum phase { RENEWING, HOLDING, IDLE }; /* HOLDING: max_hold reached, expiry watched */
enum lost { NOT_LOST, LOST_GONE, LOST_EXPIRED, LOST_MAX_HOLD };
static const char *const lost_words[] = {NULL, "gone", "expired", "max_hold"};
static const char *const phase_words[] = {"renewing", "holding", "idle"};

typedef struct renewer renewer;

typedef struct entry {
    struct entry *next, *prev;
    renewer *r;
    int refs; /* the list, the renewal userdata */
    int in_list, stopped, pending, gen;
    enum phase phase;
    enum lost lost;
    lua_Integer id;
    char *key, *token; /* immutable once linked: the thread reads them unlocked */
    size_t keylen, toklen;
    double ttl, interval, drift_factor, expires, hold_until, next_due;
    int quorum;
    int waits;          /* extends wait for replicas (wait) */
    int any_legacy;     /* some server is extended the legacy way */
    /* server i: 0 the script; WATCH/MULTI, 1 with PEXPIRE, 2 with EXPIRE */
    unsigned char legacy[MAX_SERVERS];
    redlock_wait wait;
    unsigned long renewals, failures;
    char err[ERRLEN];
} entry;

struct renewer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int started, stopping, closed;
    int has_thread;      /* a thread was started in fork generation gen */
    unsigned gen;
    double wake_at;      /* when the sleeping thread wakes; -inf while awake */
    struct entry *busy;  /* the entry the thread renews without the mutex */
    int refs; /* the renewer userdata, each renewal userdata */
    int nservers;
    int timeout_ms;       /* the fan-out's per-server limit (Redlock), 0: none */
    int any_legacy;       /* the legacy flags of entries added without their own */
    unsigned char legacy[MAX_SERVERS];
    redlock_conn **conns; /* the thread's own; freed after the join */
    int *dupfd;           /* dup of each live socket, for shutdown() by close */
    struct track *tracks; /* (renewer, i) of each server, for a Cluster's nodes */
    entry *list;
    lua_Integer next_id;
    int unreported; /* entries lost and not yet taken by take_lost */
    unsigned long renewals;
};

/* What a Cluster conn's track callback needs: a Cluster conn has no socket
 * of its own (conn_fd is -1); each node socket a command is about to wait
 * on takes the place of server i's dup. */
struct track {
    renewer *r;
    int i;
};

typedef struct {
    renewer *r;
} renewer_ud;

typedef struct {
    entry *e;
} renewal_ud;

static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;
static const redlock_script *extend_script; /* set at load, before any thread */
static int live_threads;

static void count_threads(int delta) {
    pthread_mutex_lock(&count_mu);
    live_threads += delta;
    pthread_mutex_unlock(&count_mu);
}

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void wait_until(renewer *r, double when_ms) {
    struct timespec ts;
    double s = floor(when_ms / 1e3);
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((when_ms - s * 1e3) * 1e6);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_nsec = 999999999L;
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* --- entries (all under r->mu) ------------------------------------------ */

/* Drops n references; frees e at the last. */
static void entry_drop(entry *e, int n) {
    e->refs -= n;
    if (e->refs == 0)
        free(e);
}

static void entry_unref(entry *e) { entry_drop(e, 1); }

static void mark_lost(renewer *r, entry *e, enum lost why) {
    e->lost = why;
    e->phase = IDLE;
    if (why == LOST_GONE)
        e->expires = 0;
    if (!e->stopped && !e->pending) {
        e->pending = 1;
        r->unreported++;
    }
}

static void stop_entry(renewer *r, entry *e) {
    e->stopped = 1;
    if (e->pending) {
        e->pending = 0;
        r->unreported--;
    }
}

static void link_entry(renewer *r, entry *e) {
    e->prev = NULL;
    e->next = r->list;
    if (r->list != NULL)
        r->list->prev = e;
    r->list = e;
    e->in_list = 1;
}

/* Takes e out of the list; the caller drops the list's reference. */
static void detach_entry(renewer *r, entry *e) {
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        r->list = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    e->next = e->prev = NULL;
    e->in_list = 0;
}

/* Unlinks e and drops the list's reference (may free e). */
static void unlink_entry(renewer *r, entry *e) {
    detach_entry(r, e);
    entry_unref(e);
}

/* Stops e and, unless the thread is working on it, takes it out of the
 * list now (a loop of short locks must not pile up stopped entries until
 * the thread wakes). Returns the references the caller must drop: 1 when
 * it was taken out (the list's), else 0. */
static int retire_entry(renewer *r, entry *e) {
    stop_entry(r, e);
    if (e->in_list && r->busy != e) {
        detach_entry(r, e);
        return 1;
    }
    return 0;
}

/* Wakes the thread if it sleeps past `due` (it rescans when it wakes). */
static void wake_for(renewer *r, double due) {
    if (due < r->wake_at)
        pthread_cond_signal(&r->cv);
}

/* Unlinks stopped entries; returns the live one due first and when. */
static entry *next_due(renewer *r, double *when) {
    entry *e = r->list, *next, *best = NULL;
    for (; e != NULL; e = next) {
        double t;
        next = e->next;
        if (e->stopped) {
            unlink_entry(r, e);
            continue;
        }
        if (e->phase == IDLE)
            continue;
        t = e->phase == RENEWING ? e->next_due : e->expires;
        if (best == NULL || t < *when) {
            best = e;
            *when = t;
        }
    }
    return best;
}

/* --- the thread's I/O (without the mutex) ------------------------------- */

static int conn_fd(const redlock_conn *c) { return c->ctx != NULL ? c->ctx->fd : -1; }

static void untrack(renewer *r, int i) {
    pthread_mutex_lock(&r->mu);
    if (r->dupfd[i] >= 0) {
        close(r->dupfd[i]);
        r->dupfd[i] = -1;
    }
    pthread_mutex_unlock(&r->mu);
}

/* Connects server i unless connected; the socket's dup that close() shuts
 * down is taken by track_node (the conn's on_socket) as soon as the socket
 * exists, before AUTH and the TLS handshake. -1 when stopping or on
 * failure. */
static int connect_tracked(renewer *r, int i, char *err) {
    redlock_conn *c = r->conns[i];
    int stopping;
    if (conn_fd(c) >= 0)
        return 0;
    untrack(r, i);
    pthread_mutex_lock(&r->mu);
    stopping = r->stopping;
    pthread_mutex_unlock(&r->mu);
    if (stopping) {
        snprintf(err, ERRLEN, "closed: the client is closed");
        return -1;
    }
    if (redlock_conn_ensure(c) != 0) {
        snprintf(err, ERRLEN, "%s", c->err);
        untrack(r, i); /* the dup of a socket that failed during its set-up */
        return -1;
    }
    return 0;
}

static int is_noscript(const redisReply *rep) {
    return rep->type == REDIS_REPLY_ERROR && rep->len >= 8 && memcmp(rep->str, "NOSCRIPT", 8) == 0;
}

/* What an extend reply says: 1 extended, 0 the token is not there, -1 an
 * error (err says why). Frees the reply. */
static int extend_value(redlock_conn *c, redisReply *rep, char *err) {
    int v = -1;
    if (rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer == 1 ? 1 : 0;
    else if (rep->type == REDIS_REPLY_ERROR)
        snprintf(err, ERRLEN, "server: %s: %.*s", c->name,
                 (int)(rep->len > 160 ? 160 : rep->len), rep->str);
    else
        snprintf(err, ERRLEN, "server: %s: unexpected reply to extend (type %d)",
                 c->name, rep->type);
    freeReplyObject(rep);
    return v;
}

/* Whether WAIT's answer w (NULL: it did not come; c->err says why) gives
 * e the replicas it asked for: 1, or -1 with err saying why not. */
static int acked_enough(redlock_conn *c, const entry *e, const redisReply *w, char *err) {
    long long acked, fsynced;
    if (w == NULL) {
        snprintf(err, ERRLEN, "%s", c->err);
        return -1;
    }
    if (w->type == REDIS_REPLY_ERROR) {
        snprintf(err, ERRLEN, "server: %s: %.*s", c->name, (int)(w->len > 160 ? 160 : w->len),
                 w->str);
        return -1;
    }
    if (redlock_wait_parse(w, &acked, &fsynced) != 0) {
        snprintf(err, ERRLEN, "server: %s: unexpected reply to WAIT", c->name);
        return -1;
    }
    if (acked >= e->wait.replicas && (!e->wait.aof || fsynced >= 1))
        return 1;
    snprintf(err, ERRLEN, "replicas: %s: %lld of %d replicas acknowledged the renewal within %d ms",
             c->name, acked, e->wait.replicas, e->wait.timeout_ms);
    return -1;
}

/* An extend reply with WAIT's (see extend_value and acked_enough): 1 only
 * when extended and acknowledged. Frees both replies. */
static int extend_value_wait(redlock_conn *c, const entry *e, redisReply *rep, redisReply *w,
                             char *err) {
    int v = extend_value(c, rep, err);
    if (v == 1)
        v = acked_enough(c, e, w, err);
    if (w != NULL)
        freeReplyObject(w);
    return v;
}

/* The extend script's arguments after its name: 1 key, the key, token, ttl. */
static void extend_args(const char **argv, size_t *len, const entry *e, const char *ttl) {
    argv[2] = "1";
    len[2] = 1;
    argv[3] = e->key;
    len[3] = e->keylen;
    argv[4] = e->token;
    len[4] = e->toklen;
    argv[5] = ttl;
    len[5] = strlen(ttl);
}

/* extend_on for an entry that waits for replicas: the script and WAIT in
 * one write. */
static int extend_on_wait(renewer *r, int i, const entry *e, const char **argv, size_t *len,
                          char *err) {
    const redlock_script *script = extend_script;
    redlock_conn *c = r->conns[i];
    redisReply *rep = NULL, *w = NULL;
    int rc = 1, stale = 0, attempt;
    for (attempt = 0; attempt < 2; attempt++) {
        if (connect_tracked(r, i, err) != 0)
            return -1;
        argv[0] = "EVALSHA";
        len[0] = 7;
        argv[1] = script->sha;
        len[1] = 40;
        rc = redlock_conn_round_trip_wait(c, 6, argv, len, &e->wait, &rep, &w, &stale);
        if (rep != NULL && is_noscript(rep)) {
            freeReplyObject(rep);
            if (w != NULL)
                freeReplyObject(w);
            rep = w = NULL;
            argv[0] = "EVAL";
            len[0] = 4;
            argv[1] = script->source;
            len[1] = strlen(script->source);
            rc = redlock_conn_round_trip_wait(c, 6, argv, len, &e->wait, &rep, &w, &stale);
        }
        if (conn_fd(c) < 0)
            untrack(r, i);
        if (rep != NULL || !stale)
            break;
    }
    if (rep == NULL) {
        snprintf(err, ERRLEN, "%s", c->err);
        return -1;
    }
    (void)rc; /* rc != 0 with rep: WAIT's reply did not come (w is NULL) */
    return extend_value_wait(c, e, rep, w, err);
}

/* The extend script on server i: 1 extended, 0 the token is not there,
 * -1 failed (err says why). A dropped idle connection is retried once. */
static int extend_on(renewer *r, int i, const entry *e, const char *ttl, char *err) {
    const redlock_script *script = extend_script;
    redlock_conn *c = r->conns[i];
    const char *argv[6];
    size_t len[6];
    redisReply *rep = NULL;
    int rc = 1, stale = 0, attempt;
    extend_args(argv, len, e, ttl);
    if (e->waits)
        return extend_on_wait(r, i, e, argv, len, err);
    for (attempt = 0; attempt < 2; attempt++) {
        if (connect_tracked(r, i, err) != 0)
            return -1;
        argv[0] = "EVALSHA";
        len[0] = 7;
        argv[1] = script->sha;
        len[1] = 40;
        rc = redlock_conn_round_trip(c, 6, argv, len, &rep, &stale);
        if (rc == 0 && is_noscript(rep)) {
            freeReplyObject(rep);
            rep = NULL;
            argv[0] = "EVAL";
            len[0] = 4;
            argv[1] = script->source;
            len[1] = strlen(script->source);
            rc = redlock_conn_round_trip(c, 6, argv, len, &rep, &stale);
        }
        if (conn_fd(c) < 0)
            untrack(r, i);
        if (rc == 0 || !stale)
            break;
    }
    if (rc != 0) {
        snprintf(err, ERRLEN, "%s", c->err);
        return -1;
    }
    return extend_value(c, rep, err);
}

/* One command on server i's connection: 0 and *rep, or -1 (err says why;
 * the connection is dropped, WATCH and MULTI state with it). */
static int command_on(renewer *r, int i, int argc, const char **argv, const size_t *len,
                      redisReply **rep, char *err) {
    redlock_conn *c = r->conns[i];
    int stale = 0, rc = redlock_conn_round_trip(c, argc, argv, len, rep, &stale);
    if (conn_fd(c) < 0)
        untrack(r, i);
    if (rc != 0) {
        snprintf(err, ERRLEN, "%s", c->err);
        return -1;
    }
    return 0;
}

/* Sends a command whose reply is not looked at (UNWATCH, DISCARD). */
static void command_quiet(renewer *r, int i, const char *name) {
    const char *argv[1];
    size_t len[1];
    redisReply *rep = NULL;
    char err[ERRLEN];
    argv[0] = name;
    len[0] = strlen(name);
    if (command_on(r, i, 1, argv, len, &rep, err) == 0)
        freeReplyObject(rep);
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Whether a legacy value ("<expiry ms>:<token>") is e's token and not past
 * its own expiry (lua/redlock/legacy.lua's rule: past it, the lock is not
 * ours to touch). */
static int legacy_ours(const redisReply *rep, const entry *e, double now) {
    const char *colon;
    double exp = 0;
    size_t i, digits;
    if (rep->type != REDIS_REPLY_STRING)
        return 0;
    colon = memchr(rep->str, ':', rep->len);
    if (colon == NULL)
        return 0;
    digits = (size_t)(colon - rep->str);
    if (digits == 0 || digits > 16 || rep->len - digits - 1 != e->toklen ||
        memcmp(colon + 1, e->token, e->toklen) != 0)
        return 0;
    for (i = 0; i < digits; i++) {
        if (rep->str[i] < '0' || rep->str[i] > '9')
            return 0;
        exp = exp * 10 + (rep->str[i] - '0');
    }
    return exp > now;
}

/* Keeps the first error a command queued after MULTI got (the server
 * refused to queue it: OOM under maxmemory), for the message. */
#define QUEUEDLEN 161
static void note_queued(const redisReply *rep, char *queued) {
    if (rep->type == REDIS_REPLY_ERROR && queued[0] == '\0')
        snprintf(queued, QUEUEDLEN, "%.*s", (int)(rep->len > 160 ? 160 : rep->len), rep->str);
}

/* Legacy mode's extend on server i (servers without scripting, with WATCH):
 * WATCH key, GET key; ours and not past its expiry: MULTI, SET key
 * "<now + ttl>:<token>", PEXPIRE key ttl, EXEC (a nil EXEC: somebody touched
 * the key meanwhile; -1, and the next round looks again). 1 extended, 0 not
 * ours any more, -1 failed. */
static int legacy_extend_on(renewer *r, int i, const entry *e, double ext, const char *ttl, char *err) {
    char value[48 + 256], secs[32];
    char queued[QUEUEDLEN]; /* a queued command's refusal (OOM): EXEC then says only EXECABORT */
    const char *argv[3];
    size_t len[3];
    redisReply *rep = NULL;
    int ours, v = -1;
    queued[0] = '\0';
    if (e->toklen > 256) {
        snprintf(err, ERRLEN, "renewal: token too long");
        return -1;
    }
    if (connect_tracked(r, i, err) != 0)
        return -1;
    argv[0] = "WATCH";
    len[0] = 5;
    argv[1] = e->key;
    len[1] = e->keylen;
    if (command_on(r, i, 2, argv, len, &rep, err) != 0)
        return -1;
    freeReplyObject(rep);
    argv[0] = "GET";
    len[0] = 3;
    if (command_on(r, i, 2, argv, len, &rep, err) != 0)
        return -1;
    ours = legacy_ours(rep, e, wall_ms());
    freeReplyObject(rep);
    if (!ours) {
        command_quiet(r, i, "UNWATCH");
        return 0;
    }
    snprintf(value, sizeof value, "%.0f:%.*s", floor(wall_ms()) + ext, (int)e->toklen, e->token);
    argv[0] = "MULTI";
    len[0] = 5;
    if (command_on(r, i, 1, argv, len, &rep, err) != 0)
        return -1;
    freeReplyObject(rep);
    argv[0] = "SET";
    len[0] = 3;
    argv[2] = value;
    len[2] = strlen(value);
    if (command_on(r, i, 3, argv, len, &rep, err) != 0)
        return -1;
    note_queued(rep, queued);
    freeReplyObject(rep);
    if (e->legacy[i] == 2) {
        /* no PEXPIRE (before 2.6): whole seconds, rounded up, as Lua does */
        snprintf(secs, sizeof secs, "%.0f", ceil(ext / 1000));
        argv[0] = "EXPIRE";
        argv[2] = secs;
    } else {
        argv[0] = "PEXPIRE";
        argv[2] = ttl;
    }
    len[0] = strlen(argv[0]);
    len[2] = strlen(argv[2]);
    if (command_on(r, i, 3, argv, len, &rep, err) != 0)
        return -1;
    note_queued(rep, queued);
    freeReplyObject(rep);
    argv[0] = "EXEC";
    len[0] = 4;
    if (command_on(r, i, 1, argv, len, &rep, err) != 0)
        return -1;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        v = 1;
    else if (rep->type == REDIS_REPLY_ERROR && queued[0] != '\0')
        snprintf(err, ERRLEN, "server: %s: %.160s", r->conns[i]->name, queued);
    else if (rep->type == REDIS_REPLY_ERROR)
        snprintf(err, ERRLEN, "server: %s: %.*s", r->conns[i]->name,
                 (int)(rep->len > 160 ? 160 : rep->len), rep->str);
    else
        snprintf(err, ERRLEN, "server: %s: the key changed while renewing", r->conns[i]->name);
    freeReplyObject(rep);
    return v;
}

/* Records a dup of each socket the fan-out left open (close() shuts them
 * down), and forgets those it closed. */
/* Sentinel-managed servers whose master moved are dropped (and their
 * sockets' dups closed) before a round, so that it goes to the new one.
 * Asked at least twice per renewal interval: a round that extends only the
 * old master lets the copy on the new one run out. */
static void recheck_all(renewer *r, double max_age_ms) {
    int i;
    for (i = 0; i < r->nservers; i++) {
        redlock_conn *c = r->conns[i];
        if (c->sentinels == NULL || c->ctx == NULL)
            continue;
        redlock_sentinel_recheck(c, max_age_ms);
        if (conn_fd(c) < 0)
            untrack(r, i);
    }
}

static void track_node(void *arg, int fd) {
    struct track *t = (struct track *)arg;
    renewer *r = t->r;
    pthread_mutex_lock(&r->mu);
    if (r->dupfd[t->i] >= 0)
        close(r->dupfd[t->i]);
    r->dupfd[t->i] = dup(fd); /* -1: close just waits longer */
    if (r->stopping && r->dupfd[t->i] >= 0)
        shutdown(r->dupfd[t->i], SHUT_RDWR); /* close() came first */
    pthread_mutex_unlock(&r->mu);
}

static void track_all(renewer *r) {
    int i;
    for (i = 0; i < r->nservers; i++) {
        int fd = conn_fd(r->conns[i]);
        pthread_mutex_lock(&r->mu);
        if (fd < 0 && r->dupfd[i] >= 0) {
            close(r->dupfd[i]);
            r->dupfd[i] = -1;
        } else if (fd >= 0 && r->dupfd[i] < 0) {
            r->dupfd[i] = dup(fd); /* -1: close just waits longer */
        }
        pthread_mutex_unlock(&r->mu);
    }
}

/* The extend script on every server at once (the fan-out of csrc/fanout.c),
 * each within the renewer's timeout: a round costs the slowest answer, not
 * the sum. Servers whose idle connection the server had closed get one more
 * try. Counts into *yes and *no; err keeps the last failure's message. */
static void extend_all(renewer *r, const entry *e, const char *ttl, int *yes, int *no, char *err) {
    redisReply *reps[MAX_SERVERS], *wreps[MAX_SERVERS];
    int stale[MAX_SERVERS], n = r->nservers, m = 0, i, k, pass;
    redlock_conn *conns[MAX_SERVERS];
    const char *argv[6];
    size_t len[6];
    for (i = 0; i < n; i++)
        conns[m++] = r->conns[i];
    for (pass = 0; pass < 2 && m > 0; pass++) {
        int again = 0;
        int fail;
        extend_args(argv, len, e, ttl);
        if (e->waits)
            fail = redlock_fanout_eval_wait_c(conns, m, r->timeout_ms, extend_script, &e->wait, argv,
                                              len, 6, reps, wreps, stale);
        else
            fail = redlock_fanout_eval_c(conns, m, r->timeout_ms, extend_script, argv, len, 6, reps,
                                         stale);
        if (fail != 0) {
            snprintf(err, ERRLEN, "renewal: out of memory");
            return;
        }
        for (k = 0; k < m; k++) {
            redlock_conn *c = conns[k];
            if (reps[k] == NULL) {
                if (pass == 0 && stale[k]) {
                    conns[again++] = c;
                } else {
                    snprintf(err, ERRLEN, "%s", c->err);
                }
                continue;
            }
            switch (e->waits ? extend_value_wait(c, e, reps[k], wreps[k], err)
                             : extend_value(c, reps[k], err)) {
            case 1: (*yes)++; break;
            case 0: (*no)++; break;
            default: break;
            }
        }
        m = again;
    }
    track_all(r);
}

/* One renewal round of e on every server. Called and returns with r->mu
 * held; drops it during the I/O. */
static void renew_one(renewer *r, entry *e, double now) {
    double ext = e->ttl, drift, t0, t1;
    int i, yes = 0, no = 0, n = r->nservers, gen = e->gen, stopping = 0;
    char ttl[32], err[ERRLEN];
    /* never extend past hold_until: the key expires then on its own */
    if (e->hold_until - now < ext)
        ext = floor(e->hold_until - now);
    drift = ext * e->drift_factor + 2;
    if (ext - drift < 1) {
        e->phase = HOLDING;
        return;
    }
    snprintf(ttl, sizeof ttl, "%.0f", ext);
    err[0] = '\0';
    r->busy = e;
    pthread_mutex_unlock(&r->mu);

    recheck_all(r, e->interval / 2);
    t0 = mono_ms();
    if (n >= 2 && r->timeout_ms > 0 && !e->any_legacy) {
        extend_all(r, e, ttl, &yes, &no, err);
    } else {
        /* one server, or some in legacy mode: one after another */
        for (i = 0; i < n && !stopping; i++) {
            int v = e->legacy[i] ? legacy_extend_on(r, i, e, ext, ttl, err) : extend_on(r, i, e, ttl, err);
            if (v == 1)
                yes++;
            else if (v == 0)
                no++;
            pthread_mutex_lock(&r->mu);
            stopping = r->stopping || e->stopped;
            pthread_mutex_unlock(&r->mu);
        }
    }
    t1 = mono_ms();

    pthread_mutex_lock(&r->mu);
    r->busy = NULL;
    if (r->stopping || e->stopped || e->phase != RENEWING)
        return;
    if (yes >= e->quorum && t1 - t0 < ext - drift) {
        double until = t0 + ext - drift;
        /* An extend from Lua ran meanwhile on another connection: which one
         * the servers applied last is unknown, so believe the shorter. */
        e->expires = gen == e->gen || until < e->expires ? until : e->expires;
        e->renewals++;
        r->renewals++;
        e->next_due = gen == e->gen ? t0 + e->interval : t1;
        if (ext < e->ttl)
            e->phase = HOLDING;
    } else if (no > n - e->quorum) {
        mark_lost(r, e, LOST_GONE);
    } else {
        double retry = (e->expires - t1) / 3;
        e->failures++;
        if (yes >= e->quorum)
            snprintf(e->err, ERRLEN, "the renewal took %.0f ms, past its validity", t1 - t0);
        else
            snprintf(e->err, ERRLEN, "%s", err[0] ? err : "no quorum");
        if (retry > e->interval)
            retry = e->interval;
        if (retry < MIN_RETRY_MS)
            retry = MIN_RETRY_MS;
        e->next_due = t1 + retry;
    }
}

static void *renew_main(void *arg) {
    renewer *r = (renewer *)arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        double when = 0, now;
        entry *e;
        r->wake_at = -INFINITY; /* awake: add and update need not signal */
        e = next_due(r, &when);
        if (e == NULL) {
            r->wake_at = INFINITY;
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        now = mono_ms();
        if (when > now) {
            r->wake_at = when;
            wait_until(r, when);
            continue;
        }
        if (e->phase == HOLDING)
            mark_lost(r, e, LOST_MAX_HOLD);
        else if (now >= e->expires)
            mark_lost(r, e, LOST_EXPIRED);
        else if (now >= e->hold_until)
            e->phase = HOLDING;
        else
            renew_one(r, e, now);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Starts the thread with every signal blocked, so that signals go to the
 * host's threads and a write to a dropped socket cannot kill the process
 * with SIGPIPE. Under r->mu. Returns 0 or an errno. */
static int start_thread(renewer *r) {
    sigset_t all, old;
    int rc;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&r->thread, NULL, renew_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        r->started = 1;
        r->has_thread = 1;
        r->gen = redlock_fork_generation();
        count_threads(1);
    }
    return rc;
}

/* --- renewer lifetime ---------------------------------------------------- */

/* The condition variable, timed on CLOCK_MONOTONIC. 0 or -1. */
static int init_cond(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    int ok;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
    return ok ? 0 : -1;
}

static renewer *renewer_alloc(int n) {
    renewer *r = calloc(1, sizeof *r);
    int i, ok;
    if (r == NULL)
        return NULL;
    r->conns = calloc((size_t)n, sizeof(redlock_conn *));
    r->dupfd = malloc((size_t)n * sizeof *r->dupfd);
    r->tracks = malloc((size_t)n * sizeof *r->tracks);
    ok = r->conns != NULL && r->dupfd != NULL && r->tracks != NULL && init_cond(&r->cv) == 0;
    if (ok && pthread_mutex_init(&r->mu, NULL) != 0) {
        pthread_cond_destroy(&r->cv);
        ok = 0;
    }
    if (!ok) {
        free(r->conns);
        free(r->dupfd);
        free(r->tracks);
        free(r);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        r->dupfd[i] = -1;
        r->tracks[i].r = r;
        r->tracks[i].i = i;
    }
    r->nservers = n;
    r->refs = 1;
    r->wake_at = -INFINITY; /* no thread yet: the first add starts one */
    return r;
}

/* Stops and unlinks every lock entry (the caller holds r->mu, or is the
 * only thread left). */
static void drop_entries(renewer *r) {
    entry *e = r->list, *next;
    r->list = NULL;
    for (; e != NULL; e = next) {
        next = e->next;
        stop_entry(r, e);
        e->next = e->prev = NULL;
        e->in_list = 0;
        entry_unref(e);
    }
}

static void renewer_free(renewer *r) {
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->conns);
    free(r->dupfd);
    free(r->tracks);
    free(r);
}

/* Stops and joins the thread, frees its connections, stops every entry.
 * Idempotent. */
static void renewer_shutdown(renewer *r) {
    int i, started;
    pthread_mutex_lock(&r->mu);
    if (r->closed) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    r->closed = 1;
    r->stopping = 1;
    for (i = 0; i < r->nservers; i++)
        if (r->dupfd[i] >= 0)
            shutdown(r->dupfd[i], SHUT_RDWR); /* wakes a blocked read */
    pthread_cond_broadcast(&r->cv);
    started = r->started;
    pthread_mutex_unlock(&r->mu);
    if (started) {
        pthread_join(r->thread, NULL);
        count_threads(-1);
    }
    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->nservers; i++) {
        redlock_conn_free(r->conns[i]);
        r->conns[i] = NULL;
        if (r->dupfd[i] >= 0)
            close(r->dupfd[i]);
        r->dupfd[i] = -1;
    }
    drop_entries(r);
    pthread_mutex_unlock(&r->mu);
}

/* Drops one reference; frees the renewer at the last one. */
static void renewer_unref(renewer *r) {
    int last;
    pthread_mutex_lock(&r->mu);
    last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        renewer_free(r);
}

/* A child of fork() (without exec) has no renewal thread, and may have a
 * copy of the mutex that the thread held at the fork: it starts over
 * without either, with its own sockets, and leaves the parent's locks to
 * the parent (it must not join a thread it does not have). Runs before
 * every use of the renewer from Lua (a fork generation compare: no
 * syscall); only the Lua side writes has_thread and gen. */
static void after_fork(renewer *r) {
    int i;
    if (!r->has_thread || r->gen == redlock_fork_generation())
        return;
    pthread_mutex_init(&r->mu, NULL);
    init_cond(&r->cv);
    if (r->started && !r->closed)
        count_threads(-1); /* the parent's thread, counted in the copy */
    r->has_thread = 0;
    r->started = 0;
    r->busy = NULL; /* the parent's thread's, not ours */
    r->wake_at = -INFINITY;
    r->stopping = r->closed;
    for (i = 0; i < r->nservers; i++) {
        if (r->conns[i] != NULL)
            redlock_conn_drop(r->conns[i]); /* this process's copy of the socket */
        if (r->dupfd[i] >= 0)
            close(r->dupfd[i]);
        r->dupfd[i] = -1;
    }
    drop_entries(r);
}

/* --- Lua: renewer -------------------------------------------------------- */

static renewer_ud *check_renewer(lua_State *L) {
    renewer_ud *ud = (renewer_ud *)redlock_checkself(L, REDLOCK_RENEWER_MT);
    if (ud->r != NULL)
        after_fork(ud->r);
    return ud;
}

static renewer *open_renewer(lua_State *L) {
    renewer_ud *ud = check_renewer(L);
    if (ud->r == NULL || ud->r->closed)
        luaL_error(L, "attempt to use a closed renewer");
    return ud->r;
}

/* A legacy flag at the top of the stack: 0 (false, nil), 1 (true), 2
 * ("expire"). */
static unsigned char legacy_flag(lua_State *L) {
    if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "expire") == 0)
        return 2;
    return (unsigned char)lua_toboolean(L, -1);
}

/* core.renewer({conn, ...} [, timeout_ms [, {legacy, ...}]]) */
static int renewer_new(lua_State *L) {
    int n, i;
    lua_Integer cap = luaL_optinteger(L, 2, 0);
    renewer_ud *ud;
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_argcheck(L, cap >= 0 && cap <= 86400000, 2, "out of range");
    n = (int)lua_rawlen(L, 1);
    luaL_argcheck(L, n >= 1 && n <= MAX_SERVERS, 1, "1 to 64 conns expected");
    for (i = 1; i <= n; i++) {
        redlock_conn *c;
        lua_rawgeti(L, 1, i);
        c = (redlock_conn *)luaL_testudata(L, -1, REDLOCK_CONN_MT);
        if (c == NULL)
            return luaL_argerror(L, 1, lua_pushfstring(L, "conn expected at [%d]", i));
        if (c->closed)
            return luaL_argerror(L, 1, lua_pushfstring(L, "conn [%d] is closed", i));
        lua_pop(L, 1);
    }
    ud = (renewer_ud *)lua_newuserdata(L, sizeof *ud);
    ud->r = NULL;
    luaL_getmetatable(L, REDLOCK_RENEWER_MT);
    lua_setmetatable(L, -2);
    ud->r = renewer_alloc(n);
    if (ud->r == NULL)
        return luaL_error(L, "out of memory");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        ud->r->conns[i] = redlock_conn_clone((redlock_conn *)lua_touserdata(L, -1));
        lua_pop(L, 1);
        if (ud->r->conns[i] == NULL)
            return luaL_error(L, "out of memory"); /* __gc frees the others */
        if (cap > 0 && (ud->r->conns[i]->timeout_ms == 0 || ud->r->conns[i]->timeout_ms > cap))
            ud->r->conns[i]->timeout_ms = (int)cap;
        if (cap > 0 && ud->r->conns[i]->connect_timeout_ms > cap)
            ud->r->conns[i]->connect_timeout_ms = (int)cap;
        /* a Cluster's nodes, which carry its commands, take the caps too,
         * and their sockets are tracked for close() */
        redlock_conn_set_timeouts(ud->r->conns[i], ud->r->conns[i]->connect_timeout_ms,
                                  ud->r->conns[i]->timeout_ms);
        /* every socket the thread opens is dup'ed as soon as it exists, so
         * that close() never waits for a connection's set-up (a Cluster's
         * nodes, which carry its commands, too) */
        if (ud->r->conns[i]->cluster != NULL) {
            redlock_cluster_set_track(ud->r->conns[i]->cluster, track_node, &ud->r->tracks[i]);
        } else {
            ud->r->conns[i]->on_socket = track_node;
            ud->r->conns[i]->on_socket_arg = &ud->r->tracks[i];
        }
        /* the fan-out's limit: the longest of the (capped) reply timeouts */
        if (i == 0 || ud->r->conns[i]->timeout_ms > ud->r->timeout_ms)
            ud->r->timeout_ms = ud->r->conns[i]->timeout_ms;
    }
    if (cap == 0)
        ud->r->timeout_ms = 0; /* one server: asked directly */
    if (lua_istable(L, 3)) {
        for (i = 0; i < n; i++) {
            lua_rawgeti(L, 3, i + 1);
            ud->r->legacy[i] = legacy_flag(L);
            ud->r->any_legacy |= ud->r->legacy[i] != 0;
            lua_pop(L, 1);
        }
    }
    return 1;
}

static lua_Number check_ms(lua_State *L, int arg, lua_Number lo) {
    lua_Number v = luaL_checknumber(L, arg);
    luaL_argcheck(L, v >= lo && v <= 9007199254740992.0, arg, "out of range");
    return v;
}

/* renewer:add(key, token, ttl, expires, hold_until, quorum, drift_factor
 *              [, replicas, replica_timeout, aof [, {legacy, ...}]]) */
static int renewer_add(lua_State *L) {
    renewer *r;
    renewal_ud *h;
    entry *e;
    size_t klen, tlen;
    const char *key = luaL_checklstring(L, 2, &klen);
    const char *token = luaL_checklstring(L, 3, &tlen);
    lua_Number ttl = check_ms(L, 4, 3), expires = check_ms(L, 5, -1e300);
    lua_Number hold = check_ms(L, 6, -1e300);
    lua_Integer quorum = luaL_checkinteger(L, 7);
    lua_Number drift = luaL_checknumber(L, 8);
    lua_Integer replicas = luaL_optinteger(L, 9, 0), wait_ms = luaL_optinteger(L, 10, 1000);
    int aof = lua_toboolean(L, 11), rc = 0, i;
    luaL_argcheck(L, drift >= 0 && drift < 1, 8, "out of range");
    luaL_argcheck(L, replicas >= 0 && replicas <= 1000000, 9, "out of range");
    luaL_argcheck(L, wait_ms >= 1 && wait_ms <= 86400000, 10, "out of range");
    r = open_renewer(L);
    luaL_argcheck(L, quorum >= 1 && quorum <= r->nservers, 7, "out of range");
    h = (renewal_ud *)lua_newuserdata(L, sizeof *h);
    h->e = NULL;
    luaL_getmetatable(L, REDLOCK_RENEWAL_MT);
    lua_setmetatable(L, -2);
    e = calloc(1, sizeof *e + klen + tlen + 2);
    if (e == NULL)
        return luaL_error(L, "out of memory");
    e->key = (char *)(e + 1);
    memcpy(e->key, key, klen);
    e->keylen = klen;
    e->token = e->key + klen + 1;
    memcpy(e->token, token, tlen);
    e->toklen = tlen;
    e->r = r;
    e->refs = 2;
    e->phase = RENEWING;
    e->ttl = ttl;
    e->interval = ttl / 3;
    e->expires = expires;
    e->hold_until = hold;
    e->drift_factor = drift;
    e->quorum = (int)quorum;
    e->waits = replicas > 0 || aof;
    e->wait.replicas = (int)replicas;
    e->wait.timeout_ms = (int)wait_ms;
    e->wait.aof = aof;
    e->next_due = mono_ms() + e->interval;
    /* legacy flags of this lock (the server's mode when it was taken: mode
     * "auto" may change it later), else the renewer's */
    for (i = 0; i < r->nservers; i++) {
        if (lua_istable(L, 12)) {
            lua_rawgeti(L, 12, i + 1);
            e->legacy[i] = legacy_flag(L);
            lua_pop(L, 1);
        } else {
            e->legacy[i] = r->legacy[i];
        }
        e->any_legacy |= e->legacy[i] != 0;
    }

    pthread_mutex_lock(&r->mu);
    if (!r->started)
        rc = start_thread(r);
    if (rc != 0) {
        pthread_mutex_unlock(&r->mu);
        free(e);
        return luaL_error(L, "cannot start the renewal thread (%s)", strerror(rc));
    }
    e->id = ++r->next_id;
    link_entry(r, e);
    r->refs++;
    h->e = e;
    wake_for(r, e->next_due);
    pthread_mutex_unlock(&r->mu);
    lua_pushinteger(L, e->id);
    return 2;
}

/* renewer:take_lost() -> {id, ...} of entries lost since the last call (at
 * most 32 a call), or nil */
static int renewer_take_lost(lua_State *L) {
    renewer *r = open_renewer(L);
    lua_Integer ids[MAX_TAKE];
    int n = 0, i;
    entry *e;
    pthread_mutex_lock(&r->mu);
    for (e = r->list; e != NULL && r->unreported > 0 && n < MAX_TAKE; e = e->next) {
        if (e->pending) {
            e->pending = 0;
            r->unreported--;
            ids[n++] = e->id;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (n == 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* renewer:pending() -> whether take_lost has something: the cheap test run
 * at the start of every call on a client */
static int renewer_pending(lua_State *L) {
    renewer_ud *ud = check_renewer(L);
    int n = 0;
    if (ud->r != NULL) {
        pthread_mutex_lock(&ud->r->mu);
        n = ud->r->unreported;
        pthread_mutex_unlock(&ud->r->mu);
    }
    lua_pushboolean(L, n > 0);
    return 1;
}

/* renewer:stats() -> entries renewing or holding, renewals made, running,
 * entries in the list */
static int renewer_stats(lua_State *L) {
    renewer_ud *ud = check_renewer(L);
    renewer *r = ud->r;
    lua_Integer live = 0, listed = 0;
    lua_Number renewals = 0;
    int running = 0;
    entry *e;
    if (r != NULL) {
        pthread_mutex_lock(&r->mu);
        for (e = r->list; e != NULL; e = e->next) {
            listed++;
            if (!e->stopped && e->phase != IDLE)
                live++;
        }
        renewals = (lua_Number)r->renewals;
        running = r->started && !r->closed;
        pthread_mutex_unlock(&r->mu);
    }
    lua_pushinteger(L, live);
    lua_pushnumber(L, renewals);
    lua_pushboolean(L, running);
    lua_pushinteger(L, listed);
    return 4;
}

static int renewer_close(lua_State *L) {
    renewer_ud *ud = check_renewer(L);
    if (ud->r != NULL)
        renewer_shutdown(ud->r);
    return 0;
}

static int renewer_gc(lua_State *L) {
    renewer_ud *ud = check_renewer(L);
    if (ud->r != NULL) {
        renewer_shutdown(ud->r);
        renewer_unref(ud->r);
        ud->r = NULL;
    }
    return 0;
}

static int renewer_tostring(lua_State *L) {
    renewer_ud *ud = check_renewer(L);
    if (ud->r == NULL || ud->r->closed)
        lua_pushliteral(L, "redlock.renewer (closed)");
    else
        lua_pushfstring(L, "redlock.renewer (%d servers)", ud->r->nservers);
    return 1;
}

/* --- Lua: renewal -------------------------------------------------------- */

static entry *check_renewal(lua_State *L) {
    renewal_ud *h = (renewal_ud *)redlock_checkself(L, REDLOCK_RENEWAL_MT);
    if (h->e != NULL)
        after_fork(h->e->r);
    else
        luaL_error(L, "attempt to use a collected renewal");
    return h->e;
}

static int renewal_state(lua_State *L) {
    entry *e = check_renewal(L);
    renewer *r = e->r;
    enum phase phase;
    enum lost lost;
    double expires;
    lua_Number renewals, failures;
    char err[ERRLEN];
    pthread_mutex_lock(&r->mu);
    phase = e->stopped ? IDLE : e->phase;
    lost = e->lost;
    expires = e->expires;
    renewals = (lua_Number)e->renewals;
    failures = (lua_Number)e->failures;
    memcpy(err, e->err, ERRLEN);
    pthread_mutex_unlock(&r->mu);
    lua_pushstring(L, phase_words[phase]);
    lua_pushnumber(L, expires);
    lua_pushnumber(L, renewals);
    lua_pushnumber(L, failures);
    if (lost != NOT_LOST)
        lua_pushstring(L, lost_words[lost]);
    else
        lua_pushnil(L);
    if (err[0] != '\0')
        lua_pushstring(L, err);
    else
        lua_pushnil(L);
    return 6;
}

static int renewal_expires(lua_State *L) {
    entry *e = check_renewal(L);
    double expires;
    pthread_mutex_lock(&e->r->mu);
    expires = e->lost == LOST_GONE ? 0 : e->expires;
    pthread_mutex_unlock(&e->r->mu);
    lua_pushnumber(L, expires);
    return 1;
}

static int renewal_lost(lua_State *L) {
    entry *e = check_renewal(L);
    enum lost lost;
    pthread_mutex_lock(&e->r->mu);
    lost = e->lost;
    pthread_mutex_unlock(&e->r->mu);
    if (lost == NOT_LOST)
        lua_pushnil(L);
    else
        lua_pushstring(L, lost_words[lost]);
    return 1;
}

/* renewal:update(ttl, expires): Lua extended the lock itself */
static int renewal_update(lua_State *L) {
    entry *e = check_renewal(L);
    lua_Number ttl = check_ms(L, 2, 3), expires = check_ms(L, 3, -1e300);
    renewer *r = e->r;
    pthread_mutex_lock(&r->mu);
    if (e->lost == NOT_LOST) {
        e->ttl = ttl;
        e->interval = ttl / 3;
        e->expires = expires;
        e->next_due = mono_ms() + e->interval;
        e->gen++;
        wake_for(r, e->next_due < e->expires ? e->next_due : e->expires);
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int renewal_stop(lua_State *L) {
    entry *e = check_renewal(L);
    renewer *r = e->r; /* (e outlives this: the userdata holds a reference) */
    pthread_mutex_lock(&r->mu);
    entry_drop(e, retire_entry(r, e));
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int renewal_gc(lua_State *L) {
    renewal_ud *h = (renewal_ud *)redlock_checkself(L, REDLOCK_RENEWAL_MT);
    entry *e = h->e;
    renewer *r;
    if (e == NULL)
        return 0;
    h->e = NULL;
    r = e->r;
    after_fork(r);
    pthread_mutex_lock(&r->mu);
    entry_drop(e, retire_entry(r, e) + 1); /* and the userdata's reference */
    pthread_mutex_unlock(&r->mu);
    renewer_unref(r);
    return 0;
}

/* core.renew_threads() -> renewal threads running in this process */
static int core_renew_threads(lua_State *L) {
    int n;
    pthread_mutex_lock(&count_mu);
    n = live_threads;
    pthread_mutex_unlock(&count_mu);
    lua_pushinteger(L, n);
    return 1;
}

void redlock_renew_open(lua_State *L) {
    static const luaL_Reg renewer_methods[] = {
        {"add", renewer_add},     {"take_lost", renewer_take_lost},
        {"pending", renewer_pending}, {"stats", renewer_stats},
        {"close", renewer_close}, {NULL, NULL},
    };
    static const luaL_Reg renewer_meta[] = {
        {"__gc", renewer_gc},
        {"__close", renewer_close},
        {"__tostring", renewer_tostring},
        {NULL, NULL},
    };
    static const luaL_Reg renewal_methods[] = {
        {"state", renewal_state}, {"expires", renewal_expires}, {"lost", renewal_lost},
        {"update", renewal_update}, {"stop", renewal_stop},     {NULL, NULL},
    };
    static const luaL_Reg renewal_meta[] = {
        {"__gc", renewal_gc},
        {NULL, NULL},
    };
    /* fills the SHA-1 names before any thread reads them */
    extend_script = redlock_script_find("extend");
    redlock_newtype(L, REDLOCK_RENEWER_MT, renewer_meta, renewer_methods);
    redlock_newtype(L, REDLOCK_RENEWAL_MT, renewal_meta, renewal_methods);
    lua_pushcfunction(L, renewer_new);
    lua_setfield(L, -2, "renewer");
    lua_pushcfunction(L, core_renew_threads);
    lua_setfield(L, -2, "renew_threads");
}
