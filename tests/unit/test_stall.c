/* test_stall.c -- the core's connects around a Redis stall (SIGSTOP of the fixture): no ghost holder, no dead ticket, no live permit dropped. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime.h"
#include "permit.h"
#include "redis_fixture.h"

#define PFX "ccapstall:"

REDIS_FIXTURE_GROUP(fx)
static char conf_path[256];
static bool stopped;

/* "g": fails at once while Redis is down (local_limit 0, no wait); "s":
 * one permit, waiters queue; "k": waits locally for Redis; "l": granted
 * locally. Leases 60 s (a ghost would outlive every bound here) but for
 * "s": its 8 s cap the circuit's backoff at 2 s. */
static int write_conf(void)
{
    FILE *f;

    snprintf(conf_path, sizeof conf_path, "%s/stall.conf", fx.dir);
    if (!(f = fopen(conf_path, "w")))
        return -1;
    fprintf(f,
            "redis = { socket = \"%s\"; connect_timeout_ms = 300; command_timeout_ms = 300; key_prefix = \"" PFX
            "\"; };\n"
            "semaphores = (\n"
            "  { name = \"g\"; limit = 5; local_limit = 0; lease_ms = 60000; wait_timeout_ms = 0; },\n"
            "  { name = \"s\"; limit = 1; local_limit = 0; lease_ms = 8000; wait_timeout_ms = 3000; },\n"
            "  { name = \"k\"; limit = 1; local_limit = 0; lease_ms = 60000; wait_timeout_ms = 6000; },\n"
            "  { name = \"l\"; limit = 5; local_limit = 5; lease_ms = 60000; wait_timeout_ms = 0; } );\n"
            "rules = ( { semaphore = \"g\"; match = ( \"127.0.0.1:1001\" ); },\n"
            "          { semaphore = \"s\"; match = ( \"127.0.0.1:1002\" ); },\n"
            "          { semaphore = \"k\"; match = ( \"127.0.0.1:1003\" ); },\n"
            "          { semaphore = \"l\"; match = ( \"127.0.0.1:1004\" ); } );\n"
            "on_redis_down = \"local\";\non_timeout = \"ETIMEDOUT\";\nlog_level = \"error\";\n",
            fx.sock);
    return fclose(f) == 0 ? 0 : -1;
}

static int setup_all(void **state)
{
    static const struct ccap_rt_hooks none;

    if (group_setup(state) != 0 || write_conf() != 0)
        return -1;
    setenv("CONNCAP_CONFIG", conf_path, 1);
    ccap_rt_set_hooks(&none);
    return 0;
}

static int teardown_all(void **state)
{
    if (stopped)
        kill(fx.pid, SIGCONT);
    unlink(conf_path);
    return group_teardown(state);
}

static void stall(void)
{
    assert_int_equal(kill(fx.pid, SIGSTOP), 0);
    stopped = true;
}

static void resume(void)
{
    assert_int_equal(kill(fx.pid, SIGCONT), 0);
    stopped = false;
}

static long long cmd_int(const char *fmt, const char *a, const char *b)
{
    redisReply *rep = redis_fixture_cmd(&fx, fmt, a, b);
    long long v = -1;

    assert_non_null(rep);
    if (rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    else if (rep->type == REDIS_REPLY_NIL)
        v = 0;
    freeReplyObject(rep);
    return v;
}

static long long holders(const char *sem)
{
    return cmd_int("ZCARD " PFX "{%s}:holders", sem, NULL);
}
static long long queued(const char *sem)
{
    return cmd_int("ZCARD " PFX "{%s}:queue", sem, NULL);
}
static long long acquired(const char *sem)
{
    return cmd_int("HGET " PFX "{%s}:stats acquired", sem, NULL);
}
static bool holds(const char *sem, const char *holder)
{
    return cmd_int("ZSCORE " PFX "{%s}:holders %s", sem, holder) > 0;
}

/* A connect of a new TCP socket to 127.0.0.1:PORT through the core:
 * returns connect_pre's result; *FD the socket, *P the permit taken. */
static int pre(int port, int *fd, struct ccap_permit **p)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    struct ccap_ticket t = { 0 };
    int rc;

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(*fd >= 0);
    rc = ccap_rt_connect_pre(*fd, (struct sockaddr *)&a, sizeof a, false, &t);
    *p = t.permit;
    return rc;
}

static void closed(int fd)
{
    ccap_rt_release_list(ccap_rt_close_pre(fd));
    close(fd);
}

/* Runs the core's flush until SEM has N holders, at most 10 s (the
 * circuit lets the flush through within its backoff, 2 s here). */
