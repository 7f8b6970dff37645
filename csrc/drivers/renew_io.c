/* The renewal thread's I/O (renew_int.h): a round of extends on every
 * server, through the topology core's exchange (conn.c) one server at a
 * time or the fan-out (fanout.c) all at once; legacy mode's WATCH/MULTI
 * extend; the dup'ed sockets that close() shuts down. Runs without the
 * renewer's mutex, on the thread. */
#define _GNU_SOURCE
#include "renew_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "clock.h"
#include "fanout.h"
#include "scripts.h"

static const redlock_script *extend_script; /* set at load, before any thread */

void renew_io_init(void) { extend_script = redlock_script_find("extend"); }

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
 * down is taken by renew_track_node (the conn's on_socket) as soon as the
 * socket exists, before AUTH and the TLS handshake. -1 when stopping or on
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
        redlock_set_error(err, ERRLEN, REDLOCK_E_CLOSED, NULL, "the client is closed");
        return -1;
    }
    if (redlock_conn_ensure(c) != 0) {
        snprintf(err, ERRLEN, "%s", c->err);
        untrack(r, i); /* the dup of a socket that failed during its set-up */
        return -1;
    }
    return 0;
}

/* What an extend reply says: 1 extended, 0 the token is not there, -1 an
 * error (err says why). Frees the reply. */
