/* TLS as a transport under the conn (see tls.h). One SSL_CTX per conn,
 * made at its first handshake (the renewal thread's clones make their own),
 * one SSL per connection. */
#define _GNU_SOURCE
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "conn.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

/* OpenSSL writes with write(), which raises SIGPIPE on a connection the
 * server dropped: SIGPIPE is blocked in this thread around each write and
 * one it raised is taken back, so the host's handler never sees it. */
typedef struct {
    sigset_t old;
    int was_pending;
} pipe_guard;

static void guard_on(pipe_guard *g) {
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void guard_off(pipe_guard *g) {
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending);
    if (!g->was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&set, NULL, &zero) == -1 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static char *dup_str(const char *s, int *failed) {
    char *d;
    if (s == NULL)
        return NULL;
    d = strdup(s);
    if (d == NULL)
        *failed = 1;
    return d;
}

int redlock_tls_settings_copy(redlock_tls *dst, const redlock_tls *src) {
    int failed = 0;
    memset(dst, 0, sizeof *dst);
    dst->verify = src->verify;
    dst->ca_file = dup_str(src->ca_file, &failed);
    dst->ca_path = dup_str(src->ca_path, &failed);
    dst->cert_file = dup_str(src->cert_file, &failed);
    dst->key_file = dup_str(src->key_file, &failed);
    dst->server_name = dup_str(src->server_name, &failed);
    return failed ? -1 : 0;
}

void redlock_tls_settings_free(redlock_tls *t) {
    free(t->ca_file);
    free(t->ca_path);
    free(t->cert_file);
    free(t->key_file);
    free(t->server_name);
    memset(t, 0, sizeof *t);
}

/* The first queued OpenSSL error as text, or fallback; clears the queue. */
static const char *ssl_reason(char *buf, size_t len, const char *fallback) {
    unsigned long e = ERR_peek_error();
    if (e == 0) {
        snprintf(buf, len, "%s", fallback);
    } else {
        const char *r = ERR_reason_error_string(e);
        snprintf(buf, len, "%s", r != NULL ? r : fallback);
    }
    ERR_clear_error();
    return buf;
}

static int fail(redlock_conn *u, const char *fmt, const char *what) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    snprintf(u->err, ERRLEN, "connection: %s: TLS %s", u->name, msg);
    return -1;
}

static int make_ctx(redlock_conn *u) {
    char why[200];
    const redlock_tls *t = u->tls;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL)
        return fail(u, "setup failed (%s)", ssl_reason(why, sizeof why, "out of memory"));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (t->ca_file != NULL || t->ca_path != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, t->ca_file, t->ca_path) != 1) {
            SSL_CTX_free(ctx);
            return fail(u, "could not load ca_file/ca_path (%s)",
                        ssl_reason(why, sizeof why, "unreadable"));
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        SSL_CTX_free(ctx);
        return fail(u, "could not load the system CA store (%s)",
                    ssl_reason(why, sizeof why, "unreadable"));
    }
    if (t->cert_file != NULL &&
        SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
        SSL_CTX_free(ctx);
        return fail(u, "could not load cert_file (%s)", ssl_reason(why, sizeof why, "unreadable"));
    }
    if (t->key_file != NULL &&
        (SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) != 1 ||
         SSL_CTX_check_private_key(ctx) != 1)) {
        SSL_CTX_free(ctx);
        return fail(u, "could not load key_file (%s)", ssl_reason(why, sizeof why, "unreadable"));
    }
    SSL_CTX_set_verify(ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
    u->sslctx = ctx;
    return 0;
}

static int is_ip(const char *s) {
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* The name the certificate must carry: server_name, else the host. */
static int set_peer_name(redlock_conn *u, SSL *ssl) {
    const char *name = u->tls->server_name ? u->tls->server_name : u->host;
    X509_VERIFY_PARAM *p = SSL_get0_param(ssl);
    if (name == NULL)
        return 0;
    if (!is_ip(name))
        SSL_set_tlsext_host_name(ssl, name); /* SNI: a name, never an address */
    if (!u->tls->verify)
        return 0;
    if (is_ip(name))
        return X509_VERIFY_PARAM_set1_ip_asc(p, name) == 1 ? 0 : -1;
    X509_VERIFY_PARAM_set_hostflags(p, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    return SSL_set1_host(ssl, name) == 1 ? 0 : -1;
}

static long ms_left(const struct timespec *deadline) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)(deadline->tv_sec - now.tv_sec) * 1000 +
           (deadline->tv_nsec - now.tv_nsec) / 1000000;
}

/* The verification failures users meet, in their words first. */
static const char *verify_kind(long v) {
    switch (v) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
        return "unknown CA: ";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return "name mismatch: ";
    case X509_V_ERR_CERT_HAS_EXPIRED:
        return "expired certificate: ";
    default:
        return "";
    }
}

