/* test_redis.c -- the Redis client against a private redis-server: sockets, timeouts, fds, fork. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis.h"
#include "redis_int.h"
#include "redis_fixture.h"

REDIS_FIXTURE_GROUP(fx)

static struct ccap_redis_conf unix_conf(void)
{
    struct ccap_redis_conf c = { 0 };

    c.socket = fx.sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 2000;
    return c;
}

static struct ccap_redis_conf tcp_conf(const char *host, int port, int connect_ms, int command_ms)
{
    struct ccap_redis_conf c = { 0 };

    c.host = (char *)host;
    c.port = port;
    c.connect_timeout_ms = connect_ms;
    c.command_timeout_ms = command_ms;
    return c;
}

/* Runs a command given as words; returns the ccap result, reply in *OUT (or freed). */
static int cmd(struct ccap_redis *r, redisReply **out, int argc, ...)
{
    const char *argv[16];
    redisReply *rep = NULL;
    va_list ap;
    int rc;

    va_start(ap, argc);
    for (int i = 0; i < argc && i < 16; i++)
        argv[i] = va_arg(ap, const char *);
    va_end(ap);
    rc = ccap_redis_command(r, argc, argv, &rep);
    if (out)
        *out = rep;
    else if (rep)
        freeReplyObject(rep);
    return rc;
}

/* PING through R: asserts PONG. */
static void assert_ping(struct ccap_redis *r)
{
    redisReply *rep;

    assert_int_equal(cmd(r, &rep, 1, "PING"), 0);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    assert_string_equal(rep->str, "PONG");
    freeReplyObject(rep);
}

/* The descriptor is high, close-on-exec, blocking, and a socket of FAMILY. */
static void assert_fd_shape(int fd, int family)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;

    assert_true(fd >= ccap_redis_fd_base());
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_false(fcntl(fd, F_GETFL) & O_NONBLOCK);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
    assert_int_equal(ss.ss_family, family);
}

/* The SHA1s and function names computed at build time are those Redis
 * gives the embedded texts and the embedded library. */
static void test_sha1_and_scripts(void **state)
{
    static const char *const names[] = { "acquire", "release", "renew", "timeout", "fallback", "failover" };
    char want[64];
    (void)state;

    for (int i = 0; i < CCAP_SCRIPT_COUNT; i++) {
        snprintf(want, sizeof want, "conncap_%s_%s", names[i], ccap_function_version());
        assert_string_equal(ccap_script_function(i), want);
        snprintf(want, sizeof want, "'%s'", ccap_script_function(i));
        assert_non_null(strstr(ccap_function_library(), want));
    }
    assert_null(ccap_script_function(CCAP_SCRIPT_COUNT));
    assert_null(ccap_script_source(CCAP_SCRIPT_COUNT));
    /* Redis names each script exactly as we do. */
    for (int i = 0; i < CCAP_SCRIPT_COUNT; i++) {
        const char *src = ccap_script_source(i);
        redisReply *rep;

        assert_non_null(src);
        assert_int_equal(strlen(ccap_script_sha(i)), 40);
        rep = redis_fixture_cmd(&fx, "SCRIPT LOAD %s", src);
        assert_non_null(rep);
        assert_int_equal(rep->type, REDIS_REPLY_STRING);
        assert_string_equal(rep->str, ccap_script_sha(i));
        freeReplyObject(rep);
    }
    assert_null(ccap_script_sha(CCAP_SCRIPT_COUNT));
}

static void test_unix_connect(void **state)
{
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r = ccap_redis_new(&c);
    redisReply *rep;
    (void)state;

    assert_non_null(r);
    assert_int_equal(ccap_redis_fd(r), -1); /* no I/O in new */
    assert_int_equal(ccap_redis_connect(r), 0);
    assert_fd_shape(ccap_redis_fd(r), AF_UNIX);
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:unix", "v1"), 0);
    assert_int_equal(cmd(r, &rep, 2, "GET", "t:unix"), 0);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_string_equal(rep->str, "v1");
    freeReplyObject(rep);
    assert_string_equal(ccap_redis_errstr(r), "");
    ccap_redis_free(r);
}

