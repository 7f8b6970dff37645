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
 *   each within timeout_ms: the fan-out of csrc/drivers/fanout.c; legacy[i] true:
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
 * so a with_lock loop does not ping-pong with it.
 *
 * This file: the entries, the thread's schedule and the renewer's
 * lifetime; the I/O of a round is renew_io.c's, the majority rule
 * renew_quorum.c's, the Lua bindings renew_lua.c's (renew_int.h). */
#define _GNU_SOURCE
#include "renew_int.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "token.h"

static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;
static int live_threads;

static void count_threads(int delta) {
    pthread_mutex_lock(&count_mu);
    live_threads += delta;
    pthread_mutex_unlock(&count_mu);
}

int renew_live_threads(void) {
    int n;
    pthread_mutex_lock(&count_mu);
    n = live_threads;
    pthread_mutex_unlock(&count_mu);
    return n;
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
void renew_entry_drop(entry *e, int n) {
    e->refs -= n;
    if (e->refs == 0)
        free(e);
}

static void entry_unref(entry *e) { renew_entry_drop(e, 1); }

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

void renew_link_entry(renewer *r, entry *e) {
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
int renew_retire_entry(renewer *r, entry *e) {
    stop_entry(r, e);
    if (e->in_list && r->busy != e) {
        detach_entry(r, e);
        return 1;
    }
    return 0;
}

/* Wakes the thread if it sleeps past `due` (it rescans when it wakes). */
void renew_wake_for(renewer *r, double due) {
    if (due < r->wake_at)
        pthread_cond_signal(&r->cv);
}

/* Unlinks stopped entries; returns the live one due first and when. */
entry *renew_next_due(renewer *r, double *when) {
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

/* One renewal round of e on every server. Called and returns with r->mu
 * held; drops it during the I/O. */
static void renew_one(renewer *r, entry *e, double now) {
    double ext = e->ttl, drift, t0 = 0, t1;
    enum renew_outcome outcome;
    int yes = 0, no = 0, n = r->nservers, gen = e->gen;
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

    renew_io_round(r, e, ext, ttl, &t0, &yes, &no, err);
    t1 = redlock_mono_ms();

    pthread_mutex_lock(&r->mu);
    r->busy = NULL;
    if (r->stopping || e->stopped || e->phase != RENEWING)
        return;
    outcome = renew_verdict(yes, no, n, e->quorum, t1 - t0, ext - drift);
    if (outcome == RENEWED) {
        double until = t0 + ext - drift;
        /* An extend from Lua ran meanwhile on another connection: which one
         * the servers applied last is unknown, so believe the shorter. */
        e->expires = gen == e->gen || until < e->expires ? until : e->expires;
        e->renewals++;
        r->renewals++;
        e->next_due = gen == e->gen ? t0 + e->interval : t1;
        if (ext < e->ttl)
            e->phase = HOLDING;
    } else if (outcome == RENEW_LOST) {
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
        e = renew_next_due(r, &when);
        if (e == NULL) {
            r->wake_at = INFINITY;
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        now = redlock_mono_ms();
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
int renew_start_thread(renewer *r) {
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

renewer *renew_renewer_alloc(int n) {
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
void renew_renewer_shutdown(renewer *r) {
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
void renew_renewer_unref(renewer *r) {
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
void renew_after_fork(renewer *r) {
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

