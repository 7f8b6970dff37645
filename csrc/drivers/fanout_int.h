/* What fanout.c (the engine) and fanout_lua.c (its Lua functions) share. */
#ifndef REDLOCK_FANOUT_INT_H
#define REDLOCK_FANOUT_INT_H

#include "fanout.h"
#include "topo.h"
#include "wait.h"

struct pollfd;

#define MAX_CONNS 64
#define READ_CHUNK 16384

/* S_PAUSED: waiting until resume_at to be sent again (a topology verdict) */
enum { S_DONE, S_CONNECTING, S_HANDSHAKE, S_WRITING, S_READING, S_PAUSED };
enum { F_NONE, F_TIMEOUT, F_STALE };


typedef struct {
    redlock_conn *u;     /* the connection the command goes on (a Cluster's node, or given) */
    redlock_conn *given; /* the caller's conn */
    redlock_attempt att; /* its way through the topology (csrc/topology/topo.h) */
    double resume_at;    /* S_PAUSED: when to send again */
    int state, rc, flag; /* rc: error.h's code */
    int reused;    /* the connection was open before this call */
    int got_bytes; /* something was read from it in this call */
    int setup;     /* AUTH/SELECT replies still due before ours */
    int auth_due;  /* the next of them is AUTH's */
    int skip;      /* WAIT's reply to a NOSCRIPT'd EVALSHA is still due */
    int asking;    /* the core's prefix (ASKING) went first: its reply is a setup reply */
    int want;      /* S_HANDSHAKE: POLLIN or POLLOUT */
    int limit_ms;  /* its time to answer, from the start of the call */
    redisReply *reply;
    redisReply *wreply; /* WAIT's, when the batch waits */
} slot;

typedef struct {
    int n, timeout_ms;
    slot *slots;
    const char *cmd, *alt; /* EVALSHA (or the command), and EVAL */
    long cmdlen, altlen;
    /* for the EVAL form, made on the first NOSCRIPT only (it carries the
     * whole script): the script and the arguments, prefix slots included */
    const redlock_script *script;
    const char **argv;
    size_t *argvlen;
    int argc;
    /* WAIT after the script (fanout_eval_wait): wlen > 0, the tail of wait */
    redlock_wait wait;
    char wbuf[REDLOCK_WAIT_BUF];
    long wlen;
    int wait_extra; /* how much longer a reply may take (wait.h) */
} batch;

/* argv[0..1]: EVALSHA of script (the topology core's form of a script command). */
void redlock_fanout_evalsha(const redlock_script *script, int argc, const char **argv,
                            size_t *argvlen);
/* Sets b to wait for w after the script: 0, or -1 when it does not fit. */
int redlock_fanout_wait(batch *b, const redlock_wait *w);
/* Runs the batch: every slot started, then poll() until each is done. */
void redlock_fanout_run(batch *b, struct pollfd *pfds, int *which);

#endif
