#ifndef REDLOCK_CONN_H
#define REDLOCK_CONN_H

#include <hiredis/hiredis.h>

#include "compat.h"
#include "error.h"
#include "tls.h"
#include "topo.h"
#include "wait.h"

#define REDLOCK_CONN_MT "redlock.conn"
#define REDLOCK_CONN_ERRLEN 512

struct redlock_conn;

/* A conn's kind as the hiredis driver carries it out: the topology core's
 * rules (csrc/topology/topo.h) and what the driver does for its verdicts, one table
 * per kind (plain: conn_io.c; Sentinel: sentinel.c; Cluster: cluster.c),
 * the way hiredis's redisContextFuncs separates its transports. The request
 * loop (conn.c) and the fan-out call these; a NULL entry is the plain
 * server's way. */
typedef struct redlock_conn_kind {
    const redlock_topo_kind *topo;
    /* conn{...}'s option that makes such a conn ("sentinels"), NULL: none
     * (plain, the default); conn_lua.c tries the kinds in REDLOCK_KINDS' order */
    const char *option;
    /* reads that option and the kind's others (conn{...} at index 1) into
     * u, whose own settings are read: sets u->kind, kind_data and name;
     * raises on a bad option (u's __gc frees what was made) */
    int (*options)(lua_State *L, struct redlock_conn *u);
    void *(*state)(struct redlock_conn *u); /* what the rules read (a Cluster's map); NULL: none */
    /* GO: the connection of node i (made when new), u's when NULL; NULL: out of memory (u->err) */
    struct redlock_conn *(*node)(struct redlock_conn *u, int i);
    /* before a blocking command waits on node's socket (the renewal's close) */
    void (*waiting)(struct redlock_conn *u, struct redlock_conn *node);
    int (*reload)(struct redlock_conn *u); /* RELOAD: 0, or a code with u->err */
    void (*forget)(struct redlock_conn *u); /* SWITCH, after the connection was dropped */
    int (*ensure)(struct redlock_conn *u);  /* ready for a command (a Cluster's map loaded) */
    int (*connect)(struct redlock_conn *u); /* instead of a direct connect (the sentinels) */
    void (*recheck)(struct redlock_conn *u, double max_age_ms); /* before a live socket is used */
    int (*sub_fd)(const struct redlock_conn *u); /* a socket a blocking wait watches too, or -1 */
    int (*moved)(struct redlock_conn *u);        /* that socket says the master moved */
    /* the kind's state copied from src to a zeroed dst (share: the same
     * thread's copy, conn:clone(); else another thread's, the renewal's);
     * -1: no memory. Its free. */
    int (*copy)(struct redlock_conn *dst, const struct redlock_conn *src, int share);
    void (*destroy)(struct redlock_conn *u);
    void (*set_timeouts)(struct redlock_conn *u, int connect_ms, int reply_ms); /* its nodes' too */
    /* every socket of u, its nodes' too, told to fn as it opens */
    void (*on_socket)(struct redlock_conn *u, void (*fn)(void *arg, int fd), void *arg);
} redlock_conn_kind;

/* Every kind's (topo.h's REDLOCK_KINDS): redlock_conn_plain (conn_io.c),
 * redlock_conn_sentinel, redlock_conn_cluster (csrc/drivers/). */
#define REDLOCK_CONN_KIND_DECLARE(name) extern const redlock_conn_kind redlock_conn_##name;
REDLOCK_KINDS(REDLOCK_CONN_KIND_DECLARE)

/* The conn userdata. Shared with fanout.c, which drives several of them at
 * once; everything else goes through the methods. */
typedef struct redlock_conn {
    redisContext *ctx; /* NULL when not connected */
    char *host, *path, *username, *password;
    int port, db;
    int connect_timeout_ms, timeout_ms;
    int closed;
    int answered; /* ctx has read a reply (a reset before that: see tls.h's plain hint) */
    unsigned gen; /* the fork generation (token.h) ctx was made in */
    unsigned long connects; /* connections made so far (redlock.detect re-checks on a new one;
                               conn:grant tells it) */
    int kept; /* the command in flight goes only on the connection open now, never a new one
                 (conn:command_kept, the renewal's legacy steps: a WATCH..EXEC's) */
    redlock_tls *tls;               /* NULL: plaintext */
    struct ssl_ctx_st *sslctx;      /* made at the first handshake */
    struct ssl_st *ssl;             /* the session on ctx's socket, if TLS */
    const redlock_conn_kind *kind;  /* never NULL once made */
    void *kind_data; /* the kind's own state (a Sentinel conn's redlock_sentinels, a Cluster
                        conn's redlock_cluster: its ctx stays NULL, nodes own theirs);
                        NULL for a plain conn */
    /* Told of each new socket of this conn as soon as it exists, before
     * the TLS handshake, AUTH and SELECT (conn.c and the fan-out): the
     * renewal thread dups it there so that close() can shut down a
     * connection it is still setting up (csrc/drivers/renew.c). NULL: nobody.
     * Not copied by clone. */
    void (*on_socket)(void *arg, int fd);
    void *on_socket_arg;
    /* conn:grant's XADD (conn_lua.c), encoded once per counter key */
    char *grant_xadd, *grant_counter;
    long grant_xadd_len;
    size_t grant_counter_len;
    char name[128];
    char err[REDLOCK_CONN_ERRLEN]; /* the last failure's message */
} redlock_conn;

/* The conn at stack index idx, or NULL when the value is not one. */
redlock_conn *redlock_conn_test(lua_State *L, int idx);

/* Closes the socket, if any; the next use connects again. */
void redlock_conn_drop(redlock_conn *u);