static void test_tcp_connect(void **state)
{
    const char *hosts[] = { "127.0.0.1", "localhost" }; /* numeric, then resolved */
    (void)state;

    for (size_t i = 0; i < sizeof hosts / sizeof *hosts; i++) {
        struct ccap_redis_conf c = tcp_conf(hosts[i], fx.port, 1000, 2000);
        struct ccap_redis *r = ccap_redis_new(&c);
        int fd;

        assert_non_null(r);
        assert_int_equal(ccap_redis_connect(r), 0);
        fd = ccap_redis_fd(r);
        assert_fd_shape(fd, AF_INET);
        assert_ping(r);
        assert_int_equal(ccap_redis_fd(r), fd); /* same connection reused */
        ccap_redis_free(r);
        /* Freed: the descriptor is closed. */
        assert_int_equal(fcntl(fd, F_GETFD), -1);
    }
}

static void test_error_reply(void **state)
{
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r = ccap_redis_new(&c);
    redisReply *rep = (redisReply *)1;
    int fd;
    (void)state;

    assert_int_equal(ccap_redis_connect(r), 0);
    fd = ccap_redis_fd(r);
    assert_int_equal(cmd(r, &rep, 1, "NOSUCHCOMMAND"), -EPROTO);
    assert_null(rep);
    assert_non_null(strstr(ccap_redis_errstr(r), "unknown command"));
    /* A Redis error reply leaves the connection up. */
    assert_int_equal(ccap_redis_fd(r), fd);
    assert_ping(r);
    ccap_redis_free(r);
}

/* A TCP listener on 127.0.0.1 that never accepts; its port in *PORT. */
static int silent_listener(int backlog, int *port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, backlog), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static void test_command_timeout(void **state)
{
    const int timeout = 300;
    int port, lfd = silent_listener(16, &port);
    struct ccap_redis_conf c = tcp_conf("127.0.0.1", port, 1000, timeout);
    struct ccap_redis *r = ccap_redis_new(&c);
    long long t0, dt;
    (void)state;

    /* The kernel completes the handshake; nobody ever answers. */
    for (int round = 0; round < 2; round++) {
        t0 = fx_now_ms();
        assert_int_equal(cmd(r, NULL, 1, "PING"), -ETIMEDOUT);
        dt = fx_now_ms() - t0;
        assert_true(dt >= timeout / 2);
        assert_true(dt <= 3 * timeout);
        assert_non_null(strstr(ccap_redis_errstr(r), "timed out"));
        /* The connection was dropped, and is made again on the next call. */
        assert_int_equal(ccap_redis_fd(r), -1);
    }
    ccap_redis_free(r);
    close(lfd);
}

static void test_connect_refused(void **state)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct ccap_redis_conf c;
    struct ccap_redis *r;
    char path[300];
    long long t0;
    (void)state;

    /* Bound but not listening: the port stays ours and refuses. */
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    c = tcp_conf("127.0.0.1", ntohs(a.sin_port), 3000, 3000);
    r = ccap_redis_new(&c);
    t0 = fx_now_ms();
    assert_int_equal(ccap_redis_connect(r), -ECONNREFUSED);
    assert_true(fx_now_ms() - t0 < 1000);
    assert_int_equal(ccap_redis_fd(r), -1);
    assert_true(ccap_redis_errstr(r)[0] != '\0');
    assert_int_equal(cmd(r, NULL, 1, "PING"), -ECONNREFUSED);
    ccap_redis_free(r);
    close(fd);

    /* A Unix socket path with nobody there. */
    snprintf(path, sizeof path, "%s/nobody.sock", fx.dir);
    c = unix_conf();
    c.socket = path;
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), -ECONNREFUSED);
    ccap_redis_free(r);
}

static void test_connect_timeout(void **state)
{
    const int timeout = 300;
    int port, lfd = silent_listener(0, &port), fill[8], nfill = 0;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    struct ccap_redis_conf c;
    struct ccap_redis *r;
    long long t0, dt;
    (void)state;

    /* Fill the accept queue until a handshake no longer completes: then
     * the kernel drops further SYNs and a connect hangs. */
    a.sin_port = htons(port);
    while (nfill < 8) {
        struct pollfd p;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

        assert_true(s >= 0);
        fill[nfill++] = s;
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0)
            continue;
        assert_int_equal(errno, EINPROGRESS);
        p.fd = s;
        p.events = POLLOUT;
        if (poll(&p, 1, 200) == 0)
            break;
    }
    assert_true(nfill < 8);

    c = tcp_conf("127.0.0.1", port, timeout, 1000);
    r = ccap_redis_new(&c);
    t0 = fx_now_ms();
    assert_int_equal(ccap_redis_connect(r), -ETIMEDOUT);
    dt = fx_now_ms() - t0;
    assert_true(dt >= timeout / 2);
    assert_true(dt <= 3 * timeout);
    assert_int_equal(ccap_redis_fd(r), -1);
    ccap_redis_free(r);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    close(lfd);
}