static int extend_value(redlock_conn *c, redisReply *rep, char *err) {
    int v = -1;
    if (rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer == 1 ? 1 : 0;
    else if (rep->type == REDIS_REPLY_ERROR)
        redlock_set_error(err, ERRLEN, REDLOCK_E_SERVER, c->name, "%.*s",
                          (int)(rep->len > 160 ? 160 : rep->len), rep->str);
    else
        redlock_set_error(err, ERRLEN, REDLOCK_E_SERVER, c->name,
                          "unexpected reply to extend (type %d)", rep->type);
    freeReplyObject(rep);
    return v;
}

/* Whether WAIT's answer w (NULL: it did not come; c->err says why) gives
 * e the replicas it asked for: 1, or -1 with err saying why not (wait.h's
 * rules). */
static int acked_enough(redlock_conn *c, const entry *e, const redisReply *w, char *err) {
    long long acked, fsynced;
    if (w == NULL) {
        snprintf(err, ERRLEN, "%s", c->err);
        return -1;
    }
    if (redlock_wait_answer(&e->wait, w, c->name, &acked, &fsynced, err, ERRLEN) != 0 ||
        redlock_wait_short(&e->wait, c->name, "the renewal", acked, fsynced, err, ERRLEN))
        return -1;
    return 1;
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

/* The extend script on server i (with WAIT in the same write when e waits
 * for replicas), through the request loop (conn.c: NOSCRIPT, a stale
 * connection, redirections, a master turned replica): 1 extended (and
 * acknowledged), 0 the token is not there, -1 failed (err says why). */
static int extend_on(renewer *r, int i, const entry *e, const char *ttl, char *err) {
    redlock_conn *c = r->conns[i];
    const char *argv[6];
    size_t len[6];
    char wbuf[REDLOCK_WAIT_BUF];
    redlock_cmd cmd;
    redlock_tail tail;
    redisReply *rep = NULL, *w = NULL;
    int retry = 0;
    if (connect_tracked(r, i, err) != 0)
        return -1;
    cmd.argc = 6;
    cmd.argv = argv;
    cmd.argvlen = len;
    extend_args(argv, len, e, ttl);
    redlock_cmd_evalsha(&cmd, extend_script->sha, extend_script->source);
    if (e->waits && redlock_wait_tail(&e->wait, wbuf, &tail) != 0) {
        snprintf(err, ERRLEN, "renewal: out of memory");
        return -1;
    }
    /* (not 0 with rep: WAIT's reply did not come, w is NULL) */
    (void)redlock_request(c, &cmd, e->waits ? &tail : NULL, 0, &rep, &w, &retry);
    if (conn_fd(c) < 0)
        untrack(r, i);
    if (rep == NULL) {
        snprintf(err, ERRLEN, "%s", c->err);
        return -1;
    }
    return e->waits ? extend_value_wait(c, e, rep, w, err) : extend_value(c, rep, err);
}

/* One command on server i's connection: 0 and *rep, or -1 (err says why;
 * the connection is dropped, WATCH and MULTI state with it). kept: a step
 * after WATCH, only on the connection open now (conn.h's kept). */
static int command_on(renewer *r, int i, int kept, int argc, const char **argv, const size_t *len,
                      redisReply **rep, char *err) {
    redlock_conn *c = r->conns[i];
    int retry = 0, rc;
    c->kept = kept;
    rc = redlock_command(c, argc, argv, len, kept ? REDLOCK_AT_KEPT : 0, rep, &retry);
    c->kept = 0;
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
    if (command_on(r, i, 0, 1, argv, len, &rep, err) == 0)
        freeReplyObject(rep);
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
static int legacy_extend_on(renewer *r, int i, const entry *e, double ext, const char *ttl,
                            char *err) {
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
    if (command_on(r, i, 0, 2, argv, len, &rep, err) != 0)
        return -1;
    freeReplyObject(rep);
    argv[0] = "GET";
    len[0] = 3;
    if (command_on(r, i, 1, 2, argv, len, &rep, err) != 0)
        return -1;
    ours = legacy_ours(rep, e, redlock_wall_ms());
    freeReplyObject(rep);
    if (!ours) {
        command_quiet(r, i, "UNWATCH");
        return 0;
    }
    snprintf(value, sizeof value, "%.0f:%.*s", floor(redlock_wall_ms()) + ext, (int)e->toklen,
             e->token);
    argv[0] = "MULTI";
    len[0] = 5;
    if (command_on(r, i, 1, 1, argv, len, &rep, err) != 0)
        return -1;
    freeReplyObject(rep);
    argv[0] = "SET";
    len[0] = 3;
    argv[2] = value;
    len[2] = strlen(value);
    if (command_on(r, i, 1, 3, argv, len, &rep, err) != 0)
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
    if (command_on(r, i, 1, 3, argv, len, &rep, err) != 0)
        return -1;
    note_queued(rep, queued);
    freeReplyObject(rep);
    argv[0] = "EXEC";
    len[0] = 4;
    if (command_on(r, i, 1, 1, argv, len, &rep, err) != 0)
        return -1;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        v = 1;
    else if (rep->type == REDIS_REPLY_ERROR && queued[0] != '\0')
        redlock_set_error(err, ERRLEN, REDLOCK_E_SERVER, r->conns[i]->name, "%.160s", queued);
    else if (rep->type == REDIS_REPLY_ERROR)
        redlock_set_error(err, ERRLEN, REDLOCK_E_SERVER, r->conns[i]->name, "%.*s",
                          (int)(rep->len > 160 ? 160 : rep->len), rep->str);
    else
        redlock_set_error(err, ERRLEN, REDLOCK_E_SERVER, r->conns[i]->name,
                          "the key changed while renewing");
    freeReplyObject(rep);
    return v;
}

/* Records a dup of each socket the fan-out left open (close() shuts them
 * down), and forgets those it closed. */
/* Sentinel-managed servers whose master moved are dropped (and their
 * sockets' dups closed) before a round, so that it goes to the new one:
 * moved as the thread's +switch-master subscription announced (the next
 * connect goes to the master it named, even when no sentinel answers
 * then), or as a sentinel says, asked at least twice per renewal interval:
 * a round that extends only the old master lets the copy on the new one run
 * out. */
static void recheck_all(renewer *r, double max_age_ms) {
    int i;
    for (i = 0; i < r->nservers; i++) {
        redlock_conn *c = r->conns[i];
        if (c->kind->recheck == NULL || c->ctx == NULL)
            continue;
        c->kind->recheck(c, max_age_ms);
        if (conn_fd(c) < 0)
            untrack(r, i);
    }
}

void renew_track_node(void *arg, int fd) {
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

/* The extend script on every server at once (the fan-out of csrc/drivers/fanout.c),
 * each within the renewer's timeout: a round costs the slowest answer, not
 * the sum (the fan-out sends again where the topology core says so: a
 * stale connection, a redirection). Counts into *yes and *no; err keeps
 * the last failure's message. */
static void extend_all(renewer *r, const entry *e, const char *ttl, int *yes, int *no, char *err) {
    redisReply *reps[MAX_SERVERS], *wreps[MAX_SERVERS];
    int stale[MAX_SERVERS], n = r->nservers, k, fail;
    const char *argv[6];
    size_t len[6];
    extend_args(argv, len, e, ttl);
    if (e->waits)
        fail = redlock_fanout_eval_wait_c(r->conns, n, r->timeout_ms, extend_script, &e->wait, argv,
                                          len, 6, reps, wreps, stale);
    else
        fail = redlock_fanout_eval_c(r->conns, n, r->timeout_ms, extend_script, argv, len, 6, reps,
                                     stale);
    if (fail != 0) {
        snprintf(err, ERRLEN, "renewal: out of memory");
        return;
    }
    for (k = 0; k < n; k++) {
        redlock_conn *c = r->conns[k];
        if (reps[k] == NULL) {
            snprintf(err, ERRLEN, "%s", c->err);
            continue;
        }
        switch (e->waits ? extend_value_wait(c, e, reps[k], wreps[k], err)
                         : extend_value(c, reps[k], err)) {
        case 1: (*yes)++; break;
        case 0: (*no)++; break;
        default: break;
        }
    }
    track_all(r);
}

void renew_io_round(renewer *r, entry *e, double ext, const char *ttl, double *t0, int *yes,
                    int *no, char *err) {
    int i, n = r->nservers, stopping = 0;
    recheck_all(r, e->interval / 2);
    *t0 = redlock_mono_ms();
    if (n >= 2 && r->timeout_ms > 0 && !e->any_legacy) {
        extend_all(r, e, ttl, yes, no, err);
    } else {
        /* one server, or some in legacy mode: one after another */
        for (i = 0; i < n && !stopping; i++) {
            int v = e->legacy[i] ? legacy_extend_on(r, i, e, ext, ttl, err)
                                 : extend_on(r, i, e, ttl, err);
            if (v == 1)
                (*yes)++;
            else if (v == 0)
                (*no)++;
            pthread_mutex_lock(&r->mu);
            stopping = r->stopping || e->stopped;
            pthread_mutex_unlock(&r->mu);
        }
    }
}
