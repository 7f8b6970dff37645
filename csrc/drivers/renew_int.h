/* The renewal thread's shared state (csrc/drivers/renew.c, renew_io.c,
 * renew_quorum.c, renew_lua.c): internal to those files. */
#ifndef REDLOCK_RENEW_INT_H
#define REDLOCK_RENEW_INT_H

#include <pthread.h>

#include "compat.h"
#include "conn.h"
#include "wait.h"

#define MAX_SERVERS 64
#define ERRLEN REDLOCK_CONN_ERRLEN
#define MAX_TAKE 32
#define MIN_RETRY_MS 10.0

enum phase { RENEWING, HOLDING, IDLE }; /* HOLDING: max_hold reached, expiry watched */
enum lost { NOT_LOST, LOST_GONE, LOST_EXPIRED, LOST_MAX_HOLD };

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


/* --- renew.c: entries, the thread, the renewer's lifetime --------------- */
void renew_entry_drop(entry *e, int n);
void renew_link_entry(renewer *r, entry *e);
int renew_retire_entry(renewer *r, entry *e);
void renew_wake_for(renewer *r, double due);
entry *renew_next_due(renewer *r, double *when);
int renew_start_thread(renewer *r);
renewer *renew_renewer_alloc(int n);
void renew_renewer_shutdown(renewer *r);
void renew_renewer_unref(renewer *r);
void renew_after_fork(renewer *r);
int renew_live_threads(void); /* renewal threads running in this process */

/* --- renew_io.c: the thread's I/O (without the mutex) ------------------- */
void renew_io_init(void); /* at load, before any thread */
/* One round of e on every server: the extend script (or legacy mode's
 * WATCH/MULTI extend), all at once through the fan-out when it can. *t0:
 * when the requests went out; counts into *yes (extended) and *no (the
 * token is not there); err: the last failure's message. */
void renew_io_round(renewer *r, entry *e, double ext, const char *ttl, double *t0, int *yes,
                    int *no, char *err);
/* A Cluster conn's track callback (struct track as arg). */
void renew_track_node(void *arg, int fd);

/* --- renew_quorum.c: the majority rule ---------------------------------- */
enum renew_outcome { RENEWED, RENEW_LOST, RENEW_RETRY };
/* What a round with yes extended and no refused of n servers comes to, for
 * a lock that needs quorum of them within validity ms (its ttl less the
 * clock drift), the round having taken elapsed ms. */
enum renew_outcome renew_verdict(int yes, int no, int n, int quorum, double elapsed,
                                 double validity);

#endif
