/* test_redis_sentinel.c -- the client's Sentinel logic against fake sentinels and two real redis-servers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redis.h"
#include "redis_fixture.h"

/* A fake sentinel: answers SENTINEL get-master-addr-by-name with
 * 127.0.0.1:<port> (nil when port is 0), counts the questions, and with
 * need_auth answers NOAUTH until it sees an AUTH. */
struct fake_sentinel {
    int lfd, port;
    atomic_int answer_port, questions, need_auth;
    pthread_t thr;
    atomic_bool stop;
};

static void serve_conn(struct fake_sentinel *fs, int c)
{
    char buf[4096];
    bool authed = false;

    for (;;) {
        struct pollfd p = { .fd = c, .events = POLLIN };
        ssize_t n;
        char out[128];

        if (poll(&p, 1, 2000) <= 0)
            break;
        n = read(c, buf, sizeof buf - 1);
        if (n <= 0)
            break;
        buf[n] = '\0';
        if (strstr(buf, "AUTH")) {
            authed = true;
            if (write(c, "+OK\r\n", 5) < 0)
                break;
            continue;
        }
        if (!strstr(buf, "get-master-addr-by-name")) {
            if (write(c, "-ERR unknown\r\n", 14) < 0)
                break;
            continue;
        }
        if (atomic_load(&fs->need_auth) && !authed) {
            if (write(c, "-NOAUTH Authentication required.\r\n", 34) < 0)
                break;
            continue;
        }
        atomic_fetch_add(&fs->questions, 1);
        int port = atomic_load(&fs->answer_port);
        if (port == 0) {
            snprintf(out, sizeof out, "*-1\r\n");
        } else {
            char ps[16];
            snprintf(ps, sizeof ps, "%d", port);
            snprintf(out, sizeof out, "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n", strlen(ps), ps);
        }
        if (write(c, out, strlen(out)) < 0)
            break;
    }
    close(c);
}

static void *fake_main(void *arg)
{
    struct fake_sentinel *fs = arg;

    while (!atomic_load(&fs->stop)) {
        struct pollfd p = { .fd = fs->lfd, .events = POLLIN };
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept(fs->lfd, NULL, NULL);
        if (c >= 0)
            serve_conn(fs, c);
    }
    return NULL;
}

static void fake_start(struct fake_sentinel *fs, int answer_port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;

    memset(fs, 0, sizeof *fs);
    atomic_store(&fs->answer_port, answer_port);
    fs->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fs->lfd >= 0);
    assert_int_equal(bind(fs->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fs->lfd, 16), 0);
    assert_int_equal(getsockname(fs->lfd, (struct sockaddr *)&a, &len), 0);
    fs->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&fs->thr, NULL, fake_main, fs), 0);
}

static void fake_stop(struct fake_sentinel *fs)
{
    atomic_store(&fs->stop, true);
    pthread_join(fs->thr, NULL);
    close(fs->lfd);
}

static struct redis_fixture A, B;

static int group_setup(void **state)
{
    (void)state;
    if (redis_fixture_start(&A, NULL) < 0)
        return -1;
    return redis_fixture_start(&B, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    redis_fixture_stop(&A);
    redis_fixture_stop(&B);
    return 0;
}

/* A config naming the sentinels at PORTS (N of them). */
static struct ccap_redis_conf sentinel_conf(char **list, const int *ports, size_t n)
{
    struct ccap_redis_conf c = { 0 };

    for (size_t i = 0; i < n; i++) {
        list[i] = malloc(32);
        snprintf(list[i], 32, "127.0.0.1:%d", ports[i]);
    }
    c.sentinels = list;
    c.n_sentinels = n;
    c.master = "mymaster";
    c.connect_timeout_ms = 500;
    c.command_timeout_ms = 1000;
    return c;
}

static void free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(list[i]);
}

