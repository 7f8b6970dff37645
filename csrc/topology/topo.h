#ifndef REDLOCK_TOPO_H
#define REDLOCK_TOPO_H

/* The topology core: for plain servers, Sentinel and Cluster, where a
 * command goes and what a reply means, written once, without sockets, Lua
 * or a clock (the caller passes now_ms). Every path drives it: the hiredis
 * connection (csrc/drivers/cluster.c, sentinel.c, conn.c), the fan-out
 * (csrc/drivers/fanout.c), the renewal thread through those, and nginx's
 * cosockets through core.so (core.topology, core.topo_reply, core.sentinel_*:
 * csrc/topology/topo_lua.c). The drivers own the sockets: a node is an
 * index here, and the driver keeps one connection per index. Modelled on
 * proto.c's socket-free reader. */

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "error.h"

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
    REDLOCK_GO,     /* send the command to a->node (a->asking: ASKING first) */
    REDLOCK_DONE,   /* the reply is the answer (an error reply that is not ours too) */
    REDLOCK_RESEND, /* send it again: ask redlock_attempt_next where */
    REDLOCK_PAUSE,  /* wait a->wait_ms, then redlock_attempt_next */
    REDLOCK_RELOAD, /* load the state (CLUSTER SLOTS), then redlock_attempt_next */
    REDLOCK_EVAL,   /* NOSCRIPT: send the EVAL form of the script to the same node */
    REDLOCK_FAIL,   /* give up: a->err says why, a->code its code, a->retry whether the
                       caller may send it again itself */
    REDLOCK_SWITCH  /* the master moved: drop the connection, forget the address (the
                       sentinels are asked on the next connect), then redlock_attempt_next */
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

/* ASKING as the drivers send it, in the same write before a command that
 * follows an ASK redirection (redlock_attempt_prefix); its reply is skipped. */
#define REDLOCK_ASKING "*1\r\n$6\r\nASKING\r\n"
#define REDLOCK_ASKING_LEN (sizeof REDLOCK_ASKING - 1)

/* What an attempt may do (redlock_attempt_start's flags). */
#define REDLOCK_AT_SCRIPT 1u /* an EVALSHA with its source: NOSCRIPT gives EVAL once */
#define REDLOCK_AT_KEPT 2u   /* a step of a sequence (WATCH..EXEC): never sent again */
#define REDLOCK_AT_CALLER 4u /* sent again by its caller only: a failure that allows it
                                says so (a->retry) instead */

struct redlock_topo_kind;

/* One command's way through a topology: what has been tried, until when. */
typedef struct redlock_attempt {
    const struct redlock_topo_kind *kind;
    void *state;        /* the kind's state (a Cluster's map), or NULL */
    const char *name;   /* the server's, for messages */
    unsigned flags;     /* REDLOCK_AT_* */
    int slot;           /* the key's Cluster slot, -1: no key */
    double deadline;    /* ms (the caller's clock): no resend after it */
    double pause;       /* the next pause, ms */
    double wait_ms;     /* REDLOCK_PAUSE: how long */
    int tries;          /* redirections followed */
    int resent;         /* sent again on a stale connection (once) */
    int reloaded;       /* state reloads for this command */
    int switched;       /* master switches followed (once) */
    int evaled;         /* NOSCRIPT answered with EVAL (once) */
    int doomed;         /* redlock_attempt_next fails: a->err is the answer */
    int node, asking;   /* REDLOCK_GO: where, and whether after ASKING */
    int failed_node;    /* the node whose connection failed last, -1: none */
    int code;           /* REDLOCK_FAIL: its code (error.h) */
    int retry;          /* REDLOCK_FAIL: 1 the caller may send it again (a new
                           connection); 2 a blocked command ended by a master
                           switch (its caller's next try goes to the new one) */
    char err[REDLOCK_TOPO_ERRLEN];
} redlock_attempt;

/* A topology's rules, one table per kind (plain, Sentinel, Cluster), the
 * way hiredis's redisContextFuncs separates its transports: the attempt
 * functions below call them; nothing else is written per kind. */
typedef struct redlock_topo_kind {
    const char *name;
    int routed; /* commands go by their key's slot, redirections followed within a time limit */
    /* where the command goes: GO (a->node, a->asking), RELOAD, PAUSE, FAIL */
    int (*target)(redlock_attempt *a, double now_ms);
    /* an error reply other than NOSCRIPT: DONE, RESEND, PAUSE, SWITCH, FAIL */
    int (*reply)(redlock_attempt *a, const char *err, size_t len, double now_ms);
    /* the connection failed (stale: one made before, dropped by the
     * server while idle): RESEND, RELOAD, PAUSE, FAIL */
    int (*io_failed)(redlock_attempt *a, int stale, const char *err, double now_ms);
    /* no answer in time and no time left to send again */
    void (*silent)(redlock_attempt *a);
} redlock_topo_kind;

