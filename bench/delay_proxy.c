/* A TCP proxy that delays every byte by a fixed time each way, for
 * bench/redlock.lua: it stands for the network between a client and Redis
 * servers on other machines, which one machine's loopback does not have.
 *
 *   delay_proxy ONE_WAY_US LIFETIME_S TARGET_PORT...
 * listens on one ephemeral 127.0.0.1 port per target port, prints
 * "ports P1 P2 ..." once all listen, and forwards each connection to
 * 127.0.0.1:TARGET, holding what it reads for ONE_WAY_US before writing it
 * on. Exits after LIFETIME_S seconds at the latest (a safety net: the bench
 * kills it when done). Single-threaded, ppoll() with ns timeouts; a bench
 * tool, not a general proxy: blocking connects and writes. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_TARGETS 16
#define MAX_PAIRS 256
#define CHUNK 65536

typedef struct chunk {
    struct chunk *next;
    double due;
    size_t len;
    char data[];
} chunk;

typedef struct {
    int fd[2];          /* 0: client side, 1: server side */
    chunk *head[2], *tail[2]; /* bytes waiting to be written to fd[i] */
} pair;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int listen_any(int *port) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    *port = ntohs(sa.sin_port);
    return fd;
}

static int connect_to(int port) {
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((unsigned short)port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void drop(pair *p) {
    int i;
    for (i = 0; i < 2; i++) {
        while (p->head[i] != NULL) {
            chunk *c = p->head[i];
            p->head[i] = c->next;
            free(c);
        }
        p->tail[i] = NULL;
        if (p->fd[i] >= 0)
            close(p->fd[i]);
        p->fd[i] = -1;
    }
}

int main(int argc, char **argv) {
    static pair pairs[MAX_PAIRS];
    int lfd[MAX_TARGETS], target[MAX_TARGETS], port[MAX_TARGETS];
    struct pollfd pfd[MAX_TARGETS + 2 * MAX_PAIRS];
    int nt = argc - 3, i, one = 1;
    double delay, end;
    if (nt < 1 || nt > MAX_TARGETS) {
        fprintf(stderr, "usage: delay_proxy ONE_WAY_US LIFETIME_S TARGET_PORT...\n");
        return 2;
    }
    delay = atof(argv[1]);
    end = now_us() + atof(argv[2]) * 1e6;
    for (i = 0; i < MAX_PAIRS; i++)
        pairs[i].fd[0] = pairs[i].fd[1] = -1;
    printf("ports");
    for (i = 0; i < nt; i++) {
        target[i] = atoi(argv[3 + i]);
        lfd[i] = listen_any(&port[i]);
        if (lfd[i] < 0) {
            perror("delay_proxy: listen");
            return 1;
        }
        printf(" %d", port[i]);
    }
    printf("\n");
    fflush(stdout);
    while (now_us() < end) {
        int n = 0, k;
        double next = end, t;
        struct timespec ts;
        for (i = 0; i < nt; i++) {
            pfd[n].fd = lfd[i];
            pfd[n++].events = POLLIN;
        }
        for (i = 0; i < MAX_PAIRS; i++) {
            int s;
            if (pairs[i].fd[0] < 0)
                continue;
            for (s = 0; s < 2; s++) {
                pfd[n].fd = pairs[i].fd[s];
                pfd[n++].events = POLLIN;
                if (pairs[i].head[s] != NULL && pairs[i].head[s]->due < next)
                    next = pairs[i].head[s]->due;
            }
        }
        t = next - now_us();
        if (t < 0)
            t = 0;
        ts.tv_sec = (time_t)(t / 1e6);
        ts.tv_nsec = (long)((t - (double)ts.tv_sec * 1e6) * 1e3);
        if (ppoll(pfd, (nfds_t)n, &ts, NULL) < 0 && errno != EINTR) {
            perror("delay_proxy: ppoll");
            return 1;
        }
        for (k = 0; k < n; k++) {
            if (pfd[k].revents == 0)
                continue;
            if (k < nt) {
                int c = accept(pfd[k].fd, NULL, NULL), u, j;
                if (c < 0)
                    continue;
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                u = connect_to(target[k]);
                for (j = 0; j < MAX_PAIRS && pairs[j].fd[0] >= 0; j++)
                    ;
                if (u < 0 || j == MAX_PAIRS) {
                    close(c);
                    if (u >= 0)
                        close(u);
                    continue;
                }
                pairs[j].fd[0] = c;
                pairs[j].fd[1] = u;
                continue;
            }
            for (i = 0; i < MAX_PAIRS; i++) {
                int s;
                for (s = 0; s < 2; s++) {
                    if (pairs[i].fd[s] == pfd[k].fd) {
                        chunk *c = malloc(sizeof(chunk) + CHUNK);
                        ssize_t got;
                        if (c == NULL) {
                            drop(&pairs[i]);
                            break;
                        }
                        got = recv(pfd[k].fd, c->data, CHUNK, MSG_DONTWAIT);
                        if (got <= 0) {
                            free(c);
                            if (got == 0 || (errno != EAGAIN && errno != EINTR))
                                drop(&pairs[i]);
                            break;
                        }
                        c->len = (size_t)got;
                        c->due = now_us() + delay;
                        c->next = NULL;
                        /* what one side sent goes to the other */
                        if (pairs[i].tail[1 - s] != NULL)
                            pairs[i].tail[1 - s]->next = c;
                        else
                            pairs[i].head[1 - s] = c;
                        pairs[i].tail[1 - s] = c;
                        break;
                    }
                }
            }
        }
        t = now_us();
        for (i = 0; i < MAX_PAIRS; i++) {
            int s;
            if (pairs[i].fd[0] < 0)
                continue;
            for (s = 0; s < 2 && pairs[i].fd[0] >= 0; s++) {
                while (pairs[i].head[s] != NULL && pairs[i].head[s]->due <= t) {
                    chunk *c = pairs[i].head[s];
                    size_t off = 0, len = c->len;
                    while (off < len) {
                        ssize_t w = send(pairs[i].fd[s], c->data + off, len - off, MSG_NOSIGNAL);
                        if (w < 0 && errno == EINTR)
                            continue;
                        if (w <= 0)
                            break;
                        off += (size_t)w;
                    }
                    pairs[i].head[s] = c->next;
                    if (pairs[i].head[s] == NULL)
                        pairs[i].tail[s] = NULL;
                    free(c);
                    if (off < len) {
                        drop(&pairs[i]);
                        break;
                    }
                }
            }
        }
    }
    return 0;
}
