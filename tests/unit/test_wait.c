/* test_wait.c -- waiting without polling against a private redis-server: FIFO queue, wake lists, rate, blocks, pool. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "sem.h"
#include "semcall.h"
#include "wait.h"
#include "redis_fixture.h"

#define PFX "ccapwait:"

REDIS_FIXTURE_GROUP(fx)
static struct ccap_redis *R;
static redisContext *CLI;

static struct ccap_redis_conf conf_for(const char *sock)
{
    struct ccap_redis_conf c = { 0 };

    c.socket = (char *)sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 2000;
    return c;
}

static int setup(void **state)
{
    struct ccap_redis_conf c = conf_for(fx.sock);
    (void)state;

    if (!(CLI = redis_fixture_flushed_cli(&fx)))
        return -1;
    R = ccap_redis_new(&c);
    return R ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ccap_redis_free(R);
    R = NULL;
    if (CLI)
        redisFree(CLI);
    CLI = NULL;
    ccap_wait_reap(0);
    return 0;
}

/* ---- helpers ---- */

static long long cli_int(const char *fmt, ...)
{
    redisReply *rep;
    long long v;
    va_list ap;

    va_start(ap, fmt);
    rep = redisvCommand(CLI, fmt, ap);
    va_end(ap);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    v = rep->integer;
    freeReplyObject(rep);
    return v;
}

/* A reply as a number: a string's, an integer, 0 for a status, -1 for nil. */
static long long cli_num(const char *fmt, ...)
{
    redisReply *rep;
    long long v = -1;
    va_list ap;

    va_start(ap, fmt);
    rep = redisvCommand(CLI, fmt, ap);
    va_end(ap);
    assert_non_null(rep);
    if (rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    else if (rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep->type == REDIS_REPLY_STATUS)
        v = 0;
    else
        assert_int_equal(rep->type, REDIS_REPLY_NIL);
    freeReplyObject(rep);
    return v;
}

static int queued(const char *sem, const char *h)
{
    redisReply *rep = redisCommand(CLI, "ZSCORE " PFX "{%s}:queue %s", sem, h);
    int present;

    assert_non_null(rep);
    present = rep->type != REDIS_REPLY_NIL;
    freeReplyObject(rep);
    return present;
}

static long long tokens(const char *sem, const char *h)
{
    return cli_int("LLEN " PFX "{%s}:wake:%s", sem, h);
}

/* One attempt with ticket TTL (0: try once), flags, rate/burst. */
static struct ccap_sem_result attempt(const char *sem, const char *h, int limit, int ttl, int flags, double rate,
                                      int burst)
{
    struct ccap_sem_req q = { .holder = h,
                              .lease_ms = 30000,
                              .limit = limit,
                              .ticket_ttl_ms = ttl,
                              .flags = flags,
                              .rate = rate,
                              .burst = burst };
    struct ccap_sem_result res = { -1, -1, -1, -1, -2 };

    assert_int_equal(ccap_sem_acquire(R, PFX, sem, &q, &res), 0);
    return res;
}

static int granted(const char *sem, const char *h, int limit, int ttl)
{
    return attempt(sem, h, limit, ttl, 0, 0, 1).granted;
}

/* ---- the queue ---- */

static void test_fifo_order(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    assert_true(granted("f", "A", 1, 0));
    res = attempt("f", "B", 1, 5000, 0, 0, 1);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.retry_ms, 0);
    assert_in_range(res.wake_ms, 29000, 30000); /* A's lease is the next chance */
    assert_false(granted("f", "C", 1, 5000));
    assert_true(queued("f", "B"));
    assert_true(queued("f", "C"));
    assert_false(granted("f", "N", 1, 0)); /* try-once newcomer: never queued */
    assert_false(queued("f", "N"));

    /* a release wakes exactly the first waiter */
    assert_int_equal(t_release_wake(R, PFX, "f", "A", 1), 1);
    assert_int_equal(tokens("f", "B"), 1);
    assert_int_equal(tokens("f", "C"), 0);
    /* C may not overtake B, nor may a newcomer */
    assert_false(granted("f", "C", 1, 5000));
    assert_false(granted("f", "N", 1, 0));
    assert_true(granted("f", "B", 1, 5000));
    assert_false(queued("f", "B"));
    assert_int_equal(cli_int("EXISTS " PFX "{f}:wake:B"), 0);
    assert_int_equal(t_release_wake(R, PFX, "f", "B", 1), 1);
    assert_int_equal(tokens("f", "C"), 1);
    assert_true(granted("f", "C", 1, 5000));
    assert_int_equal(cli_int("EXISTS " PFX "{f}:queue"), 0);
}