/* The program closes our descriptor and opens a file on the same number:
 * the client must notice, leave that file alone, and use a new socket. */
static void test_program_replaced_fd(void **state)
{
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r = ccap_redis_new(&c);
    char path[300];
    struct stat before, after;
    int fd, ffd, nfd;
    (void)state;

    assert_int_equal(ccap_redis_connect(r), 0);
    fd = ccap_redis_fd(r);
    snprintf(path, sizeof path, "%s/victim", fx.dir);
    ffd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(ffd >= 0);
    assert_int_equal(close(fd), 0);
    assert_int_equal(dup2(ffd, fd), fd);
    close(ffd);
    assert_int_equal(fstat(fd, &before), 0);

    assert_int_equal(cmd(r, NULL, 3, "SET", "t:replaced", "ok"), 0);
    nfd = ccap_redis_fd(r);
    assert_true(nfd >= 0);
    assert_int_not_equal(nfd, fd);
    assert_fd_shape(nfd, AF_UNIX);

    /* The program's file: still open, same file, never written to. */
    assert_int_equal(fstat(fd, &after), 0);
    assert_true(after.st_ino == before.st_ino && after.st_dev == before.st_dev);
    assert_int_equal(after.st_size, 0);
    assert_int_equal(lseek(fd, 0, SEEK_CUR), 0);

    /* And freeing the client does not close it either. */
    ccap_redis_free(r);
    assert_true(fcntl(fd, F_GETFD) >= 0);
    close(fd);

    /* /dev/null on the number, as a program's dup2 would leave it. */
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), 0);
    fd = ccap_redis_fd(r);
    ffd = open("/dev/null", O_WRONLY);
    assert_int_equal(dup2(ffd, fd), fd); /* dup2 closes our socket */
    close(ffd);
    assert_ping(r);
    assert_int_not_equal(ccap_redis_fd(r), fd);
    assert_true(fcntl(fd, F_GETFD) >= 0);
    ccap_redis_free(r);
    assert_true(fcntl(fd, F_GETFD) >= 0);
    close(fd);

    /* Replaced, then the client is freed (or forgotten) with no call in
     * between: the program's file stays open. */
    for (int forget = 0; forget < 2; forget++) {
        r = ccap_redis_new(&c);
        assert_int_equal(ccap_redis_connect(r), 0);
        fd = ccap_redis_fd(r);
        ffd = open("/dev/null", O_WRONLY);
        assert_int_equal(dup2(ffd, fd), fd);
        close(ffd);
        if (forget)
            ccap_redis_forget(r);
        ccap_redis_free(r);
        assert_true(fcntl(fd, F_GETFD) >= 0);
        close(fd);
    }

    /* Closed and left closed. */
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), 0);
    close(ccap_redis_fd(r));
    assert_ping(r);
    ccap_redis_free(r);
}

/* A child after fork: with ccap_redis_forget (the atfork path) and without
 * it (noticed by pid). Child codes: 0 ok, else the failing step. */
static int child_run(struct ccap_redis *r, int call_forget, const char *key)
{
    int old = ccap_redis_fd(r);
    redisReply *rep = NULL;
    struct stat inherited, now;

    if (fstat(old, &inherited) != 0)
        return 1;

    if (call_forget) {
        ccap_redis_forget(r);
        if (ccap_redis_fd(r) != -1)
            return 2;
        if (fcntl(old, F_GETFD) != -1) /* our copy was closed */
            return 3;
    }
    if (cmd(r, &rep, 3, "SET", key, "child") != 0)
        return 4;
    freeReplyObject(rep);
    /* A socket of its own (the number may well be the same). */
    if (ccap_redis_fd(r) < 0 || fstat(ccap_redis_fd(r), &now) != 0 || now.st_ino == inherited.st_ino)
        return 5;
    ccap_redis_free(r);
    return 0;
}

