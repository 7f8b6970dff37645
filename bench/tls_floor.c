/* The floor over TLS: the round trips of bench/floor.c's setnx and cycle
 * modes, done over OpenSSL sessions (or plain sockets with -P), with
 * nothing else around them. hiredis only encodes the commands and parses
 * the replies (redisFormatCommandArgv, redisReader), as in the library's
 * core; the bytes go through SSL_write and SSL_read. `make bench-tls` runs
 * it beside the library over TLS and without.
 *
 * usage: tls_floor [-n ops] [-w warmup] [-k key] [-t ttl] [-c cafile | -P]
 *                  MODE HOST:PORT...
 *   MODE  setnx  SET key token NX PX ttl, then EVALSHA release (the
 *                compare-and-delete script): the textbook cycle
 *         cycle  EVALSHA acquire, then EVALSHA release: the library's own
 *                round trips with several servers (Redlock; one server's
 *                uncontended acquire sends SET NX PX and INCR instead:
 *                bench/floor.c's cycle mode)
 *   -c    the CA file that signs the servers' certificates (verified, with
 *         the host as the name, as the library does)
 *   -P    plain sockets, no TLS (the same loop, for comparison)
 *   With several servers each command goes to all of them before any reply
 *   is read (a quorum client's fan-out).
 *
 * Prints one line: ns_per_op=<float> cpu_ns_per_op=<float> ops=<n>
 * Exits 2 on any failure or unexpected reply. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "scripts_gen.h"

#define MAX_SERVERS 16

typedef struct {
    int fd;
    SSL *ssl; /* NULL: plain */
    redisReader *reader;
} peer;

static peer peers[MAX_SERVERS];
static int nservers;
static char sha_acquire[41], sha_release[41];

