/* The renewal's Lua bindings: core.renewer, the renewer and renewal
 * userdata (see csrc/drivers/renew.c's head for the interface). */
#define _GNU_SOURCE
#include "renew_int.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "defaults.h"
#include "proto.h"
#include "renew.h"
#include "token.h"

static const char *const lost_words[] = {NULL, "gone", "expired", "max_hold"};
static const char *const phase_words[] = {"renewing", "holding", "idle"};


typedef struct {
    renewer *r;
} renewer_ud;

typedef struct {
    entry *e;
} renewal_ud;


/* --- Lua: renewer -------------------------------------------------------- */

static renewer_ud *check_renewer(lua_State *L) {
    renewer_ud *ud = (renewer_ud *)redlock_checkself(L, REDLOCK_RENEWER_MT);
    if (ud->r != NULL)
        renew_after_fork(ud->r);
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
    ud->r = renew_renewer_alloc(n);
    if (ud->r == NULL)
        return luaL_error(L, "out of memory");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        ud->r->conns[i] = redlock_conn_clone((redlock_conn *)lua_touserdata(L, -1));
        lua_pop(L, 1);
        if (ud->r->conns[i] == NULL)
            return luaL_error(L, "out of memory"); /* __gc frees the others */
        /* (a Sentinel conn's copy follows the failovers the sentinels
         * announce on a +switch-master subscription of its own: conn.h) */
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
        redlock_conn_on_socket(ud->r->conns[i], renew_track_node, &ud->r->tracks[i]);
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
    lua_Integer replicas = luaL_optinteger(L, 9, 0),
                wait_ms = luaL_optinteger(L, 10, REDLOCK_DEFAULT_REPLICA_TIMEOUT);
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
    e->next_due = redlock_mono_ms() + e->interval;
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
        rc = renew_start_thread(r);
    if (rc != 0) {
        pthread_mutex_unlock(&r->mu);
        free(e);
        return luaL_error(L, "cannot start the renewal thread (%s)", strerror(rc));
    }
    e->id = ++r->next_id;
    renew_link_entry(r, e);
    r->refs++;
    h->e = e;
    renew_wake_for(r, e->next_due);
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
        renew_renewer_shutdown(ud->r);
    return 0;
}

static int renewer_gc(lua_State *L) {
    renewer_ud *ud = check_renewer(L);
    if (ud->r != NULL) {
        renew_renewer_shutdown(ud->r);
        renew_renewer_unref(ud->r);
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
        renew_after_fork(h->e->r);
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
        e->next_due = redlock_mono_ms() + e->interval;
        e->gen++;
        renew_wake_for(r, e->next_due < e->expires ? e->next_due : e->expires);
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static int renewal_stop(lua_State *L) {
    entry *e = check_renewal(L);
    renewer *r = e->r; /* (e outlives this: the userdata holds a reference) */
    pthread_mutex_lock(&r->mu);
    renew_entry_drop(e, renew_retire_entry(r, e));
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
    renew_after_fork(r);
    pthread_mutex_lock(&r->mu);
    renew_entry_drop(e, renew_retire_entry(r, e) + 1); /* and the userdata's reference */
    pthread_mutex_unlock(&r->mu);
    renew_renewer_unref(r);
    return 0;
}

/* core.renew_threads() -> renewal threads running in this process */
static int core_renew_threads(lua_State *L) {
    lua_pushinteger(L, renew_live_threads());
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
    renew_io_init();
    redlock_newtype(L, REDLOCK_RENEWER_MT, renewer_meta, renewer_methods);
    redlock_newtype(L, REDLOCK_RENEWAL_MT, renewal_meta, renewal_methods);
    lua_pushcfunction(L, renewer_new);
    lua_setfield(L, -2, "renewer");
    lua_pushcfunction(L, core_renew_threads);
    lua_setfield(L, -2, "renew_threads");
}