static void test_fork(void **state)
{
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r = ccap_redis_new(&c);
    (void)state;

    for (int forget = 1; forget >= 0; forget--) {
        const char *key = forget ? "t:fork:forget" : "t:fork:pid";
        redisReply *rep;
        int fd, st;
        pid_t pid;

        assert_ping(r);
        fd = ccap_redis_fd(r);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(child_run(r, forget, key));
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);

        /* The parent's connection is untouched and in step. */
        assert_int_equal(ccap_redis_fd(r), fd);
        assert_int_equal(cmd(r, &rep, 2, "ECHO", "parent"), 0);
        assert_string_equal(rep->str, "parent");
        freeReplyObject(rep);
        assert_int_equal(ccap_redis_fd(r), fd);
        assert_int_equal(cmd(r, &rep, 2, "GET", key), 0);
        assert_int_equal(rep->type, REDIS_REPLY_STRING);
        assert_string_equal(rep->str, "child");
        freeReplyObject(rep);
    }
    ccap_redis_free(r);
}

/* The server closed the connection: our write must not raise SIGPIPE in
 * the program (whose default action would kill it). */
static void test_no_sigpipe(void **state)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r;
    sigset_t before, after, pend;
    char path[300];
    int lfd, cfd, rc;
    (void)state;

    snprintf(path, sizeof path, "%s/closer.sock", fx.dir);
    assert_true(strlen(path) < sizeof sun.sun_path);
    memcpy(sun.sun_path, path, strlen(path) + 1);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sun, sizeof sun), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_ptr_equal(signal(SIGPIPE, SIG_DFL), SIG_DFL);

    c.socket = path;
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), 0);
    cfd = accept(lfd, NULL, NULL);
    assert_true(cfd >= 0);
    close(cfd);
    close(lfd); /* the retry on a new connection (after EOF) finds nobody */

    assert_int_equal(pthread_sigmask(SIG_SETMASK, NULL, &before), 0);
    rc = cmd(r, NULL, 1, "PING"); /* still alive here */
    assert_true(rc == -EPIPE || rc == -EIO || rc == -ECONNREFUSED);
    assert_int_equal(ccap_redis_fd(r), -1);
    assert_int_equal(pthread_sigmask(SIG_SETMASK, NULL, &after), 0);
    assert_int_equal(sigismember(&after, SIGPIPE), sigismember(&before, SIGPIPE));
    assert_int_equal(sigpending(&pend), 0);
    assert_false(sigismember(&pend, SIGPIPE));

    ccap_redis_free(r);
}

static void test_select_db(void **state)
{
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r;
    redisContext *cli;
    redisReply *rep;
    (void)state;

    c.db = 5;
    r = ccap_redis_new(&c);
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:db", "five"), 0);
    ccap_redis_free(r);

    cli = redis_fixture_cli(&fx);
    assert_non_null(cli);
    rep = redisCommand(cli, "EXISTS t:db");
    assert_int_equal(rep->integer, 0); /* not in db 0 */
    freeReplyObject(rep);
    freeReplyObject(redisCommand(cli, "SELECT 5"));
    rep = redisCommand(cli, "GET t:db");
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_string_equal(rep->str, "five");
    freeReplyObject(rep);
    redisFree(cli);

    /* A database that does not exist fails the connect. */
    c.db = 100000;
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), -EIO);
    assert_int_equal(ccap_redis_fd(r), -1);
    ccap_redis_free(r);
}

