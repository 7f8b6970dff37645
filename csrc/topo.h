#ifndef REDLOCK_TOPO_H
#define REDLOCK_TOPO_H

/* The topology core: for plain servers, Sentinel and Cluster, where a
 * command goes and what a reply means, written once, without sockets, Lua
 * or a clock (the caller passes now_ms). Every path drives it: the hiredis
 * connection (csrc/cluster.c, sentinel.c, conn.c), the fan-out
 * (csrc/fanout.c), the renewal thread through those, and nginx's cosockets
 * through core.so (core.cluster_map, core.topo_*: csrc/topo_lua.c). The
 * drivers own the sockets: a node is an index here, and the driver keeps
 * one connection per index. Modelled on proto.c's socket-free reader. */

#include <stddef.h>

#include <hiredis/hiredis.h>

#define REDLOCK_SLOTS 16384
#define REDLOCK_TOPO_ERRLEN 512

/* Redirections followed at once; past these a command waits a little
 * before each further one (nodes that disagree while a slot changes hands
 * send it back and forth), until its time limit. */
#define REDLOCK_QUICK_TRIES 3
/* The pause before a command is sent again: 5 ms, doubled up to 40. */
#define REDLOCK_PAUSE_FIRST 5
#define REDLOCK_PAUSE_MAX 40
/* Sentinel: a master named but not a master (ROLE): the sentinels have not
 * caught up with a failover yet. Ask again this many times, this long
 * apart (the Sentinel client guidelines). */
#define REDLOCK_ROLE_ROUNDS 3
#define REDLOCK_ROLE_PAUSE 100

/* What the driver does next. */
enum redlock_verdict {
    REDLOCK_GO,     /* send the command to a->node (after ASKING when a->asking) */
    REDLOCK_DONE,   /* the reply is the answer (an error reply that is not ours too) */
    REDLOCK_RESEND, /* send it again now: ask the core where (redlock_*_target) */
    REDLOCK_PAUSE,  /* wait a->wait_ms, then ask the core where */
    REDLOCK_RELOAD, /* load the state (CLUSTER SLOTS; the sentinels), then ask where */
    REDLOCK_EVAL,   /* NOSCRIPT: send the EVAL form of the script to the same node */
    REDLOCK_FAIL    /* give up: a->err says why, a->code its code (1 connection, 2 server) */
};

/* A command as the drivers send it; source: an EVALSHA's script text (the
 * EVAL form NOSCRIPT asks for), or NULL. argv[0..1] are EVALSHA and the
 * SHA-1 of a script command. */
typedef struct redlock_cmd {
    int argc;
    const char **argv;
    size_t *argvlen;
    const char *source;
} redlock_cmd;

/* Makes c EVALSHA sha (argv[0], argv[1]; argc, argv, argvlen set by the
 * caller, from argv[2] on: numkeys, keys, args), EVAL source when NOSCRIPT. */
void redlock_cmd_evalsha(redlock_cmd *c, const char *sha, const char *source);
/* Turns an EVALSHA command into its EVAL form (argv[0] and argv[1]). */
void redlock_cmd_use_eval(redlock_cmd *c);

/* One command's way through a topology: what has been tried, until when. */
typedef struct redlock_attempt {
    int slot;           /* the key's Cluster slot, -1: no key */
    double deadline;    /* ms (the caller's clock): no resend after it */
    double pause;       /* the next pause, ms */
    double wait_ms;     /* REDLOCK_PAUSE: how long */
    int tries;          /* redirections followed */
    int resent;         /* sent again on a stale connection (once) */
    int reloaded;       /* state reloads for this command */
    int evaled;         /* NOSCRIPT answered with EVAL (once) */
    int node, asking;   /* REDLOCK_GO: where, and whether after ASKING */
    int failed_node;    /* the node whose connection failed last, -1: none */
    int code;           /* REDLOCK_FAIL: 1 connection, 2 server */
    char err[REDLOCK_TOPO_ERRLEN];
} redlock_attempt;

/* A command's attempt, starting now, with limit_ms to follow redirections
 * (0 or less: REDLOCK_DEFAULT_TIMEOUT). slot: redlock_command_slot's. */
void redlock_attempt_start(redlock_attempt *a, int slot, double now_ms, int limit_ms);