/* A caller without a ticket is not in the queue: it neither leaves it nor
 * wakes the waiters ahead (ZRANK's nil is false in Lua, and was once taken
 * for a place in the queue: every such call pushed the first waiters a
 * spurious token, each then a wasted re-check). */
static void test_newcomer_wakes_nobody(void **state)
{
    (void)state;
    assert_true(granted("n", "A", 2, 0));
    assert_true(granted("n", "B", 2, 0));
    assert_false(granted("n", "W", 2, 5000));
    assert_int_equal(t_release_wake(R, PFX, "n", "A", 2), 1);
    assert_int_equal(tokens("n", "W"), 1);
    assert_int_equal(cli_int("DEL " PFX "{n}:wake:%s", "W"), 1); /* W's BLPOP took it */
    assert_false(granted("n", "N", 2, 0));                       /* a try-once newcomer may not overtake W */
    assert_false(granted("n", "M", 2, 5000));                    /* nor a waiting one, who lines up behind */
    assert_int_equal(tokens("n", "W"), 0);
    assert_true(queued("n", "W"));
    assert_true(queued("n", "M"));
    assert_false(queued("n", "N"));
    assert_true(granted("n", "W", 2, 5000));
}

static void test_free_slots_wake_several(void **state)
{
    (void)state;
    assert_true(granted("m", "A", 2, 0));
    assert_true(granted("m", "B", 2, 0));
    assert_false(granted("m", "W1", 2, 5000));
    assert_false(granted("m", "W2", 2, 5000));
    assert_false(granted("m", "W3", 2, 5000));
    /* the runtime limit rises to 4 and one permit is released: three free,
     * but one call wakes only as many as it freed (one): the head; each
     * waiter admitted passes the wake-up on to the new head */
    redisReply *rep = redisCommand(CLI, "SET " PFX "{m}:limit 4");
    assert_non_null(rep);
    freeReplyObject(rep);
    assert_int_equal(t_release_wake(R, PFX, "m", "A", 2), 1);
    assert_int_equal(tokens("m", "W1"), 1);
    assert_int_equal(tokens("m", "W2") + tokens("m", "W3"), 0);
    assert_true(granted("m", "W1", 2, 5000));
    assert_int_equal(tokens("m", "W2"), 1);
    assert_int_equal(tokens("m", "W3"), 0);
    assert_true(granted("m", "W2", 2, 5000));
    assert_int_equal(tokens("m", "W3"), 1);
    assert_true(granted("m", "W3", 2, 5000));
    assert_false(granted("m", "W4", 2, 5000));
}

/* Processes that see different limits (a reload not yet everywhere): a
 * release by one that sees 2 frees a permit; the head of the queue is
 * woken, not the second waiter, whose older view (limit 1) would refuse it
 * and leave the head asleep while the permit is free. */
static void test_release_wakes_head(void **state)
{
    (void)state;
    assert_true(granted("h", "A", 1, 0));
    assert_false(granted("h", "W1", 1, 5000));
    assert_false(granted("h", "W2", 1, 5000));
    assert_int_equal(t_release_wake(R, PFX, "h", "A", 2), 1);
    assert_int_equal(tokens("h", "W1"), 1);
    assert_int_equal(tokens("h", "W2"), 0);
    assert_false(granted("h", "W2", 1, 5000));
    assert_true(granted("h", "W1", 1, 5000));
}

/* max_waiters: a newcomer that would queue behind that many tickets is
 * refused at once (queue_full, not queued, counted); a waiter already
 * queued keeps its place, and a freed place lets the next one in. */
