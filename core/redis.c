/* redis.c -- the Redis client: our own high, CLOEXEC sockets handed to hiredis; routing to
 * one server, the Sentinel's master or the cluster node that owns the key. */
#include "redis.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "redis_int.h"

/* build/scripts.c, generated from lua/NAME.lua by mk/embed-lua.sh, with
 * each script's SHA1 and function name computed at build time. */
#define CCAP_LUA_SCRIPT(n) extern const char ccap_lua_##n[], ccap_lua_##n##_sha[], ccap_lua_##n##_fn[];
CCAP_LUA_SCRIPT(acquire)
CCAP_LUA_SCRIPT(release)
CCAP_LUA_SCRIPT(renew)
CCAP_LUA_SCRIPT(timeout)
CCAP_LUA_SCRIPT(fallback)
CCAP_LUA_SCRIPT(failover)
extern const char ccap_lua_library[];
extern const char ccap_lua_version[];

#define CCAP_FD_HIGH_CAP 1024
#define CCAP_FD_HIGH_GAP 32
#define CCAP_DEFAULT_TIMEOUT_MS 200
#define CCAP_SMALL_ARGV 32

/* One embedded script: its text, SHA1 (as EVALSHA names it) and function. */
struct script {
    const char *src, *sha, *fn;
};
#define CCAP_SCRIPT_ENTRY(n)                                                                                        \
    {                                                                                                               \
        ccap_lua_##n, ccap_lua_##n##_sha, ccap_lua_##n##_fn                                                         \
    }
static const struct script scripts[CCAP_SCRIPT_COUNT] = {
    [CCAP_SCRIPT_ACQUIRE] = CCAP_SCRIPT_ENTRY(acquire),   [CCAP_SCRIPT_RELEASE] = CCAP_SCRIPT_ENTRY(release),
    [CCAP_SCRIPT_RENEW] = CCAP_SCRIPT_ENTRY(renew),       [CCAP_SCRIPT_TIMEOUT] = CCAP_SCRIPT_ENTRY(timeout),
    [CCAP_SCRIPT_FALLBACK] = CCAP_SCRIPT_ENTRY(fallback), [CCAP_SCRIPT_FAILOVER] = CCAP_SCRIPT_ENTRY(failover),
};

const char *ccap_script_sha(enum ccap_script which)
{
    return (unsigned)which < CCAP_SCRIPT_COUNT ? scripts[which].sha : NULL;
}

const char *ccap_script_source(enum ccap_script which)
{
    return (unsigned)which < CCAP_SCRIPT_COUNT ? scripts[which].src : NULL;
}

const char *ccap_script_function(enum ccap_script which)
{
    return (unsigned)which < CCAP_SCRIPT_COUNT ? scripts[which].fn : NULL;
}

const char *ccap_function_library(void)
{
    return ccap_lua_library;
}

const char *ccap_function_version(void)
{
    return ccap_lua_version;
}

int ccap_redis_fd_base(void)
{
    struct rlimit rl;
    rlim_t lim = CCAP_FD_HIGH_CAP;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < lim)
        lim = rl.rlim_cur;
    return (int)lim - CCAP_FD_HIGH_GAP;
}

/* ---- small helpers ---- */

void ccap_redis_set_err(struct ccap_redis *r, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    if (!r)
        return;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    r->err_replied = false;
    errno = saved;
}

#define set_err ccap_redis_set_err

static atomic_uint forks;

/* Guards the process's reserve of sockets (ccap_redis_reserve). */
static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;

/* Core registers no fork handler (a library any process may link); the
 * shim's runtime calls this from its one pthread_atfork child handler. */
void ccap_redis_fork_child(void)
{
    reserve_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* a thread of the parent's may have held it */
    atomic_fetch_add(&forks, 1);
}

unsigned ccap_redis_forks(void)
{
    return atomic_load_explicit(&forks, memory_order_relaxed);
}

static char *dup_or_null(const char *s, int *oom)
{
    char *d;

    if (!s)
        return NULL;
    d = strdup(s);
    if (!d)
        *oom = 1;
    return d;
}

/* A copy of the N bytes at P and a NUL (a PEM read with the configuration), or NULL. */
static char *dup_mem(const char *p, size_t n, int *oom)
{
    char *d;

    if (!p)
        return NULL;
    d = malloc(n + 1);
    if (!d) {
        *oom = 1;
        return NULL;
    }
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

static char **dup_list(char *const *v, size_t n, int *oom)
{
    char **d;

    if (!v || !n)
        return NULL;
    d = calloc(n, sizeof *d);
    if (!d) {
        *oom = 1;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        d[i] = dup_or_null(v[i], oom);
    return d;
}

static void free_list(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int ccap_hostport_parse(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon, *h = s;
    size_t hl;
    char *end;
    long p;

    if (!s)
        return -EINVAL;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (!close || close[1] != ':')
            return -EINVAL;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl >= hostlen)
        return -EINVAL;
    errno = 0;
    p = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p < 1 || p > CCAP_PORT_MAX)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

/* True when n->ctx->fd is still the socket we connected (the program may
 * have closed it, or put another file on its number). */
static int fd_still_ours(const struct ccap_node *n)
{
    struct stat st;

    if (!n->ctx || n->ctx->fd < 0)
        return 0;
    if (fstat(n->ctx->fd, &st) != 0)
        return 0;
    return st.st_dev == n->dev && st.st_ino == n->ino;
}

/* Discards the context. Closes the descriptor only if it is still ours;
 * otherwise the number belongs to the program and is left alone. */
void ccap_node_drop(struct ccap_node *n)
{
    ccap_tls_conn_free(n->tls); /* no I/O: no close_notify */
    n->tls = NULL;
    if (!n->ctx)
        return;
    if (fd_still_ours(n))
        close(n->ctx->fd);
    redisFreeKeepFd(n->ctx);
    n->ctx = NULL;
}

void ccap_node_forget(struct ccap_node *n)
{
    /* Dropping does no I/O on the connection: closing our copy of the
     * descriptor in a forked child leaves the parent's open. */
    ccap_node_drop(n);
}

/* ---- connecting ---- */

static int connect_errno(int e)
{
    switch (e) {
    case ECONNREFUSED:
    case ENOENT: /* no Unix socket there: nobody listening */ return -ECONNREFUSED;
    case ETIMEDOUT: return -ETIMEDOUT;
    case EACCES:
    case EPERM: return -EACCES;
    case ENOMEM: return -ENOMEM;
    case EMFILE: /* out of descriptors here: Redis was not even tried */
    case ENFILE: return -e;
    default: return -EIO;
    }
}

/* Waits until FD is ready for EVENTS or DEADLINE (monotonic ms) passes
 * (looks once even when it has). Returns 1 (ready), 0 (deadline) or -errno. */
static int wait_fd(int fd, short events, long long deadline)
{
    struct pollfd p = { .fd = fd, .events = events };

    for (;;) {
        long long left = deadline - ccap_now_ms();
        int n = poll(&p, 1, left <= 0 ? 0 : left > 60000 ? 60000 : (int)left);

        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -errno;
        if (left <= 0 || (n == 0 && left <= 60000))
            return 0;
    }
}

/* Waits until the non-blocking connect on FD completes or DEADLINE passes. */
static int wait_connected(int fd, long long deadline)
{
    int so_err = 0, rc = wait_fd(fd, POLLOUT, deadline);
    socklen_t len = sizeof so_err;

    if (rc <= 0)
        return rc ? rc : -ETIMEDOUT;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &len) != 0)
        return -errno;
    return so_err ? -so_err : 0;
}

