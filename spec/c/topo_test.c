/* The topology core (csrc/topology/topo.c) fed replies, without sockets: the
 * decisions every driver carries out. Prints TAP ("ok N - what"); spec/01
 * runs it. Replies are made by hiredis' reader from RESP text, as a
 * server would send them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "topo.h"
#include "wait.h"

static int n_test, failed;

static void check(int ok, const char *what) {
    n_test++;
    if (!ok)
        failed = 1;
    printf("%s %d - %s\n", ok ? "ok" : "not ok", n_test, what);
}

static redisReply *reply(const char *resp) {
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    if (rd == NULL || redisReaderFeed(rd, resp, strlen(resp)) != REDIS_OK ||
        redisReaderGetReply(rd, &r) != REDIS_OK || r == NULL) {
        fprintf(stderr, "bad RESP: %s\n", resp);
        exit(2);
    }
    redisReaderFree(rd);
    return (redisReply *)r;
}

#define NODE(m, h, p) redlock_map_node((m), (h), strlen(h), (p))
/* An attempt of a script on the Cluster of map m, as every driver starts it. */
#define START(m, slot, now, limit) \
    redlock_attempt_start(&a, &redlock_kind_cluster, (m), "cluster:x", (slot), REDLOCK_AT_SCRIPT, \
                          (now), (limit))
#define SLOTS_3 "*3\r\n" \
    "*3\r\n:0\r\n:5460\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n" \
    "*3\r\n:5461\r\n:10922\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n" \
    "*3\r\n:10923\r\n:16383\r\n*2\r\n$0\r\n\r\n:7002\r\n"

/* A map of three seeds, loaded from the second after the first refused. */
static redlock_cluster_map *loaded_map(void) {
    redlock_cluster_map *m = redlock_map_new();
    redlock_map_load l;
    redisReply *r;
    char err[REDLOCK_TOPO_ERRLEN];
    int code = 0, i;
    NODE(m, "127.0.0.1", 7000);
    NODE(m, "127.0.0.1", 7001);
    NODE(m, "127.0.0.1", 7002);
    redlock_map_load_start(&l);
    i = redlock_map_load_next(m, &l, "cluster:x", err, &code);
    r = reply("-NOPERM no permissions\r\n");
    check(i == 0 && redlock_map_load_reply(m, &l, i, r, err) == 1,
          "CLUSTER SLOTS refused by a node: the next one is asked");
    freeReplyObject(r);
    i = redlock_map_load_next(m, &l, "cluster:x", err, &code);
    check(i == 1 && redlock_map_load_failed(m, &l, i, 1, "connection: x: lost") == 1 &&
              redlock_map_load_next(m, &l, "cluster:x", err, &code) == 1,
          "a stale connection while loading: the same node once more");
    r = reply(SLOTS_3);
    check(redlock_map_load_reply(m, &l, 1, r, err) == 0 && m->loaded && m->any == 1 &&
              m->owner[0] == 1 && m->owner[5461] == 2 && m->owner[16383] == 3,
          "CLUSTER SLOTS read: every slot's master (\"\": the node asked)");
    freeReplyObject(r);
    return m;
}