static void flush_until_holders(const char *sem, long long n)
{
    for (long long end = fx_now_ms() + 10000; holders(sem) != n && fx_now_ms() < end;) {
        ccap_rt_flush();
        fx_sleep_ms(20);
    }
    assert_int_equal(holders(sem), n);
}

/* An acquire written to a stalled Redis fails the connect (its reply
 * timed out) and runs when Redis resumes: the release of its holder is
 * kept and sent once Redis answers. Before, the holder stayed a lease. */
static void test_timed_out_acquire_released(void **state)
{
    struct ccap_permit *p;
    int fd;

    (void)state;
    assert_int_equal(pre(1001, &fd, &p), 0); /* the script is loaded: the stalled one runs */
    assert_non_null(p);
    closed(fd);
    flush_until_holders("g", 0);
    stall();
    assert_int_equal(pre(1001, &fd, &p), -ETIMEDOUT);
    assert_null(p);
    resume();
    close(fd);
    for (long long end = fx_now_ms() + 5000; acquired("g") != 2 && fx_now_ms() < end;)
        fx_sleep_ms(10);
    assert_int_equal(acquired("g"), 2); /* it did run in Redis */
    flush_until_holders("g", 0);
}

struct waiter {
    int fd, rc;
    struct ccap_permit *p;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;

    w->rc = pre(1002, &w->fd, &w->p);
    return NULL;
}

/* A waiter queued when Redis stalls gives up (its wait ends while Redis
 * is down); its last re-check runs when Redis resumes and renews its
 * ticket. Its leave is kept like a release: once the flush ran (it runs
 * the kept commands oldest first, the holder's later release included),
 * the ticket is gone. Before, it blocked the queue for 5 re-checks. */
static void test_given_up_waiter_leaves(void **state)
{
    struct waiter w = { .fd = -1 };
    struct ccap_permit *p;
    pthread_t th;
    int fd;

    (void)state;
    assert_int_equal(pre(1002, &fd, &p), 0);
    assert_non_null(p);
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    for (long long end = fx_now_ms() + 5000; queued("s") != 1 && fx_now_ms() < end;)
        fx_sleep_ms(10);
    assert_int_equal(queued("s"), 1);
    stall();
    pthread_join(th, NULL);
    assert_int_equal(w.rc, -ETIMEDOUT);
    resume();
    close(w.fd);
    closed(fd); /* kept too: the circuit is open */
    flush_until_holders("s", 0);
    assert_int_equal(queued("s"), 0);
}

struct retry {
    int fd, rc;
    struct ccap_permit *p;
};

static void *retry_main(void *arg)
{
    struct retry *r = arg;

    r->rc = pre(1003, &r->fd, &r->p);
    return NULL;
}

/* The first attempt's reply is lost in the stall (it runs, and grants
 * the holder, when Redis resumes); the connect waits on and its next
 * attempt, with the same holder id, is granted. That permit is the
 * socket's: nothing releases it behind its back. */
static void test_retry_granted_kept(void **state)
{
    struct retry r = { .fd = -1 };
    pthread_t th;

    (void)state;
    stall();
    assert_int_equal(pthread_create(&th, NULL, retry_main, &r), 0);
    fx_sleep_ms(800); /* the first attempt times out (300 ms) */
    resume();
    pthread_join(th, NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(r.p);
    assert_true(holds("k", r.p->holder));
    for (int i = 0; i < 5; i++) {
        ccap_rt_flush();
        assert_true(ccap_rt_heartbeat() > 0);
    }
    assert_int_equal(holders("k"), 1);
    assert_true(holds("k", r.p->holder));
    closed(r.fd);
    flush_until_holders("k", 0);
}

/* The attempt's reply is lost and the permit is granted locally: the
 * holder Redis ends up with (after the late attempt ran and the heartbeat
 * registered the local permit) is the socket's, and only it. */
static void test_local_grant_after_lost_reply(void **state)
{
    struct ccap_permit *p;
    int fd;

    (void)state;
    stall();
    assert_int_equal(pre(1004, &fd, &p), 0);
    assert_non_null(p);
    assert_true(p->flags & CCAP_PERMIT_LOCAL);
    resume();
    for (long long end = fx_now_ms() + 10000; fx_now_ms() < end; fx_sleep_ms(20)) {
        ccap_rt_heartbeat();
        if (acquired("l") == 1 && holders("l") == 1 && holds("l", p->holder))
            break;
    }
    assert_int_equal(acquired("l"), 1); /* the lost attempt did run */
    assert_int_equal(holders("l"), 1);
    assert_true(holds("l", p->holder));
    closed(fd);
    flush_until_holders("l", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timed_out_acquire_released),
        cmocka_unit_test(test_given_up_waiter_leaves),
        cmocka_unit_test(test_retry_granted_kept),
        cmocka_unit_test(test_local_grant_after_lost_reply),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