static void test_auth(void **state)
{
    const char *extra[] = { "--requirepass", "s3cret-pw", NULL };
    struct redis_fixture afx;
    struct ccap_redis_conf c = { 0 };
    struct ccap_redis *r;
    redisContext *cli;
    redisReply *rep;
    (void)state;

    assert_int_equal(redis_fixture_start(&afx, extra), 0);
    c.socket = afx.sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 2000;

    /* No password: commands fail with the server's NOAUTH (credentials wanted). */
    r = ccap_redis_new(&c);
    assert_int_equal(cmd(r, NULL, 1, "PING"), -EACCES);
    assert_non_null(strstr(ccap_redis_errstr(r), "NOAUTH"));
    ccap_redis_free(r);

    /* Wrong password: -EACCES, and the text does not contain it. */
    c.password = "wrong-pw-xyz";
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), -EACCES);
    assert_null(strstr(ccap_redis_errstr(r), "wrong-pw-xyz"));
    assert_int_equal(ccap_redis_fd(r), -1);
    ccap_redis_free(r);

    c.password = "s3cret-pw";
    r = ccap_redis_new(&c);
    assert_ping(r);
    ccap_redis_free(r);

    /* ACL user and password. */
    cli = redis_fixture_cli(&afx);
    assert_non_null(cli);
    freeReplyObject(redisCommand(cli, "AUTH s3cret-pw"));
    rep = redisCommand(cli, "ACL SETUSER alice on >alice-pw ~* +@all");
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    redisFree(cli);

    c.username = "alice";
    c.password = "alice-pw";
    r = ccap_redis_new(&c);
    assert_ping(r);
    assert_int_equal(cmd(r, &rep, 2, "ACL", "WHOAMI"), 0);
    assert_string_equal(rep->str, "alice");
    freeReplyObject(rep);
    ccap_redis_free(r);
    c.password = "s3cret-pw"; /* the default user's, not alice's */
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), -EACCES);
    ccap_redis_free(r);

    redis_fixture_stop(&afx);
}

static void test_server_restart(void **state)
{
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r = ccap_redis_new(&c);
    int rc;
    (void)state;

    assert_ping(r);
    redis_fixture_kill(&fx);
    /* The server is gone: a transport error, not a hang or a crash. */
    rc = cmd(r, NULL, 1, "PING");
    assert_true(rc == -EPIPE || rc == -ECONNREFUSED || rc == -EIO);
    assert_int_equal(ccap_redis_fd(r), -1);
    assert_int_equal(cmd(r, NULL, 1, "PING"), -ECONNREFUSED);

    assert_int_equal(redis_fixture_restart(&fx), 0);
    assert_ping(r);
    ccap_redis_free(r);
}

/* A restart while our connection is idle costs no failed call: the closed
 * connection is noticed and the command sent again on a new one. So does a
 * server that drops the client (CLIENT KILL, an idle timeout). */
static void test_stale_connection_retried(void **state)
{
    struct ccap_redis_conf c = unix_conf();
    struct ccap_redis *r = ccap_redis_new(&c);
    redisReply *rep;
    (void)state;

    assert_ping(r);
    redis_fixture_kill(&fx);
    assert_int_equal(redis_fixture_restart(&fx), 0);
    assert_ping(r);

    assert_int_equal(cmd(r, &rep, 2, "CLIENT", "ID"), 0);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    freeReplyObject(redis_fixture_cmd(&fx, "CLIENT KILL ID %lld", rep->integer));
    freeReplyObject(rep);
    assert_ping(r);
    assert_true(ccap_redis_fd(r) >= 0);
    ccap_redis_free(r);
}

/* Hash slots as the Redis Cluster specification computes them (the
 * expected values are CLUSTER KEYSLOT's answers on Redis 7). */
static void test_key_slot(void **state)
{
    (void)state;
    assert_int_equal(ccap_redis_key_slot("123456789", 9), 0x31C3); /* the spec's CRC16 check value */
    assert_int_equal(ccap_redis_key_slot("foo", 3), 12182);
    assert_int_equal(ccap_redis_key_slot("bar", 3), 5061);
    assert_int_equal(ccap_redis_key_slot("conncap:{api}:holders", 21), 6541);
    assert_int_equal(ccap_redis_key_slot("conncap:{api}:limit", 19), 6541);
    assert_int_equal(ccap_redis_key_slot("{api}", 5), ccap_redis_key_slot("api", 3));
    assert_int_equal(ccap_redis_key_slot("{user1000}.following", 20), ccap_redis_key_slot("user1000", 8));
    /* an empty tag hashes the whole key; only the first tag counts */
    assert_int_not_equal(ccap_redis_key_slot("foo{}{bar}", 10), ccap_redis_key_slot("bar", 3));
    assert_int_equal(ccap_redis_key_slot("foo{{bar}}zap", 13), ccap_redis_key_slot("{bar", 4));
    assert_int_equal(ccap_redis_key_slot("foo{bar}{zap}", 13), ccap_redis_key_slot("bar", 3));
    assert_int_equal(ccap_redis_key_slot("{}", 2), 15257); /* whole key, as CLUSTER KEYSLOT "{}" */
    for (int i = 0; i < 1000; i++) {
        char k[32];
        int n = snprintf(k, sizeof k, "k%d", i);
        int s = ccap_redis_key_slot(k, (size_t)n);

        assert_true(s >= 0 && s < 16384);
    }
}

