/* TLS as a transport under the conn (see tls.h). One SSL_CTX per conn,
 * made at its first handshake (the renewal thread's clones make their own),
 * one SSL per connection. */
#define _GNU_SOURCE
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "clock.h"
#include "conn.h"

#define ERRLEN REDLOCK_CONN_ERRLEN

/* The session's bytes go through a BIO of our own on the conn's socket
 * instead of OpenSSL's socket BIO: send() with MSG_NOSIGNAL (OpenSSL's
 * write() raises SIGPIPE on a connection the server dropped, and would kill
 * a host that does not ignore it), and MSG_DONTWAIT on both sides while
 * `nonblock` is set (the handshake, the fan-out's reads), so that the
 * socket's own mode, blocking with its timeouts as conn.c wants it, is
 * never switched back and forth with fcntl. */
typedef struct {
    int fd;
    int nonblock;
} bio_state;

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int bio_write(BIO *b, const char *buf, int len) {
    const bio_state *st = (const bio_state *)BIO_get_data(b);
    ssize_t n;
    BIO_clear_retry_flags(b);
    do {
        n = send(st->fd, buf, (size_t)len, MSG_NOSIGNAL | (st->nonblock ? MSG_DONTWAIT : 0));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len) {
    const bio_state *st = (const bio_state *)BIO_get_data(b);
    ssize_t n;
    BIO_clear_retry_flags(b);
    do {
        n = recv(st->fd, buf, (size_t)len, st->nonblock ? MSG_DONTWAIT : 0);
    } while (n < 0 && errno == EINTR);
    /* (blocking: EAGAIN is SO_RCVTIMEO running out; SSL_read then says
     * WANT_READ, which redlock_tls_read reports as the timeout) */
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_C_GET_FD:
        return ((const bio_state *)BIO_get_data(b))->fd;
    default:
        return 0;
    }
}

static int bio_destroy(BIO *b) {
    free(BIO_get_data(b));
    BIO_set_data(b, NULL);
    return 1;
}

static void bio_init_method(void) {
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "redlock socket");
    if (m != NULL &&
        (BIO_meth_set_write(m, bio_write) != 1 || BIO_meth_set_read(m, bio_read) != 1 ||
         BIO_meth_set_ctrl(m, bio_ctrl) != 1 || BIO_meth_set_destroy(m, bio_destroy) != 1)) {
        BIO_meth_free(m);
        m = NULL;
    }
    bio_method = m;
}

/* The method lives as long as the module: freed when the module is
 * unloaded (lua_close) or the process exits, whichever comes first. */
__attribute__((destructor)) static void bio_free_method(void) {
    BIO_meth_free(bio_method);
    bio_method = NULL;
}

/* A BIO over fd, or NULL when out of memory. */
static BIO *bio_on(int fd) {
    BIO *b;
    bio_state *st;
    pthread_once(&bio_once, bio_init_method);
    if (bio_method == NULL || (st = calloc(1, sizeof *st)) == NULL)
        return NULL;
    b = BIO_new(bio_method);
    if (b == NULL) {
        free(st);
        return NULL;
    }
    st->fd = fd;
    BIO_set_data(b, st);
    BIO_set_init(b, 1);
    return b;
}

static void set_nonblock(SSL *ssl, int on) {
    ((bio_state *)BIO_get_data(SSL_get_rbio(ssl)))->nonblock = on;
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
    redlock_set_error(u->err, ERRLEN, REDLOCK_E_CONNECTION, u->name, "TLS %s", msg);
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
    /* a record in one recv(), not its header and then its body */
    SSL_CTX_set_read_ahead(ctx, 1);
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

static long ms_left(double deadline) { return (long)(deadline - redlock_mono_ms()); }

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

int redlock_tls_begin(redlock_conn *u) {
    SSL *ssl;
    BIO *bio;
    redlock_tls_free(u);
    if (u->sslctx == NULL && make_ctx(u) != 0)
        return -1;
    ssl = SSL_new(u->sslctx);
    bio = ssl != NULL ? bio_on(u->ctx->fd) : NULL;
    if (bio == NULL) {
        SSL_free(ssl);
        return fail(u, "setup failed (%s)", "out of memory");
    }
    SSL_set_bio(ssl, bio, bio); /* the SSL owns the BIO now */
    if (set_peer_name(u, ssl) != 0) {
        SSL_free(ssl);
        return fail(u, "setup failed (%s)", "out of memory");
    }
    set_nonblock(ssl, 1);
    ERR_clear_error();
    u->ssl = ssl;
    return 0;
}

int redlock_tls_continue(redlock_conn *u) {
    SSL *ssl = u->ssl;
    int r, e, saved;
    errno = 0;
    r = SSL_connect(ssl);
    saved = errno;
    if (r == 1) {
        set_nonblock(ssl, 0);
        ERR_clear_error();
        return 0;
    }
    e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        return POLLIN;
    if (e == SSL_ERROR_WANT_WRITE)
        return POLLOUT;
    handshake_error(u, ssl, e, saved);
    ERR_clear_error();
    redlock_tls_free(u);
    return -1;
}

int redlock_tls_handshake(redlock_conn *u) {
    double deadline;
    int r;
    if (redlock_tls_begin(u) != 0)
        return -1;
    deadline = redlock_mono_ms() + u->connect_timeout_ms;
    while ((r = redlock_tls_continue(u)) > 0) {
        struct pollfd pfd;
        long left = ms_left(deadline);
        if (left <= 0) {
            redlock_tls_timed_out(u, u->connect_timeout_ms);
            return -1;
        }
        pfd.fd = u->ctx->fd;
        pfd.events = (short)r;
        pfd.revents = 0;
        if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR) {
            fail(u, "handshake failed (poll: %s)", strerror(errno));
            redlock_tls_free(u);
            return -1;
        }
    }
    return r;
}

const char *redlock_tls_plain_hint(const redlock_conn *u, int fresh) {
    if (!fresh || u->tls != NULL || u->path != NULL)
        return "";
    return "; the server may want TLS (rediss://)";
}

void redlock_tls_timed_out(redlock_conn *u, int ms) {
    snprintf(u->err, ERRLEN,
             "connection: %s: TLS handshake timed out after %d ms (no TLS answer: a "
             "plaintext server?)",
             u->name, ms);
    redlock_tls_free(u);
}

void redlock_tls_free(redlock_conn *u) {
    if (u->ssl != NULL) {
        SSL_free(u->ssl);
        u->ssl = NULL;
    }
}

int redlock_tls_flush(redlock_conn *u) {
    redisContext *c = u->ctx;
    int rc = 0;
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
    ERR_clear_error();
    return rc;
}

long redlock_tls_read(redlock_conn *u, char *buf, size_t len, int nonblock) {
    int n, e;
    if (nonblock)
        set_nonblock(u->ssl, 1);
    ERR_clear_error();
    do {
        errno = 0;
        n = SSL_read(u->ssl, buf, (int)len);
        e = n > 0 ? SSL_ERROR_NONE : SSL_get_error(u->ssl, n);
    } while (e == SSL_ERROR_SYSCALL && errno == EINTR);
    if (nonblock)
        set_nonblock(u->ssl, 0);
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
