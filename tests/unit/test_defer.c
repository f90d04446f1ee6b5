/* test_defer.c -- releases sent without waiting for the reply: they reach Redis, survive NOSCRIPT, lost connections and outages. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis.h"
#include "redis_int.h"
#include "sem.h"
#include "semcall.h"
#include "redis_fixture.h"

#define PFX "ccapdefer:"
#define FAR (fx_now_ms() + 60000)

REDIS_FIXTURE_GROUP(fx)
static struct ccap_redis *R;
static redisContext *CLI; /* the test's own view of the server */

static int setup(void **state)
{
    struct ccap_redis_conf c = { 0 };
    (void)state;

    if (!(CLI = redis_fixture_flushed_cli(&fx)))
        return -1;
    c.socket = fx.sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 2000;
    R = ccap_redis_new(&c);
    return R ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (fx.pid > 0)
        kill(fx.pid, SIGCONT); /* a test that failed while the server was stopped */
    ccap_redis_free(R);
    R = NULL;
    if (CLI)
        redisFree(CLI);
    CLI = NULL;
    return 0;
}

static long long n_holders(const char *name)
{
    redisReply *rep = redisCommand(CLI, "ZCARD " PFX "{%s}:holders", name);
    long long v;

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    v = rep->integer;
    freeReplyObject(rep);
    return v;
}

static void cli_ok(const char *cmd)
{
    redisReply *rep = redisCommand(CLI, cmd);

    assert_non_null(rep);
    assert_int_not_equal(rep->type, REDIS_REPLY_ERROR);
    freeReplyObject(rep);
}

static void acq(const char *name, const char *holder)
{
    struct ccap_sem_result res;

    assert_int_equal(t_acquire(R, PFX, name, holder, 30000, 1000, &res), 0);
    assert_int_equal(res.granted, 1);
}

/* Waits up to 5 s (generous: a loaded machine) for NAME to have N holders. */
static void wait_holders(const char *name, long long n)
{
    long long end = fx_now_ms() + 5000;

    while (n_holders(name) != n && fx_now_ms() < end)
        fx_sleep_ms(5);
    assert_int_equal(n_holders(name), n);
}

/* Sent at once: Redis runs it with no further call on R (another
 * connection sees the holder gone), also as the first release on a
 * connection (the script is loaded first); the next command reads its
 * reply. */
static void test_sent_without_waiting(void **state)
{
    (void)state;
    acq("s", "A");
    acq("s", "B");
    assert_int_equal(t_release_defer(R, PFX, "s", "A", 100, FAR, true), 0);
    assert_int_equal(ccap_redis_deferred(R), 1);
    wait_holders("s", 1);
    acq("s", "C"); /* reads A's reply first, then its own */
    assert_int_equal(ccap_redis_deferred(R), 0);
    assert_int_equal(n_holders("s"), 2);
}

/* Kept, not sent (Redis down as far as the caller knows): nothing reaches
 * Redis until the flush, which runs it. */
static void test_kept_until_flush(void **state)
{
    (void)state;
    acq("k", "A");
    assert_int_equal(t_release_defer(R, PFX, "k", "A", 100, FAR, false), 0);
    fx_sleep_ms(50);
    assert_int_equal(n_holders("k"), 1);
    assert_int_equal(ccap_redis_flush(R), 0);
    assert_int_equal(n_holders("k"), 0);
    assert_int_equal(ccap_redis_deferred(R), 0);
}

/* One whose time ran out (its lease ended: Redis drops the holder anyway)
 * is dropped unsent. */
static void test_expired_dropped_unsent(void **state)
{
    (void)state;
    acq("x", "A");
    assert_int_equal(t_release_defer(R, PFX, "x", "A", 100, fx_now_ms() - 1, false), 0);
    assert_int_equal(ccap_redis_flush(R), 0);
    assert_int_equal(n_holders("x"), 1);
    assert_int_equal(ccap_redis_deferred(R), 0);
}

/* The scripts were flushed (a restart, SCRIPT FLUSH): the deferred EVALSHA
 * gets NOSCRIPT, and is loaded and run by the next command that works. */
static void test_noscript_run_again(void **state)
{
    (void)state;
    acq("n", "A");
    assert_int_equal(t_release_wake(R, PFX, "n", "Z", 100), 0); /* release known loaded here */
    cli_ok("SCRIPT FLUSH");
    assert_int_equal(t_release_defer(R, PFX, "n", "A", 100, FAR, true), 0);
    fx_sleep_ms(50);
    assert_int_equal(n_holders("n"), 1); /* NOSCRIPT: it did not run */
    acq("n", "B");
    assert_int_equal(n_holders("n"), 1); /* A gone, B in */
    assert_int_equal(ccap_redis_deferred(R), 0);
}

/* The connection was killed after the release was written: whether Redis
 * ran it or not, it is run (again: release is idempotent) on a new one. */