static void die(const char *what, const char *detail) {
    fprintf(stderr, "tls_floor: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

static void die_ssl(const char *what) {
    unsigned long e = ERR_get_error();
    die(what, e ? ERR_reason_error_string(e) : "unknown error");
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int tcp_connect(const char *host, const char *port) {
    struct addrinfo hints, *res, *a;
    int fd = -1, one = 1;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        die("cannot resolve", host);
    for (a = res; a != NULL; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        die("could not connect", host);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* as hiredis does */
    return fd;
}

static void open_peer(peer *l, const char *server, SSL_CTX *ctx) {
    char host[256];
    unsigned char addr[16];
    const char *colon = strrchr(server, ':');
    size_t len = colon ? (size_t)(colon - server) : 0;
    if (colon == NULL || len == 0 || len >= sizeof host)
        die("bad server (host:port)", server);
    memcpy(host, server, len);
    host[len] = '\0';
    l->fd = tcp_connect(host, colon + 1);
    l->reader = redisReaderCreate();
    if (l->reader == NULL)
        die("out of memory", NULL);
    if (ctx == NULL)
        return;
    l->ssl = SSL_new(ctx);
    if (l->ssl == NULL || SSL_set_fd(l->ssl, l->fd) != 1)
        die_ssl("SSL_new");
    if (inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(l->ssl), host) != 1)
            die_ssl("the server's address");
    } else if (SSL_set1_host(l->ssl, host) != 1 || SSL_set_tlsext_host_name(l->ssl, host) != 1) {
        die_ssl("the server's name");
    }
    if (SSL_connect(l->ssl) != 1)
        die_ssl("TLS handshake");
}

static void send_all(peer *l, const char *buf, size_t len) {
    while (len > 0) {
        long n = l->ssl ? SSL_write(l->ssl, buf, (int)len) : (long)write(l->fd, buf, len);
        if (n <= 0)
            die("lost the connection sending", NULL);
        buf += n;
        len -= (size_t)n;
    }
}

static redisReply *get_reply(peer *l) {
    char buf[16384];
    for (;;) {
        void *r = NULL;
        long n;
        if (redisReaderGetReply(l->reader, &r) != REDIS_OK)
            die("protocol error", l->reader->errstr);
        if (r != NULL)
            return (redisReply *)r;
        n = l->ssl ? SSL_read(l->ssl, buf, sizeof buf) : (long)read(l->fd, buf, sizeof buf);
        if (n <= 0)
            die("lost the connection waiting for a reply", NULL);
        if (redisReaderFeed(l->reader, buf, (size_t)n) != REDIS_OK)
            die("protocol error", l->reader->errstr);
    }
}

/* One command to every server, then every reply. replies[i]: the caller's. */
static void fan_out(int argc, const char **argv, redisReply **replies) {
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, NULL), i;
    if (len < 0)
        die("out of memory", NULL);
    for (i = 0; i < nservers; i++)
        send_all(&peers[i], cmd, (size_t)len);
    free(cmd);
    for (i = 0; i < nservers; i++)
        replies[i] = get_reply(&peers[i]);
}

static void expect(redisReply **replies, int (*ok)(const redisReply *), const char *what) {
    int i;
    for (i = 0; i < nservers; i++) {
        if (!ok(replies[i]))
            die(what, replies[i]->type == REDIS_REPLY_ERROR ? replies[i]->str : "unexpected reply");
        freeReplyObject(replies[i]);
    }
}

static int is_ok(const redisReply *r) { return r->type == REDIS_REPLY_STATUS; }
static int is_one(const redisReply *r) {
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}
static int is_sha(const redisReply *r) { return r->type == REDIS_REPLY_STRING && r->len == 40; }
static int is_granted(const redisReply *r) {
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && is_one(r->element[0]);
}

static void load_script(const char *source, char *sha) {
    const char *argv[3] = {"SCRIPT", "LOAD", source};
    redisReply *replies[MAX_SERVERS];
    fan_out(3, argv, replies);
    if (!is_sha(replies[0]))
        die("SCRIPT LOAD", "unexpected reply");
    memcpy(sha, replies[0]->str, 41);
    expect(replies, is_sha, "SCRIPT LOAD");
}

static void one_op(int setnx, const char *key, const char *ttl, unsigned long long seq) {
    char token[33];
    redisReply *replies[MAX_SERVERS];
    const char *acq[7] = {"EVALSHA", sha_acquire, "2", key, "redlock:fences", token, ttl};
    const char *set[6] = {"SET", key, token, "NX", "PX", ttl};
    const char *rel[5] = {"EVALSHA", sha_release, "1", key, token};
    snprintf(token, sizeof token, "%016llx%016llx", (unsigned long long)getpid(), seq);
    if (setnx) {
        fan_out(6, set, replies);
        expect(replies, is_ok, "SET NX PX");
    } else {
        fan_out(7, acq, replies);
        expect(replies, is_granted, "acquire");
    }
    fan_out(5, rel, replies);
    expect(replies, is_one, "release");
}

#define USAGE "usage: tls_floor [-n ops] [-w warmup] [-k key] [-t ttl] [-c cafile | -P] MODE HOST:PORT..."

int main(int argc, char **argv) {
    long ops = 2000, warmup = 200, i;
    const char *key = "bench:tls_floor", *ttl = "10000", *cafile = NULL;
    int opt, plain = 0, setnx;
    SSL_CTX *ctx = NULL;
    double t0, t1;
    clock_t c0, c1;
    while ((opt = getopt(argc, argv, "n:w:k:t:c:P")) != -1) {
        switch (opt) {
        case 'n': ops = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'k': key = optarg; break;
        case 't': ttl = optarg; break;
        case 'c': cafile = optarg; break;
        case 'P': plain = 1; break;
        default: die(USAGE, NULL);
        }
    }
    if (argc - optind < 2 || ops < 1 || warmup < 0 || (plain && cafile != NULL))
        die(USAGE, NULL);
    if (strcmp(argv[optind], "setnx") == 0)
        setnx = 1;
    else if (strcmp(argv[optind], "cycle") == 0)
        setnx = 0;
    else
        die("unknown mode (setnx, cycle)", argv[optind]);
    optind++;
    signal(SIGPIPE, SIG_IGN);
    if (!plain) {
        ctx = SSL_CTX_new(TLS_client_method());
        if (ctx == NULL)
            die_ssl("SSL_CTX_new");
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
        if ((cafile ? SSL_CTX_load_verify_locations(ctx, cafile, NULL)
                    : SSL_CTX_set_default_verify_paths(ctx)) != 1)
            die_ssl("the CA file");
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
    }
    for (; optind < argc; optind++) {
        if (nservers == MAX_SERVERS)
            die("too many servers", NULL);
        open_peer(&peers[nservers++], argv[optind], ctx);
    }
    load_script(REDLOCK_SCRIPT_ACQUIRE, sha_acquire);
    load_script(REDLOCK_SCRIPT_RELEASE, sha_release);
    for (i = 0; i < warmup; i++)
        one_op(setnx, key, ttl, (unsigned long long)i);
    c0 = clock();
    t0 = now_ns();
    for (i = 0; i < ops; i++)
        one_op(setnx, key, ttl, (unsigned long long)(warmup + i));
    t1 = now_ns();
    c1 = clock();
    printf("ns_per_op=%.1f cpu_ns_per_op=%.1f ops=%ld\n", (t1 - t0) / (double)ops,
           (double)(c1 - c0) * 1e9 / CLOCKS_PER_SEC / (double)ops, ops);
    for (i = 0; i < nservers; i++) {
        if (peers[i].ssl != NULL)
            SSL_free(peers[i].ssl);
        close(peers[i].fd);
        redisReaderFree(peers[i].reader);
    }
    SSL_CTX_free(ctx);
    return 0;
}
