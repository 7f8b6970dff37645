/* The contended floor: one worker process of the "C 1 ms-retry loop" that
 * `make bench-contended` (bench/contended.lua) runs against the library's
 * notified waiting. N times:
 *   lock     SET key token NX PX 10000 (token: pid and a counter, unique per
 *            acquisition); refused: sleep 1 ms (nanosleep), try again
 *   work     GET counter, SET counter v+1
 *   unlock   EVALSHA of the plain compare-and-delete script
 * This is the loop a user writes with nothing but hiredis: the releasing
 * process usually takes the lock straight back (barging), while the others
 * sleep.
 *
 * Over several servers (HOST:PORT,HOST:PORT,...: a C barging loop over
 * independent masters) the lock is SET NX PX sent to every server at once
 * (pipelined, one connection each) and held on a majority; a refused
 * attempt deletes what it got (the release script on each) before its
 * 1 ms sleep; the release runs the script on every server, and the
 * counter lives on the first.
 *
 * usage: contended_floor HOST:PORT[,HOST:PORT...] KEY COUNTER N START_AT OUT
 *   START_AT  CLOCK_MONOTONIC ms (the clock of redlock.core.now()) at which
 *             the loop starts: every worker connects and loads the script
 *             first, then sleeps until then (the barrier of the Lua worker)
 *   OUT       file written at the end, the Lua worker's format:
 *               <start ms> <end ms>
 *             then one line per acquisition, in order:
 *               <wait ms> <counter value read> <acquired at ms> <release sent at ms>
 *             (times on CLOCK_MONOTONIC; "acquired at": the SET's reply
 *             read; "release sent at": just before the release is sent)
 * Exits 2 on any unexpected reply (a release that finds another token: the
 * lock was lost, which a 10 s ttl makes impossible here). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* compare-and-delete: the textbook release */
#define RELEASE_SCRIPT                                                      \
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"                       \
    "  return redis.call('DEL', KEYS[1])\n"                                 \
    "end\n"                                                                 \
    "return 0\n"

typedef struct {
    double wait, acquired, released;
    long long seq;
} sample;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "contended_floor: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ns(long ns) {
    struct timespec ts = {0, ns};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A whole argument as a number; dies on anything else. */
static double number(const char *s, const char *what) {
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0)
        die(what, s);
    return v;
}

/* Sleeps until CLOCK_MONOTONIC reads at_ms. */
static void sleep_until(double at_ms) {
    struct timespec ts;
    int rc;
    if (at_ms <= now_ms())
        return;
    ts.tv_sec = (time_t)(at_ms / 1e3);
    ts.tv_nsec = (long)((at_ms - (double)ts.tv_sec * 1e3) * 1e6);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while ((rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) == EINTR)
        ;
    if (rc != 0)
        die("clock_nanosleep", strerror(rc));
}

/* One command; dies on a lost connection or an error reply. The reply
 * belongs to the caller. */
static redisReply *command(redisContext *c, int argc, const char **argv) {
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (r == NULL)
        die("lost the connection", c->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "contended_floor: %s: %s\n", argv[0], r->str);
        freeReplyObject(r);
        exit(2);
    }
    return r;
}

#define MAX_SERVERS 9

/* Connects to one "host:port" of the list (len bytes at s). */
static redisContext *connect_to(const char *s, size_t len) {
    char spec[300], host[256];
    const char *colon;
    size_t hlen;
    redisContext *c;
    if (len == 0 || len >= sizeof spec)
        die("bad server (host:port)", s);
    memcpy(spec, s, len);
    spec[len] = '\0';
    colon = strrchr(spec, ':');
    hlen = colon ? (size_t)(colon - spec) : 0;
    if (colon == NULL || hlen == 0 || hlen >= sizeof host)
        die("bad server (host:port)", spec);
    memcpy(host, spec, hlen);
    host[hlen] = '\0';
    c = redisConnect(host, (int)number(colon + 1, "bad port"));
    if (c == NULL || c->err)
        die("could not connect", c ? c->errstr : spec);
    return c;
}

/* Sends argv to each of the ns servers at once, then reads each reply:
 * how many answered as `ok` says (SET NX: a status; the release: 1), and
 * which (got[k]). */
