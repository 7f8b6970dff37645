#ifndef REDLOCK_TLS_H
#define REDLOCK_TLS_H

#include <stddef.h>

struct redlock_conn;

/* TLS settings of one conn (a copy owned by the conn; NULL fields unset). */
typedef struct redlock_tls {
    char *ca_file, *ca_path, *cert_file, *key_file, *server_name;
    int verify;
} redlock_tls;

/* OpenSSL under the core's own encoder and hiredis' reader: the conn's
 * redisContext keeps the socket, its output buffer and its reader; these
 * move the bytes through the SSL session instead of send()/recv().
 * Errors: -1 with u->err set ("connection: <server>: ..."). */

/* The handshake on the freshly connected u->ctx->fd, within the connect
 * timeout, verifying the chain and the name unless verify is off. */
int redlock_tls_handshake(struct redlock_conn *u);

/* The same in steps, for a caller that polls several sockets (fanout.c):
 * begin makes the session (u->ssl) on u->ctx->fd, 0 or -1; continue goes
 * on without blocking: 0 done, POLLIN or POLLOUT to wait for, -1 failed
 * (the session freed). timed_out: the message for a handshake that took
 * longer than ms (the session freed). */
int redlock_tls_begin(struct redlock_conn *u);
int redlock_tls_continue(struct redlock_conn *u);
void redlock_tls_timed_out(struct redlock_conn *u, int ms);

/* Frees the session without sending close_notify: a child after fork must
 * not write into the parent's session, and a dropped connection is gone. */
void redlock_tls_free(struct redlock_conn *u);

/* Writes the whole output buffer. 0 ok, -1 error with errno set. */
int redlock_tls_flush(struct redlock_conn *u);

/* Reads into buf. >0 bytes, 0 closed by the server, -1 error (errno set;
 * EAGAIN when nonblock and nothing is there, or on the reply timeout). */
long redlock_tls_read(struct redlock_conn *u, char *buf, size_t len, int nonblock);

/* What to add to "lost the connection ... (why)" when a plaintext TCP
 * connection (u has no TLS) was lost before its server sent a single byte
 * (fresh): a TLS port resets a client that speaks RESP to it. "" else. The
 * counterpart of the handshake's "a plaintext server, not TLS?". */
const char *redlock_tls_plain_hint(const struct redlock_conn *u, int fresh);

void redlock_tls_settings_free(redlock_tls *t);
int redlock_tls_settings_copy(redlock_tls *dst, const redlock_tls *src); /* -1: no memory */

#endif
