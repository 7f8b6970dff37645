/* The floor: a plain hiredis loop doing exactly the round trips of one lock
 * operation, with nothing else around them (no options, no Lua, no random
 * tokens: a counter makes each token unique). `make bench` runs it in
 * alternation with each library case and reports the library's time as a
 * ratio to it.
 *
 * usage: floor [-n ops] [-w warmup] [-k key] [-t ttl] [-r] MODE SERVER...
 *   SERVER  host:port, or a unix socket path (starts with '/')
 *   MODE    cycle  the library's own round trips for acquire+release (the
 *                  fair floor): SET key token NX PX ttl and XADD of the
 *                  fence counter stream in one write (redlock.scripted.grant),
 *                  then EVALSHA of the release script
 *           setnx  SET key token NX PX ttl + EVALSHA release: the textbook
 *                  acquire, with the library's release script
 *           textbook  what a user writes without a library: SET key token
 *                  NX PX ttl, then EVALSHA of the compare-and-delete script
 *                  of the Redis documentation (TEXTBOOK_RELEASE below, not
 *                  the library's): the cycle the library is measured
 *                  against for the server's cost
 *           held   EVALSHA acquire on a key another token holds: refused
 *           permit a semaphore's cycle (limit 3), as the library sends it:
 *                  EVALSHA of SEM_ACQUIRE (the key, its waiters queue and
 *                  data, the caller's hand-off list, the fence counter),
 *                  then EVALSHA of SEM_RELEASE (the key, queue, data,
 *                  wake-up list, counter)
 *           reader a read lock's cycle: RW_READ, then RW_RELEASE_READ, with
 *                  the same keys
 *           group  a 2-key group lock's cycle: GROUP_ACQUIRE (KEY, KEY:g2,
 *                  the counter), then GROUP_RELEASE (the keys and their
 *                  waiters queues)
 *           legacy legacy mode's cycle (servers without scripting), one
 *                  command per round trip as the library sends them:
 *                  WATCH, GET, MULTI, SETNX "<expiry ms>:<token>", PEXPIRE,
 *                  XADD fence, EXEC; WATCH, GET, MULTI, DEL, EXEC
 *                  (Redis 5.0+: the counter a stream)
 *   -r      tokens of 128 bits from getrandom(2), one call per token, as the
 *           library makes them (shows what that system call costs)
 *   With several servers every request goes to all of them before any reply
 *   is read (the fan-out a quorum client makes), then every reply is read.
 *
 * Prints one line:
 *   ns_per_op=<float> cpu_ns_per_op=<float> [server_ns_per_op=<float>]
 *   ops=<n> calls=<cmd>:<count>,... usec=<cmd>:<usec>,...
 * (cpu: this process's own CPU time, clock(3), what the client side costs;
 * server: the redis-server processes' CPU time, the first field of
 * /proc/<pid>/task/<tid>/schedstat summed over their threads, ns, left out
 * when the servers' /proc is not readable here) where calls and usec are
 * the INFO commandstats deltas over the measured loop, summed over the
 * servers (INFO itself left out; a script's usec includes the commands it
 * calls, which count again under their own names). Exits 2 on any
 * unexpected reply. The script texts come from scripts/NAME.lua (the
 * build's generated scripts_gen.h), so the server runs the very scripts
 * the library runs. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "scripts.h"     /* the grant's fence command */
#include "scripts_gen.h"

/* The release of the SET command's documentation (redis.io, "Patterns"),
 * as a user copies it: not scripts/release.lua. */
#define TEXTBOOK_RELEASE                                                    \
    "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n"                      \
    "    return redis.call(\"del\",KEYS[1])\n"                              \
    "else\n"                                                                \
    "    return 0\n"                                                        \
    "end"

#define MAX_SERVERS 16
#define MAX_STATS 64

typedef struct {
    char name[48];
    long long calls;
    long long usec;
} stat;

typedef struct {
    stat s[MAX_STATS];
    int n;
} stats;

