/* redis.c -- the shim's Redis client: our own high, CLOEXEC socket handed to hiredis. */
#include "redis.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sha1.h"

/* build/scripts.c, generated from lua/NAME.lua by mk/embed-lua.sh. */
extern const char ccap_lua_acquire[];
extern const char ccap_lua_release[];
extern const char ccap_lua_renew[];
extern const char ccap_lua_timeout[];
extern const char ccap_lua_reset[];

#define CCAP_FD_HIGH_CAP 1024
#define CCAP_FD_HIGH_GAP 32
#define CCAP_DEFAULT_TIMEOUT_MS 200
#define CCAP_SMALL_ARGV 16

struct ccap_redis {
    struct ccap_redis_conf conf; /* our own copy; sentinels and cluster not kept */
    redisContext *ctx;           /* NULL when not connected */
    dev_t dev;                   /* identity of ctx->fd when we made it */
    ino_t ino;
    pid_t pid;                   /* the process that made the connection */
    char err[256];
};

static const char *const script_src[CCAP_SCRIPT_COUNT] = {
    [CCAP_SCRIPT_ACQUIRE] = ccap_lua_acquire,
    [CCAP_SCRIPT_RELEASE] = ccap_lua_release,
    [CCAP_SCRIPT_RENEW] = ccap_lua_renew,
    [CCAP_SCRIPT_TIMEOUT] = ccap_lua_timeout,
    [CCAP_SCRIPT_RESET] = ccap_lua_reset,
};
static char script_sha[CCAP_SCRIPT_COUNT][41];
static pthread_once_t script_sha_once = PTHREAD_ONCE_INIT;

static void script_sha_init(void)
{
    for (int i = 0; i < CCAP_SCRIPT_COUNT; i++)
        ccap_sha1_hex(script_src[i], strlen(script_src[i]), script_sha[i]);
}

const char *ccap_script_sha(enum ccap_script which)
{
    if ((unsigned)which >= CCAP_SCRIPT_COUNT)
        return NULL;
    pthread_once(&script_sha_once, script_sha_init);
    return script_sha[which];
}

