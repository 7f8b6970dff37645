/* A TCP proxy that can hold back what clients send, for spec/26: it stands
 * for a network that delays one connection's bytes (a lost segment
 * retransmitted) while later connections get through, so that requests
 * reach the server in another order than they were sent.
 *
 *   hold_proxy LIFETIME_S PORT NEW
 * listens on one ephemeral 127.0.0.1 port, prints "port P" once it
 * listens, and forwards each connection to 127.0.0.1:PORT. On SIGUSR1 it
 * prints "holding" and from then on keeps what clients send on the
 * connections open at that moment and on the next NEW connections it
 * accepts (later ones are forwarded as usual). On SIGUSR2 it forwards what
 * it kept, one connection at a time in the order they were accepted, each
 * once the server has answered the one before (its first reply byte), then
 * prints "released N" (N connections). A held connection outlives its
 * client: its bytes still reach the server (as a lingering close's would).
 * On SIGHUP it prints "cutting", and each connection open at that moment
 * passes on the server's next bytes up to the end of their first line (a
 * simple reply, the first of two) and is then closed, both ways: a
 * connection lost between two replies of one write (spec/04).
 * Exits after LIFETIME_S seconds at the latest, or on SIGTERM.
 * Single-threaded; a test tool, not a general proxy: blocking connects
 * and writes. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proxy_io.h"

#define MAX_PAIRS 64

typedef struct pair {
    int client, server; /* client -1: it went away */
    int held;           /* what the client sends is kept */
    int cut;            /* closed after the server's next line */
    char *kept;
    size_t len;
} pair;

static volatile sig_atomic_t hold_asked = 0, release_asked = 0, cut_asked = 0;
static void on_usr1(int sig) { (void)sig; hold_asked = 1; }
static void on_usr2(int sig) { (void)sig; release_asked = 1; }
static void on_hup(int sig) { (void)sig; cut_asked = 1; }



static int keep(pair *p, const char *buf, size_t n) {
    char *grown = realloc(p->kept, p->len + n);
    if (grown == NULL)
        return -1;
    memcpy(grown + p->len, buf, n);
    p->kept = grown;
    p->len += n;
    return 0;
}

static void end_pair(pair *pairs, int *npairs, int i) {
    if (pairs[i].client >= 0)
        close(pairs[i].client);
    if (pairs[i].server >= 0)
        close(pairs[i].server);
    free(pairs[i].kept);
    memmove(pairs + i, pairs + i + 1, (size_t)(*npairs - i - 1) * sizeof *pairs);
    (*npairs)--;
}

/* Forwards what p kept and waits (5 s at most) for the server's first
 * reply byte, passed on to the client if it is still there. */
static void release_one(pair *p) {
    struct pollfd pfd;
    char buf[65536];
    ssize_t got;
    p->held = 0;
    if (p->len == 0 || write_all(p->server, p->kept, p->len) != 0)
        return;
    p->len = 0;
    pfd.fd = p->server;
    pfd.events = POLLIN;
    if (poll(&pfd, 1, 5000) <= 0)
        return;
    got = read(p->server, buf, sizeof buf);
    if (got > 0 && p->client >= 0)
        (void)write_all(p->client, buf, (size_t)got);
}

int main(int argc, char **argv) {
    pair pairs[MAX_PAIRS];
    int npairs = 0, lfd, target, new_held = 0, hold_new, i;
    time_t end;
    struct sigaction act;
    if (argc != 4) {
        fprintf(stderr, "usage: hold_proxy LIFETIME_S PORT NEW\n");
        return 2;
    }
    end = time(NULL) + strtol(argv[1], NULL, 10);
    target = (int)strtol(argv[2], NULL, 10);
    hold_new = (int)strtol(argv[3], NULL, 10);
    memset(&act, 0, sizeof act);
    act.sa_handler = on_usr1;
    sigaction(SIGUSR1, &act, NULL);
    act.sa_handler = on_usr2;
    sigaction(SIGUSR2, &act, NULL);
    act.sa_handler = on_hup;
    sigaction(SIGHUP, &act, NULL);
    signal(SIGPIPE, SIG_IGN);
    lfd = listen_any("hold_proxy: listen");
    if (lfd < 0)
        return 1;
    while (time(NULL) < end) {
        struct pollfd pfd[1 + 2 * MAX_PAIRS];
        int n = 0;
        if (hold_asked) {
            hold_asked = 0;
            for (i = 0; i < npairs; i++)
                pairs[i].held = 1;
            new_held = hold_new;
            printf("holding\n");
            fflush(stdout);
        }
        if (release_asked) {
            int released = 0;
            release_asked = 0;
            new_held = 0;
            for (i = 0; i < npairs; i++) {
                if (pairs[i].held) {
                    release_one(&pairs[i]);
                    released++;
                    if (pairs[i].client < 0)
                        end_pair(pairs, &npairs, i--);
                }
            }
            printf("released %d\n", released);
            fflush(stdout);
        }
        if (cut_asked) {
            cut_asked = 0;
            for (i = 0; i < npairs; i++)
                pairs[i].cut = 1;
            printf("cutting\n");
            fflush(stdout);
        }
        pfd[n].fd = lfd;
        pfd[n++].events = POLLIN;
        for (i = 0; i < npairs; i++) {
            pfd[n].fd = pairs[i].client;
            pfd[n++].events = POLLIN;
            pfd[n].fd = pairs[i].server;
            pfd[n++].events = POLLIN;
        }
        if (poll(pfd, (nfds_t)n, 100) <= 0)
            continue; /* (EINTR: a signal) */
        if ((pfd[0].revents & POLLIN) && npairs < MAX_PAIRS) {
            int c = accept(lfd, NULL, NULL);
            if (c >= 0) {
                memset(&pairs[npairs], 0, sizeof pairs[npairs]);
                pairs[npairs].client = c;
                pairs[npairs].server = connect_to(target);
                if (new_held > 0) {
                    pairs[npairs].held = 1;
                    new_held--;
                }
                npairs++;
                continue;
            }
        }
        for (i = 0; i < npairs; i++) {
            pair *p = &pairs[i];
            char buf[65536];
            ssize_t got;
            short cev = pfd[1 + 2 * i].revents, sev = pfd[2 + 2 * i].revents;
            if (p->client >= 0 && (cev & (POLLIN | POLLHUP | POLLERR))) {
                got = read(p->client, buf, sizeof buf);
                if (got > 0 && p->held && keep(p, buf, (size_t)got) == 0)
                    continue;
                if (got > 0 && !p->held && write_all(p->server, buf, (size_t)got) == 0)
                    continue;
                if (p->held) { /* the client went away: its bytes stay due */
                    close(p->client);
                    p->client = -1;
                    continue;
                }
                end_pair(pairs, &npairs, i);
                break; /* the poll set changed: poll again */
            }
            if (sev & (POLLIN | POLLHUP | POLLERR)) {
                const char *nl;
                got = read(p->server, buf, sizeof buf);
                if (got > 0 && p->cut && (nl = memchr(buf, '\n', (size_t)got)) != NULL) {
                    if (p->client >= 0)
                        (void)write_all(p->client, buf, (size_t)(nl - buf + 1));
                    end_pair(pairs, &npairs, i);
                    break;
                }
                if (got > 0 && (p->client < 0 || write_all(p->client, buf, (size_t)got) == 0))
                    continue;
                end_pair(pairs, &npairs, i);
                break;
            }
        }
    }
    while (npairs > 0)
        end_pair(pairs, &npairs, npairs - 1);
    return 0;
}