static void test_max_waiters(void **state)
{
    struct ccap_sem_req q = {
        .lease_ms = 30000, .limit = 1, .ticket_ttl_ms = 5000, .max_waiters = 2, .wait_left_ms = 5000
    };
    struct ccap_sem_result res;
    const char *who[] = { "A", "W1", "W2", "W3", "W4" };
    (void)state;

    for (int i = 0; i < 5; i++) {
        q.holder = who[i];
        assert_int_equal(ccap_sem_acquire(R, PFX, "mw", &q, &res), 0);
        assert_int_equal(res.granted, i == 0);
        assert_int_equal(res.queue_full, i >= 3);
    }
    assert_true(queued("mw", "W1") && queued("mw", "W2"));
    assert_false(queued("mw", "W3") || queued("mw", "W4"));
    assert_int_equal(cli_int("ZCARD " PFX "{mw}:queue"), 2);
    assert_int_equal(cli_num("HGET " PFX "{mw}:stats queue_full"), 2);
    assert_int_equal(cli_num("HGET " PFX "{mw}:stats denied"), 4);
    assert_int_equal(cli_num("ZSCORE " PFX "{mw}:waiters W3"), -1);
    assert_int_equal(cli_int("EXISTS " PFX "{mw}:wake:W3"), 0);
    q.holder = "W2"; /* a queued waiter re-checking is never refused */
    assert_int_equal(ccap_sem_acquire(R, PFX, "mw", &q, &res), 0);
    assert_int_equal(res.queue_full, 0);
    q.holder = "W1"; /* W1 gives up: W3 may line up */
    q.flags = CCAP_SEM_LEAVE;
    assert_int_equal(ccap_sem_acquire(R, PFX, "mw", &q, &res), 0);
    q.flags = 0;
    q.holder = "W3";
    assert_int_equal(ccap_sem_acquire(R, PFX, "mw", &q, &res), 0);
    assert_int_equal(res.queue_full, 0);
    assert_true(queued("mw", "W3"));
    q.max_waiters = 0; /* no bound */
    q.holder = "W4";
    assert_int_equal(ccap_sem_acquire(R, PFX, "mw", &q, &res), 0);
    assert_int_equal(res.queue_full, 0);
    assert_true(queued("mw", "W4"));
}

/* A release that frees one permit wakes one waiter, however many wait. */
static void test_wake_bounded(void **state)
{
    char h[16];
    int woken = 0;
    (void)state;

    assert_true(granted("wb", "A", 1, 0));
    for (int i = 0; i < 50; i++) {
        snprintf(h, sizeof h, "W%d", i);
        assert_false(granted("wb", h, 1, 5000));
    }
    assert_int_equal(cli_num("SET " PFX "{wb}:limit 100"), 0);
    assert_int_equal(t_release_wake(R, PFX, "wb", "A", 1), 1);
    for (int i = 0; i < 50; i++) {
        snprintf(h, sizeof h, "W%d", i);
        woken += (int)tokens("wb", h);
    }
    assert_int_equal(woken, 1);
}

static void test_dead_ticket_expires(void **state)
{
    (void)state;
    assert_true(granted("d", "A", 1, 0));
    assert_false(granted("d", "B", 1, 300)); /* B will die: never refreshes */
    assert_false(granted("d", "C", 1, 5000));
    assert_int_equal(t_release_wake(R, PFX, "d", "A", 1), 1);
    assert_int_equal(tokens("d", "B"), 1);
    assert_int_equal(tokens("d", "C"), 0);
    assert_false(granted("d", "C", 1, 5000)); /* B's ticket is still live */
    fx_sleep_ms(400);
    assert_true(granted("d", "C", 1, 5000));
    assert_false(queued("d", "B"));
    assert_int_equal(cli_int("EXISTS " PFX "{d}:wake:B"), 0);
}