const char *ccap_script_source(enum ccap_script which)
{
    if ((unsigned)which >= CCAP_SCRIPT_COUNT)
        return NULL;
    return script_src[which];
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

static void set_err(struct ccap_redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct ccap_redis *r, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    errno = saved;
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

/* True when ctx->fd is still the socket we connected (the program may have
 * closed it, or put another file on its number). */
static int fd_still_ours(const struct ccap_redis *r)
{
    struct stat st;

    if (!r->ctx || r->ctx->fd < 0)
        return 0;
    if (fstat(r->ctx->fd, &st) != 0)
        return 0;
    return st.st_dev == r->dev && st.st_ino == r->ino;
}

/* Discards the context. Closes the descriptor only if it is still ours;
 * otherwise the number belongs to the program and is left alone. */
static void drop_conn(struct ccap_redis *r)
{
    if (!r->ctx)
        return;
    if (fd_still_ours(r))
        close(r->ctx->fd);
    redisFreeKeepFd(r->ctx);
    r->ctx = NULL;
}

/* Writes to a socket the peer closed raise SIGPIPE, which would kill a
 * program that never asked for it: block it around our I/O and swallow one
 * that our own write caused. */
struct pipe_guard {
    sigset_t old;
    int was_pending;
    int blocked;
};

static void pipe_guard_on(struct pipe_guard *g)
{
    sigset_t set, pend;

    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    g->was_pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
    g->blocked = pthread_sigmask(SIG_BLOCK, &set, &g->old) == 0;
}

static void pipe_guard_off(struct pipe_guard *g)
{
    sigset_t set, pend;
    struct timespec zero = { 0, 0 };
    int saved = errno;

    if (!g->blocked)
        return;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    if (!g->was_pending && sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE))
        while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
            ;
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
    errno = saved;
}

/* ---- connecting ---- */

static int connect_errno(int e)
{
    switch (e) {
    case ECONNREFUSED:
    case ENOENT: /* no Unix socket there: nobody listening */
        return -ECONNREFUSED;
    case ETIMEDOUT:
        return -ETIMEDOUT;
    case EACCES:
    case EPERM:
        return -EACCES;
    case ENOMEM:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

/* Waits until the non-blocking connect on FD completes or DEADLINE passes. */
static int wait_connected(int fd, long long deadline)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    int so_err = 0;
    socklen_t len = sizeof so_err;

    for (;;) {
        long long left = deadline - now_ms();
        int n;

        if (left <= 0)
            return -ETIMEDOUT;
        n = poll(&p, 1, (int)left);
        if (n > 0)
            break;
        if (n == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &len) != 0)
        return -errno;
    return so_err ? -so_err : 0;
}

/* One socket to one address, bounded by DEADLINE. Returns the descriptor or -errno. */
static int connect_addr(int family, const struct sockaddr *sa, socklen_t len, long long deadline)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc;

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

            if (now_ms() >= deadline) {
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

static int connect_unix(struct ccap_redis *r, long long deadline)
{
    struct sockaddr_un sun;
    int fd;

    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    if (strlen(r->conf.socket) >= sizeof sun.sun_path) {
        set_err(r, "redis socket path too long: %s", r->conf.socket);
        return -EIO;
    }
    strcpy(sun.sun_path, r->conf.socket);
    fd = connect_addr(AF_UNIX, (struct sockaddr *)&sun, sizeof sun, deadline);
    if (fd < 0)
        set_err(r, "redis connect to %s: %s", r->conf.socket,
                fd == -ETIMEDOUT ? "timed out" : strerror(-fd));
    return fd;
}

static int connect_tcp(struct ccap_redis *r, long long deadline)
{
    struct addrinfo hints, *res = NULL, *ai;
    char port[16];
    int rc, fd = -EIO;

    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    snprintf(port, sizeof port, "%d", r->conf.port);
    rc = getaddrinfo(r->conf.host, port, &hints, &res);
    if (rc == EAI_NONAME) {
        hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
        rc = getaddrinfo(r->conf.host, port, &hints, &res);
    }
    if (rc != 0) {
        set_err(r, "redis host %s: %s", r->conf.host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -EIO;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = connect_addr(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline);
        if (fd >= 0 || fd == -ETIMEDOUT)
            break;
    }
    freeaddrinfo(res);
    if (fd < 0)
        set_err(r, "redis connect to %s:%d: %s", r->conf.host, r->conf.port,
                fd == -ETIMEDOUT ? "timed out" : strerror(-fd));
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

/* Runs ARGV on the live context. 0 and *OUT (any reply type), or -errno on
 * a transport error, after which the connection is gone. */
static int exec_argv(struct ccap_redis *r, int argc, const char *const *argv, redisReply **out)
{
    size_t small[CCAP_SMALL_ARGV], *lens = small;
    struct pipe_guard g;
    redisReply *rep;
    int e, herr, rc;

    *out = NULL;
    if (argc > CCAP_SMALL_ARGV) {
        lens = malloc(sizeof *lens * (size_t)argc);
        if (!lens) {
            set_err(r, "out of memory");
            return -ENOMEM;
        }
    }
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);

    pipe_guard_on(&g);
    errno = 0;
    rep = redisCommandArgv(r->ctx, argc, (const char **)argv, lens);
    e = errno;
    pipe_guard_off(&g);
    if (lens != small)
        free(lens);
    if (rep) {
        *out = rep;
        return 0;
    }

    herr = r->ctx->err;
    if (herr == REDIS_ERR_IO && (e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT)) {
        rc = -ETIMEDOUT;
        set_err(r, "redis %s: timed out after %d ms", argv[0], r->conf.command_timeout_ms);
    } else {
        if (herr == REDIS_ERR_IO)
            rc = e == EPIPE || e == ECONNRESET ? -EPIPE : e == ECONNREFUSED ? -ECONNREFUSED : -EIO;
        else if (herr == REDIS_ERR_EOF)
            rc = -EPIPE;
        else if (herr == REDIS_ERR_OOM)
            rc = -ENOMEM;
        else
            rc = -EIO;
        set_err(r, "redis %s: %s", argv[0], r->ctx->errstr[0] ? r->ctx->errstr : "connection error");
    }
    drop_conn(r);
    return rc;
}

/* AUTH and SELECT on a fresh connection. */
static int conn_setup(struct ccap_redis *r)
{
    redisReply *rep;
    int rc;

    if (r->conf.password) {
        const char *av[3] = { "AUTH" };
        int ac = 1;

        if (r->conf.username && r->conf.username[0])
            av[ac++] = r->conf.username;
        av[ac++] = r->conf.password;
        rc = exec_argv(r, ac, av, &rep);
        if (rc < 0)
            return rc;
        if (rep->type == REDIS_REPLY_ERROR) {
            /* Redis's text names no password; ours neither. */
            set_err(r, "redis AUTH failed: %s", rep->str);
            freeReplyObject(rep);
            drop_conn(r);
            return -EACCES;
        }
        freeReplyObject(rep);
    }
    if (r->conf.db != 0) {
        char db[16];
        const char *av[2] = { "SELECT", db };

        snprintf(db, sizeof db, "%d", r->conf.db);
        rc = exec_argv(r, 2, av, &rep);
        if (rc < 0)
            return rc;
        if (rep->type == REDIS_REPLY_ERROR) {
            set_err(r, "redis SELECT %d failed: %s", r->conf.db, rep->str);
            freeReplyObject(rep);
            drop_conn(r);
            return -EIO;
        }
        freeReplyObject(rep);
    }
    return 0;
}

static int do_connect(struct ccap_redis *r)
{
    long long deadline = now_ms() + r->conf.connect_timeout_ms;
    struct timeval tv;
    struct stat st;
    int fd, fl;

    fd = r->conf.socket ? connect_unix(r, deadline) : connect_tcp(r, deadline);
    if (fd < 0)
        return connect_errno(-fd);

    fd = move_high(fd);
    fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || fstat(fd, &st) < 0) {
        set_err(r, "redis socket setup: %s", strerror(errno));
        close(fd);
        return -EIO;
    }
    r->ctx = redisConnectFd(fd);
    if (!r->ctx) {
        set_err(r, "out of memory");
        close(fd);
        return -ENOMEM;
    }
    r->dev = st.st_dev;
    r->ino = st.st_ino;
    r->pid = getpid();

    tv.tv_sec = r->conf.command_timeout_ms / 1000;
    tv.tv_usec = (r->conf.command_timeout_ms % 1000) * 1000;
    if (redisSetTimeout(r->ctx, tv) != REDIS_OK) {
        set_err(r, "redis set timeout: %s", r->ctx->errstr);
        drop_conn(r);
        return -EIO;
    }
    return conn_setup(r);
}

/* Makes sure a usable connection is there: the inherited one after a fork
 * is forgotten, one whose descriptor the program took is abandoned without
 * touching that number, one in error is closed. */
static int ensure_conn(struct ccap_redis *r)
{
    if (r->ctx) {
        if (r->pid != getpid()) {
            ccap_redis_forget(r);
        } else if (!fd_still_ours(r)) {
            redisFreeKeepFd(r->ctx);
            r->ctx = NULL;
        } else if (r->ctx->err) {
            drop_conn(r);
        } else {
            return 0;
        }
    }
    return do_connect(r);
}

/* ---- public calls ---- */

struct ccap_redis *ccap_redis_new(const struct ccap_redis_conf *conf)
{
    struct ccap_redis *r = calloc(1, sizeof *r);
    int oom = 0;

    if (!r)
        return NULL;
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
    if (oom) {
        ccap_redis_free(r);
        return NULL;
    }
    return r;
}

void ccap_redis_free(struct ccap_redis *r)
{
    if (!r)
        return;
    drop_conn(r);
    if (r->conf.password) {
        explicit_bzero(r->conf.password, strlen(r->conf.password));
        free(r->conf.password);
    }
    free(r->conf.host);
    free(r->conf.socket);
    free(r->conf.key_prefix);
    free(r->conf.username);
    free(r->conf.master);
    free(r);
}

int ccap_redis_connect(struct ccap_redis *r)
{
    r->err[0] = '\0';
    return ensure_conn(r);
}

/* Runs ARGV; an error reply becomes -EPROTO with its text in errstr. */
static int run_checked(struct ccap_redis *r, int argc, const char *const *argv, redisReply **reply)
{
    int rc = exec_argv(r, argc, argv, reply);

    if (rc < 0)
        return rc;
    if ((*reply)->type == REDIS_REPLY_ERROR) {
        set_err(r, "%s", (*reply)->str);
        freeReplyObject(*reply);
        *reply = NULL;
        return -EPROTO;
    }
    return 0;
}

int ccap_redis_command(struct ccap_redis *r, int argc, const char *const *argv, redisReply **reply)
{
    int rc;

    *reply = NULL;
    r->err[0] = '\0';
    if (argc <= 0 || !argv)
        return -EINVAL;
    rc = ensure_conn(r);
    if (rc < 0)
        return rc;
    return run_checked(r, argc, argv, reply);
}

/* SCRIPT LOAD of WHICH; checks that Redis names it as we do. */
static int script_load(struct ccap_redis *r, enum ccap_script which)
{
    const char *av[3] = { "SCRIPT", "LOAD", script_src[which] };
    redisReply *rep;
    int rc = run_checked(r, 3, av, &rep);

    if (rc < 0)
        return rc;
    if (rep->type != REDIS_REPLY_STRING || strcmp(rep->str, ccap_script_sha(which)) != 0) {
        set_err(r, "redis SCRIPT LOAD: unexpected reply");
        freeReplyObject(rep);
        return -EPROTO;
    }
    freeReplyObject(rep);
    return 0;
}

static int is_noscript(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ERROR && rep->str && strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

int ccap_redis_script(struct ccap_redis *r, enum ccap_script which, int nkeys, int argc,
                      const char *const *args, redisReply **reply)
{
    const char *small[CCAP_SMALL_ARGV], **av = small;
    char nk[16];
    redisReply *rep = NULL;
    int rc;

    *reply = NULL;
    r->err[0] = '\0';
    if ((unsigned)which >= CCAP_SCRIPT_COUNT || nkeys < 0 || argc < nkeys || (argc && !args))
        return -EINVAL;
    if (argc + 3 > CCAP_SMALL_ARGV) {
        av = malloc(sizeof *av * (size_t)(argc + 3));
        if (!av) {
            set_err(r, "out of memory");
            return -ENOMEM;
        }
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    av[0] = "EVALSHA";
    av[1] = ccap_script_sha(which);
    av[2] = nk;
    for (int i = 0; i < argc; i++)
        av[3 + i] = args[i];

    rc = ensure_conn(r);
    if (rc == 0)
        rc = exec_argv(r, argc + 3, av, &rep);
    if (rc == 0 && is_noscript(rep)) {
        /* Never loaded here, or flushed, or a restart or failover: load and retry once. */
        freeReplyObject(rep);
        rep = NULL;
        rc = script_load(r, which);
        if (rc == 0)
            rc = exec_argv(r, argc + 3, av, &rep);
    }
    if (av != small)
        free(av);
    if (rc < 0)
        return rc;
    if (rep->type == REDIS_REPLY_ERROR) {
        set_err(r, "%s", rep->str);
        freeReplyObject(rep);
        return -EPROTO;
    }
    *reply = rep;
    return 0;
}

void ccap_redis_forget(struct ccap_redis *r)
{
    if (!r || !r->ctx)
        return;
    /* No I/O: closing our copy of the descriptor leaves the parent's open. */
    if (fd_still_ours(r))
        close(r->ctx->fd);
    redisFreeKeepFd(r->ctx);
    r->ctx = NULL;
}

int ccap_redis_fd(const struct ccap_redis *r)
{
    return r && r->ctx ? r->ctx->fd : -1;
}

const char *ccap_redis_errstr(const struct ccap_redis *r)
{
    return r ? r->err : "";
}