static int everywhere(redisContext **c, int ns, int argc, const char **argv, int release, int *got) {
    int k, yes = 0;
    for (k = 0; k < ns; k++)
        if (redisAppendCommandArgv(c[k], argc, argv, NULL) != REDIS_OK)
            die("lost the connection", c[k]->errstr);
    for (k = 0; k < ns; k++) {
        redisReply *r;
        if (redisGetReply(c[k], (void **)&r) != REDIS_OK || r == NULL)
            die("lost the connection", c[k]->errstr);
        if (r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "contended_floor: %s: %s\n", argv[0], r->str);
            exit(2);
        }
        got[k] = release ? (r->type == REDIS_REPLY_INTEGER && r->integer == 1) : r->type == REDIS_REPLY_STATUS;
        if (!release && !got[k] && r->type != REDIS_REPLY_NIL)
            die("SET NX PX", "unexpected reply");
        yes += got[k];
        freeReplyObject(r);
    }
    return yes;
}

int main(int argc, char **argv) {
    const char *servers, *key, *counter, *out, *p;
    char token[64], sha[41], value[32];
    long n, i;
    long long acquisitions = 0;
    double start_at, t_start, t_end;
    sample *samples;
    redisContext *cs[MAX_SERVERS], *c;
    int ns = 0, k, got[MAX_SERVERS];
    redisReply *r;
    FILE *f;
    if (argc != 7)
        die("usage: contended_floor HOST:PORT[,HOST:PORT...] KEY COUNTER N START_AT OUT", NULL);
    servers = argv[1];
    key = argv[2];
    counter = argv[3];
    n = (long)number(argv[4], "N is not a number");
    start_at = number(argv[5], "START_AT is not a number");
    out = argv[6];
    if (n < 1)
        die("N must be at least 1", argv[4]);
    for (p = servers;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (ns == MAX_SERVERS)
            die("too many servers", servers);
        cs[ns++] = connect_to(p, len);
        if (!comma)
            break;
        p = comma + 1;
    }
    c = cs[0];
    samples = calloc((size_t)n, sizeof *samples);
    if (samples == NULL)
        die("out of memory", NULL);
    for (k = 0; k < ns; k++) {
        const char *load[3] = {"SCRIPT", "LOAD", RELEASE_SCRIPT};
        r = command(cs[k], 3, load);
        if (r->type != REDIS_REPLY_STRING || r->len != 40)
            die("SCRIPT LOAD", "unexpected reply");
        memcpy(sha, r->str, 41);
        freeReplyObject(r);
    }
    sleep_until(start_at);
    t_start = now_ms();
    for (i = 0; i < n; i++) {
        const char *set[6] = {"SET", key, token, "NX", "PX", "10000"};
        const char *get[2] = {"GET", counter};
        const char *put[3] = {"SET", counter, value};
        const char *rel[5] = {"EVALSHA", sha, "1", key, token};
        double t0 = now_ms(), t1;
        long long v = 0;
        snprintf(token, sizeof token, "%ld-%lld", (long)getpid(), acquisitions++);
        for (;;) {
            if (ns == 1) {
                r = command(c, 6, set);
                if (r->type == REDIS_REPLY_STATUS)
                    break; /* OK: ours */
                if (r->type != REDIS_REPLY_NIL)
                    die("SET NX PX", "unexpected reply");
                freeReplyObject(r);
                r = NULL;
            } else {
                if (everywhere(cs, ns, 6, set, 0, got) > ns / 2)
                    break; /* a majority: ours */
                for (k = 0; k < ns; k++)
                    if (got[k])
                        freeReplyObject(command(cs[k], 5, rel));
            }
            sleep_ns(1000000L);
        }
        if (ns == 1)
            freeReplyObject(r);
        t1 = now_ms();
        r = command(c, 2, get);
        if (r->type == REDIS_REPLY_STRING)
            v = (long long)number(r->str, "GET: not a number");
        else if (r->type != REDIS_REPLY_NIL)
            die("GET", "unexpected reply");
        freeReplyObject(r);
        snprintf(value, sizeof value, "%lld", v + 1);
        freeReplyObject(command(c, 3, put));
        samples[i].wait = t1 - t0;
        samples[i].acquired = t1;
        samples[i].seq = v;
        samples[i].released = now_ms();
        if (everywhere(cs, ns, 5, rel, 1, got) <= ns / 2)
            die("release", "the lock was not ours any more");
    }
    t_end = now_ms();
    for (k = 0; k < ns; k++)
        redisFree(cs[k]);
    f = fopen(out, "w");
    if (f == NULL)
        die("could not write", out);
    fprintf(f, "%.3f %.3f\n", t_start, t_end);
    for (i = 0; i < n; i++)
        fprintf(f, "%.4f %lld %.4f %.4f\n", samples[i].wait, samples[i].seq, samples[i].acquired,
                samples[i].released);
    if (fclose(f) != 0)
        die("could not write", out);
    free(samples);
    return 0;
}