/* Why the handshake failed, in words a user can act on. */
static int handshake_error(redlock_conn *u, SSL *ssl, int err, int saved_errno) {
    char why[200];
    long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
        snprintf(why, sizeof why, "%s%s", verify_kind(v), X509_verify_cert_error_string(v));
        ERR_clear_error();
        return fail(u, "certificate verification failed (%s)", why);
    }
    if (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
        ERR_clear_error();
        return fail(u, "handshake failed (%s; is it a TLS port?)",
                    saved_errno ? strerror(saved_errno) : "closed by the server");
    }
    ssl_reason(why, sizeof why, "unknown error");
    if (strstr(why, "wrong version number") || strstr(why, "packet length too long") ||
        strstr(why, "record layer failure"))
        return fail(u, "handshake failed (%s: a plaintext server, not TLS?)", why);
    return fail(u, "handshake failed (%s)", why);
}

int redlock_tls_handshake(redlock_conn *u) {
    struct timespec deadline;
    int fd = u->ctx->fd, fl, rc = -1;
    SSL *ssl;
    pipe_guard g;
    if (u->sslctx == NULL && make_ctx(u) != 0)
        return -1;
    ssl = SSL_new(u->sslctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1 || set_peer_name(u, ssl) != 0) {
        SSL_free(ssl);
        return fail(u, "setup failed (%s)", "out of memory");
    }
    fl = fcntl(fd, F_GETFL);
    if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1) {
        SSL_free(ssl);
        return fail(u, "setup failed (%s)", strerror(errno));
    }
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += u->connect_timeout_ms / 1000;
    deadline.tv_nsec += (long)(u->connect_timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    ERR_clear_error();
    guard_on(&g);
    for (;;) {
        int r, e, saved;
        struct pollfd pfd;
        long left;
        errno = 0;
        r = SSL_connect(ssl);
        saved = errno;
        if (r == 1) {
            rc = 0;
            break;
        }
        e = SSL_get_error(ssl, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
            handshake_error(u, ssl, e, saved);
            break;
        }
        left = ms_left(&deadline);
        if (left <= 0) {
            snprintf(u->err, ERRLEN,
                     "connection: %s: TLS handshake timed out after %d ms (no TLS answer: a "
                     "plaintext server?)",
                     u->name, u->connect_timeout_ms);
            break;
        }
        pfd.fd = fd;
        pfd.events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        pfd.revents = 0;
        if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR) {
            fail(u, "handshake failed (poll: %s)", strerror(errno));
            break;
        }
    }
    guard_off(&g);
    ERR_clear_error();
    if (rc == 0 && fcntl(fd, F_SETFL, fl) == -1)
        rc = fail(u, "setup failed (%s)", strerror(errno));
    if (rc != 0) {
        SSL_free(ssl);
        return -1;
    }
    u->ssl = ssl;
    return 0;
}

void redlock_tls_free(redlock_conn *u) {
    if (u->ssl != NULL) {
        SSL_free(u->ssl);
        u->ssl = NULL;
    }
}

int redlock_tls_flush(redlock_conn *u) {
    redisContext *c = u->ctx;
    pipe_guard g;
    int rc = 0;
    guard_on(&g);
    while (sdslen(c->obuf) > 0) {
        int n, e;
        size_t len = sdslen(c->obuf);
        ERR_clear_error();
        errno = 0;
        n = SSL_write(u->ssl, c->obuf, (int)(len > 1 << 30 ? 1 << 30 : len));
        if (n > 0) {
            sdsrange(c->obuf, n, -1);
            continue;
        }
        e = SSL_get_error(u->ssl, n);
        if (e == SSL_ERROR_SYSCALL && errno == EINTR)
            continue;
        if (errno == 0)
            errno = e == SSL_ERROR_WANT_WRITE ? EAGAIN : ECONNRESET;
        c->err = REDIS_ERR_IO;
        snprintf(c->errstr, sizeof c->errstr, "%s", strerror(errno));
        rc = -1;
        break;
    }
    guard_off(&g);
    ERR_clear_error();
    return rc;
}

long redlock_tls_read(redlock_conn *u, char *buf, size_t len, int nonblock) {
    int fd = u->ctx->fd, fl = 0, n, e;
    if (nonblock) {
        fl = fcntl(fd, F_GETFL);
        if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1)
            return -1;
    }
    ERR_clear_error();
    do {
        errno = 0;
        n = SSL_read(u->ssl, buf, (int)len);
        e = n > 0 ? SSL_ERROR_NONE : SSL_get_error(u->ssl, n);
    } while (e == SSL_ERROR_SYSCALL && errno == EINTR);
    if (nonblock)
        fcntl(fd, F_SETFL, fl);
    if (n > 0)
        return n;
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) {
        ERR_clear_error();
        return 0;
    }
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        /* nothing yet (nonblock: not an error of the context), or
         * SO_RCVTIMEO ran out */
        errno = EAGAIN;
        ERR_clear_error();
        if (nonblock)
            return -1;
    } else if (errno == 0) {
        errno = EPROTO;
    }
    ERR_clear_error();
    u->ctx->err = REDIS_ERR_IO;
    snprintf(u->ctx->errstr, sizeof u->ctx->errstr, "%s",
             errno == EPROTO ? "TLS error" : strerror(errno));
    return -1;
}
