/* redis_fixture.h -- tests: a private redis-server (Unix socket + TCP port) in a mkdtemp folder. */
#ifndef CCAP_REDIS_FIXTURE_H
#define CCAP_REDIS_FIXTURE_H

/* Header-only. Starts redis-server with fork/exec in a fresh temporary
 * folder, waits for PING, stops it by pid and removes the folder. Never
 * touches a Redis it did not start. The server gets PR_SET_PDEATHSIG so a
 * crashed test leaves nothing behind. */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <hiredis/hiredis.h>

struct redis_fixture {
    pid_t pid;             /* the redis-server, or 0 */
    int port;              /* its TCP port on 127.0.0.1 */
    char dir[128];         /* the temporary folder */
    char sock[192];        /* DIR/redis.sock */
    char log[192];         /* DIR/redis.log */
    const char *extra[16]; /* extra arguments, NULL-terminated */
};

static inline long long fx_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void fx_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A TCP port free on 127.0.0.1 right now. */
static inline int fx_free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static inline void fx_print_log(const struct redis_fixture *f)
{
    char buf[2048];
    FILE *fp = fopen(f->log, "r");
    size_t n;

    if (!fp)
        return;
    n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    fprintf(stderr, "redis_fixture: %s:\n%s\n", f->log, buf);
}