static void test_leave_and_cancel(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    assert_true(granted("l", "A", 1, 0));
    assert_false(granted("l", "B", 1, 5000));
    assert_false(granted("l", "C", 1, 5000));
    assert_false(granted("l", "D", 1, 5000));
    res = attempt("l", "B", 1, 5000, CCAP_SEM_LEAVE, 0, 1); /* B gives up */
    assert_int_equal(res.granted, 0);
    assert_false(queued("l", "B"));
    assert_int_equal(tokens("l", "C"), 0); /* nothing is free: nobody woken */
    /* a release of a holder id that only waits takes it out of the queue */
    assert_int_equal(t_release_wake(R, PFX, "l", "D", 1), 0);
    assert_false(queued("l", "D"));
    assert_int_equal(t_release_wake(R, PFX, "l", "A", 1), 1);
    assert_int_equal(tokens("l", "C"), 1);
    assert_true(granted("l", "C", 1, 5000));
}

static void test_leaving_head_passes_the_wake(void **state)
{
    (void)state;
    assert_true(granted("h", "A", 1, 0));
    assert_false(granted("h", "B", 1, 5000));
    assert_false(granted("h", "C", 1, 5000));
    assert_int_equal(t_release_wake(R, PFX, "h", "A", 1), 1);
    assert_int_equal(tokens("h", "B"), 1);
    assert_int_equal(tokens("h", "C"), 0);
    /* B was woken but gives up before its attempt: the wake passes to C */
    assert_int_equal(t_release_wake(R, PFX, "h", "B", 1), 0);
    assert_int_equal(cli_int("EXISTS " PFX "{h}:wake:B"), 0);
    assert_int_equal(tokens("h", "C"), 1);
    assert_true(granted("h", "C", 1, 5000));
}

static void test_unblock_flag(void **state)
{
    (void)state;
    assert_true(granted("u", "A", 1, 0));
    assert_false(granted("u", "B", 1, 5000));
    assert_int_equal(tokens("u", "B"), 0);
    assert_int_equal(attempt("u", "B", 1, 5000, CCAP_SEM_UNBLOCK, 0, 1).granted, 0);
    assert_int_equal(tokens("u", "B"), 1);
    assert_in_range(cli_int("PTTL " PFX "{u}:wake:B"), 1, 5000);
}

static void test_lease_expiry_wakes_first(void **state)
{
    struct ccap_sem_req q = { .holder = "A", .lease_ms = 300, .limit = 1 };
    struct ccap_sem_result res;
    (void)state;

    assert_int_equal(ccap_sem_acquire(R, PFX, "e", &q, &res), 0);
    assert_int_equal(res.granted, 1);
    res = attempt("e", "B", 1, 5000, 0, 0, 1);
    assert_int_equal(res.granted, 0);
    assert_in_range(res.wake_ms, 0, 300); /* re-check when A's lease ends */
    assert_false(granted("e", "C", 1, 5000));
    fx_sleep_ms(350);
    /* C's attempt sweeps A's expired lease: not C's turn, but B is woken */
    assert_false(granted("e", "C", 1, 5000));
    assert_int_equal(tokens("e", "B"), 1);
    assert_true(granted("e", "B", 1, 5000));
}

/* A refused waiter listed in waiters leaves it when granted: also when the
 * grant comes in the same ms as the refusal (waited 0, still queued), and
 * when its ticket died meanwhile (not queued any more, but it waited). */
