/* The topology core (csrc/topo.c) fed replies, without sockets: the
 * decisions every driver carries out. Prints TAP ("ok N - what"); spec/01
 * runs it. Replies are made by hiredis' reader from RESP text, as a
 * server would send them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "topo.h"

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
    redlock_attempt_start(&a, slot, t, 1000);
    check(redlock_map_target(m, &a, t) == REDLOCK_RELOAD, "an unloaded map: RELOAD before the command");
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
    redlock_attempt_start(&a, slot, t, 1000);
    v = redlock_map_target(m, &a, t);
    check(v == REDLOCK_GO && a.node == m->owner[slot] - 1 && !a.asking, "GO to the slot's master");

    /* MOVED: three at once, then pauses; the map reloaded, MOVED believed */
    for (i = 0; i < 3; i++)
        v = redlock_map_reply(m, &a, 1, "MOVED 1 127.0.0.1:7009", 22, t);
    check(v == REDLOCK_RESEND && !m->loaded && m->owner[1] == 4 && m->n == 4,
          "MOVED: RESEND, the map to reload, the new node known");
    v = redlock_map_reply(m, &a, 1, "MOVED 1 127.0.0.1:7009", 22, t);
    check(v == REDLOCK_PAUSE && a.wait_ms == 5, "past three redirections: PAUSE 5 ms");

    /* ASK: once to the node named, after ASKING */
    m->loaded = 1;
    redlock_attempt_start(&a, slot, t, 1000);
    v = redlock_map_reply(m, &a, 1, "ASK 1 127.0.0.1:7001", 20, t);
    a.slot = 1;
    check(v == REDLOCK_RESEND && redlock_map_target(m, &a, t) == REDLOCK_GO && a.asking && a.node == 1,
          "ASK: RESEND to the node named, after ASKING");
    check(redlock_map_target(m, &a, t) == REDLOCK_GO && !a.asking && a.node == 3,
          "after the ASK: the slot's master again");

    /* TRYAGAIN: pauses 5, 10, 20, 40, 40 ... until the deadline */
    redlock_attempt_start(&a, slot, t, 100);
    {
        double waited = 0;
        int pauses = 0;
        while ((v = redlock_map_reply(m, &a, 1, "TRYAGAIN Multiple keys", 22, t + waited)) ==
               REDLOCK_PAUSE) {
            waited += a.wait_ms;
            pauses++;
        }
        check(v == REDLOCK_FAIL && a.code == 2 && pauses == 4 && waited == 75 &&
                  strstr(a.err, "TRYAGAIN Multiple keys") != NULL,
              "TRYAGAIN: PAUSE (5, 10, 20, 40 ms) until the deadline, then FAIL with the refusal");
    }

    /* CLUSTERDOWN: pause, reload */
    redlock_attempt_start(&a, slot, t, 1000);
    v = redlock_map_reply(m, &a, 1, "CLUSTERDOWN Hash slot not served", 32, t);
    check(v == REDLOCK_PAUSE && !m->loaded && redlock_map_target(m, &a, t) == REDLOCK_RELOAD,
          "CLUSTERDOWN: PAUSE, then the map reloaded");

    /* a loaded map without the slot's master: pause and reload, to the deadline */
    m->loaded = 1;
    m->owner[slot] = 0;
    redlock_attempt_start(&a, slot, t, 10);
    v = redlock_map_target(m, &a, t);
    check(v == REDLOCK_PAUSE && !m->loaded && redlock_map_target(m, &a, t + 5) == REDLOCK_RELOAD,
          "a slot the loaded map lacks: PAUSE, then RELOAD (not a final error)");
    m->loaded = 1;
    a.pause = 40;
    v = redlock_map_target(m, &a, t + 5);
    check(v == REDLOCK_FAIL && a.code == 2 && strstr(a.err, "no node serves slot") != NULL,
          "... until the deadline: FAIL, no node serves the slot");
    m->owner[slot] = 1;
    m->loaded = 1;

    /* NOSCRIPT: EVAL once; other errors are the caller's */
    redlock_attempt_start(&a, slot, t, 1000);
    check(redlock_map_reply(m, &a, 1, "NOSCRIPT No matching script", 27, t) == REDLOCK_EVAL &&
              redlock_map_reply(m, &a, 1, "NOSCRIPT No matching script", 27, t) == REDLOCK_DONE &&
              redlock_map_reply(m, &a, 1, "ERR wrong", 9, t) == REDLOCK_DONE,
          "NOSCRIPT: EVAL once; any other error: DONE");

    /* a node that cannot be reached */
    redlock_attempt_start(&a, slot, t, 1000);
    check(redlock_map_io_failed(m, &a, 1, "connection: x: lost", t) == REDLOCK_RESEND,
          "a stale connection: RESEND once");
    v = redlock_map_io_failed(m, &a, 1, "connection: x: lost", t);
    check(v == REDLOCK_RELOAD && !m->loaded, "a node unreachable: RELOAD the map at once");
    v = redlock_map_io_failed(m, &a, 0, "connection: x: refused", t);
    check(v == REDLOCK_PAUSE, "again: PAUSE, then the map (a failover: nodes learn it one by one)");
    v = redlock_map_io_failed(m, &a, 0, "connection: x: refused", t + 1000);
    check(v == REDLOCK_FAIL && a.code == 1 && strcmp(a.err, "connection: x: refused") == 0,
          "at the deadline: FAIL with the connection's error");
    /* a node cut off silently: the read timed out at the deadline; the
     * map is reloaded all the same, and the command sent again if the slot
     * has another owner now (its replica promoted), else it fails there */
    m->loaded = 1;
    redlock_attempt_start(&a, slot, t, 300);
    check(redlock_map_target(m, &a, t) == REDLOCK_GO && a.node == 0, "to the slot's owner");
    v = redlock_map_io_failed(m, &a, 0, "connection: x: timed out", t + 300);
    check(v == REDLOCK_RELOAD && !m->loaded, "timed out at the deadline: RELOAD all the same");
    m->loaded = 1;
    check(redlock_map_target(m, &a, t + 310) == REDLOCK_FAIL && a.code == 1 &&
              strcmp(a.err, "connection: x: timed out") == 0,
          "the reloaded map names the same node: FAIL with its error, no second timeout");
    redlock_attempt_start(&a, slot, t, 300);
    check(redlock_map_target(m, &a, t) == REDLOCK_GO && a.node == 0, "to the slot's owner again");
    v = redlock_map_io_failed(m, &a, 0, "connection: x: timed out", t + 300);
    m->loaded = 1;
    m->owner[slot] = 2;
    check(v == REDLOCK_RELOAD && redlock_map_target(m, &a, t + 310) == REDLOCK_GO && a.node == 1,
          "the reloaded map names another node (a promotion): sent there, past the deadline");
    check(redlock_map_io_failed(m, &a, 0, "connection: y: timed out", t + 610) == REDLOCK_FAIL,
          "that one failing too: FAIL");
    m->owner[slot] = 1;
    redlock_attempt_start(&a, -1, t, 1000);
    a.node = 0;
    check(redlock_map_io_failed(m, &a, 0, "connection: x: refused", t) == REDLOCK_RESEND && m->any == 1,
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
    redlock_attempt_start(&a, 1, t, 1000);
    check(redlock_map_target(m, &a, t) == REDLOCK_GO && a.node == 7, "to the 8th node");
    v = redlock_map_reply(m, &a, 0, "MOVED 1 10.0.0.9:7000", 21, t);
    check(v == REDLOCK_RESEND && m->n == 9 && strstr(a.err, "server: 127.0.0.1:7007: MOVED") == a.err,
          "MOVED to a 9th node: the map grows, the message names the node asked");
    redlock_map_free(m);

    /* plain and Sentinel servers */
    redlock_attempt_start(&a, -1, t, 0);
    check(redlock_server_reply(&a, "s", 1, 0, "NOSCRIPT x", 10) == REDLOCK_EVAL &&
              redlock_server_reply(&a, "s", 1, 0, "NOSCRIPT x", 10) == REDLOCK_DONE,
          "plain: NOSCRIPT gives EVAL once");
    redlock_attempt_start(&a, -1, t, 0);
    v = redlock_server_reply(&a, "sentinel:m", 1, 1, "READONLY You can't write", 24);
    check(v == REDLOCK_RELOAD && strstr(a.err, "the master became a replica") != NULL &&
              redlock_server_reply(&a, "sentinel:m", 1, 1, "READONLY x", 10) == REDLOCK_FAIL,
          "Sentinel: a master turned replica: RELOAD (ask the sentinels) once");
    check(redlock_server_reply(&a, "s", 1, 0, "READONLY x", 10) == REDLOCK_DONE,
          "plain: READONLY is the caller's");
    redlock_attempt_start(&a, -1, t, 0);
    check(redlock_stale_verdict(&a, 1, "e") == REDLOCK_RESEND && redlock_stale_verdict(&a, 1, "e") == REDLOCK_FAIL &&
              a.code == 1,
          "stale connection: send once more, once");

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