static void test_connection_lost(void **state)
{
    redisReply *rep;
    (void)state;
    acq("c", "A");
    acq("c", "B");
    cli_ok("CLIENT PAUSE 300 WRITE"); /* A's release is read but not run until the kill */
    assert_int_equal(t_release_defer(R, PFX, "c", "A", 100, FAR, true), 0);
    rep = redisCommand(CLI, "CLIENT KILL TYPE normal SKIPME yes");
    assert_non_null(rep);
    freeReplyObject(rep);
    fx_sleep_ms(400);
    assert_true(ccap_redis_flush(R) >= 0);
    assert_int_equal(ccap_redis_deferred(R), 0);
    assert_int_equal(n_holders("c"), 1);
}

/* Redis unreachable: the flush fails and keeps it; once Redis is back,
 * the flush runs it. */
static void test_kept_while_down(void **state)
{
    (void)state;
    acq("d", "A");
    redisFree(CLI);
    CLI = NULL;
    redis_fixture_kill(&fx);
    int rc = t_release_defer(R, PFX, "d", "A", 100, FAR, true);
    assert_true(rc == 0 || rc < 0); /* written into a dead socket, or refused */
    assert_true(ccap_redis_flush(R) < 0);
    assert_int_equal(ccap_redis_deferred(R), 1);
    assert_int_equal(redis_fixture_restart(&fx), 0);
    assert_non_null(CLI = redis_fixture_cli(&fx));
    cli_ok("ZADD " PFX "{d}:holders 99999999999999 A"); /* as if renewed after the restart */
    assert_int_equal(ccap_redis_flush(R), 0);
    assert_int_equal(n_holders("d"), 0);
}

/* An acquire written to a stalled server (SIGSTOP) times out on the
 * client and runs when the server resumes; the release of its holder, kept
 * meanwhile and sent on a new connection once the server answers, runs
 * after it: no holder is left. The core releases the holder id of an
 * attempt whose reply was lost this way. */
static void test_release_after_stalled_acquire(void **state)
{
    struct ccap_redis_conf c = { 0 };
    struct ccap_sem_result res;
    struct ccap_redis *r;
    redisReply *rep;

    (void)state;
    c.socket = fx.sock;
    c.connect_timeout_ms = 300;
    c.command_timeout_ms = 300;
    assert_non_null(r = ccap_redis_new(&c));
    assert_int_equal(t_acquire(r, PFX, "st", "W", 30000, 10, &res), 0); /* loads the script */
    assert_int_equal(kill(fx.pid, SIGSTOP), 0);
    assert_int_equal(t_acquire(r, PFX, "st", "A", 30000, 10, &res), -ETIMEDOUT);
    assert_int_equal(t_release_defer(r, PFX, "st", "A", 10, FAR, false), 0);
    assert_int_equal(kill(fx.pid, SIGCONT), 0);
    assert_int_equal(ccap_redis_flush(r), 0);
    ccap_redis_free(r);
    rep = redisCommand(CLI, "HGET " PFX "{st}:stats acquired");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_string_equal(rep->str, "2"); /* A's acquire did run */
    freeReplyObject(rep);
    assert_int_equal(n_holders("st"), 1); /* W's only */
}

/* Many more releases than it keeps replies for, with no command between:
 * none is lost. */
static void test_many_without_reading(void **state)
{
    char h[32];
    (void)state;
    for (int i = 0; i < 600; i++) {
        snprintf(h, sizeof h, "H%d", i);
        acq("m", h);
    }
    for (int i = 0; i < 600; i++) {
        snprintf(h, sizeof h, "H%d", i);
        assert_int_equal(t_release_defer(R, PFX, "m", h, 100, FAR, true), 0);
    }
    assert_true(ccap_redis_deferred(R) <= 256);
    wait_holders("m", 0);
    assert_int_equal(ccap_redis_flush(R), 0);
}

/* A fork child drops its parent's deferred commands: it never runs them
 * nor reads their replies (which belong to the parent's connection). */
