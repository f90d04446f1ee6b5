/* tls.c -- TLS to Redis: OpenSSL 3 reached through dlopen'ed function pointers, sessions on a BIO of our own. */
#include "tls.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Types and constants only: the shim and the CLI link no libssl. Every
 * call goes through the table F, filled by load(). */
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* The X-macro lists stay packed as written. */
/* clang-format off */
#define SSL_FUNCS(X)                                                                                          \
    X(OPENSSL_init_ssl) X(TLS_client_method) X(SSL_CTX_new_ex) X(SSL_CTX_free) X(SSL_CTX_ctrl)                \
    X(SSL_CTX_set_options) X(SSL_CTX_load_verify_locations) X(SSL_CTX_set_default_verify_paths)               \
    X(SSL_CTX_use_certificate_chain_file) X(SSL_CTX_use_PrivateKey_file) X(SSL_CTX_check_private_key)         \
    X(SSL_CTX_set_verify) X(SSL_CTX_set_default_passwd_cb) X(SSL_new) X(SSL_free) X(SSL_set_bio) X(SSL_ctrl)  \
    X(SSL_set1_host) X(SSL_get0_param) X(SSL_connect) X(SSL_read) X(SSL_write) X(SSL_get_error)               \
    X(SSL_pending) X(SSL_get_verify_result) X(SSL_get_version) X(SSL_get1_peer_certificate)                   \
    X(SSL_get_current_cipher) X(SSL_CIPHER_get_name) X(SSL_CTX_use_certificate) X(SSL_CTX_use_PrivateKey)   \
    X(SSL_CTX_get_cert_store)
#define CRYPTO_FUNCS(X)                                                                                       \
    X(OSSL_LIB_CTX_new) X(OSSL_LIB_CTX_free) X(X509_VERIFY_PARAM_set1_ip_asc) X(X509_verify_cert_error_string) \
    X(X509_get_subject_name) X(X509_NAME_oneline) X(X509_free) X(ERR_get_error) X(ERR_error_string_n)         \
    X(ERR_clear_error) X(BIO_meth_new) X(BIO_meth_free) X(BIO_meth_set_write) X(BIO_meth_set_read)            \
    X(BIO_meth_set_ctrl) X(BIO_get_new_index) X(BIO_new) X(BIO_set_data) X(BIO_get_data) X(BIO_set_init)      \
    X(BIO_set_flags) X(BIO_clear_flags) X(BIO_new_mem_buf) X(BIO_free) X(X509_new_ex)                        \
    X(PEM_read_bio_X509) X(PEM_read_bio_X509_AUX) X(PEM_read_bio_PrivateKey_ex) X(X509_STORE_add_cert)        \
    X(EVP_PKEY_free) X(ERR_peek_last_error)
/* clang-format on */

#define DECLARE(name) __typeof__(&name) name;
static struct {
    SSL_FUNCS(DECLARE)
    CRYPTO_FUNCS(DECLARE)
} F;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static atomic_bool loaded, exiting;
static void (*exit_hook)(void);
static char load_err[CCAP_TLS_ERR_LEN];

struct ccap_tls {
    OSSL_LIB_CTX *lib;
    SSL_CTX *ctx;
    BIO_METHOD *bio;
    bool verify;
    char *server_name;
};

struct ccap_tls_conn {
    SSL *ssl;
};

