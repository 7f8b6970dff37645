/* conn{...}: a conn's options checked and copied into a new userdata
 * (host, port, path, credentials, db, timeouts, TLS; a kind's, read by its
 * kind with the readers here: sentinels and master_name, cluster seeds).
 * Raises on bad options before allocating. */
#define _GNU_SOURCE
#include "conn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "proto.h"

char *redlock_opt_string(lua_State *L, int t, const char *field, int required) {
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

int redlock_opt_int(lua_State *L, int t, const char *field, int dflt, int lo, int hi) {
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

char *redlock_opt_dup(lua_State *L, const char *s) {
    char *d;
    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        luaL_error(L, "out of memory"); /* the userdata owns what is copied so far */
    return d;
}

int redlock_opt_tls(lua_State *L, int from, const char *field, redlock_tls *t) {
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
    t->ca_file = redlock_opt_string(L, idx, "ca_file", 0);
    t->ca_path = redlock_opt_string(L, idx, "ca_path", 0);
    t->cert_file = redlock_opt_string(L, idx, "cert_file", 0);
    t->key_file = redlock_opt_string(L, idx, "key_file", 0);
    t->server_name = redlock_opt_string(L, idx, "server_name", 0);
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

/* conn{host=, port=, path=, username=, password=, db=, connect_timeout=,
 * timeout=, tls=} -> an unconnected conn; of a kind with an option
 * (sentinels = {...} and master_name =, cluster = {...}), which the caller
 * found in the table, without host, port and path: the kind reads its
 * options. Checks the server's own settings before allocating. */
int redlock_conn_new(lua_State *L, const redlock_conn_kind *kind) {
    const char *host, *path, *username, *password;
    int port, db, cto, to, has_tls, own = kind->options != NULL;
    redlock_tls tls;
    conn_ud *u;
    path = own ? NULL : redlock_opt_string(L, 1, "path", 0);
    host = path || own ? NULL : redlock_opt_string(L, 1, "host", 1);
    username = redlock_opt_string(L, 1, "username", 0);
    password = redlock_opt_string(L, 1, "password", 0);
    port = redlock_opt_int(L, 1, "port", 6379, 1, 65535);
    db = redlock_opt_int(L, 1, "db", 0, 0, 1 << 20);
    cto = redlock_opt_int(L, 1, "connect_timeout", REDLOCK_DEFAULT_CONNECT_TIMEOUT, 1, 86400000);
    to = redlock_opt_int(L, 1, "timeout", REDLOCK_DEFAULT_TIMEOUT, 0, 86400000);
    if (username != NULL && password == NULL)
        return luaL_error(L, "bad option 'username' to 'conn' (needs a password)");
    has_tls = redlock_opt_tls(L, 1, "tls", &tls);

    u = (conn_ud *)lua_newuserdata(L, sizeof *u);
    memset(u, 0, sizeof *u);
    u->kind = &redlock_conn_plain;
    luaL_getmetatable(L, REDLOCK_CONN_MT);
    lua_setmetatable(L, -2);
    u->port = port;
    u->db = db;
    u->connect_timeout_ms = cto;
    u->timeout_ms = to;
    if (path != NULL)
        snprintf(u->name, sizeof u->name, "unix:%s", path);
    else if (host == NULL)
        u->name[0] = '\0'; /* its kind names it */
    else if (strchr(host, ':') != NULL)
        snprintf(u->name, sizeof u->name, "[%s]:%d", host, port);
    else
        snprintf(u->name, sizeof u->name, "%s:%d", host, port);
    u->host = redlock_opt_dup(L, host);
    u->path = redlock_opt_dup(L, path);
    u->username = redlock_opt_dup(L, username);
    u->password = redlock_opt_dup(L, password);
    if (has_tls) {
        u->tls = calloc(1, sizeof *u->tls);
        if (u->tls == NULL || redlock_tls_settings_copy(u->tls, &tls) != 0)
            return luaL_error(L, "out of memory"); /* __gc frees the partial copy */
    }
    if (own)
        kind->options(L, u); /* raising here: __gc frees what was made */
    return 1;
}