/* The process's reserve (ccap_redis_reserve): one unconnected socket per
 * family, on a high number, for a connect that finds no number free. */
static struct reserve {
    int family, fd;
    dev_t dev;
    ino_t ino;
    unsigned forks; /* ccap_redis_forks() when made: a fork child's copy is shared with its parent */
} reserves[] = { { AF_INET, -1, 0, 0, 0 }, { AF_INET6, -1, 0, 0, 0 }, { AF_UNIX, -1, 0, 0, 0 } };

static struct reserve *reserve_of(int family)
{
    for (size_t i = 0; i < sizeof reserves / sizeof *reserves; i++)
        if (reserves[i].family == family)
            return &reserves[i];
    return NULL;
}

/* Under reserve_lock: whether V's socket is still ours (the program may
 * have closed or replaced the number: it is then forgotten, never closed)
 * and this process's own (a fork child closes its copy of the parent's:
 * one socket connected by both would be both's connection). */
static bool reserve_held(struct reserve *v)
{
    struct stat st;

    if (v->fd >= 0 && (fstat(v->fd, &st) != 0 || st.st_dev != v->dev || st.st_ino != v->ino))
        v->fd = -1;
    if (v->fd >= 0 && v->forks != ccap_redis_forks()) {
        close(v->fd);
        v->fd = -1;
    }
    return v->fd >= 0;
}

static int move_high(int fd);

void ccap_redis_reserve(const struct ccap_redis *r)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    struct reserve *v;
    struct stat st;
    int cur = r ? ccap_redis_fd(r) : -1, fd;

    if (cur < 0 || getsockname(cur, (struct sockaddr *)&ss, &len) != 0 || !(v = reserve_of(ss.ss_family)))
        return;
    pthread_mutex_lock(&reserve_lock);
    if (!reserve_held(v) && (fd = socket(v->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) >= 0) {
        fd = move_high(fd);
        if (fstat(fd, &st) == 0) {
            v->fd = fd;
            v->dev = st.st_dev;
            v->ino = st.st_ino;
            v->forks = ccap_redis_forks();
        } else {
            close(fd);
        }
    }
    pthread_mutex_unlock(&reserve_lock);
}

/* A socket of FAMILY when none can be made: the reserve's (taken), or -1. */
static int take_reserve(int family)
{
    struct reserve *v = reserve_of(family);
    int fd = -1;

    if (!v)
        return -1;
    pthread_mutex_lock(&reserve_lock);
    if (reserve_held(v)) {
        fd = v->fd;
        v->fd = -1;
    }
    pthread_mutex_unlock(&reserve_lock);
    return fd;
}

