/* The fan-out's Lua functions: core.fanout, core.fanout_eval and
 * core.fanout_eval_wait (see csrc/drivers/fanout.c's head for what they return),
 * over the engine of fanout.c. */
#define _GNU_SOURCE
#include "fanout_int.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "error.h"
#include "proto.h"
#include "reply.h"
#include "resp.h"

static const char *const flag_words[] = {NULL, "timeout", "stale"};

/* acks[i] and fsyncs[i] (the tables at -2 and -1) of a waiting batch's
 * slot whose script answered (see fanout_eval_wait). */
static void push_ack(lua_State *L, const batch *b, const slot *s, int i) {
    long long acked, fsynced;
    char err[REDLOCK_CONN_ERRLEN];
    if (s->rc != REDLOCK_OK) {
        lua_pushstring(L, s->u->err);
    } else if (redlock_wait_answer(&b->wait, s->wreply, s->u->name, &acked, &fsynced, err,
                                   sizeof err) != 0) {
        lua_pushstring(L, err);
    } else {
        lua_pushinteger(L, (lua_Integer)acked);
        lua_rawseti(L, -3, i + 1);
        lua_pushinteger(L, (lua_Integer)fsynced);
        lua_rawseti(L, -2, i + 1);
        return;
    }
    lua_rawseti(L, -3, i + 1);
}

/* Runs protected: builds the four result tables from the slots (six for a
 * waiting batch). */
static int push_results(lua_State *L) {
    batch *b = (batch *)lua_touserdata(L, 1);
    int i, w = b->wlen > 0 ? 2 : 0;
    lua_createtable(L, b->n, 0);
    lua_createtable(L, b->n, 0);
    lua_createtable(L, b->n, 0);
    lua_createtable(L, b->n, 0);
    if (w) {
        lua_createtable(L, b->n, 0);
        lua_createtable(L, b->n, 0);
    }
    for (i = 0; i < b->n; i++) {
        slot *s = &b->slots[i];
        redisReply *r = s->reply;
        if (w && r != NULL && r->type != REDIS_REPLY_ERROR) {
            /* the script answered: WAIT's part goes to acks */
            redlock_push_reply(L, r);
            lua_rawseti(L, -7, i + 1);
            push_ack(L, b, s, i);
            continue;
        }
        if (s->rc == REDLOCK_OK && r != NULL && r->type != REDIS_REPLY_ERROR) {
            redlock_push_reply(L, r);
            lua_rawseti(L, -5 - w, i + 1);
            continue;
        }
        /* (a script's error whose WAIT reply did not come: the connection's
         * failure is the news) */
        if (s->rc == REDLOCK_OK && r != NULL) {
            lua_pushfstring(L, "server: %s: ", s->u->name);
            lua_pushlstring(L, r->str, r->len > 200 ? 200 : r->len);
            lua_concat(L, 2);
            lua_rawseti(L, -4 - w, i + 1);
            lua_pushstring(L, redlock_code_word(REDLOCK_E_SERVER));
        } else {
            lua_pushstring(L, s->u->err);
            lua_rawseti(L, -4 - w, i + 1);
            lua_pushstring(L, redlock_code_word(s->rc));
        }
        lua_rawseti(L, -3 - w, i + 1);
        if (s->flag != F_NONE) {
            lua_pushstring(L, flag_words[s->flag]);
            lua_rawseti(L, -2 - w, i + 1);
        }
    }
    return 4 + w;
}

static void free_batch(batch *b, const char **argv, size_t *argvlen) {
    int i;
    if (b->slots != NULL)
        for (i = 0; i < b->n; i++) {
            if (b->slots[i].reply != NULL)
                freeReplyObject(b->slots[i].reply);
            if (b->slots[i].wreply != NULL)
                freeReplyObject(b->slots[i].wreply);
        }
    free(b->slots);
    free((void *)b->cmd);
    free((void *)b->alt);
    free((void *)argv);
    free(argvlen);
}

/* Checks conns (arg 1) and timeout (arg 2); returns the count. */
static int check_conns(lua_State *L, redlock_conn **conns) {
    int n, i, j;
    lua_Integer ms;
    luaL_checktype(L, 1, LUA_TTABLE);
    n = (int)lua_rawlen(L, 1);
    luaL_argcheck(L, n >= 1 && n <= MAX_CONNS, 1, "1 to 64 conns expected");
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        conns[i] = redlock_conn_test(L, -1);
        lua_pop(L, 1); /* the table keeps the userdata alive */
        if (conns[i] == NULL)
            return luaL_argerror(L, 1, lua_pushfstring(L, "conn expected at index %d", i + 1));
        for (j = 0; j < i; j++)
            if (conns[j] == conns[i])
                return luaL_argerror(L, 1, lua_pushfstring(L, "conn at index %d twice", i + 1));
    }
    ms = luaL_checkinteger(L, 2);
    luaL_argcheck(L, ms >= 1 && ms <= 86400000, 2, "out of range (1 to 86400000 ms)");
    return n;
}