static int cmd(struct ccap_redis *r, redisReply **out, int argc, ...)
{
    const char *argv[8];
    redisReply *rep = NULL;
    va_list ap;
    int rc;

    va_start(ap, argc);
    for (int i = 0; i < argc && i < 8; i++)
        argv[i] = va_arg(ap, const char *);
    va_end(ap);
    rc = ccap_redis_command(r, argc, argv, &rep);
    if (out)
        *out = rep;
    else if (rep)
        freeReplyObject(rep);
    return rc;
}

static int server_port_of(struct ccap_redis *r)
{
    redisReply *rep;
    int port = -1;

    if (cmd(r, &rep, 3, "CONFIG", "GET", "port") == 0 && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        port = atoi(rep->element[1]->str);
    if (rep)
        freeReplyObject(rep);
    return port;
}

/* The master the sentinels name is used; a dead sentinel is skipped; the
 * one that answered is asked first next time. */
static void test_finds_master(void **state)
{
    struct fake_sentinel s2;
    int dead = fx_free_port();
    char *list[2];
    (void)state;

    fake_start(&s2, A.port);
    int ports[2] = { dead, s2.port };
    struct ccap_redis_conf c = sentinel_conf(list, ports, 2);
    struct ccap_redis *r = ccap_redis_new(&c);

    assert_int_equal(ccap_redis_connect(r), 0);
    assert_int_equal(server_port_of(r), A.port);
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:s", "1"), 0);
    assert_int_equal(atomic_load(&s2.questions), 1);
    ccap_redis_forget(r); /* the next call reconnects: asks again, the good sentinel first */
    assert_int_equal(server_port_of(r), A.port);
    assert_int_equal(atomic_load(&s2.questions), 2);
    ccap_redis_free(r);
    free_list(list, 2);
    fake_stop(&s2);
}

/* READONLY (the master became a replica): the sentinels are asked again at
 * once and the command runs on the new master, invisibly to the caller. */
static void test_readonly_asks_again(void **state)
{
    struct fake_sentinel s;
    char *list[1], bport[16];
    redisReply *rep;
    (void)state;

    fake_start(&s, A.port);
    struct ccap_redis_conf c = sentinel_conf(list, &s.port, 1);
    struct ccap_redis *r = ccap_redis_new(&c);

    assert_int_equal(cmd(r, NULL, 3, "SET", "t:ro", "1"), 0);
    assert_int_equal(server_port_of(r), A.port);
    /* a failover the client did not see: A follows B, the sentinels say B */
    snprintf(bport, sizeof bport, "%d", B.port);
    rep = redis_fixture_cmd(&A, "REPLICAOF 127.0.0.1 %s", bport);
    assert_non_null(rep);
    freeReplyObject(rep);
    atomic_store(&s.answer_port, B.port);
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:ro", "2"), 0);
    assert_int_equal(server_port_of(r), B.port);
    assert_int_equal(atomic_load(&s.questions), 2);

    /* the sentinels still name the replica: ROLE catches it, -EAGAIN */
    atomic_store(&s.answer_port, A.port);
    ccap_redis_forget(r);
    assert_int_equal(cmd(r, NULL, 1, "PING"), -EAGAIN);
    assert_non_null(strstr(ccap_redis_errstr(r), "is a slave"));
    assert_int_equal(ccap_redis_fd(r), -1);

    rep = redis_fixture_cmd(&A, "REPLICAOF NO ONE");
    freeReplyObject(rep);
    ccap_redis_free(r);
    free_list(list, 1);
    fake_stop(&s);
}

/* A failover counts in the epoch (the first master found does not); a
 * call that expects the old epoch finds the new master and returns
 * -ESTALE without running its command there; expecting the new one, it
 * runs. */
static void test_failover_epoch(void **state)
{
    struct fake_sentinel s;
    char *list[1], bport[16], want[32];
    redisReply *rep;
    (void)state;

    fake_start(&s, A.port);
    struct ccap_redis_conf c = sentinel_conf(list, &s.port, 1);
    struct ccap_redis *r = ccap_redis_new(&c);

    assert_int_equal(cmd(r, NULL, 3, "DEL", "t:ep", "t:ep2"), 0);
    assert_int_equal(ccap_redis_key_epoch(r, "t:ep"), 0);
    snprintf(want, sizeof want, "127.0.0.1:%d", A.port);
    assert_string_equal(ccap_redis_key_server(r, "t:ep"), want);
    ccap_redis_expect_epoch(r, 0); /* no failover: runs */
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:ep", "a"), 0);

    snprintf(bport, sizeof bport, "%d", B.port);
    rep = redis_fixture_cmd(&A, "REPLICAOF 127.0.0.1 %s", bport);
    freeReplyObject(rep);
    atomic_store(&s.answer_port, B.port);
    ccap_redis_expect_epoch(r, 0);
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:ep2", "b"), -ESTALE); /* READONLY, asked again, B */
    assert_non_null(strstr(ccap_redis_errstr(r), "failover"));
    assert_int_equal(ccap_redis_key_epoch(r, "t:ep2"), 1);
    snprintf(want, sizeof want, "127.0.0.1:%d", B.port);
    assert_string_equal(ccap_redis_key_server(r, "t:ep2"), want);
    rep = redis_fixture_cmd(&B, "EXISTS t:ep2");
    assert_int_equal(rep->integer, 0); /* not run */
    freeReplyObject(rep);
    ccap_redis_expect_epoch(r, 1);
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:ep2", "b"), 0);
    assert_int_equal(server_port_of(r), B.port);
    assert_int_equal(cmd(r, NULL, 3, "SET", "t:ep2", "c"), 0); /* the expectation was for one call */

    rep = redis_fixture_cmd(&A, "REPLICAOF NO ONE");
    freeReplyObject(rep);
    ccap_redis_free(r);
    free_list(list, 1);
    fake_stop(&s);
}

/* No sentinel knows the master, or none answers: -ECONNREFUSED with a text
 * that says so; a sentinel that wants AUTH gets the configured password. */
static void test_sentinel_failures(void **state)
{
    struct fake_sentinel s;
    char *list[2];
    int dead[2] = { fx_free_port(), fx_free_port() };
    (void)state;

    struct ccap_redis_conf c = sentinel_conf(list, dead, 2);
    struct ccap_redis *r = ccap_redis_new(&c);
    long long t0 = fx_now_ms();
    assert_int_equal(ccap_redis_connect(r), -ECONNREFUSED);
    assert_true(fx_now_ms() - t0 < 1500);
    assert_non_null(strstr(ccap_redis_errstr(r), "no sentinel answered"));
    ccap_redis_free(r);
    free_list(list, 2);

    fake_start(&s, 0);
    c = sentinel_conf(list, &s.port, 1);
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), -ECONNREFUSED);
    assert_non_null(strstr(ccap_redis_errstr(r), "does not know master \"mymaster\""));
    ccap_redis_free(r);

    atomic_store(&s.answer_port, A.port);
    atomic_store(&s.need_auth, 1);
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), -ECONNREFUSED); /* no password configured */
    ccap_redis_free(r);
    free_list(list, 1);
    c = sentinel_conf(list, &s.port, 1);
    c.password = "pw"; /* A has no password: AUTH there fails, the sentinel accepts it */
    r = ccap_redis_new(&c);
    assert_int_equal(ccap_redis_connect(r), -EACCES);
    assert_true(atomic_load(&s.questions) >= 1);
    assert_null(strstr(ccap_redis_errstr(r), "\"pw\""));
    ccap_redis_free(r);
    free_list(list, 1);
    fake_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finds_master),
        cmocka_unit_test(test_readonly_asks_again),
        cmocka_unit_test(test_failover_epoch),
        cmocka_unit_test(test_sentinel_failures),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