/* The slot a command's key hashes to (EVAL/EVALSHA: the first key; the
 * commands without a key: -1; else the first argument). argvlen may be
 * NULL (C strings). */
int redlock_command_slot(int argc, const char **argv, const size_t *argvlen);

/* The pieces of a reply every topology reads alike. */
int redlock_reply_noscript(const char *err, size_t len);
/* A Cluster's refusal: MOVED, ASK, TRYAGAIN, CLUSTERDOWN (not run). */
int redlock_reply_redirect(const char *err, size_t len);
/* READONLY (a write refused by a replica, in a script too), or WAIT on a
 * replica ("WAIT cannot be used with replica instances"). */
int redlock_reply_demoted(const char *err, size_t len);
/* A blocked command (BLPOP) ended by the server, not by its timeout:
 * "UNBLOCKED force unblock from blocking operation, instance state changed
 * (master -> replica?)" when the server turns replica (Redis 2.8+, Valkey),
 * or CLIENT UNBLOCK ... ERROR. Nothing was refused: the caller tries again. */
int redlock_reply_unblocked(const char *err, size_t len);

/* After a connection failure (the command may not have been sent): a stale
 * connection (one made before, closed by the server while idle, so nothing
 * was sent) is sent again once on a fresh one; anything else is final.
 * REDLOCK_RESEND or REDLOCK_FAIL (a->err/code: the caller's message). The
 * one rule of "stale connection: send once more" for the C side. */
int redlock_stale_verdict(redlock_attempt *a, int stale, const char *err);

/* After an error reply from a plain or Sentinel server: NOSCRIPT to an
 * EVALSHA (evalsha: the command was one) gives REDLOCK_EVAL once; a
 * Sentinel master turned replica (sentinel: the server is one's) gives
 * REDLOCK_RELOAD once (the master moved: ask the sentinels, send again:
 * nothing was written), with a->err saying so; else REDLOCK_DONE. */
int redlock_server_reply(redlock_attempt *a, const char *name, int evalsha, int sentinel,
                         const char *err, size_t len);

/* --- Cluster ----------------------------------------------------------- */

typedef struct redlock_topo_node {
    char *host;
    int port;
    char name[80]; /* host:port, [v6]:port */
} redlock_topo_node;

/* A Cluster's nodes (the seeds first, then those CLUSTER SLOTS and
 * redirections name) and which node serves each slot. */
typedef struct redlock_cluster_map {
    int n, cap;
    redlock_topo_node *nodes;
    int loaded;                 /* the map is believed current */
    int any;                    /* the node for commands without a key */
    int ask_slot, ask_node;     /* an ASK to follow once (-1: none) */
    int moved_slot, moved_node; /* the last MOVED, believed over a reload */
    unsigned short owner[REDLOCK_SLOTS]; /* node index + 1 of a slot's master; 0: unknown */
} redlock_cluster_map;

/* An empty map; 0, or -1 when out of memory (nothing to free then). */
redlock_cluster_map *redlock_map_new(void);
void redlock_map_free(redlock_cluster_map *m);
/* The index of the node at host:port, added when new; -1: no memory. */
int redlock_map_node(redlock_cluster_map *m, const char *host, size_t hostlen, int port);

/* Where the command goes: REDLOCK_GO (a->node, a->asking), REDLOCK_RELOAD
 * (the map is not loaded), REDLOCK_PAUSE (the loaded map has no node for the
 * slot: a failover or a slot being added; the map is reloaded after the
 * pause, until the deadline), REDLOCK_FAIL. */
int redlock_map_target(redlock_cluster_map *m, redlock_attempt *a, double now_ms);

/* After an error reply from node a->node: MOVED (the map is reloaded, the
 * MOVED believed for its slot) and ASK (once to the node named, after
 * ASKING) give REDLOCK_RESEND, or REDLOCK_PAUSE past REDLOCK_QUICK_TRIES;
 * TRYAGAIN (a slot half migrated) and CLUSTERDOWN (a failover under way;
 * the map is reloaded) REDLOCK_PAUSE until the deadline; then REDLOCK_FAIL
 * ("server: node: the error"). NOSCRIPT: as redlock_server_reply. Any other
 * error: REDLOCK_DONE. A refused command was not carried out. */
int redlock_map_reply(redlock_cluster_map *m, redlock_attempt *a, int evalsha, const char *err,
                      size_t len, double now_ms);

