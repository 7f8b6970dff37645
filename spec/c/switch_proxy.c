/* A TCP proxy that moves its clients to another server without closing
 * their connections, for spec/22: it stands for the proxies that keep a
 * client's connection across a master switch (Redis Enterprise endpoints,
 * Envoy's Redis proxy, twemproxy), under which a client cannot tell from
 * its connection that the server behind it changed.
 *
 *   switch_proxy LIFETIME_S PORT_A PORT_B
 * listens on one ephemeral 127.0.0.1 port, prints "port P" once it
 * listens, and forwards each connection to 127.0.0.1:PORT_A; on SIGUSR1,
 * closes every upstream connection and opens it again to PORT_B, the
 * client's connection kept (bytes in flight then are lost: the spec
 * switches between requests). Exits after LIFETIME_S seconds at the latest
 * (a safety net: the spec kills it when done), or on SIGTERM.
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

static volatile sig_atomic_t switch_asked = 0;
static void on_usr1(int sig) { (void)sig; switch_asked = 1; }



int main(int argc, char **argv) {
    int pairs[MAX_PAIRS][2], npairs = 0, lfd, target, i;
    time_t end;
    struct sigaction act;
    if (argc != 4) {
        fprintf(stderr, "usage: switch_proxy LIFETIME_S PORT_A PORT_B\n");
        return 2;
    }
    end = time(NULL) + atoi(argv[1]);
    target = atoi(argv[2]);
    memset(&act, 0, sizeof act);
    act.sa_handler = on_usr1;
    sigaction(SIGUSR1, &act, NULL);
    signal(SIGPIPE, SIG_IGN);
    lfd = listen_any("switch_proxy: listen");
    if (lfd < 0)
        return 1;
    while (time(NULL) < end) {
        struct pollfd pfd[1 + 2 * MAX_PAIRS];
        int n = 0;
        if (switch_asked) {
            switch_asked = 0;
            target = atoi(argv[3]);
            for (i = 0; i < npairs; i++) {
                close(pairs[i][1]);
                pairs[i][1] = connect_to(target);
            }
        }
        pfd[n].fd = lfd;
        pfd[n++].events = POLLIN;
        for (i = 0; i < npairs; i++) {
            pfd[n].fd = pairs[i][0];
            pfd[n++].events = POLLIN;
            pfd[n].fd = pairs[i][1];
            pfd[n++].events = POLLIN;
        }
        if (poll(pfd, (nfds_t)n, 100) <= 0)
            continue; /* (EINTR: SIGUSR1) */
        if ((pfd[0].revents & POLLIN) && npairs < MAX_PAIRS) {
            int c = accept(lfd, NULL, NULL);
            if (c >= 0) {
                pairs[npairs][0] = c;
                pairs[npairs][1] = connect_to(target);
                npairs++;
                continue;
            }
        }
        for (i = 0; i < npairs; i++) {
            int side;
            for (side = 0; side < 2; side++) {
                char buf[65536];
                ssize_t got;
                if (!(pfd[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                got = read(pairs[i][side], buf, sizeof buf);
                if (got > 0 && write_all(pairs[i][1 - side], buf, (size_t)got) == 0)
                    continue;
                /* one side ended: the pair ends (the client sees it closed) */
                close(pairs[i][0]);
                close(pairs[i][1]);
                pairs[i][0] = pairs[npairs - 1][0];
                pairs[i][1] = pairs[npairs - 1][1];
                npairs--;
                i = npairs; /* the poll set changed: poll again */
                break;
            }
        }
    }
    return 0;
}