/* A fresh hiredis connection to the fixture's Unix socket, or NULL. */
static inline redisContext *redis_fixture_cli(const struct redis_fixture *f)
{
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectUnixWithTimeout(f->sock, tv);

    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

static inline int fx_spawn(struct redis_fixture *f)
{
    char port[16];
    const char *argv[40];
    int n = 0;
    pid_t parent = getpid();

    snprintf(port, sizeof port, "%d", f->port);
    argv[n++] = "redis-server";
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--unixsocket";
    argv[n++] = f->sock;
    argv[n++] = "--unixsocketperm";
    argv[n++] = "700";
    argv[n++] = "--dir";
    argv[n++] = f->dir;
    argv[n++] = "--save";
    argv[n++] = "";
    argv[n++] = "--appendonly";
    argv[n++] = "no";
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    argv[n++] = "--logfile";
    argv[n++] = f->log;
    for (int i = 0; f->extra[i] && n < 39; i++)
        argv[n++] = f->extra[i];
    argv[n] = NULL;

    f->pid = fork();
    if (f->pid < 0) {
        f->pid = 0;
        return -1;
    }
    if (f->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        if (close_range(3, ~0U, 0) != 0)
            for (int fd = 3; fd < 1024; fd++)
                close(fd);
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    return 0;
}

/* Waits until the server answers PING (NOAUTH counts as up). 0 or -1. */
static inline int fx_wait_up(struct redis_fixture *f)
{
    long long deadline = fx_now_ms() + 10000;

    while (fx_now_ms() < deadline) {
        int st;
        redisContext *c;

        if (waitpid(f->pid, &st, WNOHANG) == f->pid) {
            f->pid = 0;
            return -1;
        }
        c = redis_fixture_cli(f);
        if (c) {
            redisReply *rep = redisCommand(c, "PING");
            int up = rep && ((rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0) ||
                             (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOAUTH", 6) == 0));

            if (rep)
                freeReplyObject(rep);
            redisFree(c);
            if (up)
                return 0;
        }
        fx_sleep_ms(20);
    }
    return -1;
}

/* Stops the server (SIGTERM, then SIGKILL) but keeps the folder. */
static inline void redis_fixture_kill(struct redis_fixture *f)
{
    long long deadline;
    int st;

    if (f->pid <= 0)
        return;
    kill(f->pid, SIGTERM);
    deadline = fx_now_ms() + 5000;
    while (waitpid(f->pid, &st, WNOHANG) == 0) {
        if (fx_now_ms() > deadline) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, &st, 0);
            break;
        }
        fx_sleep_ms(10);
    }
    f->pid = 0;
}

/* Starts the server again in the same folder, on the same socket and port
 * (after redis_fixture_kill). 0 or -1. */
static inline int redis_fixture_restart(struct redis_fixture *f)
{
    if (fx_spawn(f) != 0 || fx_wait_up(f) != 0) {
        fx_print_log(f);
        return -1;
    }
    return 0;
}

static inline int fx_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Stops the server and removes the folder. */
static inline void redis_fixture_stop(struct redis_fixture *f)
{
    redis_fixture_kill(f);
    if (f->dir[0]) {
        nftw(f->dir, fx_rm, 16, FTW_DEPTH | FTW_PHYS);
        f->dir[0] = '\0';
    }
}

/* Starts a private server; EXTRA is NULL or a NULL-terminated list of more
 * redis-server arguments (e.g. "--requirepass", "pw"). 0, or -1 with a
 * message on stderr. */
static inline int redis_fixture_start(struct redis_fixture *f, const char *const *extra)
{
    const char *tmp = getenv("TMPDIR");

    memset(f, 0, sizeof *f);
    for (int i = 0; extra && extra[i] && i < 15; i++)
        f->extra[i] = extra[i];
    snprintf(f->dir, sizeof f->dir, "%s/ccap-redis.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(f->dir)) {
        fprintf(stderr, "redis_fixture: mkdtemp %s: %s\n", f->dir, strerror(errno));
        f->dir[0] = '\0';
        return -1;
    }
    snprintf(f->sock, sizeof f->sock, "%s/redis.sock", f->dir);
    snprintf(f->log, sizeof f->log, "%s/redis.log", f->dir);

    /* The port may be taken between probing and binding: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        f->port = fx_free_port();
        if (f->port > 0 && fx_spawn(f) == 0 && fx_wait_up(f) == 0)
            return 0;
        redis_fixture_kill(f);
    }
    fprintf(stderr, "redis_fixture: redis-server did not start\n");
    fx_print_log(f);
    redis_fixture_stop(f);
    return -1;
}

/* Runs a command on a fresh fixture connection; returns the reply (caller
 * frees) or NULL. */
static inline redisReply *redis_fixture_cmd(const struct redis_fixture *f, const char *fmt, ...)
{
    redisContext *c = redis_fixture_cli(f);
    redisReply *rep;
    va_list ap;

    if (!c)
        return NULL;
    va_start(ap, fmt);
    rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return rep;
}

/* A client on F's server after FLUSHALL and FUNCTION FLUSH (a test starts
 * from an empty server, scripts run with EVALSHA), or NULL. The caller
 * frees it with redisFree. */
static inline redisContext *redis_fixture_flushed_cli(const struct redis_fixture *f)
{
    redisContext *c = redis_fixture_cli(f);
    redisReply *rep = c ? redisCommand(c, "FUNCTION FLUSH") : NULL;

    if (rep) {
        freeReplyObject(rep); /* an error before Redis 7: nothing to flush */
        rep = redisCommand(c, "FLUSHALL");
    }
    if (!rep) {
        if (c)
            redisFree(c);
        return NULL;
    }
    freeReplyObject(rep);
    return c;
}

/* One server for a whole cmocka group: defines the fixture FX and
 * group_setup / group_teardown, which start and stop it (pass them to
 * cmocka_run_group_tests). */
#define REDIS_FIXTURE_GROUP(FX)                                                                                     \
    static struct redis_fixture FX;                                                                                 \
    static int group_setup(void **state)                                                                            \
    {                                                                                                               \
        (void)state;                                                                                                \
        return redis_fixture_start(&FX, NULL);                                                                      \
    }                                                                                                               \
    static int group_teardown(void **state)                                                                         \
    {                                                                                                               \
        (void)state;                                                                                                \
        redis_fixture_stop(&FX);                                                                                    \
        return 0;                                                                                                   \
    }

#endif