/* name: the stack index of the script's name (nkeys follows), 0 for a
 * plain command (from index 3); w: WAIT after the script, or NULL. */
static int fanout_common(lua_State *L, const redlock_script *script, int name,
                         const redlock_wait *w) {
    redlock_conn *conns[MAX_CONNS] = {NULL}; /* set by check_conns; zeroed for the analyzer */
    struct pollfd pfds[MAX_CONNS];
    int which[MAX_CONNS];
    int n = check_conns(L, conns), first, argc, prefix, status, i, nres = w != NULL ? 6 : 4;
    const char **argv = NULL;
    size_t *argvlen = NULL;
    char *cmd = NULL;
    batch b;
    if (n < 1)
        return 0; /* not reached: check_conns raised (for the analyzer) */
    memset(&b, 0, sizeof b);
    b.n = n;
    b.timeout_ms = (int)lua_tointeger(L, 2);
    if (w != NULL) {
        if (redlock_fanout_wait(&b, w) != 0)
            return luaL_error(L, "out of memory");
    }
    if (script != NULL) {
        lua_Integer nkeys = luaL_checkinteger(L, name + 1);
        int top = lua_gettop(L);
        if (nkeys < 0 || nkeys > top - (name + 1))
            return luaL_argerror(L, name + 1, "numkeys out of range");
        first = name + 1; /* numkeys, keys and args */
        prefix = 2;
    } else {
        first = 3;
        prefix = 0;
    }
    argc = redlock_check_argv(L, first, lua_gettop(L));
    /* Everything that may raise comes before the C memory. */
    lua_pushcfunction(L, push_results);
    if (redlock_argv_alloc(L, first, argc, prefix, &argv, &argvlen) != 0)
        return luaL_error(L, "out of memory");
    b.slots = (slot *)calloc((size_t)n, sizeof(slot));
    if (script != NULL)
        redlock_fanout_evalsha(script, argc + prefix, argv, argvlen);
    b.cmdlen = redlock_encode(NULL, 0, argc + prefix, argv, argvlen, &cmd);
    b.cmd = b.cmdlen < 0 ? NULL : cmd;
    b.script = script;
    b.argv = argv;
    b.argvlen = argvlen;
    b.argc = argc + prefix;
    if (b.slots == NULL || b.cmd == NULL) {
        free_batch(&b, argv, argvlen);
        return luaL_error(L, "out of memory");
    }
    for (i = 0; i < n; i++)
        b.slots[i].u = conns[i];
    redlock_fanout_run(&b, pfds, which);
    lua_pushlightuserdata(L, &b);
    status = lua_pcall(L, 1, nres, 0);
    free_batch(&b, argv, argvlen);
    if (status != 0)
        return lua_error(L); /* everything is freed */
    return nres;
}

/* fanout(conns, timeout_ms, arg, ...) */
static int core_fanout(lua_State *L) { return fanout_common(L, NULL, 0, NULL); }

/* fanout_eval(conns, timeout_ms, name, numkeys, key..., arg...) */
static int core_fanout_eval(lua_State *L) {
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 3));
    if (s == NULL)
        return luaL_argerror(L, 3, "unknown script");
    return fanout_common(L, s, 3, NULL);
}

/* fanout_eval_wait(conns, timeout_ms, replicas, wait_ms, aof, name,
 * numkeys, key..., arg...) */
static int core_fanout_eval_wait(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 3), ms = luaL_checkinteger(L, 4);
    const redlock_script *s = redlock_script_find(luaL_checkstring(L, 6));
    redlock_wait w;
    /* (returns rather than luaL_argcheck: the analyzer then sees the end) */
    if (n < 0 || n > 1000000)
        return luaL_argerror(L, 3, "out of range (0 to 1000000)");
    if (ms < 1 || ms > 86400000)
        return luaL_argerror(L, 4, "out of range (1 to 86400000)");
    if (s == NULL)
        return luaL_argerror(L, 6, "unknown script");
    w.replicas = (int)n;
    w.timeout_ms = (int)ms;
    w.aof = lua_toboolean(L, 5);
    return fanout_common(L, s, 6, &w);
}

void redlock_fanout_open(lua_State *L) {
    lua_pushcfunction(L, core_fanout);
    lua_setfield(L, -2, "fanout");
    lua_pushcfunction(L, core_fanout_eval);
    lua_setfield(L, -2, "fanout_eval");
    lua_pushcfunction(L, core_fanout_eval_wait);
    lua_setfield(L, -2, "fanout_eval_wait");
}