static redisContext *ctx[MAX_SERVERS];
static long server_pid[MAX_SERVERS]; /* INFO server process_id */
static int nservers;
static char sha_acquire[41], sha_release[41], sha_textbook[41];
static char sha_sem_acquire[41], sha_sem_release[41], sha_rw_read[41], sha_rw_release[41];
static char sha_group_acquire[41], sha_group_release[41];
/* tokens: the pid (once: getpid is a system call) and a counter */
static unsigned long long token_prefix;
static int random_tokens;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "floor: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static redisContext *connect_to(const char *server) {
    redisContext *c;
    if (server[0] == '/') {
        c = redisConnectUnix(server);
    } else {
        char host[256];
        const char *colon = strrchr(server, ':');
        size_t len = colon ? (size_t)(colon - server) : 0;
        if (colon == NULL || len == 0 || len >= sizeof host)
            die("bad server (host:port or /path)", server);
        memcpy(host, server, len);
        host[len] = '\0';
        c = redisConnect(host, atoi(colon + 1));
    }
    if (c == NULL || c->err)
        die("could not connect", c ? c->errstr : server);
    return c;
}

/* Sends one command to every server, then reads every reply: one round
 * trip, fanned out. replies[i] belongs to the caller. */
static void fan_out(int argc, const char **argv, const size_t *argvlen, redisReply **replies) {
    int i, done;
    void *r;
    for (i = 0; i < nservers; i++) {
        if (redisAppendCommandArgv(ctx[i], argc, argv, argvlen) != REDIS_OK)
            die("could not encode a command", ctx[i]->errstr);
        do {
            if (redisBufferWrite(ctx[i], &done) != REDIS_OK)
                die("could not send", ctx[i]->errstr);
        } while (!done);
    }
    for (i = 0; i < nservers; i++) {
        if (redisGetReply(ctx[i], &r) != REDIS_OK)
            die("lost the connection", ctx[i]->errstr);
        replies[i] = r;
    }
}

static void free_all(redisReply **replies) {
    int i;
    for (i = 0; i < nservers; i++)
        freeReplyObject(replies[i]);
}

/* Runs a setup command on one server; returns the reply. */
static redisReply *command(redisContext *c, int argc, const char **argv) {
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (r == NULL)
        die("lost the connection", c->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        die(argv[0], r->str);
    return r;
}

static void load_script(const char *source, char *sha) {
    const char *argv[3] = {"SCRIPT", "LOAD", source};
    int i;
    for (i = 0; i < nservers; i++) {
        redisReply *r = command(ctx[i], 3, argv);
        if (r->type != REDIS_REPLY_STRING || r->len != 40)
            die("SCRIPT LOAD", "unexpected reply");
        memcpy(sha, r->str, 41);
        freeReplyObject(r);
    }
}

/* INFO commandstats, summed over the servers, INFO itself left out. */
static void read_stats(stats *st) {
    const char *argv[2] = {"INFO", "commandstats"};
    int i, j;
    st->n = 0;
    for (i = 0; i < nservers; i++) {
        redisReply *r = command(ctx[i], 2, argv);
        char *line = r->str, *end;
        while (line != NULL && (line = strstr(line, "cmdstat_")) != NULL) {
            char name[48];
            long long calls, usec;
            line += 8;
            end = strchr(line, ':');
            if (end == NULL || (size_t)(end - line) >= sizeof name)
                break;
            memcpy(name, line, (size_t)(end - line));
            name[end - line] = '\0';
            if (sscanf(end, ":calls=%lld,usec=%lld", &calls, &usec) != 2 || strcmp(name, "info") == 0)
                continue;
            for (j = 0; j < st->n && strcmp(st->s[j].name, name) != 0; j++)
                ;
            if (j == st->n) {
                if (st->n == MAX_STATS)
                    die("INFO commandstats", "too many commands");
                memcpy(st->s[j].name, name, sizeof name);
                st->s[j].calls = 0;
                st->s[j].usec = 0;
                st->n++;
            }
            st->s[j].calls += calls;
            st->s[j].usec += usec;
        }
        freeReplyObject(r);
    }
}

/* The commands whose calls changed, with the change of calls or (usec
 * set) of usec: name:delta,... */
static void print_deltas(const stats *before, const stats *after, int usec) {
    int i, j, first = 1;
    for (i = 0; i < after->n; i++) {
        long long calls = after->s[i].calls, d = usec ? after->s[i].usec : calls;
        for (j = 0; j < before->n; j++)
            if (strcmp(before->s[j].name, after->s[i].name) == 0) {
                calls -= before->s[j].calls;
                d -= usec ? before->s[j].usec : before->s[j].calls;
            }
        if (calls == 0)
            continue;
        printf("%s%s:%lld", first ? "" : ",", after->s[i].name, d);
        first = 0;
    }
}

/* The servers' process ids (INFO server), for their CPU time in /proc. */
static void read_pids(void) {
    const char *argv[2] = {"INFO", "server"};
    int i;
    for (i = 0; i < nservers; i++) {
        redisReply *r = command(ctx[i], 2, argv);
        const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, "process_id:") : NULL;
        server_pid[i] = p ? strtol(p + 11, NULL, 10) : 0;
        freeReplyObject(r);
    }
}