static void test_granted_waiter_leaves_waiters(void **state)
{
    struct ccap_sem_req b = {
        .holder = "B", .lease_ms = 30000, .limit = 1, .ticket_ttl_ms = 5000, .wait_left_ms = 5000
    };
    struct ccap_sem_req c = {
        .holder = "C", .lease_ms = 30000, .limit = 1, .ticket_ttl_ms = 300, .wait_left_ms = 5000
    };
    struct ccap_sem_result res;
    (void)state;

    assert_true(granted("gw", "A", 1, 0));
    assert_int_equal(ccap_sem_acquire(R, PFX, "gw", &b, &res), 0);
    assert_int_equal(res.granted, 0);
    assert_int_equal(cli_int("ZCARD " PFX "{gw}:waiters"), 1);
    assert_true(cli_int("PTTL " PFX "{gw}:waiters") > 0);
    assert_int_equal(t_release_wake(R, PFX, "gw", "A", 1), 1);
    assert_int_equal(ccap_sem_acquire(R, PFX, "gw", &b, &res), 0); /* waited_ms 0 */
    assert_int_equal(res.granted, 1);
    assert_int_equal(cli_int("EXISTS " PFX "{gw}:waiters"), 0);
    assert_int_equal(cli_int("EXISTS " PFX "{gw}:wake:B"), 0);

    assert_int_equal(ccap_sem_acquire(R, PFX, "gw", &c, &res), 0);
    assert_int_equal(res.granted, 0);
    assert_int_equal(cli_int("ZCARD " PFX "{gw}:waiters"), 1);
    fx_sleep_ms(400); /* C's ticket dies */
    assert_int_equal(t_release_wake(R, PFX, "gw", "B", 1), 1);
    c.waited_ms = 400;
    c.wait_left_ms = 4600;
    assert_int_equal(ccap_sem_acquire(R, PFX, "gw", &c, &res), 0);
    assert_int_equal(res.granted, 1);
    assert_false(queued("gw", "C"));
    assert_int_equal(cli_int("EXISTS " PFX "{gw}:waiters"), 0);
}

/* ---- the rate ---- */

static void test_rate_burst_then_spacing(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    for (int i = 0; i < 3; i++)
        assert_int_equal(attempt("r", i == 0 ? "a" : i == 1 ? "b" : "c", 100, 0, 0, 10, 3).granted, 1);
    res = attempt("r", "d", 100, 0, 0, 10, 3);
    assert_int_equal(res.granted, 0);
    assert_in_range(res.retry_ms, 1, 100);
    assert_int_equal(res.wake_ms, -1);
    assert_int_equal(cli_int("EXISTS " PFX "{r}:queue"), 0); /* try-once: not queued */
    fx_sleep_ms((int)res.retry_ms);
    res = attempt("r", "d", 100, 0, 0, 10, 3);
    assert_int_equal(res.granted, 1);
    /* the key expires once the bucket is full again */
    assert_in_range(cli_int("PTTL " PFX "{r}:rate"), 1, 301);
}

static void test_rate_never_exceeds_window(void **state)
{
    long long t0 = fx_now_ms(), grants[64];
    int n = 0;
    char h[32];
    (void)state;

    /* hammer for 700 ms at rate 20/s, burst 4: at most 4 + 20 * 0.7 = 18 */
    for (int i = 0; fx_now_ms() - t0 < 700 && n < 64; i++) {
        snprintf(h, sizeof h, "h%d", i);
        if (attempt("w", h, 1000, 0, 0, 20, 4).granted)
            grants[n++] = fx_now_ms();
    }
    assert_in_range(n, 10, 4 + 14 + 1);
    for (int i = 0; i < n; i++)
        for (int j = i; j < n; j++)
            assert_true(j - i + 1 <= 4 + 20 * (grants[j] - grants[i] + 5) / 1000.0);
}

static void test_rate_retry_by_queue_place(void **state)
{
    struct ccap_sem_result b, c;
    (void)state;

    assert_int_equal(attempt("q", "A", 100, 0, 0, 10, 1).granted, 1);
    b = attempt("q", "B", 100, 5000, 0, 10, 1);
    c = attempt("q", "C", 100, 5000, 0, 10, 1);
    assert_int_equal(b.granted, 0);
    assert_int_equal(c.granted, 0);
    assert_in_range(b.retry_ms, 1, 100);
    assert_in_range(c.retry_ms, 101, 200); /* after B's slot */
}

/* ---- blocks on a waiter's own connection ---- */