/* dlsym of every NAME of a table from HANDLE; false (load_err says which) if one is missing. */
#define RESOLVE(name)                                                                                               \
    if (!(F.name = (__typeof__(F.name))dlsym(handle, #name))) {                                                     \
        snprintf(load_err, sizeof load_err, "TLS: %s has no %s (OpenSSL 3 is needed)", lib, #name);                 \
        return false;                                                                                               \
    }

static bool resolve_ssl(void *handle, const char *lib)
{
    SSL_FUNCS(RESOLVE) return true;
}
static bool resolve_crypto(void *handle, const char *lib)
{
    CRYPTO_FUNCS(RESOLVE) return true;
}

/* Registered after OpenSSL's own init, so it runs before an OPENSSL_cleanup
 * that a program using OpenSSL registered: the hook (the shim's releases)
 * still has OpenSSL; after it, no call reaches OpenSSL any more. */
static void at_exit(void)
{
    if (exit_hook)
        exit_hook();
    atomic_store(&exiting, true);
}

void ccap_tls_set_exit_hook(void (*fn)(void))
{
    exit_hook = fn;
}

/* Kept loaded for the life of the process (sessions may outlive a context). */
static void load(void)
{
    void *crypto = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL), *ssl;

    ssl = crypto ? dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!ssl) {
        const char *e = dlerror();
        snprintf(load_err, sizeof load_err,
                 "TLS: cannot load OpenSSL 3 (libssl.so.3, libcrypto.so.3: install "
                 "libssl3): %s",
                 e ? e : "not found");
        return;
    }
    if (!resolve_crypto(crypto, "libcrypto.so.3") || !resolve_ssl(ssl, "libssl.so.3"))
        return;
    F.OPENSSL_init_ssl(OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_ATEXIT, NULL);
    atomic_store(&loaded, true);
    atexit(at_exit);
}

bool ccap_tls_loaded(void)
{
    return atomic_load(&loaded);
}

/* After at_exit: OpenSSL may be cleaned up. Returns -EIO with the reason. */
static int gone(char *err, size_t errlen)
{
    snprintf(err, errlen, "TLS: the process is exiting");
    return -EIO;
}

/* OpenSSL's first queued error (or WHAT) into ERR; empties this thread's queue. */
static void ssl_error(const char *what, char *err, size_t errlen)
{
    unsigned long e = F.ERR_get_error();
    char buf[160] = "";

    if (e)
        F.ERR_error_string_n(e, buf, sizeof buf);
    snprintf(err, errlen, "%s%s%s", what, buf[0] ? ": " : "", buf);
    F.ERR_clear_error();
}

/* The BIO: send(MSG_NOSIGNAL) and recv on the descriptor kept as its data. */
static int bio_write(BIO *b, const char *buf, int len)
{
    ssize_t w = send((int)(intptr_t)F.BIO_get_data(b), buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);

    F.BIO_clear_flags(b, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        F.BIO_set_flags(b, BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY);
    return (int)w;
}

static int bio_read(BIO *b, char *buf, int len)
{
    ssize_t k = recv((int)(intptr_t)F.BIO_get_data(b), buf, (size_t)len, MSG_DONTWAIT);

    F.BIO_clear_flags(b, BIO_FLAGS_RWS | BIO_FLAGS_SHOULD_RETRY);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        F.BIO_set_flags(b, BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY);
    return (int)k;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

/* Never asked: a key with a passphrase fails instead of prompting on a terminal. */
static int no_passphrase(char *buf, int size, int rw, void *u)
{
    (void)buf, (void)size, (void)rw, (void)u;
    return 0;
}

/* The next certificate of the PEM in B (AUX: with its trust settings, as
 * the first of a chain is read), made in T's library context; NULL at the
 * end or on an error. */
static X509 *next_cert(struct ccap_tls *t, BIO *b, bool aux)
{
    X509 *x = F.X509_new_ex(t->lib, NULL);
    if (x && !(aux ? F.PEM_read_bio_X509_AUX : F.PEM_read_bio_X509)(b, &x, no_passphrase, NULL)) {
        F.X509_free(x);
        x = NULL;
    }
    return x;
}

/* True when the read that just failed met the end of the text (no further
 * "-----BEGIN"), not a broken certificate; the queue is emptied then. */
static bool at_end(void)
{
    unsigned long e = F.ERR_peek_last_error();
    if (ERR_GET_LIB(e) != ERR_LIB_PEM || ERR_GET_REASON(e) != PEM_R_NO_START_LINE)
        return false;
    F.ERR_clear_error();
    return true;
}

/* The certificates of PEM (LEN bytes: ca_file's content) trusted. */
static int ca_from_mem(struct ccap_tls *t, const char *pem, size_t len)
{
    BIO *b = F.BIO_new_mem_buf(pem, (int)len);
    X509_STORE *store = F.SSL_CTX_get_cert_store(t->ctx);
    X509 *x;
    int n = 0, bad = 0;
    while (b && (x = next_cert(t, b, false)) != NULL) {
        bad += F.X509_STORE_add_cert(store, x) != 1;
        n++;
        F.X509_free(x);
    }
    bool end = b && at_end();
    if (b)
        F.BIO_free(b);
    return n > 0 && !bad && end ? 0 : -EINVAL;
}

/* The certificate chain in PEM (cert_file's content): the first is ours,
 * the rest its chain, as SSL_CTX_use_certificate_chain_file reads them. */
static int cert_from_mem(struct ccap_tls *t, const char *pem, size_t len)
{
    BIO *b = F.BIO_new_mem_buf(pem, (int)len);
    X509 *x = b ? next_cert(t, b, true) : NULL;
    int rc = x && F.SSL_CTX_use_certificate(t->ctx, x) == 1 ? 0 : -EINVAL;
    if (x)
        F.X509_free(x);
    while (rc == 0 && (x = next_cert(t, b, false)) != NULL)
        if (F.SSL_CTX_ctrl(t->ctx, SSL_CTRL_CHAIN_CERT, 0, x) != 1) { /* SSL_CTX_add0_chain_cert */
            F.X509_free(x);
            rc = -EINVAL;
        }
    if (rc == 0 && !at_end())
        rc = -EINVAL;
    if (b)
        F.BIO_free(b);
    return rc;
}

/* The private key in PEM (key_file's content), never asking a passphrase. */
static int key_from_mem(struct ccap_tls *t, const char *pem, size_t len)
{
    BIO *b = F.BIO_new_mem_buf(pem, (int)len);
    EVP_PKEY *k = b ? F.PEM_read_bio_PrivateKey_ex(b, NULL, no_passphrase, NULL, t->lib, NULL) : NULL;
    int rc = k && F.SSL_CTX_use_PrivateKey(t->ctx, k) == 1 ? 0 : -EINVAL;
    if (k)
        F.EVP_PKEY_free(k);
    if (b)
        F.BIO_free(b);
    return rc;
}

/* The CAs to trust: ca_file's content as read with the configuration, or
 * the files and directory by name, or the system's. */
static int trust_setup(struct ccap_tls *t, const struct ccap_tls_conf *conf, char *err, size_t errlen)
{
    SSL_CTX *ctx = t->ctx;

    if ((conf->ca_pem && ca_from_mem(t, conf->ca_pem, conf->ca_len) < 0) ||
        ((conf->ca_dir || (conf->ca_file && !conf->ca_pem)) &&
         F.SSL_CTX_load_verify_locations(ctx, conf->ca_pem ? NULL : conf->ca_file, conf->ca_dir) != 1)) {
        ssl_error(conf->ca_file ? "TLS: cannot load ca_file" : "TLS: cannot load ca_dir", err, errlen);
        return -EINVAL;
    }
    if (!conf->ca_file && !conf->ca_dir && F.SSL_CTX_set_default_verify_paths(ctx) != 1) {
        ssl_error("TLS: cannot load the system's CAs", err, errlen);
        return -EINVAL;
    }
    return 0;
}

/* CONF's trust, client certificate and policy into T->ctx. */
static int ctx_setup(struct ccap_tls *t, const struct ccap_tls_conf *conf, char *err, size_t errlen)
{
    SSL_CTX *ctx = t->ctx;

    F.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
    F.SSL_CTX_ctrl(ctx, SSL_CTRL_MODE, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, NULL);
    F.SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    F.SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    F.SSL_CTX_set_verify(ctx, conf->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (trust_setup(t, conf, err, errlen) < 0)
        return -EINVAL;
    if (conf->cert_file && (conf->cert_pem ? cert_from_mem(t, conf->cert_pem, conf->cert_len) < 0
                                           : F.SSL_CTX_use_certificate_chain_file(ctx, conf->cert_file) != 1)) {
        ssl_error("TLS: cannot load cert_file", err, errlen);
        return -EINVAL;
    }
    if (conf->key_file &&
        ((conf->key_pem ? key_from_mem(t, conf->key_pem, conf->key_len) < 0
                        : F.SSL_CTX_use_PrivateKey_file(ctx, conf->key_file, SSL_FILETYPE_PEM) != 1) ||
         F.SSL_CTX_check_private_key(ctx) != 1)) {
        ssl_error("TLS: cannot use key_file (a key without a passphrase, matching cert_file)", err, errlen);
        return -EINVAL;
    }
    return 0;
}

int ccap_tls_new(const struct ccap_tls_conf *conf, struct ccap_tls **out, char *err, size_t errlen)
{
    struct ccap_tls *t;
    int rc;

    *out = NULL;
    if (atomic_load(&exiting))
        return gone(err, errlen);
    pthread_once(&load_once, load);
    if (!ccap_tls_loaded()) {
        snprintf(err, errlen, "%s", load_err);
        return -ENOENT;
    }
    if (!(t = calloc(1, sizeof *t)))
        return -ENOMEM;
    F.ERR_clear_error();
    t->verify = conf->verify;
    if ((conf->server_name && !(t->server_name = strdup(conf->server_name))) || !(t->lib = F.OSSL_LIB_CTX_new()) ||
        !(t->ctx = F.SSL_CTX_new_ex(t->lib, NULL, F.TLS_client_method())) ||
        !(t->bio = F.BIO_meth_new(F.BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "conncap")) ||
        !F.BIO_meth_set_write(t->bio, bio_write) || !F.BIO_meth_set_read(t->bio, bio_read) ||
        !F.BIO_meth_set_ctrl(t->bio, bio_ctrl)) {
        ssl_error("TLS: cannot create a context", err, errlen);
        ccap_tls_free(t);
        return -ENOMEM;
    }
    if ((rc = ctx_setup(t, conf, err, errlen)) < 0) {
        ccap_tls_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void ccap_tls_free(struct ccap_tls *t)
{
    if (!t)
        return;
    if (atomic_load(&exiting)) {
        free(t->server_name);
        free(t);
        return;
    }
    if (t->ctx)
        F.SSL_CTX_free(t->ctx);
    if (t->bio)
        F.BIO_meth_free(t->bio);
    if (t->lib)
        F.OSSL_LIB_CTX_free(t->lib);
    free(t->server_name);
    free(t);
}

/* The name NAME (or T's server_name) to send and check on SSL. */
static int set_name(struct ccap_tls *t, SSL *ssl, const char *name)
{
    unsigned char bin[16];
    bool ip;

    name = t->server_name ? t->server_name : name;
    if (!name || !name[0])
        return 0;
    ip = inet_pton(AF_INET, name, bin) == 1 || inet_pton(AF_INET6, name, bin) == 1;
    if (!ip && F.SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)name) != 1)
        return -EINVAL;
    if (!t->verify)
        return 0;
    if (ip)
        return F.X509_VERIFY_PARAM_set1_ip_asc(F.SSL_get0_param(ssl), name) == 1 ? 0 : -EINVAL;
    return F.SSL_set1_host(ssl, name) == 1 ? 0 : -EINVAL;
}

int ccap_tls_conn_new(struct ccap_tls *t, int fd, const char *name, struct ccap_tls_conn **out, char *err,
                      size_t errlen)
{
    struct ccap_tls_conn *c = calloc(1, sizeof *c);
    BIO *b = NULL;

    *out = NULL;
    F.ERR_clear_error();
    if (!c || !(c->ssl = F.SSL_new(t->ctx)) || !(b = F.BIO_new(t->bio))) {
        ssl_error("TLS: out of memory", err, errlen);
        ccap_tls_conn_free(c);
        return -ENOMEM;
    }
    F.BIO_set_data(b, (void *)(intptr_t)fd);
    F.BIO_set_init(b, 1);
    F.SSL_set_bio(c->ssl, b, b);
    if (set_name(t, c->ssl, name) < 0) {
        ssl_error("TLS: cannot set the server name", err, errlen);
        ccap_tls_conn_free(c);
        return -EINVAL;
    }
    *out = c;
    return 0;
}

void ccap_tls_conn_free(struct ccap_tls_conn *c)
{
    if (!c)
        return;
    if (c->ssl && !atomic_load(&exiting))
        F.SSL_free(c->ssl); /* frees the BIO; no I/O */
    free(c);
}

/* The outcome RC of an SSL call on C as 0 / -EAGAIN (*WANT) / -EPIPE / -EPROTO / -EIO. */
static int outcome(struct ccap_tls_conn *c, int rc, short *want, char *err, size_t errlen)
{
    int e = errno, se = F.SSL_get_error(c->ssl, rc);
    long v;

    switch (se) {
    case SSL_ERROR_NONE: return 0;
    case SSL_ERROR_WANT_READ: *want = POLLIN; return -EAGAIN;
    case SSL_ERROR_WANT_WRITE: *want = POLLOUT; return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        F.ERR_clear_error();
        snprintf(err, errlen, "connection closed by the server");
        return -EPIPE;
    case SSL_ERROR_SYSCALL:
        F.ERR_clear_error();
        snprintf(err, errlen, "%s", e && e != EAGAIN ? strerror(e) : "connection closed by the server");
        return e == ECONNRESET || e == EPIPE || !e ? -EPIPE : -EIO;
    default:
        if ((v = F.SSL_get_verify_result(c->ssl)) != X509_V_OK) {
            F.ERR_clear_error();
            snprintf(err, errlen, "certificate verify failed: %s", F.X509_verify_cert_error_string(v));
        } else {
            ssl_error("TLS error", err, errlen);
        }
        return -EPROTO;
    }
}

int ccap_tls_handshake(struct ccap_tls_conn *c, short *want, char *err, size_t errlen)
{
    if (atomic_load(&exiting))
        return gone(err, errlen);
    F.ERR_clear_error();
    return outcome(c, F.SSL_connect(c->ssl), want, err, errlen);
}

ssize_t ccap_tls_read(struct ccap_tls_conn *c, void *buf, size_t len, short *want, char *err, size_t errlen)
{
    int k, rc;

    if (atomic_load(&exiting))
        return gone(err, errlen);
    F.ERR_clear_error();
    k = F.SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (k > 0)
        return k;
    rc = outcome(c, k, want, err, errlen);
    return rc == -EPIPE && !strcmp(err, "connection closed by the server") ? 0 : rc == -EPROTO ? -EIO : rc;
}

ssize_t ccap_tls_write(struct ccap_tls_conn *c, const void *buf, size_t len, short *want, char *err, size_t errlen)
{
    int k, rc;

    if (atomic_load(&exiting))
        return gone(err, errlen);
    F.ERR_clear_error();
    k = F.SSL_write(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (k > 0)
        return k;
    rc = outcome(c, k, want, err, errlen);
    return rc == -EPROTO ? -EIO : rc;
}

bool ccap_tls_pending(const struct ccap_tls_conn *c)
{
    return c && !atomic_load(&exiting) && F.SSL_pending(c->ssl) > 0;
}

void ccap_tls_describe(const struct ccap_tls_conn *c, char *out, size_t outlen)
{
    X509 *peer = F.SSL_get1_peer_certificate(c->ssl);
    const SSL_CIPHER *ciph = F.SSL_get_current_cipher(c->ssl);
    char subject[256] = "(no certificate)";

    if (peer) {
        F.X509_NAME_oneline(F.X509_get_subject_name(peer), subject, sizeof subject);
        F.X509_free(peer);
    }
    snprintf(out, outlen, "%s %s, peer %s", F.SSL_get_version(c->ssl), ciph ? F.SSL_CIPHER_get_name(ciph) : "",
             subject);
}