/* One socket to one address, bounded by DEADLINE. Returns the descriptor or -errno. */
static int connect_addr(int family, const struct sockaddr *sa, socklen_t len, long long deadline)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc;

    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        int e = errno;
        if ((fd = take_reserve(family)) < 0)
            errno = e; /* no number free, and no reserve: the process ran out of descriptors */
    }
    if (fd < 0)
        return -errno;
    for (;;) {
        if (connect(fd, sa, len) == 0) {
            rc = 0;
            break;
        }
        if (errno == EINPROGRESS || errno == EINTR) {
            rc = wait_connected(fd, deadline);
            break;
        }
        if (errno == EAGAIN && family == AF_UNIX) {
            /* The server's backlog is full: try again until the deadline. */
            struct timespec ts = { 0, 2 * 1000 * 1000 };

            if (ccap_now_ms() >= deadline) {
                rc = -ETIMEDOUT;
                break;
            }
            nanosleep(&ts, NULL);
            continue;
        }
        rc = -errno;
        break;
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    if (family != AF_UNIX) {
        int one = 1;

        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

static int connect_unix(struct ccap_redis *r, const struct ccap_node *n, long long deadline)
{
    struct sockaddr_un sun;
    int fd;

    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    if (strlen(n->socket) >= sizeof sun.sun_path) {
        set_err(r, "redis socket path too long: %s", n->socket);
        return -EIO;
    }
    strcpy(sun.sun_path, n->socket);
    fd = connect_addr(AF_UNIX, (struct sockaddr *)&sun, sizeof sun, deadline);
    if (fd < 0)
        set_err(r, "redis connect to %s: %s", n->socket, fd == -ETIMEDOUT ? "timed out" : strerror(-fd));
    return fd;
}

static int connect_tcp(struct ccap_redis *r, const struct ccap_node *n, long long deadline)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[CCAP_FMT_LL_LEN];
    int rc, fd = -EIO;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    snprintf(port, sizeof port, "%d", n->port);
    rc = getaddrinfo(n->host, port, &hints, &res);
    if (rc == EAI_NONAME) {
        hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
        rc = getaddrinfo(n->host, port, &hints, &res);
    }
    if (rc != 0) {
        set_err(r, "redis host %s: %s", n->host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -EIO;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = connect_addr(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline);
        if (fd >= 0 || fd == -ETIMEDOUT)
            break;
    }
    freeaddrinfo(res);
    if (fd < 0)
        set_err(r, "redis connect to %s:%d: %s", n->host, n->port, fd == -ETIMEDOUT ? "timed out" : strerror(-fd));
    return fd;
}

/* Moves FD to a number at or above ccap_redis_fd_base(), out of the range
 * programs use, so that a program's dup2 or close of a low number rarely
 * hits it. Keeps FD where it is if that fails. */
static int move_high(int fd)
{
    int base = ccap_redis_fd_base(), nfd;

    if (base <= 2 || fd >= base)
        return fd;
    nfd = fcntl(fd, F_DUPFD_CLOEXEC, base);
    if (nfd < 0)
        return fd;
    close(fd);
    return nfd;
}

int ccap_node_io_error(struct ccap_redis *r, struct ccap_node *n, const char *cmd, int e)
{
    int herr = n->ctx->err, rc;

    if ((herr == REDIS_ERR_IO || herr == 0) && (e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT)) {
        rc = -ETIMEDOUT;
        set_err(r, "redis %s: timed out after %d ms", cmd, r->conf.command_timeout_ms);
    } else {
        if (herr == REDIS_ERR_IO || herr == 0)
            rc = e == EPIPE || e == ECONNRESET ? -EPIPE : e == ECONNREFUSED ? -ECONNREFUSED : -EIO;
        else if (herr == REDIS_ERR_EOF)
            rc = -EPIPE;
        else if (herr == REDIS_ERR_OOM)
            rc = -ENOMEM;
        else
            rc = -EIO;
        set_err(r, "redis %s: %s", cmd,
                n->ctx->errstr[0] ? n->ctx->errstr
                : herr            ? "connection error"
                                  : strerror(e));
    }
    ccap_node_drop(n);
    return rc;
}

/* N's digits at P; returns the end (no NUL). */
static char *put_digits(char *p, unsigned long long n)
{
    char d[CCAP_FMT_LL_LEN];
    int k = 0;

    do
        d[k++] = (char)('0' + n % 10);
    while ((n /= 10) > 0);
    while (k > 0)
        *p++ = d[--k];
    return p;
}

char *ccap_fmt_ll(char *out, long long v)
{
    char *p = out;

    if (v < 0)
        *p++ = '-';
    p = put_digits(p, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
    *p = '\0';
    return out;
}

/* Writes "<c><n>\r\n" at P; returns the end. */
static char *resp_head(char *p, char c, size_t n)
{
    *p++ = c;
    p = put_digits(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

size_t ccap_resp_size(int argc, const char *const *argv)
{
    size_t total = 1 + 20 + 2;

    for (int i = 0; i < argc; i++)
        total += 1 + 20 + 2 + strlen(argv[i]) + 2;
    return total;
}

size_t ccap_resp_format(char *out, int argc, const char *const *argv)
{
    char *p = resp_head(out, '*', (size_t)argc);

    for (int i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]);

        p = resp_head(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    return (size_t)(p - out);
}

/* Writes LEN bytes of BUF on N's TLS session: > 0, -EAGAIN (*WANT), or
 * -EPIPE / -EIO with the reason in R's error. */
static ssize_t tls_send(struct ccap_redis *r, struct ccap_node *n, const char *buf, size_t len, short *want)
{
    char why[CCAP_TLS_ERR_LEN];
    ssize_t w = ccap_tls_write(n->tls, buf, len, want, why, sizeof why);

    if (w < 0 && w != -EAGAIN)
        set_err(r, "redis TLS write: %s", why);
    return w;
}

/* Writes never go through hiredis (its write() would raise SIGPIPE on a
 * peer that went away, killing a program that never asked for it): the
 * command is sent here with MSG_NOSIGNAL, so no signal mask is touched;
 * hiredis only reads. The command is formatted here too, into a buffer on
 * the stack when it fits: hiredis's formatter allocates and calls sprintf
 * once per argument, a cost a matched connect+close would pay on every
 * command. Contract: redis_int.h. */
int ccap_node_send(struct ccap_redis *r, struct ccap_node *n, int argc, const char *const *argv, long long deadline)
{
    char small[2048], *cmd = small;
    size_t len, off = 0, need;
    int rc = 0;

    if (!n->ctx || argc < 1) {
        set_err(r, "redis %s: not connected", argc > 0 ? argv[0] : "");
        return argc < 1 ? -EINVAL : -EIO;
    }
    need = ccap_resp_size(argc, argv);
    if (need > sizeof small && !(cmd = malloc(need))) {
        set_err(r, "out of memory");
        return -ENOMEM;
    }
    len = ccap_resp_format(cmd, argc, argv);
    while (off < len && rc == 0) {
        short want = POLLOUT;
        ssize_t w = n->tls ? tls_send(r, n, cmd + off, len - off, &want)
                           : send(n->ctx->fd, cmd + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        int ready;

        if (w == -EIO || (w < 0 && w != -1 && w != -EAGAIN)) {
            rc = ccap_node_io_error(r, n, argv[0], w == -EPIPE ? EPIPE : EIO);
            break;
        }
        if (w == -EAGAIN)
            w = -1, errno = EAGAIN;
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
            (ready = wait_fd(n->ctx->fd, want, deadline)) != 0) {
            if (ready > 0)
                continue;
            errno = -ready;
        }
        if (w <= 0) {
            rc = ccap_node_io_error(r, n, argv[0], w < 0 ? errno : EPIPE);
            break;
        }
        off += (size_t)w;
    }
    if (cmd != small)
        free(cmd);
    return rc;
}

/* A failed read of CMD's reply on N: closes N, says why. Returns RC. */
static int read_failed(struct ccap_redis *r, struct ccap_node *n, const char *cmd, int rc, const char *why)
{
    set_err(r, "redis %s: %s", cmd, why);
    ccap_node_drop(n);
    return rc;
}

/* Reads what N's socket holds (one buffer), checks it, hands it to the
 * reader. Returns 0 (maybe nothing read: EAGAIN, EINTR) or -errno (N closed). */
static int node_fill(struct ccap_redis *r, struct ccap_node *n, const char *cmd)
{
    char buf[8192], why[CCAP_TLS_ERR_LEN];
    ssize_t k;

    if (n->tls) {
        n->want = POLLIN;
        k = ccap_tls_read(n->tls, buf, sizeof buf, &n->want, why, sizeof why);
        if (k == -EAGAIN)
            return 0;
        if (k < 0)
            return read_failed(r, n, cmd, k == -EPIPE ? -EPIPE : -EIO, why);
    } else {
        k = recv(n->ctx->fd, buf, sizeof buf, MSG_DONTWAIT);
    }
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (k == 0)
        return read_failed(r, n, cmd, -EPIPE, "connection closed by the server");
    if (k < 0)
        return read_failed(r, n, cmd, errno == ECONNRESET ? -EPIPE : -EIO, strerror(errno));
    if (ccap_resp_scan(&n->scan, buf, (size_t)k) < 0) {
        set_err(r, "redis %s: reply refused: %s", cmd, n->scan.err);
        ccap_node_drop(n);
        return -EIO;
    }
    if (redisReaderFeed(n->ctx->reader, buf, (size_t)k) != REDIS_OK)
        return read_failed(r, n, cmd, -ENOMEM, "out of memory");
    return 0;
}

int ccap_node_read(struct ccap_redis *r, struct ccap_node *n, const char *cmd, long long deadline, redisReply **out)
{
    void *rep = NULL;
    int rc;

    *out = NULL;
    if (!n->ctx)
        return read_failed(r, n, cmd, -EIO, "not connected");
    for (;;) {
        if (redisReaderGetReply(n->ctx->reader, &rep) != REDIS_OK) /* out of memory is ours, not the server's */
            return read_failed(r, n, cmd, n->ctx->reader->err == REDIS_ERR_OOM ? -ENOMEM : -EIO,
                               n->ctx->reader->errstr[0] ? n->ctx->reader->errstr : "protocol error");
        if (rep) {
            *out = rep;
            return 0;
        }
        rc = n->tls && ccap_tls_pending(n->tls) ? 1 : wait_fd(n->ctx->fd, n->tls ? n->want : POLLIN, deadline);
        if (rc == 0) {
            set_err(r, "redis %s: timed out after %d ms", cmd, r->conf.command_timeout_ms);
            return -ETIMEDOUT;
        }
        if (rc < 0)
            return read_failed(r, n, cmd, -EIO, strerror(-rc));
        if ((rc = node_fill(r, n, cmd)) < 0)
            return rc;
    }
}

int ccap_node_exec(struct ccap_redis *r, struct ccap_node *n, int argc, const char *const *argv, redisReply **out)
{
    long long deadline = ccap_now_ms() + r->conf.command_timeout_ms;
    int rc;

    *out = NULL;
    if (!n->ctx) {
        set_err(r, "redis %s: not connected", argv[0]);
        return -EIO;
    }
    /* Sent before the replies still owed on N are read (they come first):
     * pipelined, the two cost Redis one wake-up and us one wait, not two. */
    if ((rc = ccap_node_send(r, n, argc, argv, deadline)) < 0)
        return rc;
    if (r->n_defer && (rc = ccap_defer_collect(r, n, deadline)) < 0)
        return rc;
    rc = ccap_node_read(r, n, argv[0], deadline, out);
    if (rc == -ETIMEDOUT)
        ccap_node_drop(n); /* a reply cut short cannot be told from the next one */
    return rc;
}

/* AUTH and SELECT on a fresh connection, as SETUP asks. */
static int node_setup(struct ccap_redis *r, struct ccap_node *n, int setup)
{
    redisReply *rep;
    int rc;

    if ((setup & CCAP_SETUP_AUTH) && r->conf.password) {
        const char *av[3] = { "AUTH" };
        int ac = 1;

        if (r->conf.username && r->conf.username[0])
            av[ac++] = r->conf.username;
        av[ac++] = r->conf.password;
        rc = ccap_node_exec(r, n, ac, av, &rep);
        if (rc < 0)
            return rc;
        if (rep->type == REDIS_REPLY_ERROR) {
            /* Redis's text names no password; ours neither. */
            set_err(r, "redis AUTH failed: %s", rep->str);
            freeReplyObject(rep);
            ccap_node_drop(n);
            return -EACCES;
        }
        freeReplyObject(rep);
    }
    if ((setup & CCAP_SETUP_SELECT) && r->conf.db != 0) {
        char db[CCAP_FMT_LL_LEN];
        const char *av[2] = { "SELECT", db };

        snprintf(db, sizeof db, "%d", r->conf.db);
        rc = ccap_node_exec(r, n, 2, av, &rep);
        if (rc < 0)
            return rc;
        if (rep->type == REDIS_REPLY_ERROR) {
            set_err(r, "redis SELECT %d failed: %s", r->conf.db, rep->str);
            freeReplyObject(rep);
            ccap_node_drop(n);
            return -EIO;
        }
        freeReplyObject(rep);
    }
    return 0;
}

/* The TLS handshake on N's fresh connection (when configured: for a
 * sentinel only with tls.sentinels), bounded by DEADLINE (the connect's).
 * OpenSSL is loaded by the first one. Returns 0 or -errno (N still open). */
static int tls_attach(struct ccap_redis *r, struct ccap_node *n, long long deadline, int setup)
{
    const char *where = n->host;
    char why[CCAP_TLS_ERR_LEN];
    short want = POLLOUT;
    int rc;

    if (!r->conf.tls.enabled || ((setup & CCAP_SETUP_SENTINEL) && !r->conf.tls.sentinels))
        return 0;
    if (!r->tls) {
        /* local work (loading OpenSSL, the CAs) is not the server's handshake time */
        if ((rc = ccap_tls_new(&r->conf.tls, &r->tls, why, sizeof why)) < 0) {
            set_err(r, "redis %s", why);
            return rc == -ENOMEM ? rc : -EIO;
        }
        deadline = ccap_now_ms() + r->conf.connect_timeout_ms;
    }
    if ((rc = ccap_tls_conn_new(r->tls, n->ctx->fd, n->host, &n->tls, why, sizeof why)) < 0) {
        set_err(r, "redis %s:%d: %s", where, n->port, why);
        return rc == -ENOMEM ? rc : -EIO;
    }
    while ((rc = ccap_tls_handshake(n->tls, &want, why, sizeof why)) == -EAGAIN) {
        int ready = wait_fd(n->ctx->fd, want, deadline);

        if (ready <= 0) {
            set_err(r, "redis TLS handshake with %s:%d: %s", where, n->port,
                    ready ? strerror(-ready) : "timed out (connect_timeout_ms)");
            return ready ? -EIO : -ETIMEDOUT;
        }
    }
    if (rc < 0) {
        set_err(r, "redis TLS handshake with %s:%d failed: %s", where, n->port, why);
        return -EIO;
    }
    ccap_tls_describe(n->tls, r->tls_info, sizeof r->tls_info);
    n->want = POLLIN;
    return 0;
}

static int node_connect(struct ccap_redis *r, struct ccap_node *n, long long deadline, int setup)
{
    struct stat st;
    int fd, fl, rc;

    fd = n->socket ? connect_unix(r, n, deadline) : connect_tcp(r, n, deadline);
    if (fd < 0)
        return connect_errno(-fd);

    fd = move_high(fd);
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || fstat(fd, &st) < 0) {
        set_err(r, "redis socket setup: %s", strerror(errno));
        close(fd);
        return -EIO;
    }
    n->ctx = redisConnectFd(fd);
    if (!n->ctx) {
        set_err(r, "out of memory");
        close(fd);
        return -ENOMEM;
    }
    n->dev = st.st_dev;
    n->ino = st.st_ino;
    n->forks = ccap_redis_forks();
    n->gen++;
    n->loaded = 0;
    if (n->fn > 0)
        n->fn = 0; /* asked again on the new connection; a "missing" holds until fn_at */
    ccap_resp_scan_init(&n->scan, r->caps);

    if ((rc = tls_attach(r, n, deadline, setup)) < 0) {
        ccap_node_drop(n);
        return rc;
    }
    return node_setup(r, n, setup);
}

/* True when N holds a usable connection. The inherited one after a fork is
 * forgotten, one whose descriptor the program took is abandoned without
 * touching that number, one in error is closed. */
static bool node_usable(struct ccap_node *n)
{
    if (!n->ctx)
        return false;
    if (n->forks != ccap_redis_forks()) {
        ccap_node_forget(n);
    } else if (!fd_still_ours(n)) {
        ccap_tls_conn_free(n->tls);
        n->tls = NULL;
        redisFreeKeepFd(n->ctx);
        n->ctx = NULL;
    } else if (n->ctx->err) {
        ccap_node_drop(n);
    } else {
        return true;
    }
    return false;
}

int ccap_node_ensure(struct ccap_redis *r, struct ccap_node *n, long long deadline, int setup)
{
    int rc;

    if (node_usable(n))
        return 0;
    rc = node_connect(r, n, deadline, setup);
    return rc < 0 ? rc : 1;
}

/* ---- replies ---- */

static bool err_is(const redisReply *rep, const char *code)
{
    size_t n = strlen(code);

    return rep && rep->type == REDIS_REPLY_ERROR && rep->str && strncmp(rep->str, code, n) == 0 &&
           (rep->str[n] == ' ' || rep->str[n] == '\0');
}

/* An error reply as -errno: -EAGAIN when the server is there but cannot
 * serve right now (loading, a failover or a resharding under way, a
 * replica, out of memory, too many clients, protected mode, a failing
 * disk), -EACCES when it wants other credentials, else -EPROTO (the
 * command itself was refused). The text goes to errstr. */
int ccap_redis_error_rc(struct ccap_redis *r, const redisReply *rep)
{
    static const char *const transient[] = { "LOADING", "MASTERDOWN", "CLUSTERDOWN",  "TRYAGAIN", "READONLY",
                                             "BUSY",    "MOVED",      "ASK",          "OOM",      "DENIED",
                                             "MISCONF", "NOREPLICAS", "NOMASTERLINK", NULL };
    static const char *const auth[] = { "NOAUTH", "WRONGPASS", "NOPERM", NULL };

    set_err(r, "%s", rep->str && rep->str[0] ? rep->str : "error reply without a text");
    r->err_replied = true;
    for (int i = 0; transient[i]; i++)
        if (err_is(rep, transient[i]))
            return -EAGAIN;
    static const char maxclients[] = "ERR max number of clients";
    if (rep->str && !strncmp(rep->str, maxclients, sizeof(maxclients) - 1))
        return -EAGAIN;
    for (int i = 0; auth[i]; i++)
        if (err_is(rep, auth[i]))
            return -EACCES;
    return -EPROTO;
}

/* ---- routing ---- */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum
 * of the Redis Cluster specification ("Keys distribution model"). */
static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int ccap_redis_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);

        if (close && close > open + 1) {
            key = open + 1;
            len = (size_t)(close - key);
        }
    }
    return crc16(key, len) & (CCAP_CLUSTER_SLOTS - 1);
}

/* Index in ARGV of a plain command's first key, or -1 for a command without
 * keys (any node may run it). Most commands take their key first; those
 * that do not are listed. A wrong guess costs one MOVED redirect. */
static int command_key_index(int argc, const char *const *argv)
{
    static const char *const keyless[] = {
        "PING",  "TIME",     "SCRIPT",  "INFO",         "CLUSTER",   "ACL",     "AUTH",      "HELLO",    "SELECT",
        "ROLE",  "CLIENT",   "CONFIG",  "COMMAND",      "DBSIZE",    "KEYS",    "SCAN",      "FLUSHALL", "FLUSHDB",
        "ECHO",  "SENTINEL", "ASKING",  "READONLY",     "READWRITE", "WAIT",    "LASTSAVE",  "SLOWLOG",  "LATENCY",
        "DEBUG", "SAVE",     "BGSAVE",  "BGREWRITEAOF", "FUNCTION",  "PUBLISH", "RANDOMKEY", "SWAPDB",   "MULTI",
        "EXEC",  "DISCARD",  "UNWATCH", "QUIT",         "RESET",     NULL
    };

    if (argc < 2)
        return -1;
    for (int i = 0; keyless[i]; i++)
        if (strcasecmp(argv[0], keyless[i]) == 0)
            return -1;
    if (!strcasecmp(argv[0], "EVAL") || !strcasecmp(argv[0], "EVALSHA") || !strcasecmp(argv[0], "EVAL_RO") ||
        !strcasecmp(argv[0], "EVALSHA_RO") || !strcasecmp(argv[0], "FCALL") || !strcasecmp(argv[0], "FCALL_RO"))
        return argc > 3 && atoi(argv[2]) > 0 ? 3 : -1;
    if (!strcasecmp(argv[0], "OBJECT") || !strcasecmp(argv[0], "MEMORY"))
        return argc > 2 ? 2 : -1;
    if (!strcasecmp(argv[0], "XREAD") || !strcasecmp(argv[0], "XREADGROUP")) {
        for (int i = 1; i + 1 < argc; i++)
            if (!strcasecmp(argv[i], "STREAMS"))
                return i + 1;
        return -1;
    }
    return 1;
}

static int slot_of(const struct ccap_redis *r, const char *key)
{
    if (r->mode != CCAP_MODE_CLUSTER || !key)
        return -1;
    return ccap_redis_key_slot(key, strlen(key));
}

/* How many failovers R saw of the master serving SLOT (-1: not a cluster). */
static unsigned slot_epoch(const struct ccap_redis *r, int slot)
{
    if (r->mode == CCAP_MODE_CLUSTER)
        return slot >= 0 && r->slot_epoch ? r->slot_epoch[slot] : 0;
    return r->epoch;
}

/* "host:port" (or the socket) of the server serving SLOT as R knows it
 * now, in R's buffer; "" when none is known yet. */
static const char *server_of(struct ccap_redis *r, int slot)
{
    const struct ccap_node *n = &r->main;

    if (r->mode == CCAP_MODE_SENTINEL)
        return r->master_seen;
    if (r->mode == CCAP_MODE_CLUSTER)
        n = slot >= 0 && r->slots && r->slots[slot] ? r->nodes[r->slots[slot] - 1] : NULL;
    if (!n)
        r->server_buf[0] = '\0';
    else if (n->socket)
        snprintf(r->server_buf, sizeof r->server_buf, "%s", n->socket);
    else
        snprintf(r->server_buf, sizeof r->server_buf, "%s:%d", n->host, n->port);
    return r->server_buf;
}

unsigned ccap_redis_key_epoch(const struct ccap_redis *r, const char *key)
{
    return r ? slot_epoch(r, slot_of(r, key)) : 0;
}

unsigned ccap_redis_epochs(const struct ccap_redis *r)
{
    return r ? r->epoch : 0;
}

const char *ccap_redis_key_server(struct ccap_redis *r, const char *key)
{
    return server_of(r, slot_of(r, key));
}

void ccap_redis_expect_epoch(struct ccap_redis *r, unsigned epoch)
{
    r->expect = true;
    r->expect_epoch = epoch;
}

/* The node for SLOT (-1: any), connected. *FRESH tells whether the
 * connection was made just now (an old one may have been closed by the
 * server meanwhile: see dispatch). */
int ccap_redis_pick(struct ccap_redis *r, int slot, struct ccap_node **out, int *fresh)
{
    int rc;

    *out = NULL;
    switch (r->mode) {
    case CCAP_MODE_SENTINEL:
        if (node_usable(&r->main)) {
            *fresh = 0;
        } else {
            rc = ccap_sentinel_connect(r);
            if (rc < 0)
                return rc;
            *fresh = 1;
        }
        *out = &r->main;
        return 0;
    case CCAP_MODE_CLUSTER:
        rc = ccap_cluster_node(r, slot, out);
        if (rc < 0)
            return rc;
        *fresh = rc;
        return 0;
    default:
        rc = ccap_node_ensure(r, &r->main, ccap_now_ms() + r->conf.connect_timeout_ms,
                              CCAP_SETUP_AUTH | CCAP_SETUP_SELECT);
        if (rc < 0)
            return rc;
        *fresh = rc;
        *out = &r->main;
        return 0;
    }
}

#define CCAP_FN_RETRY_MS 60000

/* REP says this server has no (usable) library of ours: none loaded, a
 * Redis before 7, or a user that may not call it. */
static bool fn_missing(const redisReply *rep)
{
    return rep && rep->type == REDIS_REPLY_ERROR && rep->str &&
           (!strncmp(rep->str, "ERR Function not found", 22) || !strncmp(rep->str, "ERR unknown command", 19) ||
            err_is(rep, "NOPERM"));
}

/* N goes back to EVALSHA for CCAP_FN_RETRY_MS: the library is missing
 * there (WHY: Redis's answer). Said once per process, at debug: every
 * process of a fleet would say it until `conncap setup` ran (and the fleet
 * keeps its cap with the scripts); `conncap check` and `conncap status`
 * warn about it instead, once. */
static void fn_fall_back(struct ccap_node *n, const char *why)
{
    static atomic_bool warned;
    char port[CCAP_FMT_LL_LEN + 1] = ""; /* ":port" */

    n->fn = -1;
    n->fn_at = ccap_now_ms() + CCAP_FN_RETRY_MS;
    if (!n->socket)
        snprintf(port, sizeof port, ":%d", n->port);
    if (!atomic_exchange(&warned, true))
        ccap_log(CCAP_LOG_DEBUG,
                 "redis: the function library conncap_%s is not loaded on %s%s (%s): "
                 "running the scripts with EVALSHA instead, which needs EVAL rights; run `conncap setup`",
                 ccap_lua_version, n->socket ? n->socket : n->host, port, why);
}

/* N has no library of ours and refuses the scripts too (WHY: its NOPERM):
 * no connect of this process can take a permit until `conncap setup` ran.
 * Said once per process at warn, as an outage is: it is one. */
static void fn_no_scripts(const struct ccap_node *n, const char *why)
{
    static atomic_bool warned;
    char port[CCAP_FMT_LL_LEN + 1] = ""; /* ":port" */

    if (!n->socket)
        snprintf(port, sizeof port, ":%d", n->port);
    if (!atomic_exchange(&warned, true))
        ccap_log(CCAP_LOG_WARN,
                 "redis: %s%s has no function library conncap_%s and this user may not run the scripts "
                 "instead (%s): run `conncap setup` with an administrative user",
                 n->socket ? n->socket : n->host, port, ccap_lua_version, why);
}

/* Whether to send script calls to N as FCALL: yes unless N answered that
 * it has no library of ours less than CCAP_FN_RETRY_MS ago. */
static bool fn_try(const struct ccap_node *n)
{
    return n->fn >= 0 || ccap_now_ms() >= n->fn_at;
}

/* ARGV ("EVALSHA" sha nkeys ...) as CMD ARG1 nkeys ... in SMALL
 * (CCAP_SMALL_ARGV) or a new array: "FCALL" function, or "EVAL" source.
 * Returns it, or NULL (no memory). */
static const char **script_argv(const char *cmd, const char *arg1, int argc, const char *const *argv,
                                const char **small)
{
    const char **av = argc > CCAP_SMALL_ARGV ? malloc(sizeof *av * (size_t)argc) : small;

    if (!av)
        return NULL;
    av[0] = cmd;
    av[1] = arg1;
    for (int i = 2; i < argc; i++)
        av[i] = argv[i];
    return av;
}

/* Script WHICH's ARGV written to N without its reply: FCALL, or EVALSHA of
 * a script this connection ran before, or else EVAL with the source (one
 * command that also caches it: no SCRIPT LOAD round trip, no NOSCRIPT). */
int ccap_node_script_send(struct ccap_redis *r, struct ccap_node *n, int which, int argc, const char *const *argv,
                          long long deadline)
{
    const char *small[CCAP_SMALL_ARGV], **av = (const char **)argv;
    bool fn = fn_try(n), eval = !fn && !(n->loaded & (1u << which));
    int rc;

    /* an FCALL answered "not found" is run again the normal way (see
     * ccap_defer_collect), which then falls back to EVALSHA */
    if (fn || eval) {
        av = fn ? script_argv("FCALL", scripts[which].fn, argc, argv, small)
                : script_argv("EVAL", scripts[which].src, argc, argv, small);
        if (!av)
            return -ENOMEM;
    }
    rc = ccap_node_send(r, n, argc, av, deadline);
    if (rc == 0 && eval && n->ctx)
        n->loaded |= 1u << which; /* a refused EVAL: the EVALSHA after it gets NOSCRIPT, handled */
    if (av != small && av != (const char **)argv)
        free(av);
    return rc;
}

/* ASKING on N before a command that an ASK redirect sent there. */
static int asking(struct ccap_redis *r, struct ccap_node *n)
{
    const char *av[1] = { "ASKING" };
    redisReply *rep;
    int rc = ccap_node_exec(r, n, 1, av, &rep);

    if (rc == 0)
        freeReplyObject(rep);
    return rc;
}

/* Script WHICH's ARGV as FCALL on N, unless N said lately that it has no
 * library of ours. *OUT stays NULL when FCALL is not tried, or when N
 * answers that the library is missing (never loaded, Redis before 7,
 * NOPERM, or removed meanwhile): then run it with EVALSHA. */
static int run_fcall(struct ccap_redis *r, struct ccap_node *n, int which, bool ask, int argc,
                     const char *const *argv, redisReply **out)
{
    const char *small[CCAP_SMALL_ARGV], **av;
    int rc;

    *out = NULL;
    if (!fn_try(n))
        return 0;
    if (!(av = script_argv("FCALL", scripts[which].fn, argc, argv, small))) {
        set_err(r, "out of memory");
        return -ENOMEM;
    }
    rc = ask ? asking(r, n) : 0;
    if (rc == 0)
        rc = ccap_node_exec(r, n, argc, av, out);
    if (av != small)
        free(av);
    if (rc == 0 && fn_missing(*out)) {
        fn_fall_back(n, (*out)->str);
        freeReplyObject(*out);
        *out = NULL;
    } else if (rc == 0 && n->ctx) {
        n->fn = 1;
    }
    return rc;
}

/* Script WHICH's ARGV on N as EVAL with its source. Returns 0 and *OUT,
 * or -errno as ccap_node_exec. */
static int eval_source(struct ccap_redis *r, struct ccap_node *n, int which, int argc, const char *const *argv,
                       redisReply **out)
{
    const char *small[CCAP_SMALL_ARGV], **av = script_argv("EVAL", scripts[which].src, argc, argv, small);
    int rc;

    if (!av) {
        set_err(r, "out of memory");
        return -ENOMEM;
    }
    rc = ccap_node_exec(r, n, argc, av, out);
    if (av != small)
        free(av);
    return rc;
}

/* ARGV on N (after ASKING when ASK). A script (WHICH >= 0) runs as FCALL
 * of our library when N has it, else with EVALSHA, run once more as EVAL
 * with its source after NOSCRIPT, invisibly to the caller. */
static int run_on(struct ccap_redis *r, struct ccap_node *n, int which, bool ask, int argc, const char *const *argv,
                  redisReply **out)
{
    redisReply *rep = NULL;
    int rc = which >= 0 ? run_fcall(r, n, which, ask, argc, argv, &rep) : 0;

    if (rc < 0 || rep) {
        *out = rep;
        return rc;
    }
    rc = ask ? asking(r, n) : 0;
    if (rc == 0)
        rc = ccap_node_exec(r, n, argc, argv, &rep);
    if (rc == 0 && which >= 0 && err_is(rep, "NOSCRIPT")) {
        /* Never loaded here, or flushed, or a restart or failover: once
         * more with EVAL and the source, which also caches it. */
        freeReplyObject(rep);
        rep = NULL;
        ccap_defer_retry(r); /* a release the flush also hit goes first (see dispatch) */
        rc = n->ctx ? 0 : -EPIPE;
        if (rc == 0 && ask)
            rc = asking(r, n);
        if (rc == 0)
            rc = eval_source(r, n, which, argc, argv, &rep);
    }
    if (rc == 0 && which >= 0 && !err_is(rep, "NOSCRIPT") && n->ctx)
        n->loaded |= 1u << which;
    if (rc == 0 && which >= 0 && n->fn < 0 && err_is(rep, "NOPERM"))
        fn_no_scripts(n, rep->str);
    *out = rep;
    return rc;
}

#define CCAP_MAX_REDIRECTS 5
#define CCAP_TRYAGAIN_MS 20

/* One ccap_redis_dispatch across its attempts: the node and how it was
 * reached, and what is left of each kind of retry. */
struct dispatch {
    int slot;    /* the keys' cluster slot, or -1 */
    bool expect; /* run only while the keys' epoch is EXPECT_EPOCH (else -ESTALE) */
    unsigned expect_epoch;
    struct ccap_node *n; /* where the next attempt goes; NULL: pick again */
    bool ask, last_ask;  /* send ASKING first (next / last attempt) */
    bool stale_retry;    /* a reused connection found closed may be replaced once */
    bool ro_retry;       /* a READONLY master may be asked for once */
    int hops, tryagain, fresh;
    long long t0; /* monotonic ms at the start */
};

/* TRYAGAIN: a slot in migration and our keys split between the two nodes
 * (or some not created yet): the same node again after CCAP_TRYAGAIN_MS,
 * with ASKING again if it was an ASK target. Frees REP. */
static void try_again(struct dispatch *d, redisReply *rep)
{
    struct timespec ts = { 0, CCAP_TRYAGAIN_MS * 1000000L };

    if (!d->tryagain++)
        ccap_log(CCAP_LOG_DEBUG, "redis cluster: TRYAGAIN on %s:%d (slot %d in migration)", d->n->host, d->n->port,
                 d->slot);
    d->ask = d->last_ask;
    freeReplyObject(rep);
    nanosleep(&ts, NULL);
}

/* What REP asks of dispatch D: MOVED/ASK (at most CCAP_MAX_REDIRECTS hops),
 * TRYAGAIN (until command_timeout_ms from D's start is spent), READONLY
 * under Sentinel (once). Returns 1 when the command is to be sent again
 * (REP freed, D updated), 0 when REP is the answer, or -errno (REP freed). */
static int follow(struct ccap_redis *r, struct dispatch *d, redisReply *rep)
{
    if (rep->type == REDIS_REPLY_ERROR && r->mode == CCAP_MODE_CLUSTER && d->hops < CCAP_MAX_REDIRECTS) {
        if (err_is(rep, "MOVED") || err_is(rep, "ASK")) {
            int rc;

            d->hops++;
            rc = ccap_cluster_redirect(r, d->n, rep->str, &d->n, &d->ask);
            freeReplyObject(rep);
            if (rc < 0)
                return rc;
            d->fresh = 1;
            return 1;
        }
        if (err_is(rep, "TRYAGAIN") && ccap_now_ms() + CCAP_TRYAGAIN_MS < d->t0 + r->conf.command_timeout_ms) {
            try_again(d, rep);
            return 1;
        }
    }
    if (r->mode == CCAP_MODE_SENTINEL && d->ro_retry && err_is(rep, "READONLY")) {
        ccap_log(CCAP_LOG_WARN, "redis sentinel: %s:%d is a replica now: asking the sentinels again", r->main.host,
                 r->main.port);
        d->ro_retry = false;
        freeReplyObject(rep);
        ccap_node_drop(&r->main);
        d->n = NULL;
        return 1;
    }
    return 0;
}

/* Runs ARGV where it belongs: on the server (single), the master the
 * sentinels name, or the cluster node that owns SLOT. Follows what the
 * servers say: MOVED and ASK (cluster, at most CCAP_MAX_REDIRECTS hops),
 * TRYAGAIN (a slot in migration: retried for up to command_timeout_ms),
 * READONLY (Sentinel: the master we knew became a replica: ask again).
 * A reused connection found closed by the server (EOF or reset: Redis
 * restarted, failed over, or dropped an idle client) is replaced and the
 * command sent once more, so that such a restart costs no failed call; the
 * scripts are idempotent per holder. Returns 0 and *OUT (any reply type),
 * or -errno. */
int ccap_redis_dispatch(struct ccap_redis *r, int slot, int which, int argc, const char *const *argv,
                        redisReply **out)
{
    struct dispatch d = { .slot = slot, .stale_retry = true, .ro_retry = true, .t0 = ccap_now_ms() };
    redisReply *rep;
    int rc;

    *out = NULL;
    d.expect = r->expect; /* the caller's, for this call only (nested ones run as they are) */
    d.expect_epoch = r->expect_epoch;
    r->expect = false;
    for (;;) {
        /* releases that never ran (lost with a connection, or NOSCRIPT)
         * go first: an acquire must not count a permit already given back */
        if (!d.n)
            ccap_defer_retry(r);
        if (!d.n && (rc = ccap_redis_pick(r, slot, &d.n, &d.fresh)) < 0)
            return rc;
        /* a failover found on the way (a new master named, a slot moved to
         * a replica): the caller acts first, this command is not run */
        if (d.expect && slot_epoch(r, slot) != d.expect_epoch) {
            set_err(r, "redis: the master changed (failover, now %s): not run", server_of(r, slot));
            return -ESTALE;
        }
        r->last = d.n;
        rc = run_on(r, d.n, which, d.ask, argc, argv, &rep);
        d.last_ask = d.ask;
        d.ask = false;
        if (rc == -EPIPE && !d.fresh && d.stale_retry) {
            d.stale_retry = false;
            d.n = NULL;
            continue;
        }
        if (rc < 0) {
            if (r->mode == CCAP_MODE_CLUSTER)
                r->slots_stale = true;
            return rc;
        }
        if ((rc = follow(r, &d, rep)) < 0)
            return rc;
        if (rc == 0) {
            *out = rep;
            return 0;
        }
    }
}

/* ---- public calls ---- */

struct ccap_redis *ccap_redis_new(const struct ccap_redis_conf *conf)
{
    struct ccap_redis *r = calloc(1, sizeof *r);
    int oom = 0;

    if (!r)
        return NULL;
    r->caps = &ccap_resp_caps_shim;
    r->conf.host = dup_or_null(conf->host && conf->host[0] ? conf->host : "127.0.0.1", &oom);
    r->conf.port = conf->port > 0 ? conf->port : 6379;
    r->conf.socket = conf->socket && conf->socket[0] ? dup_or_null(conf->socket, &oom) : NULL;
    r->conf.db = conf->db;
    r->conf.connect_timeout_ms = conf->connect_timeout_ms > 0 ? conf->connect_timeout_ms : CCAP_DEFAULT_TIMEOUT_MS;
    r->conf.command_timeout_ms = conf->command_timeout_ms > 0 ? conf->command_timeout_ms : CCAP_DEFAULT_TIMEOUT_MS;
    r->conf.key_prefix = dup_or_null(conf->key_prefix, &oom);
    r->conf.username = dup_or_null(conf->username, &oom);
    r->conf.password = dup_or_null(conf->password, &oom);
    r->conf.master = dup_or_null(conf->master, &oom);
    r->conf.sentinels = dup_list(conf->sentinels, conf->n_sentinels, &oom);
    r->conf.n_sentinels = r->conf.sentinels ? conf->n_sentinels : 0;
    r->conf.cluster = dup_list(conf->cluster, conf->n_cluster, &oom);
    r->conf.tls = conf->tls;
    r->conf.tls.ca_file = dup_or_null(conf->tls.ca_file, &oom);
    r->conf.tls.ca_dir = dup_or_null(conf->tls.ca_dir, &oom);
    r->conf.tls.cert_file = dup_or_null(conf->tls.cert_file, &oom);
    r->conf.tls.key_file = dup_or_null(conf->tls.key_file, &oom);
    r->conf.tls.server_name = dup_or_null(conf->tls.server_name, &oom);
    r->conf.tls.ca_pem = dup_mem(conf->tls.ca_pem, conf->tls.ca_len, &oom);
    r->conf.tls.cert_pem = dup_mem(conf->tls.cert_pem, conf->tls.cert_len, &oom);
    r->conf.tls.key_pem = dup_mem(conf->tls.key_pem, conf->tls.key_len, &oom);
    r->conf.n_cluster = r->conf.cluster ? conf->n_cluster : 0;
    if (oom) {
        ccap_redis_free(r);
        return NULL;
    }
    if (r->conf.n_cluster) {
        r->mode = CCAP_MODE_CLUSTER;
        for (size_t i = 0; i < r->conf.n_cluster; i++) {
            char host[CCAP_HOST_MAX];
            int port;

            if (ccap_hostport_parse(r->conf.cluster[i], host, sizeof host, &port) == 0 &&
                !ccap_cluster_node_at(r, host, port)) {
                ccap_redis_free(r);
                return NULL;
            }
        }
    } else if (r->conf.n_sentinels && r->conf.master) {
        r->mode = CCAP_MODE_SENTINEL;
    } else if (r->conf.socket) {
        r->main.socket = r->conf.socket;
    } else {
        snprintf(r->main.host, sizeof r->main.host, "%s", r->conf.host);
        r->main.port = r->conf.port;
    }
    return r;
}

void ccap_redis_set_caps(struct ccap_redis *r, const struct ccap_resp_caps *caps)
{
    r->caps = caps;
}

void ccap_redis_free(struct ccap_redis *r)
{
    if (!r)
        return;
    ccap_defer_clear(r);
    ccap_node_drop(&r->main);
    ccap_cluster_free(r);
    if (r->conf.password) {
        explicit_bzero(r->conf.password, strlen(r->conf.password));
        free(r->conf.password);
    }
    free(r->conf.host);
    free(r->conf.socket);
    free(r->conf.key_prefix);
    free(r->conf.username);
    free(r->conf.master);
    free_list(r->conf.sentinels, r->conf.n_sentinels);
    free_list(r->conf.cluster, r->conf.n_cluster);
    ccap_tls_free(r->tls);
    free(r->conf.tls.ca_file);
    free(r->conf.tls.ca_dir);
    free(r->conf.tls.cert_file);
    free(r->conf.tls.key_file);
    free(r->conf.tls.server_name);
    free(r->conf.tls.ca_pem);
    free(r->conf.tls.cert_pem);
    if (r->conf.tls.key_pem)
        explicit_bzero(r->conf.tls.key_pem, r->conf.tls.key_len);
    free(r->conf.tls.key_pem);
    free(r);
}

int ccap_redis_connect(struct ccap_redis *r)
{
    struct ccap_node *n;
    int fresh, rc;

    r->err[0] = '\0';
    rc = ccap_redis_pick(r, -1, &n, &fresh);
    if (rc == 0)
        r->last = n;
    return rc < 0 ? rc : 0;
}

int ccap_redis_command(struct ccap_redis *r, int argc, const char *const *argv, redisReply **reply)
{
    int k, rc;

    *reply = NULL;
    r->err[0] = '\0';
    if (argc <= 0 || !argv) {
        r->expect = false;
        return -EINVAL;
    }
    k = command_key_index(argc, argv);
    rc = ccap_redis_dispatch(r, k >= 0 ? slot_of(r, argv[k]) : -1, -1, argc, argv, reply);
    if (rc < 0)
        return rc;
    ccap_defer_retry(r);
    if ((*reply)->type == REDIS_REPLY_ERROR) {
        rc = ccap_redis_error_rc(r, *reply);
        freeReplyObject(*reply);
        *reply = NULL;
        return rc;
    }
    return 0;
}

int ccap_redis_script(struct ccap_redis *r, enum ccap_script which, int nkeys, int argc, const char *const *args,
                      redisReply **reply)
{
    const char *small[CCAP_SMALL_ARGV], **av = small;
    char nk[CCAP_FMT_LL_LEN];
    redisReply *rep = NULL;
    int rc;

    *reply = NULL;
    r->err[0] = '\0';
    if ((unsigned)which >= CCAP_SCRIPT_COUNT || nkeys < 0 || argc < nkeys || (argc && !args)) {
        r->expect = false; /* it was for this call */
        return -EINVAL;
    }
    if (argc + 3 > CCAP_SMALL_ARGV) {
        av = malloc(sizeof *av * (size_t)(argc + 3));
        if (!av) {
            r->expect = false;
            set_err(r, "out of memory");
            return -ENOMEM;
        }
    }
    ccap_fmt_ll(nk, nkeys);
    av[0] = "EVALSHA";
    av[1] = ccap_script_sha(which);
    av[2] = nk;
    for (int i = 0; i < argc; i++)
        av[3 + i] = args[i];

    rc = ccap_redis_dispatch(r, nkeys > 0 ? slot_of(r, args[0]) : -1, (int)which, argc + 3, av, &rep);
    if (av != small)
        free(av);
    if (rc < 0)
        return rc;
    ccap_defer_retry(r);
    if (rep->type == REDIS_REPLY_ERROR) {
        rc = ccap_redis_error_rc(r, rep);
        freeReplyObject(rep);
        return rc;
    }
    *reply = rep;
    return 0;
}

/* ARGV on N (connected now if need be), told to EACH. Returns 1 when N
 * answered without an error reply, else 0. */
static int each_on(struct ccap_redis *r, struct ccap_node *n, int argc, const char *const *argv,
                   void (*each)(void *, const char *, const redisReply *, int), void *ctx)
{
    char name[CCAP_HOST_MAX + 16];
    redisReply *rep = NULL;
    int rc = ccap_node_ensure(r, n, ccap_now_ms() + r->conf.connect_timeout_ms,
                              r->mode == CCAP_MODE_CLUSTER ? CCAP_SETUP_AUTH : CCAP_SETUP_AUTH | CCAP_SETUP_SELECT);

    if (n->socket)
        snprintf(name, sizeof name, "%s", n->socket);
    else
        snprintf(name, sizeof name, "%s:%d", n->host, n->port);
    if (rc >= 0)
        rc = ccap_node_exec(r, n, argc, argv, &rep);
    if (rc == 0 && rep->type == REDIS_REPLY_ERROR)
        ccap_redis_error_rc(r, rep);
    each(ctx, name, rep, rc);
    rc = rc == 0 && rep->type != REDIS_REPLY_ERROR;
    if (rep)
        freeReplyObject(rep);
    return rc;
}

int ccap_redis_command_each(struct ccap_redis *r, int argc, const char *const *argv,
                            void (*each)(void *ctx, const char *node, const redisReply *rep, int rc), void *ctx)
{
    struct ccap_node *n;
    int fresh, rc, ok = 0;

    r->err[0] = '\0';
    if (argc < 1 || !argv || !each)
        return -EINVAL;
    if ((rc = ccap_redis_pick(r, -1, &n, &fresh)) < 0)
        return rc;
    if (r->mode != CCAP_MODE_CLUSTER)
        return each_on(r, n, argc, argv, each, ctx);
    for (size_t i = 0; i < r->n_nodes; i++) {
        bool owns = false;

        for (int s = 0; r->slots && s < CCAP_CLUSTER_SLOTS && !owns; s++)
            owns = r->slots[s] == i + 1;
        if (owns)
            ok += each_on(r, r->nodes[i], argc, argv, each, ctx);
    }
    return ok;
}

void ccap_redis_forget(struct ccap_redis *r)
{
    if (!r)
        return;
    ccap_defer_clear(r); /* the parent's commands are the parent's */
    ccap_node_forget(&r->main);
    for (size_t i = 0; i < r->n_nodes; i++)
        ccap_node_forget(r->nodes[i]);
}

int ccap_redis_fd(const struct ccap_redis *r)
{
    const struct ccap_node *n;

    if (!r)
        return -1;
    n = r->last ? r->last : &r->main;
    return n->ctx ? n->ctx->fd : -1;
}

const char *ccap_redis_tls_info(const struct ccap_redis *r)
{
    return r ? r->tls_info : "";
}

const char *ccap_redis_errstr(const struct ccap_redis *r)
{
    return r ? r->err : "";
}

bool ccap_redis_err_replied(const struct ccap_redis *r)
{
    return r && r->err_replied;
}