static void test_block_deadline_is_ours(void **state)
{
    struct ccap_redis_conf c = conf_for(fx.sock);
    struct ccap_redis *w = ccap_wait_conn_get(&c);
    long long t0;
    int rc;
    (void)state;

    assert_non_null(w);
    /* Redis would time the BLPOP out up to 100 ms late: the deadline is ours */
    t0 = fx_now_ms();
    rc = ccap_wait_block(w, PFX "{b}:wake:x", 130);
    assert_int_equal(rc, 0);
    assert_in_range(fx_now_ms() - t0, 130, 130 + 60);
    cli_int("LPUSH " PFX "{b}:wake:x u");
    assert_int_equal(ccap_wait_finish(w, 1000), 0);
    assert_int_equal(cli_int("EXISTS " PFX "{b}:wake:x"), 0);
    /* a token already there: at once */
    cli_int("LPUSH " PFX "{b}:wake:x w");
    t0 = fx_now_ms();
    assert_int_equal(ccap_wait_block(w, PFX "{b}:wake:x", 5000), 1);
    assert_in_range(fx_now_ms() - t0, 0, 500);
    ccap_wait_conn_put(w, true);
}

static void test_no_lost_wakeup_between_attempt_and_block(void **state)
{
    struct ccap_redis_conf c = conf_for(fx.sock);
    struct ccap_redis *w;
    char key[256];
    long long t0;
    (void)state;

    assert_true(granted("x", "A", 1, 0));
    assert_false(granted("x", "B", 1, 5000));
    /* the release lands after B's attempt, before B blocks */
    assert_int_equal(t_release_wake(R, PFX, "x", "A", 1), 1);
    assert_true(ccap_sem_wake_key(key, sizeof key, PFX, "x", "B") > 0);
    w = ccap_wait_conn_get(&c);
    assert_non_null(w);
    t0 = fx_now_ms();
    assert_int_equal(ccap_wait_block(w, key, 5000), 1);
    assert_in_range(fx_now_ms() - t0, 0, 500);
    assert_true(granted("x", "B", 1, 5000));
    ccap_wait_conn_put(w, true);
}

static void test_pool_reuse_reap_fork(void **state)
{
    struct ccap_redis_conf c = conf_for(fx.sock);
    struct ccap_redis *a, *b;
    int fd, st;
    pid_t pid;
    (void)state;

    ccap_wait_reap(0);
    assert_int_equal(ccap_wait_conn_count(), 0);
    a = ccap_wait_conn_get(&c);
    b = ccap_wait_conn_get(&c);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_int_equal(ccap_wait_conn_count(), 2);
    assert_int_equal(ccap_wait_block(a, PFX "{p}:wake:z", 10), 0); /* opens it */
    cli_int("LPUSH " PFX "{p}:wake:z u");
    assert_int_equal(ccap_wait_finish(a, 1000), 0);
    fd = ccap_redis_fd(a);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    ccap_wait_conn_put(a, true);
    ccap_wait_conn_put(b, false); /* closed, not pooled */
    assert_int_equal(ccap_wait_conn_count(), 1);
    assert_ptr_equal(ccap_wait_conn_get(&c), a); /* the idle one is reused */
    ccap_wait_conn_put(a, true);

    /* a fork child forgets them without I/O and closes its copies */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(ccap_wait_conn_count() == 0 && fcntl(fd, F_GETFD) == -1 ? 0 : 1);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(fcntl(fd, F_GETFD) >= 0); /* the parent's stays open */

    ccap_wait_reap(60000);
    assert_int_equal(ccap_wait_conn_count(), 1); /* not idle long enough */
    ccap_wait_reap(0);
    assert_int_equal(ccap_wait_conn_count(), 0);
    assert_int_equal(fcntl(fd, F_GETFD), -1);
}

/* ---- restart grace (opt-in) ---- */

static struct ccap_sem_result graced(const char *sem, const char *h, int grace_ms)
{
    struct ccap_sem_req q = {
        .holder = h, .lease_ms = 30000, .limit = 2, .ticket_ttl_ms = 5000, .burst = 1, .grace_ms = grace_ms
    };
    struct ccap_sem_result res = { -1, -1, -1, -1, -2 };

    assert_int_equal(ccap_sem_acquire(R, PFX, sem, &q, &res), 0);
    return res;
}

/* Blocked clients on the server now (INFO clients). */
static long blocked_clients(void)
{
    redisReply *rep = redisCommand(CLI, "INFO clients");
    const char *p = rep && rep->str ? strstr(rep->str, "blocked_clients:") : NULL;
    long n = p ? atol(p + strlen("blocked_clients:")) : -1;

    freeReplyObject(rep);
    return n;
}