/* ns on CPU of every thread of the servers so far (the first field of
 * /proc/<pid>/task/<tid>/schedstat); -1 when one cannot be read (a server
 * on another machine, or in another pid namespace). */
static double server_cpu_ns(void) {
    double total = 0;
    int i;
    for (i = 0; i < nservers; i++) {
        char path[64];
        DIR *d;
        struct dirent *e;
        int threads = 0;
        if (server_pid[i] <= 0)
            return -1;
        snprintf(path, sizeof path, "/proc/%ld/task", server_pid[i]);
        if ((d = opendir(path)) == NULL)
            return -1;
        while ((e = readdir(d)) != NULL) {
            char file[128], line[128];
            FILE *f;
            if (e->d_name[0] == '.')
                continue;
            snprintf(file, sizeof file, "/proc/%ld/task/%.32s/schedstat", server_pid[i], e->d_name);
            if ((f = fopen(file, "r")) == NULL)
                continue; /* a thread that has just ended */
            if (fgets(line, sizeof line, f) != NULL) {
                total += (double)strtoull(line, NULL, 10);
                threads++;
            }
            fclose(f);
        }
        closedir(d);
        if (threads == 0)
            return -1;
    }
    return total;
}

static int is_int(const redisReply *r, long long v) {
    return r->type == REDIS_REPLY_INTEGER && r->integer == v;
}

/* {1, fence} when want_held is 0; {0, pttl} when it is 1 */
static void check_acquire(redisReply **replies, int want_held) {
    int i;
    for (i = 0; i < nservers; i++) {
        redisReply *r = replies[i];
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            !is_int(r->element[0], want_held ? 0 : 1))
            die("acquire", want_held ? "expected a refusal" : "expected the lock");
    }
}

static void check_each(redisReply **replies, int type, long long integer, const char *what) {
    int i;
    for (i = 0; i < nservers; i++)
        if (replies[i]->type != type || (type == REDIS_REPLY_INTEGER && replies[i]->integer != integer))
            die(what, "unexpected reply");
}

typedef enum { CYCLE, SETNX, TEXTBOOK, HELD, LEGACY, PERMIT, READER, GROUP } mode;

/* The companion keys of a key without a hash tag, as the library names
 * them (lua/redlock/util.lua companion_key). */
static void companion(char *out, size_t size, const char *key, const char *suffix) {
    if ((size_t)snprintf(out, size, "{%s}%s", key, suffix) >= size)
        die("key too long", key);
}

/* A semaphore's or a reader's cycle, or a 2-key group's: the library's
 * scripts with the library's keys and arguments. */