/* Before any use of u->ctx, drops a socket that must not be used (the
 * next use reconnects): one made before a fork() is shared with the other
 * process, whose replies would be read as ours (and ours as theirs): this
 * process closes its copy, nothing sent; and a Sentinel-managed conn's,
 * once the sentinels name another master (asked every check_ms: see
 * csrc/drivers/sentinel.c). Cheap otherwise. */
void redlock_conn_before_use(redlock_conn *u);

/* Writes the output buffer with send(MSG_NOSIGNAL) (see conn.c), adding
 * MSG_DONTWAIT when nonblock; over TLS, SSL_write (blocking: a command is
 * small). Returns 0 when all is written, 1 when the
 * socket would block (nonblock only), -1 on error with errno set. */
int redlock_conn_flush(redlock_conn *u, int nonblock);

/* For the renewal thread, which owns private clones: these never touch a
 * lua_State nor raise. Codes as error.h's; the message is then in c->err. */
redlock_conn *redlock_conn_clone(const redlock_conn *src); /* NULL: out of memory */
void redlock_conn_free(redlock_conn *c);
int redlock_conn_ensure(redlock_conn *c); /* connects unless connected */

/* One request on c as the topology core says (csrc/topology/topo.h): the one loop
 * of the hiredis drivers. cmd (and tail after it in the same write, unless
 * NULL) goes where c's kind says; NOSCRIPT is answered with EVAL, a stale
 * connection sent again once, a Sentinel master turned replica left for
 * the new one, a Cluster's redirections followed, as the verdicts say.
 * flags: REDLOCK_AT_KEPT (a step of a sequence: never sent again) or
 * REDLOCK_AT_CALLER (*retry says whether the caller may send it again).
 * *r1: the command's reply, *r2: the tail's (error replies included; the
 * caller frees both). On failure (not 0) *r1 may still be set: the command
 * answered and the tail's reply did not come. *retry: 1 the caller may
 * send it again (REDLOCK_AT_CALLER; or the tail's reply lost without a
 * timeout); 2 a BLPOP ended by a master switch. */
int redlock_request(redlock_conn *c, redlock_cmd *cmd, const redlock_tail *tail, unsigned flags,
                    redisReply **r1, redisReply **r2, int *retry);
/* redlock_request of a command without a script or tail. */
int redlock_command(redlock_conn *c, int argc, const char **argv, const size_t *argvlen,
                    unsigned flags, redisReply **out, int *retry);

/* One round trip on one connection, no rule (the request loop's, and the
 * topology drivers' own connections): prefix (unless NULL: ASKING), cmd
 * and tail (unless NULL) in one write; the prefix's reply skipped, *r1 the
 * command's, *r2 the tail's. On failure u->err holds the message, the
 * connection is dropped (the next call reconnects), and *stale says
 * whether nothing ran on a connection the server had dropped (1; 2: a
 * BLPOP ended by +switch-master). */
int redlock_conn_trip(redlock_conn *u, const char *prefix, size_t prefixlen, redlock_cmd *cmd,
                      const redlock_tail *tail, redisReply **r1, redisReply **r2, int *stale);

/* The same for one connection without its topology (csrc/connection/conn_io.c), for
 * the topology drivers' own connections (a Cluster's nodes, the sentinels):
 * a copy of the settings, its free, a connect unless connected, and one
 * round trip. */
redlock_conn *redlock_conn_clone_io(const redlock_conn *src); /* NULL: out of memory */
void redlock_conn_free_io(redlock_conn *c);
int redlock_conn_ensure_io(redlock_conn *c);
int redlock_conn_trip1(redlock_conn *c, int argc, const char **argv, const size_t *argvlen,
                       redisReply **out, int *stale);
void redlock_conn_set_timeouts_io(redlock_conn *c, int connect_ms, int reply_ms);

/* Connects to host/port (or path) as they are now, with the handshake, AUTH
 * and SELECT: what a connect is without Sentinel (csrc/drivers/sentinel.c). */
int redlock_conn_connect_direct(redlock_conn *c);

/* Whether the TCP socket fd is connected to itself: a connect to a local
 * port in the ephemeral range that nothing listens on can be given that
 * very port as its own (TCP's simultaneous open), and then reads back what
 * it writes, and holds the port the server would bind. A connect that
 * ends so has failed. */
int redlock_conn_self_connected(int fd);
#define REDLOCK_SELF_CONNECTED "nothing listens there: the socket connected to itself"

/* Sets the connect (if > 0) and reply (if >= 0; 0: none) timeouts of c,
 * and of its nodes when it is a Cluster conn. */
void redlock_conn_set_timeouts(redlock_conn *c, int connect_ms, int reply_ms);

/* Tells fn(arg, fd) each socket of c (its nodes' too) as soon as it opens,
 * before the TLS handshake, AUTH and SELECT (the renewal thread's close). */
void redlock_conn_on_socket(redlock_conn *c, void (*fn)(void *arg, int fd), void *arg);

/* conn{...}'s readers (conn_opts.c), for the kinds' options too: raise
 * with Lua's wording ("bad option 'F' to 'conn' (...)") on a bad value. A
 * string field of table t (NULL when absent and not required: borrowed,
 * alive while the table is), an integer one (dflt when absent, lo..hi), a
 * copy of s (NULL for NULL) and a tls = {...} field of table from into *t
 * (borrowed strings; 0 when there is none). */
char *redlock_opt_string(lua_State *L, int t, const char *field, int required);
int redlock_opt_int(lua_State *L, int t, const char *field, int dflt, int lo, int hi);
char *redlock_opt_dup(lua_State *L, const char *s);
int redlock_opt_tls(lua_State *L, int from, const char *field, redlock_tls *t);

/* Adds conn() to the table on top of the stack and creates the metatable. */
void redlock_conn_open(lua_State *L);

#endif
