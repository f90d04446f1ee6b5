/* tls.h -- TLS to Redis: OpenSSL 3 loaded at first use, a library context of our own, I/O that never raises SIGPIPE. */
#ifndef CCAP_TLS_H
#define CCAP_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "config.h"

/* Room for the error text of any call below (ERR, ERRLEN): a reason, the
 * peer or file it concerns, and OpenSSL's own text. */
#define CCAP_TLS_ERR_LEN 300

/* A TLS client context for one struct ccap_redis: trusted CAs, client
 * certificate, verification policy. libssl.so.3 and libcrypto.so.3 are
 * dlopen'ed by the first ccap_tls_new of the process (never before: a
 * program whose configuration has no TLS maps no libssl), and every
 * context lives in an OSSL_LIB_CTX of its own, apart from the program's
 * OpenSSL state. A context may be used by one thread at a time; separate
 * contexts are independent. */
struct ccap_tls;

/* One TLS session on a connected socket (an SSL object). */
struct ccap_tls_conn;

/* Loads OpenSSL if needed and creates a context for CONF: TLS 1.2 at
 * least, the CAs of ca_file/ca_dir (else the system's), the client
 * certificate and key (never a passphrase prompt), verification as CONF
 * says. Returns 0 and *OUT, or -errno (-ENOENT: libssl.so.3 not found;
 * -EINVAL: a file OpenSSL refused; -ENOMEM) with the reason in ERR. */
int ccap_tls_new(const struct ccap_tls_conf *conf, struct ccap_tls **out, char *err, size_t errlen);

/* Frees T (its sessions must be freed first). NULL is fine. */
void ccap_tls_free(struct ccap_tls *t);

/* Starts a client session on the connected socket FD: SNI and the
 * verified name are NAME (a host name; an IP address is checked against
 * the certificate's IP entries and sent without SNI). No I/O yet.
 * Returns 0 and *OUT, or -ENOMEM / -EINVAL with the reason in ERR. */
int ccap_tls_conn_new(struct ccap_tls *t, int fd, const char *name, struct ccap_tls_conn **out, char *err,
                      size_t errlen);

/* Frees C without any I/O (no close_notify): after fork in the child, or
 * before closing the socket. The descriptor is not closed. NULL is fine. */
void ccap_tls_conn_free(struct ccap_tls_conn *c);

/* One step of the handshake. Returns 0 (done), -EAGAIN with *WANT set to
 * POLLIN or POLLOUT (wait for it, then call again), or -EPIPE (the peer
 * closed) / -EPROTO (refused: the verification reason or OpenSSL's text in
 * ERR). */
int ccap_tls_handshake(struct ccap_tls_conn *c, short *want, char *err, size_t errlen);

/* Reads / writes at most LEN bytes. Return > 0 (bytes), 0 (read: the peer
 * closed), -EAGAIN with *WANT (retry a write with the same arguments),
 * -EPIPE (reset, or closed mid-write) or -EIO (ERR says why). Writes go
 * out with send(MSG_NOSIGNAL): never a SIGPIPE. */
ssize_t ccap_tls_read(struct ccap_tls_conn *c, void *buf, size_t len, short *want, char *err, size_t errlen);
ssize_t ccap_tls_write(struct ccap_tls_conn *c, const void *buf, size_t len, short *want, char *err, size_t errlen);

/* True when C holds decrypted bytes not read yet (poll would not see them). */
bool ccap_tls_pending(const struct ccap_tls_conn *c);

/* "TLSv1.3 TLS_AES_256_GCM_SHA384, peer /CN=redis.example" into OUT. */
void ccap_tls_describe(const struct ccap_tls_conn *c, char *out, size_t outlen);

/* FN runs at exit() before OpenSSL can be cleaned up (an atexit handler
 * registered when OpenSSL is loaded, so after any of the program's); from
 * then on every call fails with -EIO and frees without OpenSSL. For the
 * shim: its releases at exit. Set it before the first ccap_tls_new. */
void ccap_tls_set_exit_hook(void (*fn)(void));

/* True once this process has loaded libssl (for tests and `conncap check`).
 * Thread-safe (an atomic load). */
bool ccap_tls_loaded(void);

#endif