static void wait_blocked(long n)
{
    for (int i = 0; i < 500 && blocked_clients() != n; i++)
        usleep(10000);
    assert_int_equal(blocked_clients(), n);
}

/* Two waiting threads' wake lists on one waker: one blocked connection; a
 * newcomer asks for a poke, and after it each token reaches its own waiter
 * only; without the poke the newcomer polls instead of missing its token. */
static void test_waker_one_connection(void **state)
{
    struct ccap_redis_conf c = conf_for(fx.sock);
    struct ccap_waiter a, b;
    char poke[CCAP_WAIT_KEY_MAX];
    (void)state;

    snprintf(a.key, sizeof a.key, PFX "{u}:wake:a");
    snprintf(b.key, sizeof b.key, PFX "{u}:wake:b");
    assert_int_equal(ccap_waiter_join(&a, NULL, &c, PFX, "u", poke, sizeof poke), 0);
    wait_blocked(1);
    assert_int_equal(ccap_wait_waker_count(), 1);
    assert_int_equal(ccap_waiter_join(&b, NULL, &c, PFX, "u", poke, sizeof poke), 1);
    assert_non_null(strstr(poke, "{u}:wake:poke."));
    freeReplyObject(redisCommand(CLI, "RPUSH %s p", poke));
    freeReplyObject(redisCommand(CLI, "LPUSH %s w", b.key));
    assert_int_equal(ccap_waiter_wait(&b, ccap_now_ms() + 10000), CCAP_WOKE_TOKEN);
    assert_int_equal(ccap_waiter_wait(&a, ccap_now_ms() + 50), 0); /* not a's token */
    assert_int_equal(ccap_waiter_arm(&b, poke, sizeof poke), 1);   /* back to sleep: a's block lacks b */
    freeReplyObject(redisCommand(CLI, "RPUSH %s p", poke));
    freeReplyObject(redisCommand(CLI, "LPUSH %s w", a.key));
    assert_int_equal(ccap_waiter_wait(&a, ccap_now_ms() + 10000), CCAP_WOKE_TOKEN);
    wait_blocked(1); /* still one connection for both: b's key */
    ccap_waiter_leave(&b);

    snprintf(b.key, sizeof b.key, PFX "{u}:wake:c");
    assert_int_equal(ccap_waiter_arm(&a, poke, sizeof poke), 1);                      /* the block lacks a */
    assert_int_equal(ccap_waiter_join(&b, NULL, &c, PFX, "u", poke, sizeof poke), 0); /* a's poke is on its way */
    freeReplyObject(redisCommand(CLI, "RPUSH %s p", poke));
    assert_int_equal(ccap_waiter_wait(&a, ccap_now_ms() + 100), 0);
    ccap_waiter_leave(&b);
    snprintf(b.key, sizeof b.key, PFX "{u}:wake:d");
    assert_int_equal(ccap_waiter_join(&b, NULL, &c, PFX, "u", poke, sizeof poke), 1);
    ccap_waiter_poke_failed(&b);
    assert_int_equal(ccap_waiter_wait(&b, ccap_now_ms() + 60000), CCAP_WOKE_POLL);
    ccap_waiter_leave(&b);
    ccap_waiter_leave(&a);
}

/* A waiter woken by a token is out of the waker's next BLPOP: with no other
 * waiter armed the waker holds none (no BLPOP on a key that the woken
 * waiter, taking its permit, abandons), and the next waiter of the process
 * joins without a poke. A token pushed while its waiter is disarmed wakes it
 * as soon as it arms again. */
