#ifndef REDLOCK_CONN_H
#define REDLOCK_CONN_H

#include <hiredis/hiredis.h>

#include "compat.h"
#include "cluster.h"
#include "sentinel.h"
#include "tls.h"
#include "wait.h"

#define REDLOCK_CONN_MT "redlock.conn"
#define REDLOCK_CONN_ERRLEN 512

struct redlock_conn;

/* What a conn whose address comes from elsewhere (Sentinel) adds to its
 * connection: csrc/conn_io.c calls these, csrc/sentinel.c defines them
 * (redlock_sentinel_hooks), so that the connection layer never calls a
 * topology's file. */
typedef struct redlock_conn_hooks {
    int (*connect)(struct redlock_conn *u);     /* instead of a direct connect */
    void (*recheck)(struct redlock_conn *u);    /* before a live socket is used */
    int (*sub_fd)(const struct redlock_conn *u); /* a socket a blocking wait watches too, or -1 */
    int (*moved)(struct redlock_conn *u);       /* that socket says the master moved */
} redlock_conn_hooks;

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
    redlock_sentinels *sentinels;   /* NULL: host and port are fixed */
    const redlock_conn_hooks *hooks; /* the Sentinel's, or NULL */
    redlock_cluster *cluster;       /* non-NULL: a Cluster; ctx stays NULL, nodes own theirs */
    /* Told of each new socket of this conn as soon as it exists, before
     * the TLS handshake, AUTH and SELECT (conn.c and the fan-out): the
     * renewal thread dups it there so that close() can shut down a
     * connection it is still setting up (csrc/renew.c). NULL: nobody.
     * Not copied by clone. */
    void (*on_socket)(void *arg, int fd);
    void *on_socket_arg;
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
 * csrc/sentinel.h). Cheap otherwise. */
void redlock_conn_before_use(redlock_conn *u);

/* Writes the output buffer with send(MSG_NOSIGNAL) (see conn.c), adding
 * MSG_DONTWAIT when nonblock; over TLS, SSL_write (blocking: a command is
 * small). Returns 0 when all is written, 1 when the
 * socket would block (nonblock only), -1 on error with errno set. */
int redlock_conn_flush(redlock_conn *u, int nonblock);

/* For the renewal thread, which owns private clones: these never touch a
 * lua_State nor raise. Error codes: 0 ok, 1 connection, 2 server; the
 * message is then in c->err. */
redlock_conn *redlock_conn_clone(const redlock_conn *src); /* NULL: out of memory */
void redlock_conn_free(redlock_conn *c);
int redlock_conn_ensure(redlock_conn *c); /* connects unless connected */
int redlock_conn_round_trip(redlock_conn *c, int argc, const char **argv, const size_t *argvlen,
                            redisReply **out, int *stale);
/* One command (and WAIT w after it in the same write, unless NULL) as the
 * topology core says (csrc/topo.h): NOSCRIPT answered with EVAL, a Sentinel
 * master turned replica left for the new one (a script; a plain command,
 * which may be one of a MULTI..EXEC, fails as stale), a Cluster's redirections
 * followed. *r1: the command's reply, *r2: WAIT's (error replies included;
 * the caller frees both). On failure (not 0) *r1 may still be set: the
 * command answered and WAIT's reply did not come. *stale: as conn:command's. */
int redlock_conn_exchange(redlock_conn *c, redlock_cmd *cmd, const redlock_wait *w,
                          redisReply **r1, redisReply **r2, int *stale);
/* One round trip of cmd (and w) on a plain or Sentinel conn, no rule: for
 * the drivers of the topology core (csrc/cluster.c). */
int redlock_conn_trip(redlock_conn *c, redlock_cmd *cmd, const redlock_wait *w, redisReply **r1,
                      redisReply **r2, int *stale);

/* The same for one connection without its topology (csrc/conn_io.c), for
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
 * and SELECT: what a connect is without Sentinel (csrc/sentinel.c). */
int redlock_conn_connect_direct(redlock_conn *c);

/* Sets the connect (if > 0) and reply (if >= 0; 0: none) timeouts of c,
 * and of its nodes when it is a Cluster conn. */
void redlock_conn_set_timeouts(redlock_conn *c, int connect_ms, int reply_ms);

/* Adds conn() to the table on top of the stack and creates the metatable. */
void redlock_conn_open(lua_State *L);

#endif