/* Every kind, once, in the order a conn's options are tried: X(NAME) for a
 * kind whose rules are redlock_kind_NAME (topo.c) and whose hiredis driver
 * is redlock_conn_NAME (conn.h: plain in conn_io.c, the others in
 * csrc/drivers/NAME.c). A new kind is a line here. */
#define REDLOCK_KINDS(X) X(plain) X(sentinel) X(cluster)

#define REDLOCK_TOPO_KIND_DECLARE(name) extern const redlock_topo_kind redlock_kind_##name;
REDLOCK_KINDS(REDLOCK_TOPO_KIND_DECLARE)
/* Every kind, NULL-ended: a host names its kind by its name (core.topology). */
extern const redlock_topo_kind *const redlock_topo_kinds[];

/* A kind that is not routed sends every command to its one node (0), with
 * nothing before it: its first try needs no verdict, and a driver may send
 * it before it starts the attempt, at the first outcome that is not the
 * answer (the usual command then costs no attempt). */
#define REDLOCK_ONE_NODE(kind) (!(kind)->routed)

/* --- The attempt: one request, every driver ----------------------------
 * A driver (the hiredis connection, the fan-out, the renewal thread, the
 * nginx cosockets) starts an attempt, asks redlock_attempt_next where to
 * send, sends, and hands the core what came back: an error reply
 * (redlock_attempt_reply) or a failed connection (redlock_attempt_io_failed).
 * Each answers a verdict; the driver carries it out and asks again, until
 * DONE or FAIL. Decisions only: the driver owns sockets and sleeps. */

/* A command's attempt on a server of kind (state: its state; name: the
 * server's), starting now, with limit_ms to follow redirections (0 or
 * less: REDLOCK_DEFAULT_TIMEOUT). slot: redlock_command_slot's (kinds
 * that are routed only; else -1). flags: REDLOCK_AT_*. */
void redlock_attempt_start(redlock_attempt *a, const redlock_topo_kind *kind, void *state,
                           const char *name, int slot, unsigned flags, double now_ms,
                           int limit_ms);
/* Where the command goes: GO, RELOAD, PAUSE, FAIL. */
int redlock_attempt_next(redlock_attempt *a, double now_ms);
/* After an error reply (err, len: its text): EVAL (NOSCRIPT to a script,
 * once), or the kind's verdict (DONE: the reply is the answer). */
int redlock_attempt_reply(redlock_attempt *a, const char *err, size_t len, double now_ms);
/* After a connection failure (err: the driver's message; stale: 1 a
 * connection made before the call that the server had dropped, not a
 * timeout; 2 a blocked command ended because the master moved): a stale
 * connection is sent again once on a fresh one (REDLOCK_AT_KEPT: never;
 * REDLOCK_AT_CALLER: FAIL with a->retry), and the kind decides the rest. */
int redlock_attempt_io_failed(redlock_attempt *a, int stale, const char *err, double now_ms);
/* No answer in time and no time left (the fan-out's one pass). */
void redlock_attempt_silent(redlock_attempt *a);
/* redlock_io_stale's answered: what came back in the failed call. */
#define REDLOCK_IO_NOTHING 0
#define REDLOCK_IO_PART 1 /* some of the reply */
#define REDLOCK_IO_TAIL 2 /* the command's whole reply, not its tail's */
/* Whether a failed exchange may go once more on a fresh connection (the
 * one rule of the stale resend). Never once it timed out. Else: when
 * nothing came back on a connection made before the call (reused), the
 * server had dropped it while idle: nothing ran; when the command answered
 * and only its tail's reply was lost (REDLOCK_IO_TAIL), its caller sends it
 * again in a form that takes what it did (conn:grant's SET and XADD as
 * the acquire script). The drivers tell redlock_attempt_io_failed, or
 * their caller (*retry), what this says. */
int redlock_io_stale(int reused, int answered, int timed_out);
/* What goes before the command in the same write (ASKING after an ASK), or
 * NULL; *len its length. */
const char *redlock_attempt_prefix(const redlock_attempt *a, size_t *len);

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