/* "host:port" and "[v6]:port", as in the sentinels and cluster lists. */
static void test_hostport_parse(void **state)
{
    char host[64];
    int port = 0;
    (void)state;

    assert_int_equal(ccap_hostport_parse("10.0.0.1:26379", host, sizeof host, &port), 0);
    assert_string_equal(host, "10.0.0.1");
    assert_int_equal(port, 26379);
    assert_int_equal(ccap_hostport_parse("[::1]:6379", host, sizeof host, &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 6379);
    assert_int_equal(ccap_hostport_parse("redis.example.com:1", host, sizeof host, &port), 0);
    assert_string_equal(host, "redis.example.com");
    assert_int_equal(port, 1);
    assert_int_equal(ccap_hostport_parse("host", host, sizeof host, &port), -EINVAL);
    assert_int_equal(ccap_hostport_parse("host:0", host, sizeof host, &port), -EINVAL);
    assert_int_equal(ccap_hostport_parse("host:65536", host, sizeof host, &port), -EINVAL);
    assert_int_equal(ccap_hostport_parse("host:12x", host, sizeof host, &port), -EINVAL);
    assert_int_equal(ccap_hostport_parse("host:", host, sizeof host, &port), -EINVAL);
    assert_int_equal(ccap_hostport_parse("[::1]6379", host, sizeof host, &port), -EINVAL);
    assert_int_equal(ccap_hostport_parse("1.2.3.4:5", host, 4, &port), -EINVAL); /* too long for HOST */
    assert_int_equal(ccap_hostport_parse(NULL, host, sizeof host, &port), -EINVAL);
}

/* Our RESP formatter writes the bytes hiredis's does, for empty,
 * binary-looking, long (a 4-digit length, past the 2 KiB stack buffer) and
 * many arguments; ccap_fmt_ll prints what printf's %lld does. */
static void test_resp_format(void **state)
{
    static char big[5000];
    const char *argv[40];
    char numbers[6][24];
    int argc = 0;
    (void)state;

    memset(big, 'x', sizeof big - 1);
    argv[argc++] = "EVALSHA";
    argv[argc++] = "";
    argv[argc++] = "a b\r\n{c}:d";
    argv[argc++] = big;
    for (int i = 0; i < 30; i++)
        argv[argc++] = i % 2 ? "9" : "0123456789";
    for (int n = 1; n <= argc; n += n < 5 ? 1 : 17) {
        size_t lens[40], size = ccap_resp_size(n, argv), len;
        char *ours = malloc(size), *theirs = NULL;
        long long tlen;

        assert_non_null(ours);
        for (int i = 0; i < n; i++)
            lens[i] = strlen(argv[i]);
        tlen = redisFormatCommandArgv(&theirs, n, argv, lens);
        len = ccap_resp_format(ours, n, argv);
        assert_true(len <= size);
        assert_int_equal((long long)len, tlen);
        assert_memory_equal(ours, theirs, len);
        redisFreeCommand(theirs);
        free(ours);
    }

    const long long v[6] = { 0, 7, -1, 1234567890123LL, -9223372036854775807LL - 1, 9223372036854775807LL };
    for (int i = 0; i < 6; i++) {
        char want[24];

        snprintf(want, sizeof want, "%lld", v[i]);
        assert_string_equal(ccap_fmt_ll(numbers[i], v[i]), want);
    }
}

int main(void)
{
    /* Core registers no fork handler: a process that forks with live
     * connections registers ccap_redis_fork_child, as the shim's runtime does. */
    pthread_atfork(NULL, NULL, ccap_redis_fork_child);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha1_and_scripts),
        cmocka_unit_test(test_unix_connect),
        cmocka_unit_test(test_tcp_connect),
        cmocka_unit_test(test_error_reply),
        cmocka_unit_test(test_command_timeout),
        cmocka_unit_test(test_connect_refused),
        cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_program_replaced_fd),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_no_sigpipe),
        cmocka_unit_test(test_select_db),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_server_restart),
        cmocka_unit_test(test_stale_connection_retried),
        cmocka_unit_test(test_key_slot),
        cmocka_unit_test(test_hostport_parse),
        cmocka_unit_test(test_resp_format),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