static void test_fork_child_drops(void **state)
{
    int st;
    pid_t pid;
    (void)state;
    acq("f", "A");
    assert_int_equal(t_release_defer(R, PFX, "f", "A", 100, FAR, false), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        ccap_redis_forget(R);
        _exit(ccap_redis_deferred(R) == 0 && ccap_redis_flush(R) == 0 ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(n_holders("f"), 1); /* the child sent nothing */
    assert_int_equal(ccap_redis_flush(R), 0);
    assert_int_equal(n_holders("f"), 0);
}

/* A write to a server that went away never raises SIGPIPE (the program
 * may not ignore it): the shim's writes use MSG_NOSIGNAL. */
static void test_no_sigpipe(void **state)
{
    struct sigaction sa = { .sa_handler = SIG_DFL }, old;
    (void)state;
    acq("p", "A");
    sigaction(SIGPIPE, &sa, &old);
    redisFree(CLI);
    CLI = NULL;
    redis_fixture_kill(&fx);
    for (int i = 0; i < 5; i++) /* the first write may pass; the next ones hit EPIPE */
        (void)t_release_defer(R, PFX, "p", "A", 100, FAR, true);
    sigaction(SIGPIPE, &old, NULL);
    assert_int_equal(redis_fixture_restart(&fx), 0);
    assert_non_null(CLI = redis_fixture_cli(&fx));
}

/* White box: the sync re-run of an unsent command while a command ahead of
 * it still owes its reply on the same connection (reachable in a cluster,
 * after a redirect to that node). The re-run reads that reply first and
 * drops its command, moving the others: the one re-run must still be the
 * one dropped afterwards (it was dropped by a stale index, past the end). */
static void test_rerun_behind_owed(void **state)
{
    (void)state;
    acq("o", "X");
    acq("o", "Y");
    acq("o", "Z");
    assert_int_equal(t_release_defer(R, PFX, "o", "X", 100, FAR, true), 0);  /* owed */
    assert_int_equal(t_release_defer(R, PFX, "o", "Y", 100, FAR, false), 0); /* unsent */
    assert_int_equal(ccap_redis_deferred(R), 2);
    ccap_defer_retry(R);
    assert_int_equal(ccap_redis_deferred(R), 0);
    assert_int_equal(n_holders("o"), 1); /* Z */
    assert_int_equal(t_release_defer(R, PFX, "o", "Z", 100, FAR, true), 0);
    assert_int_equal(ccap_redis_flush(R), 0);
    assert_int_equal(n_holders("o"), 0);
}

/* One try-once acquire of NAME (limit LIMIT) for HOLDER: granted or not. */
static int try_acq(const char *name, const char *holder, int limit)
{
    struct ccap_sem_result res;

    assert_int_equal(t_acquire(R, PFX, name, holder, 30000, limit, &res), 0);
    return res.granted;
}

/* A release that never ran -- its connection killed before Redis ran it,
 * or its script flushed -- runs again BEFORE the next acquire, not after:
 * with a limit of 1, the process's own closed socket must not refuse its
 * next connect (it did, found by a fresh-eyes stress run). */
static void test_lost_release_goes_first(void **state)
{
    redisReply *rep;
    (void)state;

    assert_true(try_acq("g", "A", 1));
    cli_ok("CLIENT PAUSE 300 WRITE"); /* A's release is read, not run, until the kill */
    assert_int_equal(t_release_defer(R, PFX, "g", "A", 100, FAR, true), 0);
    rep = redisCommand(CLI, "CLIENT KILL TYPE normal SKIPME yes");
    assert_non_null(rep);
    freeReplyObject(rep);
    assert_true(try_acq("g", "B", 1));
    assert_int_equal(ccap_redis_deferred(R), 0);
    assert_int_equal(n_holders("g"), 1);

    /* the same after SCRIPT FLUSH: B's release gets NOSCRIPT, read while C's
     * acquire (sent behind it) gets NOSCRIPT too */
    assert_int_equal(t_release_wake(R, PFX, "g", "Z", 1), 0); /* release loaded here */
    cli_ok("SCRIPT FLUSH");
    assert_int_equal(t_release_defer(R, PFX, "g", "B", 100, FAR, true), 0);
    assert_true(try_acq("g", "C", 1));
    assert_int_equal(ccap_redis_deferred(R), 0);
    assert_int_equal(n_holders("g"), 1);
}

/* A reply owed by a deferred release that times out reads as any timeout,
 * naming the script and the time ("Resource temporarily unavailable" and
 * "deferred" misled the outage log line, and "EVALSHA" a fleet whose calls
 * are FCALLs). */
static void test_owed_reply_timeout_text(void **state)
{
    struct ccap_redis_conf c = { 0 };
    struct ccap_redis *r;
    struct ccap_sem_result res;
    (void)state;

    c.socket = fx.sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 200;
    assert_non_null(r = ccap_redis_new(&c));
    assert_int_equal(t_acquire(r, PFX, "t", "A", 30000, 10, &res), 0);
    assert_int_equal(t_release_wake(r, PFX, "t", "Z", 10), 0);
    cli_ok("CLIENT PAUSE 1000 ALL");
    assert_int_equal(t_release_defer(r, PFX, "t", "A", 100, FAR, true), 0);
    assert_int_equal(t_acquire(r, PFX, "t", "B", 30000, 10, &res), -ETIMEDOUT);
    /* named by the script, whichever form it went out in (here EVALSHA: no library loaded) */
    char want[128];
    snprintf(want, sizeof want, "redis %s: timed out after 200 ms", ccap_script_function(CCAP_SCRIPT_RELEASE));
    assert_non_null(strstr(ccap_redis_errstr(r), want));
    assert_null(strstr(ccap_redis_errstr(r), "deferred"));
    fx_sleep_ms(1100);
    assert_true(ccap_redis_flush(r) >= 0); /* kept, and run once Redis answers */
    assert_int_equal(n_holders("t"), 0);
    ccap_redis_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sent_without_waiting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_until_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_dropped_unsent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noscript_run_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_lost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_while_down, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_after_stalled_acquire, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_without_reading, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_child_drops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_sigpipe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rerun_behind_owed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_release_goes_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owed_reply_timeout_text, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