/* The Cluster kind (redlock_kind_cluster, state: the map) decides:
 * - where: the slot's master (an ASK's node once, after ASKING; a command
 *   without a key, any node known to answer); RELOAD when the map is not
 *   loaded; a loaded map without the slot's master (a failover, a slot
 *   being added): PAUSE, the map reloaded after it, until the deadline;
 * - an error reply: MOVED (the map reloaded, the MOVED believed for its
 *   slot) and ASK (once to the node named) RESEND, or PAUSE past
 *   REDLOCK_QUICK_TRIES; TRYAGAIN (a slot half migrated) and CLUSTERDOWN (a
 *   failover under way; the map reloaded) PAUSE until the deadline; then
 *   FAIL ("server: node: the error"); any other error: DONE. A refused
 *   command was not carried out;
 * - a failed connection: a stale one RESEND once; a command with a key
 *   has the map reloaded (the node may be gone: a failover) and is sent
 *   again, after a pause from the second time, until the deadline. The
 *   first reload comes also past the deadline (a read that timed out spent
 *   it all), and its resend only to another node: a silent node costs one
 *   timeout, not one per command, once the cluster has promoted its
 *   replica. A command without a key goes to the next node, each once;
 * - silent (no time left): the map is not believed any more, so the next
 *   command loads it afresh, and a reload that names that node again fails
 *   the command at once. */

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
/* The Sentinel client's policy (the Sentinel client guidelines), one for
 * the hiredis driver (csrc/drivers/sentinel.c) and nginx's
 * (lua/redlock/nginx/sentinel.lua): the sentinels are kept in the order
 * they are asked; the drivers ask them and move them as said here.
 *
 * Finding the master (none known, or the last one forgotten): the
 * sentinels in turn. Sentinel i (from 0) of n answered `answer`:
 * REDLOCK_DONE its address is the master's, and it moves to the front (the
 * next question goes to it first); REDLOCK_RESEND ask sentinel i + 1;
 * REDLOCK_FAIL none named it (redlock_sentinel_failure says why). Then
 * the master is connected to and checked in rounds (redlock_sentinel_round). */
int redlock_sentinel_locate(int i, int n, int answer);
/* Checking the master in use: due (1) when its address was confirmed at
 * `checked` (ms, monotonic) max_age ms ago or more (max_age at most
 * check_ms: sentinel_check; the renewal thread asks for less). */
int redlock_sentinel_check_due(double now, double checked, double check_ms, double max_age);
/* A check is one question, to the first sentinel only: a command waits
 * for it, so sentinels that hang cost one short timeout per check, not one
 * each. What its answer means (same: it names the address in use), and
 * *checked, when the check counts as made (now, the answer's time; after a
 * failure, so that the next comes a whole check_ms later): */
enum redlock_sentinel_check {
    REDLOCK_CHECK_KEEP,   /* the master stays */
    REDLOCK_CHECK_ROTATE, /* the sentinel failed: it goes to the back (the next check
                             asks the next one); the master stays, and its writes are
                             refused (READONLY) if it was demoted */
    REDLOCK_CHECK_FIND    /* moved, or no longer known: forget the master and find it
                             again (redlock_sentinel_locate, then the rounds) */
};
int redlock_sentinel_check(int answer, int same, double now, double check_ms, double max_age,
                           double *checked);
/* The message when no sentinel named the master (unknown: how many said
 * they know no such master; n: how many were asked). */
void redlock_sentinel_failure(char *err, size_t errlen, const char *master, int unknown, int n,
                              const char *why);
/* What ROLE's reply r from the server named says: 1 a master; 0 not one
 * (err: "connection: ... not a master", ask again after a pause); -1 ROLE
 * refused (err: "server: ... ROLE failed", final). */
int redlock_role_verdict(const redisReply *r, const char *name, char *err, size_t errlen);

/* Finding a Sentinel's master goes in rounds (the Sentinel client
 * guidelines): each asks the sentinels where the master is, connects to
 * it and asks it ROLE. What round `round` (from 1) came to: */
enum redlock_round_outcome {
    REDLOCK_ROUND_MASTER = 1,      /* a master: connected */
    REDLOCK_ROUND_NOT_MASTER = 0,  /* ROLE says it is not (yet): a failover under way */
    REDLOCK_ROUND_REFUSED = -1,    /* ROLE refused (an ACL without +role) */
    REDLOCK_ROUND_UNREACHABLE = -2 /* the server named could not be connected (the
                                      sentinels may not know yet that it died) */
};
/* ... and what comes next: REDLOCK_DONE, REDLOCK_PAUSE (REDLOCK_ROLE_PAUSE
 * ms, then the next round: the sentinels asked again) or REDLOCK_FAIL (the
 * round's error is the answer). No sentinel naming the master fails
 * before a round ends. */
int redlock_sentinel_round(int round, int outcome);

/* A +switch-master message, "<name> <old ip> <old port> <new ip> <new
 * port>": 0 with the master's name and its new address (NUL-terminated in
 * the caller's buffers), or -1 when it is not one (or does not fit). */
int redlock_sentinel_switch(const char *msg, size_t len, char *name, size_t namelen, char *host,
                            size_t hostlen, int *port);

/* Appends "; msg" (or msg) to why (a buffer of whylen), truncating. */
void redlock_append_why(char *why, size_t whylen, const char *msg);

#endif
