/* conn{...}: a conn's options checked and copied into a new userdata
 * (host, port, path, credentials, db, timeouts, TLS; sentinels and
 * master_name; cluster seeds). Raises on bad options before allocating. */
#define _GNU_SOURCE
#include "conn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "proto.h"

static char *opt_string(lua_State *L, int t, const char *field, int required) {
    const char *s;
    lua_getfield(L, t, field);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        if (required)
            luaL_error(L, "bad option '%s' to 'conn' (string expected, got nil)", field);
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "bad option '%s' to 'conn' (string expected, got %s)", field,
                   luaL_typename(L, -1));
    s = lua_tostring(L, -1);
    lua_pop(L, 1); /* the string stays alive: it is still in the options table */
    return (char *)s;
}

static int opt_int(lua_State *L, int t, const char *field, int dflt, int lo, int hi) {
    lua_Number n;
    lua_getfield(L, t, field);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return dflt;
    }
    if (lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "bad option '%s' to 'conn' (number expected, got %s)", field,
                   luaL_typename(L, -1));
    n = lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (!(n >= lo && n <= hi) || n != (lua_Number)(int)n)
        luaL_error(L, "bad option '%s' to 'conn' (integer from %d to %d expected)", field, lo, hi);
    return (int)n;
}

static char *dup_or_null(lua_State *L, const char *s) {
    char *d;
    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        luaL_error(L, "out of memory"); /* the userdata owns what is copied so far */
    return d;
}

/* The tls = {...} table of conn's options into t (borrowed strings, alive
 * while the options table is); 0 when there is none. Raises on bad fields. */
static int opt_tls(lua_State *L, int from, const char *field, redlock_tls *t) {
    int idx;
    memset(t, 0, sizeof *t);
    lua_getfield(L, from, field);
    if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
        lua_pop(L, 1);
        return 0;
    }
    if (lua_type(L, -1) != LUA_TTABLE)
        luaL_error(L, "bad option 'tls' to 'conn' (table expected, got %s)", luaL_typename(L, -1));
    idx = lua_gettop(L);
    t->ca_file = opt_string(L, idx, "ca_file", 0);
    t->ca_path = opt_string(L, idx, "ca_path", 0);
    t->cert_file = opt_string(L, idx, "cert_file", 0);
    t->key_file = opt_string(L, idx, "key_file", 0);
    t->server_name = opt_string(L, idx, "server_name", 0);
    lua_getfield(L, idx, "verify");
    if (lua_isnil(L, -1))
        t->verify = 1;
    else if (lua_type(L, -1) == LUA_TBOOLEAN)
        t->verify = lua_toboolean(L, -1);
    else
        luaL_error(L, "bad option 'tls.verify' to 'conn' (boolean expected, got %s)",
                   luaL_typename(L, -1));
    lua_pop(L, 2); /* the strings stay alive: the table is still in the options */
    if ((t->cert_file == NULL) != (t->key_file == NULL))
        luaL_error(L, "bad option 'tls' to 'conn' (cert_file and key_file go together)");
    return 1;
}

/* One sentinel of conn{sentinels = {...}}: the table at the top of the
 * stack into node (owned by the conn being made: raising frees it). */