int main(void) {
    redlock_cluster_map *m;
    redlock_attempt a;
    const char *eval[5] = {"EVALSHA", "x", "1", "{k}", "t"};
    const char *ping[1] = {"PING"};
    const char *get[2] = {"get", "{k}"};
    char err[REDLOCK_TOPO_ERRLEN], host[64], why[256];
    int slot, v, i, code = 0, port = 0;
    redisReply *r;
    double t = 1000;

    slot = redlock_command_slot(5, eval, NULL);
    check(slot == redlock_command_slot(2, get, NULL) && slot >= 0 &&
              redlock_command_slot(1, ping, NULL) == -1,
          "the slot of a command: EVALSHA's first key, another command's first argument, none for PING");

    /* a map that is not loaded: reload first */
    m = redlock_map_new();
    NODE(m, "127.0.0.1", 7000);
    START(m, slot, t, 1000);
    check(redlock_attempt_next(&a, t) == REDLOCK_RELOAD, "an unloaded map: RELOAD before the command");
    redlock_map_free(m);

    /* every node fails: the reasons; or the first refusal */
    m = redlock_map_new();
    NODE(m, "127.0.0.1", 7000);
    {
        redlock_map_load l;
        redlock_map_load_start(&l);
        i = redlock_map_load_next(m, &l, "cluster:x", err, &code);
        redlock_map_load_failed(m, &l, i, 0, "connection: 127.0.0.1:7000: could not connect");
        check(redlock_map_load_next(m, &l, "cluster:x", err, &code) == -1 && code == 1 &&
                  strstr(err, "no cluster node reachable (connection: 127.0.0.1:7000: could not connect)"),
              "no node answers CLUSTER SLOTS: a connection error naming why");
    }
    redlock_map_free(m);

    m = loaded_map();
    START(m, slot, t, 1000);
    v = redlock_attempt_next(&a, t);
    check(v == REDLOCK_GO && a.node == m->owner[slot] - 1 && !a.asking, "GO to the slot's master");

    /* MOVED: three at once, then pauses; the map reloaded, MOVED believed */
    for (i = 0; i < 3; i++)
        v = redlock_attempt_reply(&a, "MOVED 1 127.0.0.1:7009", 22, t);
    check(v == REDLOCK_RESEND && !m->loaded && m->owner[1] == 4 && m->n == 4,
          "MOVED: RESEND, the map to reload, the new node known");
    v = redlock_attempt_reply(&a, "MOVED 1 127.0.0.1:7009", 22, t);
    check(v == REDLOCK_PAUSE && a.wait_ms == 5, "past three redirections: PAUSE 5 ms");

    /* ASK: once to the node named, after ASKING */
    m->loaded = 1;
    START(m, slot, t, 1000);
    v = redlock_attempt_reply(&a, "ASK 1 127.0.0.1:7001", 20, t);
    a.slot = 1;
    check(v == REDLOCK_RESEND && redlock_attempt_next(&a, t) == REDLOCK_GO && a.asking && a.node == 1,
          "ASK: RESEND to the node named, after ASKING");
    check(redlock_attempt_next(&a, t) == REDLOCK_GO && !a.asking && a.node == 3,
          "after the ASK: the slot's master again");

    /* TRYAGAIN: pauses 5, 10, 20, 40, 40 ... until the deadline */
    START(m, slot, t, 100);
    {
        double waited = 0;
        int pauses = 0;
        while ((v = redlock_attempt_reply(&a, "TRYAGAIN Multiple keys", 22, t + waited)) ==
               REDLOCK_PAUSE) {
            waited += a.wait_ms;
            pauses++;
        }
        check(v == REDLOCK_FAIL && a.code == 2 && pauses == 4 && waited == 75 &&
                  strstr(a.err, "TRYAGAIN Multiple keys") != NULL,
              "TRYAGAIN: PAUSE (5, 10, 20, 40 ms) until the deadline, then FAIL with the refusal");
    }

    /* CLUSTERDOWN: pause, reload */
    START(m, slot, t, 1000);
    v = redlock_attempt_reply(&a, "CLUSTERDOWN Hash slot not served", 32, t);
    check(v == REDLOCK_PAUSE && !m->loaded && redlock_attempt_next(&a, t) == REDLOCK_RELOAD,
          "CLUSTERDOWN: PAUSE, then the map reloaded");

    /* a loaded map without the slot's master: pause and reload, to the deadline */
    m->loaded = 1;
    m->owner[slot] = 0;
    START(m, slot, t, 10);
    v = redlock_attempt_next(&a, t);
    check(v == REDLOCK_PAUSE && !m->loaded && redlock_attempt_next(&a, t + 5) == REDLOCK_RELOAD,
          "a slot the loaded map lacks: PAUSE, then RELOAD (not a final error)");
    m->loaded = 1;
    a.pause = 40;
    v = redlock_attempt_next(&a, t + 5);
    check(v == REDLOCK_FAIL && a.code == 2 && strstr(a.err, "no node serves slot") != NULL,
          "... until the deadline: FAIL, no node serves the slot");
    m->owner[slot] = 1;
    m->loaded = 1;

    /* NOSCRIPT: EVAL once; other errors are the caller's */
    START(m, slot, t, 1000);
    check(redlock_attempt_reply(&a, "NOSCRIPT No matching script", 27, t) == REDLOCK_EVAL &&
              redlock_attempt_reply(&a, "NOSCRIPT No matching script", 27, t) == REDLOCK_DONE &&
              redlock_attempt_reply(&a, "ERR wrong", 9, t) == REDLOCK_DONE,
          "NOSCRIPT: EVAL once; any other error: DONE");

    /* a node that cannot be reached */
    START(m, slot, t, 1000);
    check(redlock_attempt_io_failed(&a, 1, "connection: x: lost", t) == REDLOCK_RESEND,
          "a stale connection: RESEND once");
    v = redlock_attempt_io_failed(&a, 1, "connection: x: lost", t);
    check(v == REDLOCK_RELOAD && !m->loaded, "a node unreachable: RELOAD the map at once");
    v = redlock_attempt_io_failed(&a, 0, "connection: x: refused", t);
    check(v == REDLOCK_PAUSE, "again: PAUSE, then the map (a failover: nodes learn it one by one)");
    v = redlock_attempt_io_failed(&a, 0, "connection: x: refused", t + 1000);
    check(v == REDLOCK_FAIL && a.code == 1 && strcmp(a.err, "connection: x: refused") == 0,
          "at the deadline: FAIL with the connection's error");
    /* a node cut off silently: the read timed out at the deadline; the
     * map is reloaded all the same, and the command sent again if the slot
     * has another owner now (its replica promoted), else it fails there */
    m->loaded = 1;
    START(m, slot, t, 300);
    check(redlock_attempt_next(&a, t) == REDLOCK_GO && a.node == 0, "to the slot's owner");
    v = redlock_attempt_io_failed(&a, 0, "connection: x: timed out", t + 300);
    check(v == REDLOCK_RELOAD && !m->loaded, "timed out at the deadline: RELOAD all the same");
    m->loaded = 1;
    check(redlock_attempt_next(&a, t + 310) == REDLOCK_FAIL && a.code == 1 &&
              strcmp(a.err, "connection: x: timed out") == 0,
          "the reloaded map names the same node: FAIL with its error, no second timeout");
    START(m, slot, t, 300);
    check(redlock_attempt_next(&a, t) == REDLOCK_GO && a.node == 0, "to the slot's owner again");
    v = redlock_attempt_io_failed(&a, 0, "connection: x: timed out", t + 300);
    m->loaded = 1;
    m->owner[slot] = 2;
    check(v == REDLOCK_RELOAD && redlock_attempt_next(&a, t + 310) == REDLOCK_GO && a.node == 1,
          "the reloaded map names another node (a promotion): sent there, past the deadline");
    check(redlock_attempt_io_failed(&a, 0, "connection: y: timed out", t + 610) == REDLOCK_FAIL,
          "that one failing too: FAIL");
    m->owner[slot] = 1;
    START(m, -1, t, 1000);
    a.node = 0;
    check(redlock_attempt_io_failed(&a, 0, "connection: x: refused", t) == REDLOCK_RESEND && m->any == 1,
          "a command without a key: the next node");
    redlock_map_free(m);

    /* a MOVED to a node the map does not know, when its node array is full
     * (8): the array grows, and the message still names the node asked */
    m = redlock_map_new();
    {
        int p;
        for (p = 7000; p < 7008; p++)
            NODE(m, "127.0.0.1", p);
    }
    m->loaded = 1;
    m->owner[1] = 8;
    START(m, 1, t, 1000);
    check(redlock_attempt_next(&a, t) == REDLOCK_GO && a.node == 7, "to the 8th node");
    v = redlock_attempt_reply(&a, "MOVED 1 10.0.0.9:7000", 21, t);
    check(v == REDLOCK_RESEND && m->n == 9 && strstr(a.err, "server: 127.0.0.1:7007: MOVED") == a.err,
          "MOVED to a 9th node: the map grows, the message names the node asked");
    redlock_map_free(m);

    /* plain and Sentinel servers */
#define KIND(k, name, flags) redlock_attempt_start(&a, (k), NULL, (name), -1, (flags), t, 0)
    KIND(&redlock_kind_plain, "s", REDLOCK_AT_SCRIPT);
    check(redlock_attempt_next(&a, t) == REDLOCK_GO && a.node == 0 &&
              redlock_attempt_prefix(&a, (size_t *)&i) == NULL,
          "plain: GO to its one node, nothing before the command");
    check(redlock_attempt_reply(&a, "NOSCRIPT x", 10, t) == REDLOCK_EVAL &&
              redlock_attempt_reply(&a, "NOSCRIPT x", 10, t) == REDLOCK_DONE,
          "plain: NOSCRIPT gives EVAL once");
    KIND(&redlock_kind_plain, "s", 0);
    check(redlock_attempt_reply(&a, "NOSCRIPT x", 10, t) == REDLOCK_DONE,
          "a command that is no script: NOSCRIPT is its answer");
    KIND(&redlock_kind_sentinel, "sentinel:m", REDLOCK_AT_SCRIPT);
    v = redlock_attempt_reply(&a, "READONLY You can't write", 24, t);
    check(v == REDLOCK_SWITCH && strstr(a.err, "connection: sentinel:m: the master became a replica") == a.err &&
              redlock_attempt_next(&a, t) == REDLOCK_GO,
          "Sentinel: a master turned replica: SWITCH (ask the sentinels), then GO to the new one");
    check(redlock_attempt_reply(&a, "READONLY x", 10, t) == REDLOCK_SWITCH &&
              redlock_attempt_next(&a, t) == REDLOCK_FAIL && a.code == 1 && a.retry == 0,
          "... once: the second time, FAIL after the switch");
    KIND(&redlock_kind_sentinel, "sentinel:m", REDLOCK_AT_KEPT);
    check(redlock_attempt_reply(&a, "READONLY x", 10, t) == REDLOCK_SWITCH &&
              redlock_attempt_next(&a, t) == REDLOCK_FAIL && a.retry == 0,
          "Sentinel: a step of a sequence is never sent to the new master");
    KIND(&redlock_kind_sentinel, "sentinel:m", REDLOCK_AT_CALLER);
    check(redlock_attempt_reply(&a, "READONLY x", 10, t) == REDLOCK_SWITCH &&
              redlock_attempt_next(&a, t) == REDLOCK_FAIL && a.retry == 1,
          "Sentinel: a command its caller sends again: FAIL, the caller may");
    KIND(&redlock_kind_plain, "s", 0);
    check(redlock_attempt_reply(&a, "READONLY x", 10, t) == REDLOCK_DONE,
          "plain: READONLY is the caller's");
    KIND(&redlock_kind_plain, "s", 0);
    check(redlock_attempt_io_failed(&a, 1, "e", t) == REDLOCK_RESEND &&
              redlock_attempt_io_failed(&a, 1, "e", t) == REDLOCK_FAIL && a.code == 1 &&
              strcmp(a.err, "e") == 0,
          "stale connection: send once more, once");
    KIND(&redlock_kind_plain, "s", 0);
    check(redlock_attempt_io_failed(&a, 0, "timed out", t) == REDLOCK_FAIL && a.retry == 0,
          "a timeout: FAIL (the command may have run)");
    KIND(&redlock_kind_plain, "s", REDLOCK_AT_KEPT);
    check(redlock_attempt_io_failed(&a, 1, "e", t) == REDLOCK_FAIL && a.retry == 0,
          "a step of a sequence: never sent again, not even on a stale connection");
    KIND(&redlock_kind_plain, "s", REDLOCK_AT_CALLER);
    check(redlock_attempt_io_failed(&a, 1, "e", t) == REDLOCK_FAIL && a.retry == 1,
          "a command its caller sends again: FAIL, and the caller may");
    KIND(&redlock_kind_sentinel, "s", 0);
    check(redlock_attempt_io_failed(&a, 2, "moved", t) == REDLOCK_FAIL && a.retry == 2,
          "a BLPOP ended by +switch-master: FAIL, the caller's next try goes to the new master");
    check(redlock_io_stale(1, REDLOCK_IO_NOTHING, 0) && !redlock_io_stale(0, REDLOCK_IO_NOTHING, 0) &&
              !redlock_io_stale(1, REDLOCK_IO_PART, 0) && !redlock_io_stale(1, REDLOCK_IO_NOTHING, 1),
          "stale: a connection made before the call that answered nothing in it, not timed out");
    check(redlock_io_stale(0, REDLOCK_IO_TAIL, 0) && redlock_io_stale(1, REDLOCK_IO_TAIL, 0) &&
              !redlock_io_stale(1, REDLOCK_IO_TAIL, 1),
          "the command answered and its tail's reply was lost: its caller's to send again, unless "
          "it timed out");
    m = loaded_map();
    redlock_attempt_start(&a, &redlock_kind_cluster, m, "cluster:x", slot, REDLOCK_AT_KEPT, t, 1000);
    check(redlock_attempt_next(&a, t) == REDLOCK_GO &&
              redlock_attempt_io_failed(&a, 1, "e", t) == REDLOCK_FAIL && m->loaded,
          "Cluster: a step of a sequence is not routed again");
    START(m, slot, t, 1000);
    redlock_attempt_reply(&a, "ASK 1 127.0.0.1:7001", 20, t);
    a.slot = 1;
    {
        size_t len = 0;
        const char *p;
        check(redlock_attempt_next(&a, t) == REDLOCK_GO && (p = redlock_attempt_prefix(&a, &len)) != NULL &&
                  len == REDLOCK_ASKING_LEN && memcmp(p, "*1\r\n$6\r\nASKING\r\n", len) == 0 &&
                  redlock_attempt_reply(&a, "NOSCRIPT x", 10, t) == REDLOCK_EVAL &&
                  redlock_attempt_prefix(&a, &len) != NULL,
              "ASK: ASKING before the command in the same write, and before its EVAL");
    }
    redlock_map_free(m);

    /* replica acknowledgement */
    {
        redlock_wait w = {2, 500, 0};
        redlock_tail tl;
        char buf[REDLOCK_WAIT_BUF];
        long long acked = 0, fsynced = 0;
        check(redlock_wait_tail(&w, buf, &tl) == 0 && tl.extra_ms == 600 &&
                  tl.len == (long)strlen("*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$3\r\n500\r\n") &&
                  memcmp(tl.buf, "*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$3\r\n500\r\n", (size_t)tl.len) == 0,
              "WAIT 2 500: encoded, its reply 100 ms later than the timeout at most");
        r = reply(":1\r\n");
        check(redlock_wait_answer(&w, r, "s", &acked, &fsynced, err, sizeof err) == 0 && acked == 1 &&
                  fsynced == -1 && redlock_wait_short(&w, "s", "the lock", acked, fsynced, err, sizeof err) &&
                  strcmp(err, "replicas: s: 1 of 2 replicas acknowledged the lock within 500 ms") == 0,
              "WAIT's 1 of 2: short, said so");
        freeReplyObject(r);
        check(!redlock_wait_short(&w, "s", "the lock", 2, -1, err, sizeof err), "2 of 2: enough");
        w.aof = 1;
        r = reply("*2\r\n:0\r\n:2\r\n");
        check(redlock_wait_answer(&w, r, "s", &acked, &fsynced, err, sizeof err) == 0 && acked == 2 &&
                  fsynced == 0 && redlock_wait_short(&w, "s", "the lock", acked, fsynced, err, sizeof err) &&
                  strstr(err, "and not the master's") != NULL,
              "WAITAOF: the master's own fsync counts too");
        freeReplyObject(r);
        r = reply("-ERR unknown command 'WAITAOF'\r\n");
        check(redlock_wait_answer(&w, r, "s", &acked, &fsynced, err, sizeof err) == -1 &&
                  strstr(err, "server: s: WAITAOF needs Redis 7.2+") == err,
              "WAITAOF unknown: the Redis it needs");
        freeReplyObject(r);
    }

    why[0] = '\0';
    r = reply("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n");
    check(redlock_sentinel_answer(r, "sentinel a", host, sizeof host, &port, why, sizeof why) ==
                  REDLOCK_MASTER_AT && strcmp(host, "127.0.0.1") == 0 && port == 6380,
          "a sentinel names the master");
    freeReplyObject(r);
    r = reply("*-1\r\n");
    check(redlock_sentinel_answer(r, "sentinel a", host, sizeof host, &port, why, sizeof why) ==
              REDLOCK_MASTER_UNKNOWN,
          "a null answer: no master of that name");
    freeReplyObject(r);
    r = reply("-ERR unknown\r\n");
    check(redlock_sentinel_answer(r, "sentinel b", host, sizeof host, &port, why, sizeof why) ==
                  REDLOCK_SENTINEL_FAILED && strstr(why, "server: sentinel b: ERR unknown"),
          "an error answer: a failure with its reason");
    freeReplyObject(r);
    redlock_sentinel_failure(err, sizeof err, "m", 1, 2, why);
    check(strstr(err, "master name unknown: 1 of 2 sentinels") != NULL, "the message: master name unknown");
    r = reply("*3\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n");
    check(redlock_role_verdict(r, "sentinel:m", err, sizeof err) == 0 && strstr(err, "not a master (ROLE: slave)"),
          "ROLE: a replica is not the master (another round)");
    freeReplyObject(r);
    r = reply("-NOPERM role\r\n");
    check(redlock_role_verdict(r, "sentinel:m", err, sizeof err) == -1 && strstr(err, "server: sentinel:m: ROLE failed"),
          "ROLE refused: final");
    freeReplyObject(r);
    check(redlock_sentinel_round(1, REDLOCK_ROUND_NOT_MASTER) == REDLOCK_PAUSE &&
              redlock_sentinel_round(2, REDLOCK_ROUND_UNREACHABLE) == REDLOCK_PAUSE &&
              redlock_sentinel_round(3, REDLOCK_ROUND_NOT_MASTER) == REDLOCK_FAIL &&
              redlock_sentinel_round(1, REDLOCK_ROUND_REFUSED) == REDLOCK_FAIL &&
              redlock_sentinel_round(2, REDLOCK_ROUND_MASTER) == REDLOCK_DONE,
          "Sentinel rounds: not a master or not reached: another round, three at most; ROLE refused: final");
    check(redlock_sentinel_locate(0, 3, REDLOCK_SENTINEL_FAILED) == REDLOCK_RESEND &&
              redlock_sentinel_locate(1, 3, REDLOCK_MASTER_UNKNOWN) == REDLOCK_RESEND &&
              redlock_sentinel_locate(2, 3, REDLOCK_MASTER_AT) == REDLOCK_DONE &&
              redlock_sentinel_locate(2, 3, REDLOCK_MASTER_UNKNOWN) == REDLOCK_FAIL &&
              redlock_sentinel_locate(0, 1, REDLOCK_SENTINEL_FAILED) == REDLOCK_FAIL,
          "Sentinel discovery: the sentinels in turn until one names the master, then fail");
    {
        double checked = -1;
        check(!redlock_sentinel_check_due(1500, 1000, 1000, -1) &&
                  redlock_sentinel_check_due(2000, 1000, 1000, -1) &&
                  redlock_sentinel_check_due(1500, 1000, 1000, 500) &&
                  !redlock_sentinel_check_due(1500, 1000, 1000, 5000),
              "Sentinel check: due after sentinel_check, or the caller's shorter age");
        check(redlock_sentinel_check(REDLOCK_MASTER_AT, 1, 5000, 1000, 1000, &checked) ==
                      REDLOCK_CHECK_KEEP && checked == 5000 &&
                  redlock_sentinel_check(REDLOCK_MASTER_AT, 0, 5000, 1000, 1000, &checked) ==
                      REDLOCK_CHECK_FIND &&
                  redlock_sentinel_check(REDLOCK_MASTER_UNKNOWN, 0, 5000, 1000, 1000, &checked) ==
                      REDLOCK_CHECK_FIND,
              "Sentinel check: the same address keeps the master; another, or none, finds it again");
        check(redlock_sentinel_check(REDLOCK_SENTINEL_FAILED, 0, 5000, 1000, 250, &checked) ==
                      REDLOCK_CHECK_ROTATE && checked == 5750 &&
                  !redlock_sentinel_check_due(5999, checked, 1000, 250) &&
                  redlock_sentinel_check_due(6000, checked, 1000, 250),
              "Sentinel check: a failed sentinel goes to the back, the next check a whole "
              "sentinel_check later");
    }
    r = reply("*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    check(redlock_role_verdict(r, "sentinel:m", err, sizeof err) == 1, "ROLE: a master");
    freeReplyObject(r);

    {
        char name[32], h[32];
        const char *msg = "mymaster 127.0.0.1 6379 127.0.0.1 6380";
        check(redlock_sentinel_switch(msg, strlen(msg), name, sizeof name, h, sizeof h, &port) == 0 &&
                  strcmp(name, "mymaster") == 0 && strcmp(h, "127.0.0.1") == 0 && port == 6380 &&
                  redlock_sentinel_switch("m 1 2 3", 7, name, sizeof name, h, sizeof h, &port) == -1,
              "+switch-master: the master's name and new address; anything else is no switch");
    }

    {
        const char *demoted = "UNBLOCKED force unblock from blocking operation, instance state changed "
                              "(master -> replica?)";
        const char *old = "UNBLOCKED force unblock from blocking operation, instance state changed "
                          "(master -> slave?)";
        const char *client_unblock = "UNBLOCKED client unblocked via CLIENT UNBLOCK";
        const char *refused = "ERR unknown command 'BLPOP'";
        const char *noperm = "NOPERM this user has no permissions to run the 'blpop' command";
        check(redlock_reply_unblocked(demoted, strlen(demoted)) &&
                  redlock_reply_unblocked(old, strlen(old)) &&
                  redlock_reply_unblocked(client_unblock, strlen(client_unblock)) &&
                  !redlock_reply_unblocked(refused, strlen(refused)) &&
                  !redlock_reply_unblocked(noperm, strlen(noperm)) &&
                  !redlock_reply_demoted(refused, strlen(refused)) &&
                  !redlock_reply_demoted(noperm, strlen(noperm)),
              "a block the server ended (turned replica, CLIENT UNBLOCK) is unblocked; a refusal of "
              "BLPOP is neither unblocked nor demoted");
    }

    printf("1..%d\n", n_test);
    return failed;
}