/* Node a->node did not answer in time and the command has no time left to
 * send again (the Redlock fan-out's one pass): its map is not believed
 * any more, so the next command loads it afresh (the node may be cut off,
 * its replica promoted), and a reload that names that node again fails
 * the command at once. redlock_map_io_failed does this too. */
void redlock_map_silent(redlock_cluster_map *m, redlock_attempt *a);

/* After a connection failure on node a->node (err: the driver's message):
 * a stale connection is sent again once; a command with a key has the map
 * reloaded (the node may be gone: a failover) and is sent again, after a
 * pause from the second time, until the deadline. The first reload comes
 * also past the deadline (a read that timed out spent it all), and its
 * resend only to another node (redlock_map_target fails it otherwise): a
 * silent node costs one timeout, not one per command, once the cluster
 * has promoted its replica. A driver tells its timeouts here too (stale
 * 0). A command without one
 * goes to the next node, each node once. REDLOCK_RESEND, REDLOCK_RELOAD,
 * REDLOCK_PAUSE or REDLOCK_FAIL (a->err = err). */
int redlock_map_io_failed(redlock_cluster_map *m, redlock_attempt *a, int stale, const char *err,
                          double now_ms);

/* Loading the map: ask the nodes in turn (seeds first) until one answers
 * CLUSTER SLOTS; an error reply (not a cluster node, LOADING, an ACL
 * without cluster|slots) or a failure moves on to the next. */
typedef struct redlock_map_load {
    int next;      /* the next node to ask */
    int resent;    /* the node asked now was sent again (stale) */
    int again;     /* ask it again next */
    size_t used;
    char why[REDLOCK_TOPO_ERRLEN];     /* the failures so far */
    char refused[REDLOCK_TOPO_ERRLEN]; /* the first error reply */
} redlock_map_load;

void redlock_map_load_start(redlock_map_load *l);
/* The node to ask next, or -1 when none is left: err (the caller's buffer,
 * REDLOCK_TOPO_ERRLEN) says why, *code its code. name: the Cluster's. */
int redlock_map_load_next(redlock_cluster_map *m, redlock_map_load *l, const char *name, char *err,
                          int *code);
/* node answered r: 0 loaded; 1 ask the next node (an error reply); -1 not a
 * CLUSTER SLOTS answer (err says so: final). */
int redlock_map_load_reply(redlock_cluster_map *m, redlock_map_load *l, int node,
                           const redisReply *r, char *err);
/* node failed (err: why): 1 ask it again (a stale connection, once), 0 the
 * next one. */
int redlock_map_load_failed(redlock_cluster_map *m, redlock_map_load *l, int node, int stale,
                            const char *err);

/* --- Sentinel ---------------------------------------------------------- */

enum redlock_sentinel_answer { REDLOCK_MASTER_AT, REDLOCK_MASTER_UNKNOWN, REDLOCK_SENTINEL_FAILED };

/* What a sentinel's reply to SENTINEL get-master-addr-by-name says: the
 * address (host copied, NUL-terminated), unknown (null: it monitors no
 * master of that name), or a failure (why appended to why: an error
 * reply, or not a sentinel's answer). */
int redlock_sentinel_answer(const redisReply *r, const char *sentinel, char *host, size_t hostlen,
                            int *port, char *why, size_t whylen);
/* The message when no sentinel named the master (unknown: how many said
 * they know no such master; n: how many were asked). */
void redlock_sentinel_failure(char *err, size_t errlen, const char *master, int unknown, int n,
                              const char *why);
/* What ROLE's reply r from the server named says: 1 a master; 0 not one
 * (err: "connection: ... not a master", ask again after a pause); -1 ROLE
 * refused (err: "server: ... ROLE failed", final). */
int redlock_role_verdict(const redisReply *r, const char *name, char *err, size_t errlen);

/* A +switch-master message, "<name> <old ip> <old port> <new ip> <new
 * port>": 0 with the master's name and its new address (NUL-terminated in
 * the caller's buffers), or -1 when it is not one (or does not fit). */
int redlock_sentinel_switch(const char *msg, size_t len, char *name, size_t namelen, char *host,
                            size_t hostlen, int *port);

/* Appends "; msg" (or msg) to why (a buffer of whylen), truncating. */
void redlock_append_why(char *why, size_t whylen, const char *msg);

#endif