static void test_waker_disarms_woken(void **state)
{
    struct ccap_redis_conf c = conf_for(fx.sock);
    struct ccap_waiter a, b;
    char poke[CCAP_WAIT_KEY_MAX];
    (void)state;

    snprintf(a.key, sizeof a.key, PFX "{v}:wake:a");
    snprintf(b.key, sizeof b.key, PFX "{v}:wake:b");
    if (ccap_waiter_join(&a, NULL, &c, PFX, "v", poke, sizeof poke) == 1) /* an earlier test's block */
        freeReplyObject(redisCommand(CLI, "RPUSH %s p", poke));
    wait_blocked(1);
    freeReplyObject(redisCommand(CLI, "LPUSH %s w", a.key));
    assert_int_equal(ccap_waiter_wait(&a, ccap_now_ms() + 10000), CCAP_WOKE_TOKEN);
    wait_blocked(0); /* a re-checks: nobody to block for */
    assert_int_equal(ccap_wait_waker_count(), 1);

    /* a was refused after all: it sleeps again, and a token it missed is kept */
    freeReplyObject(redisCommand(CLI, "LPUSH %s w", a.key));
    assert_int_equal(ccap_waiter_arm(&a, poke, sizeof poke), 0);
    assert_int_equal(ccap_waiter_wait(&a, ccap_now_ms() + 10000), CCAP_WOKE_TOKEN);
    ccap_waiter_leave(&a); /* granted */
    wait_blocked(0);

    /* the process's next wait: no poke, one BLPOP */
    assert_int_equal(ccap_waiter_join(&b, NULL, &c, PFX, "v", poke, sizeof poke), 0);
    wait_blocked(1);
    freeReplyObject(redisCommand(CLI, "LPUSH %s w", b.key));
    assert_int_equal(ccap_waiter_wait(&b, ccap_now_ms() + 10000), CCAP_WOKE_TOKEN);
    ccap_waiter_leave(&b);
}

/* The semaphore's data is gone (never seen, or Redis lost it): no new
 * grant until the grace ends, while a holder that re-registered keeps its
 * permit; then grants resume; with the epoch key present, none waits. */
static void test_restart_grace(void **state)
{
    struct ccap_sem_result res;
    long long t0;
    (void)state;

    res = graced("g", "A", 600);
    assert_int_equal(res.granted, 0);
    assert_true(res.retry_ms > 300 && res.retry_ms <= 600); /* the waiter's next try */
    assert_int_equal(cli_int("EXISTS " PFX "{g}:epoch"), 1);
    assert_int_equal(cli_int("TTL " PFX "{g}:epoch"), -1); /* no TTL: outlives idle spells */

    /* a holder of before the loss, re-registered by its heartbeat, keeps its permit */
    assert_int_equal(cli_int("ZADD " PFX "{g}:holders 99999999999999 H"), 1);
    assert_int_equal(graced("g", "H", 600).granted, 1);
    assert_int_equal(graced("g", "B", 600).granted, 0);

    t0 = fx_now_ms();
    while (graced("g", "A", 600).granted == 0) {
        assert_true(fx_now_ms() - t0 < 5000);
        fx_sleep_ms(20);
    }
    assert_true(fx_now_ms() - t0 >= 200);               /* not before the grace ended */
    assert_int_equal(graced("g", "B", 600).granted, 0); /* limit 2: H and A */

    /* epoch present: a semaphore emptied the normal way waits for nothing */
    assert_int_equal(cli_int("DEL " PFX "{g}:holders"), 1);
    assert_int_equal(graced("g", "C", 600).granted, 1);

    /* grace 0 (the default) never looks at the epoch */
    assert_int_equal(graced("g0", "A", 0).granted, 1);
    assert_int_equal(cli_int("EXISTS " PFX "{g0}:epoch"), 0);
}

int main(void)
{
    /* The pool registers no fork handler itself: the runtime's one set of
     * handlers (runtime/lifecycle.c) calls these; so does this program. */
    pthread_atfork(ccap_wait_fork_prepare, ccap_wait_fork_parent, ccap_wait_fork_child);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fifo_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newcomer_wakes_nobody, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_slots_wake_several, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_ticket_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave_and_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leaving_head_passes_the_wake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unblock_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry_wakes_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_granted_waiter_leaves_waiters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_burst_then_spacing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_never_exceeds_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_retry_by_queue_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block_deadline_is_ours, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_lost_wakeup_between_attempt_and_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_reuse_reap_fork, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_grace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_wakes_head, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_waiters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wake_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waker_one_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waker_disarms_woken, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