static void kind_cycle(mode m, const char *key, const char *fence_key, const char *ttl, const char *token) {
    redisReply *replies[MAX_SERVERS];
    char waiters[300], data[300], handoff[340], wake[300], prefix[300], key2[300], waiters2[300];
    int i;
    companion(waiters, sizeof waiters, key, ":waiters");
    companion(data, sizeof data, key, ":waiting");
    companion(wake, sizeof wake, key, ":wake");
    companion(prefix, sizeof prefix, key, ":handoff:");
    if ((size_t)snprintf(handoff, sizeof handoff, "%s%s", prefix, token) >= sizeof handoff)
        die("key too long", key);
    if (m == GROUP) {
        if ((size_t)snprintf(key2, sizeof key2, "%s:g2", key) >= sizeof key2)
            die("key too long", key);
        companion(waiters2, sizeof waiters2, key2, ":waiters");
        {
            const char *acq[9] = {"EVALSHA", sha_group_acquire, "3", key, key2, fence_key, token, ttl, "2"};
            const char *rel[8] = {"EVALSHA", sha_group_release, "4", key, key2, waiters, waiters2, token};
            fan_out(9, acq, NULL, replies);
            for (i = 0; i < nservers; i++)
                if (replies[i]->type != REDIS_REPLY_ARRAY || replies[i]->element[0]->integer != 1)
                    die("group_acquire", "unexpected reply");
            free_all(replies);
            fan_out(8, rel, NULL, replies);
            for (i = 0; i < nservers; i++)
                if (replies[i]->type != REDIS_REPLY_ARRAY || replies[i]->element[0]->integer != 2)
                    die("group_release", "unexpected reply");
            free_all(replies);
        }
        return;
    }
    {
        const char *sem[14] = {"EVALSHA", sha_sem_acquire, "5", key, waiters, data, handoff, fence_key,
                               token, ttl, "3", "0", "w", "1"};
        const char *read[13] = {"EVALSHA", sha_rw_read, "5", key, waiters, data, handoff, fence_key,
                                token, ttl, "0", "w", "1"};
        const char *rel[10] = {"EVALSHA", m == PERMIT ? sha_sem_release : sha_rw_release, "5", key, waiters,
                               data, wake, fence_key, token, prefix};
        if (m == PERMIT)
            fan_out(14, sem, NULL, replies);
        else
            fan_out(13, read, NULL, replies);
        for (i = 0; i < nservers; i++)
            if (replies[i]->type != REDIS_REPLY_ARRAY || replies[i]->element[0]->integer != 1)
                die(m == PERMIT ? "sem_acquire" : "rw_read", "unexpected reply");
        free_all(replies);
        fan_out(10, rel, NULL, replies);
        check_each(replies, REDIS_REPLY_INTEGER, 1, "release");
        free_all(replies);
    }
}

/* One command of legacy mode's cycle on every server; dies unless every
 * reply has the type expected. */
static void step(int argc, const char **argv, int type, redisReply **replies) {
    int i;
    fan_out(argc, argv, NULL, replies);
    for (i = 0; i < nservers; i++)
        if (replies[i]->type != type)
            die(argv[0], "unexpected reply");
    free_all(replies);
}