static int sentinel_node(lua_State *L, conn_ud *node, int cto, int to) {
    int t = lua_gettop(L), has_tls;
    const char *host = opt_string(L, t, "host", 1);
    redlock_tls tls;
    node->port = opt_int(L, t, "port", 26379, 1, 65535);
    node->connect_timeout_ms = cto;
    node->timeout_ms = to;
    snprintf(node->name, sizeof node->name, strchr(host, ':') ? "sentinel [%s]:%d" : "sentinel %s:%d",
             host, node->port);
    node->host = dup_or_null(L, host);
    node->username = dup_or_null(L, opt_string(L, t, "username", 0));
    node->password = dup_or_null(L, opt_string(L, t, "password", 0));
    if (node->username != NULL && node->password == NULL)
        return luaL_error(L, "bad option 'sentinels' to 'conn' (a username needs a password)");
    has_tls = opt_tls(L, t, "tls", &tls);
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
static int opt_sentinels(lua_State *L, conn_ud *u) {
    const char *master = opt_string(L, 1, "master_name", 1);
    int n, i, cap = REDLOCK_DEFAULT_SENTINEL_CAP;
    int cto = u->connect_timeout_ms < cap ? u->connect_timeout_ms : cap;
    int to = u->timeout_ms > 0 && u->timeout_ms < cap ? u->timeout_ms : cap;
    redlock_sentinels *s;
    lua_getfield(L, 1, "sentinels");
    n = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
    if (n < 1 || n > 64)
        return luaL_error(L, "bad option 'sentinels' to 'conn' (1 to 64 tables expected)");
    s = u->sentinels = calloc(1, sizeof *u->sentinels);
    if (s == NULL)
        return luaL_error(L, "out of memory");
    u->hooks = &redlock_sentinel_hooks; /* its connection finds the master through them */
    s->check_ms = opt_int(L, 1, "sentinel_check", REDLOCK_DEFAULT_SENTINEL_CHECK, 1, 86400000);
    if (redlock_sentinels_subscribe(s) != 0)
        return luaL_error(L, "out of memory");
    s->master_name = dup_or_null(L, master);
    s->nodes = calloc((size_t)n, sizeof(redlock_conn *));
    if (s->nodes == NULL)
        return luaL_error(L, "out of memory");
    for (i = 1; i <= n; i++) {
        conn_ud *node = calloc(1, sizeof *node);
        if (node == NULL)
            return luaL_error(L, "out of memory");
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

/* conn{cluster = {{host=, port=}, ...}, ...}: u speaks to a Redis Cluster
 * whose seed nodes these are; each node a plain conn with u's credentials,
 * TLS and timeouts (csrc/cluster.c). */
static int opt_cluster(lua_State *L, conn_ud *u) {
    int n, i;
    lua_getfield(L, 1, "cluster");
    n = lua_istable(L, -1) ? (int)lua_rawlen(L, -1) : 0;
    if (n < 1 || n > 64)
        return luaL_error(L, "bad option 'cluster' to 'conn' (1 to 64 tables expected)");
    u->cluster = redlock_cluster_new();
    if (u->cluster == NULL)
        return luaL_error(L, "out of memory");
    for (i = 1; i <= n; i++) {
        conn_ud *node;
        const char *host;
        int t, port;
        lua_rawgeti(L, -1, i);
        if (!lua_istable(L, -1))
            return luaL_error(L, "bad option 'cluster' to 'conn' (table expected at %d)", i);
        t = lua_gettop(L);
        host = opt_string(L, t, "host", 1);
        port = opt_int(L, t, "port", 6379, 1, 65535);
        node = calloc(1, sizeof *node);
        if (node != NULL) {
            /* a node is a plain conn with u's settings: not a Cluster */
            redlock_cluster *c = u->cluster;
            int failed;
            u->cluster = NULL;
            failed = redlock_conn_copy_io(node, u);
            u->cluster = c;
            if (failed) {
                redlock_conn_destroy_io(node);
                free(node);
                node = NULL;
            }
        }
        if (node != NULL) {
            free(node->host);
            node->host = strdup(host);
            node->port = port;
            snprintf(node->name, sizeof node->name, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
                     node->port);
        }
        if (node == NULL || node->host == NULL || redlock_cluster_add(u->cluster, node) != 0) {
            if (node != NULL) {
                redlock_conn_destroy_io(node);
                free(node);
            }
            return luaL_error(L, "out of memory");
        }
        if (i == 1)
            snprintf(u->name, sizeof u->name, "cluster:%.110s", node->name);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

/* conn{host=, port=, path=, username=, password=, db=, connect_timeout=,
 * timeout=, tls=} -> an unconnected conn; or with sentinels = {...} and
 * master_name = instead of host (see opt_sentinels). Checks the
 * server's own settings before allocating. */
int redlock_conn_new(lua_State *L) {
    const char *host, *path, *username, *password;
    int port, db, cto, to, has_tls, sentinels, cluster;
    redlock_tls tls;
    conn_ud *u;
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "sentinels");
    sentinels = !lua_isnil(L, -1);
    lua_getfield(L, 1, "cluster");
    cluster = !lua_isnil(L, -1);
    lua_pop(L, 2);
    path = sentinels || cluster ? NULL : opt_string(L, 1, "path", 0);
    host = path || sentinels || cluster ? NULL : opt_string(L, 1, "host", 1);
    username = opt_string(L, 1, "username", 0);
    password = opt_string(L, 1, "password", 0);
    port = opt_int(L, 1, "port", 6379, 1, 65535);
    db = opt_int(L, 1, "db", 0, 0, 1 << 20);
    cto = opt_int(L, 1, "connect_timeout", REDLOCK_DEFAULT_CONNECT_TIMEOUT, 1, 86400000);
    to = opt_int(L, 1, "timeout", REDLOCK_DEFAULT_TIMEOUT, 0, 86400000);
    if (username != NULL && password == NULL)
        return luaL_error(L, "bad option 'username' to 'conn' (needs a password)");
    has_tls = opt_tls(L, 1, "tls", &tls);

    u = (conn_ud *)lua_newuserdata(L, sizeof *u);
    memset(u, 0, sizeof *u);
    luaL_getmetatable(L, REDLOCK_CONN_MT);
    lua_setmetatable(L, -2);
    u->port = port;
    u->db = db;
    u->connect_timeout_ms = cto;
    u->timeout_ms = to;
    if (path != NULL)
        snprintf(u->name, sizeof u->name, "unix:%s", path);
    else if (host == NULL)
        u->name[0] = '\0'; /* opt_sentinels names it */
    else if (strchr(host, ':') != NULL)
        snprintf(u->name, sizeof u->name, "[%s]:%d", host, port);
    else
        snprintf(u->name, sizeof u->name, "%s:%d", host, port);
    u->host = dup_or_null(L, host);
    u->path = dup_or_null(L, path);
    u->username = dup_or_null(L, username);
    u->password = dup_or_null(L, password);
    if (has_tls) {
        u->tls = calloc(1, sizeof *u->tls);
        if (u->tls == NULL || redlock_tls_settings_copy(u->tls, &tls) != 0)
            return luaL_error(L, "out of memory"); /* __gc frees the partial copy */
    }
    if (sentinels)
        opt_sentinels(L, u); /* raising here: __gc frees what was made */
    else if (cluster)
        opt_cluster(L, u);
    return 1;
}