static void legacy_cycle(const char *key, const char *fence_key, const char *ttl,
                         const char *token) {
    redisReply *replies[MAX_SERVERS];
    struct timespec ts;
    char value[64];
    const char *watch[2] = {"WATCH", key}, *get[2] = {"GET", key}, *multi[1] = {"MULTI"};
    const char *setnx[3] = {"SETNX", key, value}, *pexpire[3] = {"PEXPIRE", key, ttl};
    const char *xadd[7] = {"XADD", fence_key, "MAXLEN", "0", "*", "f", "1"};
    const char *exec[1] = {"EXEC"}, *del[2] = {"DEL", key};
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(value, sizeof value, "%lld:%s",
             (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + atoll(ttl), token);
    step(2, watch, REDIS_REPLY_STATUS, replies);
    step(2, get, REDIS_REPLY_NIL, replies);
    step(1, multi, REDIS_REPLY_STATUS, replies);
    step(3, setnx, REDIS_REPLY_STATUS, replies); /* QUEUED */
    step(3, pexpire, REDIS_REPLY_STATUS, replies);
    step(7, xadd, REDIS_REPLY_STATUS, replies);
    step(1, exec, REDIS_REPLY_ARRAY, replies);
    step(2, watch, REDIS_REPLY_STATUS, replies);
    step(2, get, REDIS_REPLY_STRING, replies);
    step(1, multi, REDIS_REPLY_STATUS, replies);
    step(2, del, REDIS_REPLY_STATUS, replies);
    step(1, exec, REDIS_REPLY_ARRAY, replies);
}

/* SET NX PX and XADD of the counter in one write on every server, then
 * both replies of each: the library's uncontended acquire (the XADD's
 * words from scripts.h, as conn:grant's). */
static void grant(const char *fence_key, const char **set) {
    const char *xadd[REDLOCK_GRANT_FENCE_ARGC] = REDLOCK_GRANT_FENCE_ARGV(fence_key);
    int i, j, done;
    void *r;
    for (i = 0; i < nservers; i++) {
        if (redisAppendCommandArgv(ctx[i], 6, set, NULL) != REDIS_OK ||
            redisAppendCommandArgv(ctx[i], REDLOCK_GRANT_FENCE_ARGC, xadd, NULL) != REDIS_OK)
            die("could not encode a command", ctx[i]->errstr);
        do {
            if (redisBufferWrite(ctx[i], &done) != REDIS_OK)
                die("could not send", ctx[i]->errstr);
        } while (!done);
    }
    for (i = 0; i < nservers; i++)
        for (j = 0; j < 2; j++) {
            redisReply *rep;
            if (redisGetReply(ctx[i], &r) != REDIS_OK)
                die("lost the connection", ctx[i]->errstr);
            rep = r;
            if (rep->type != (j == 0 ? REDIS_REPLY_STATUS : REDIS_REPLY_STRING))
                die(j == 0 ? "SET NX PX" : "XADD", "unexpected reply");
            freeReplyObject(rep);
        }
}

static void release_all(const char *key, const char *token) {
    redisReply *replies[MAX_SERVERS];
    const char *rel[5] = {"EVALSHA", sha_release, "1", key, token};
    fan_out(5, rel, NULL, replies);
    check_each(replies, REDIS_REPLY_INTEGER, 1, "release");
    free_all(replies);
}

static void one_op(mode m, const char *key, const char *fence_key, const char *ttl,
                   unsigned long long seq) {
    char token[33];
    redisReply *replies[MAX_SERVERS];
    const char *acq[7] = {"EVALSHA", sha_acquire, "2", key, fence_key, token, ttl};
    const char *rel[5] = {"EVALSHA", m == TEXTBOOK ? sha_textbook : sha_release, "1", key, token};
    const char *set[6] = {"SET", key, token, "NX", "PX", ttl};
    if (random_tokens) {
        unsigned long long raw[2];
        if (syscall(SYS_getrandom, raw, sizeof raw, 0) != (long)sizeof raw)
            die("getrandom", NULL);
        snprintf(token, sizeof token, "%016llx%016llx", raw[0], raw[1]);
    } else {
        snprintf(token, sizeof token, "%016llx%016llx", token_prefix, seq);
    }
    if (m == LEGACY) {
        legacy_cycle(key, fence_key, ttl, token);
        return;
    }
    if (m == PERMIT || m == READER || m == GROUP) {
        kind_cycle(m, key, fence_key, ttl, token);
        return;
    }
    if (m == SETNX || m == TEXTBOOK) {
        fan_out(6, set, NULL, replies);
        check_each(replies, REDIS_REPLY_STATUS, 0, "SET NX PX");
    } else if (m == CYCLE) {
        grant(fence_key, set);
        release_all(key, token);
        return;
    } else {
        fan_out(7, acq, NULL, replies);
        check_acquire(replies, m == HELD);
    }
    free_all(replies);
    if (m == HELD)
        return;
    fan_out(5, rel, NULL, replies);
    check_each(replies, REDIS_REPLY_INTEGER, 1, "release");
    free_all(replies);
}

int main(int argc, char **argv) {
    long ops = 2000, warmup = 200, i;
    const char *key = "bench:floor", *ttl = "10000", *mode_name;
    char fence_key[300];
    mode m;
    int opt;
    stats before, after;
    double t0, t1, s0, s1;
    clock_t c0, c1;
    while ((opt = getopt(argc, argv, "n:w:k:t:r")) != -1) {
        switch (opt) {
        case 'n': ops = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'k': key = optarg; break;
        case 't': ttl = optarg; break;
        case 'r': random_tokens = 1; break;
        default: die("usage: floor [-n ops] [-w warmup] [-k key] [-t ttl] [-r] MODE SERVER...", NULL);
        }
    }
    if (argc - optind < 2 || ops < 1 || warmup < 0)
        die("usage: floor [-n ops] [-w warmup] [-k key] [-t ttl] [-r] MODE SERVER...", NULL);
    mode_name = argv[optind++];
    token_prefix = (unsigned long long)getpid();
    if (strcmp(mode_name, "cycle") == 0)
        m = CYCLE;
    else if (strcmp(mode_name, "setnx") == 0)
        m = SETNX;
    else if (strcmp(mode_name, "textbook") == 0)
        m = TEXTBOOK;
    else if (strcmp(mode_name, "held") == 0)
        m = HELD;
    else if (strcmp(mode_name, "legacy") == 0)
        m = LEGACY;
    else if (strcmp(mode_name, "permit") == 0)
        m = PERMIT;
    else if (strcmp(mode_name, "reader") == 0)
        m = READER;
    else if (strcmp(mode_name, "group") == 0)
        m = GROUP;
    else
        die("unknown mode (cycle, setnx, textbook, held, legacy, permit, reader, group)", mode_name);
    if (strlen(key) > 200 || strchr(key, '{') || strchr(key, '}'))
        die("key: at most 200 bytes, no braces", key);
    /* the library's companion key for a key without a hash tag */
    snprintf(fence_key, sizeof fence_key, "redlock:fences"); /* one per server */
    for (; optind < argc; optind++) {
        if (nservers == MAX_SERVERS)
            die("too many servers", NULL);
        ctx[nservers++] = connect_to(argv[optind]);
    }
    read_pids();
    load_script(REDLOCK_SCRIPT_ACQUIRE, sha_acquire);
    load_script(REDLOCK_SCRIPT_RELEASE, sha_release);
    load_script(TEXTBOOK_RELEASE, sha_textbook);
    load_script(REDLOCK_SCRIPT_SEM_ACQUIRE, sha_sem_acquire);
    load_script(REDLOCK_SCRIPT_SEM_RELEASE, sha_sem_release);
    load_script(REDLOCK_SCRIPT_RW_READ, sha_rw_read);
    load_script(REDLOCK_SCRIPT_RW_RELEASE_READ, sha_rw_release);
    load_script(REDLOCK_SCRIPT_GROUP_ACQUIRE, sha_group_acquire);
    load_script(REDLOCK_SCRIPT_GROUP_RELEASE, sha_group_release);
    if (m == HELD) {
        const char *hold[5] = {"SET", key, "held-by-someone-else", "PX", "600000"};
        for (i = 0; i < nservers; i++)
            freeReplyObject(command(ctx[i], 5, hold));
    }
    for (i = 0; i < warmup; i++)
        one_op(m, key, fence_key, ttl, (unsigned long long)i);
    read_stats(&before);
    s0 = server_cpu_ns();
    c0 = clock();
    t0 = now_ns();
    for (i = 0; i < ops; i++)
        one_op(m, key, fence_key, ttl, (unsigned long long)(warmup + i));
    t1 = now_ns();
    c1 = clock();
    s1 = server_cpu_ns();
    read_stats(&after);
    if (m == HELD) {
        const char *del[2] = {"DEL", key};
        for (i = 0; i < nservers; i++)
            freeReplyObject(command(ctx[i], 2, del));
    }
    printf("ns_per_op=%.1f cpu_ns_per_op=%.1f", (t1 - t0) / (double)ops,
           (double)(c1 - c0) * 1e9 / CLOCKS_PER_SEC / (double)ops);
    if (s0 >= 0 && s1 >= s0)
        printf(" server_ns_per_op=%.1f", (s1 - s0) / (double)ops);
    printf(" ops=%ld calls=", ops);
    print_deltas(&before, &after, 0);
    printf(" usec=");
    print_deltas(&before, &after, 1);
    printf("\n");
    for (i = 0; i < nservers; i++)
        redisFree(ctx[i]);
    return 0;
}
