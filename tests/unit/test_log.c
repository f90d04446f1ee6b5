/* test_log.c -- unit tests for the logger (core/log.c): tag, levels, one line per write, rate limit. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int saved_stderr = -1, pipe_rd = -1;
static FILE *old_stderr, *real_stderr;
static char got[65536];

/* Sends fd 2 into a pipe we read; stdio's stderr (where cmocka reports
 * failures) keeps going to the real one. */
static int capture(void **state)
{
    (void)state;
    int p[2];
    if (pipe(p) < 0)
        return -1;
    saved_stderr = dup(2);
    real_stderr = fdopen(saved_stderr, "w");
    if (saved_stderr < 0 || !real_stderr)
        return -1;
    setvbuf(real_stderr, NULL, _IONBF, 0);
    old_stderr = stderr;
    stderr = real_stderr;
    dup2(p[1], 2);
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    pipe_rd = p[0];
    return 0;
}

static int restore(void **state)
{
    (void)state;
    dup2(saved_stderr, 2);
    stderr = old_stderr;
    fclose(real_stderr);
    close(pipe_rd);
    return 0;
}

/* All that was written to fd 2 since the last call. */
static const char *drain(void)
{
    size_t n = 0;
    ssize_t r;
    while (n < sizeof got - 1 && (r = read(pipe_rd, got + n, sizeof got - 1 - n)) > 0)
        n += (size_t)r;
    got[n] = '\0';
    return got;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Waits for the start of a new second of the logger's clock, so that a test
 * has a whole rate-limit window (of CCAP_LOG_BURST lines) to itself. */
static void next_second(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &a);
    do {
        usleep(1000);
        clock_gettime(CLOCK_MONOTONIC_COARSE, &b);
    } while (b.tv_sec == a.tv_sec);
}

static void test_level_parse(void **state)
{
    (void)state;
    assert_int_equal(ccap_log_level_parse("error"), CCAP_LOG_ERROR);
    assert_int_equal(ccap_log_level_parse("warn"), CCAP_LOG_WARN);
    assert_int_equal(ccap_log_level_parse("info"), CCAP_LOG_INFO);
    assert_int_equal(ccap_log_level_parse("debug"), CCAP_LOG_DEBUG);
    assert_int_equal(ccap_log_level_parse("verbose"), -EINVAL);
    assert_int_equal(ccap_log_level_parse(""), -EINVAL);
    assert_int_equal(ccap_log_level_parse(NULL), -EINVAL);
}

static void test_format_and_levels(void **state)
{
    (void)state;
    char want[128];
    next_second();
    drain();
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
    errno = EHOSTUNREACH;
    ccap_log(CCAP_LOG_WARN, "no permit of %s within %d ms", "api", 5000);
    assert_int_equal(errno, EHOSTUNREACH);
    snprintf(want, sizeof want, "conncap[%d]: warn: no permit of api within 5000 ms\n", (int)getpid());
    assert_string_equal(drain(), want);

    ccap_log(CCAP_LOG_ERROR, "bad");
    snprintf(want, sizeof want, "conncap[%d]: error: bad\n", (int)getpid());
    assert_string_equal(drain(), want);

    /* below the threshold: nothing */
    ccap_log(CCAP_LOG_INFO, "info");
    ccap_log(CCAP_LOG_DEBUG, "debug");
    assert_string_equal(drain(), "");
    ccap_log_setup(CCAP_LOG_DEBUG, CCAP_LOG_STDERR);
    ccap_log(CCAP_LOG_DEBUG, "now %s", "yes");
    snprintf(want, sizeof want, "conncap[%d]: debug: now yes\n", (int)getpid());
    assert_string_equal(drain(), want);
    ccap_log_setup(CCAP_LOG_ERROR, CCAP_LOG_STDERR);
    ccap_log(CCAP_LOG_WARN, "hidden");
    assert_string_equal(drain(), "");

    /* a message with newlines stays one line */
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
    ccap_log(CCAP_LOG_WARN, "a\nb\r\nc");
    snprintf(want, sizeof want, "conncap[%d]: warn: a b  c\n", (int)getpid());
    assert_string_equal(drain(), want);
}

static void test_truncation(void **state)
{
    (void)state;
    next_second();
    drain();
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
    char big[5000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ccap_log(CCAP_LOG_WARN, "%s", big);
    const char *s = drain();
    size_t n = strlen(s);
    assert_int_equal(count_lines(s), 1);
    assert_true(n <= 1024);
    assert_true(n > 900);
    assert_memory_equal(s + n - 4, "...\n", 4);
}

static void test_rate_limit(void **state)
{
    (void)state;
    char want[128];
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
    next_second();
    drain();
    /* filtered lines do not use up the budget */
    for (int i = 0; i < 100; i++)
        ccap_log(CCAP_LOG_DEBUG, "filtered %d", i);
    for (int i = 0; i < CCAP_LOG_BURST + 10; i++)
        ccap_log(CCAP_LOG_WARN, "line %d", i);
    const char *s = drain();
    assert_int_equal(count_lines(s), CCAP_LOG_BURST);
    snprintf(want, sizeof want, "warn: line %d\n", CCAP_LOG_BURST - 1);
    assert_non_null(strstr(s, want));
    snprintf(want, sizeof want, "warn: line %d\n", CCAP_LOG_BURST);
    assert_null(strstr(s, want));
    /* the next window's first line reports what was dropped, once */
    next_second();
    errno = ENOBUFS;
    ccap_log(CCAP_LOG_WARN, "after");
    assert_int_equal(errno, ENOBUFS);
    snprintf(want, sizeof want, "conncap[%d]: warn: after (10 messages suppressed)\n", (int)getpid());
    assert_string_equal(drain(), want);
    ccap_log(CCAP_LOG_WARN, "again");
    snprintf(want, sizeof want, "conncap[%d]: warn: again\n", (int)getpid());
    assert_string_equal(drain(), want);
}

/* Held-back lines are reported by ccap_log_flush (exit, exec), once; a fork
 * child neither reports nor carries its parent's count. */
static void test_flush_and_fork(void **state)
{
    (void)state;
    char want[160];
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
    next_second();
    drain();
    for (int i = 0; i < CCAP_LOG_BURST + 10; i++)
        ccap_log(CCAP_LOG_WARN, "line %d", i);
    assert_int_equal(count_lines(drain()), CCAP_LOG_BURST);
    pid_t k = fork();
    assert_true(k >= 0);
    if (k == 0) {
        ccap_log_flush();                 /* not the child's to report */
        ccap_log(CCAP_LOG_WARN, "child"); /* its own window: passes, no count */
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(k, &st, 0), k);
    snprintf(want, sizeof want, "conncap[%d]: warn: child\n", (int)k);
    assert_string_equal(drain(), want);
    errno = EXDEV;
    ccap_log_flush();
    assert_int_equal(errno, EXDEV);
    snprintf(want, sizeof want, "conncap[%d]: warn: 10 messages suppressed by the rate limit\n", (int)getpid());
    assert_string_equal(drain(), want);
    ccap_log_flush(); /* once */
    assert_string_equal(drain(), "");
}

static void *writer(void *arg)
{
    char chunk[400];
    memset(chunk, 'a' + (int)(long)arg, sizeof chunk - 1);
    chunk[sizeof chunk - 1] = '\0';
    for (int i = 0; i < 4; i++)
        ccap_log(CCAP_LOG_WARN, "%s", chunk);
    return NULL;
}

static void test_threads_whole_lines(void **state)
{
    (void)state;
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
    next_second();
    drain();
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer, (void *)i), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    const char *s = drain();
    assert_int_equal(count_lines(s), 16);
    /* every line is one writer's, whole: one write(2) per line */
    for (const char *l = s; *l;) {
        const char *body = strstr(l, ": warn: ");
        assert_non_null(body);
        body += 8;
        const char *nl = strchr(body, '\n');
        assert_int_equal(nl - body, 399);
        for (const char *c = body; c < nl; c++)
            assert_int_equal(*c, *body);
        l = nl + 1;
    }
}

static void test_syslog_not_stderr(void **state)
{
    (void)state;
    next_second();
    drain();
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_SYSLOG);
    errno = EPIPE;
    ccap_log(CCAP_LOG_WARN, "to syslog");
    assert_int_equal(errno, EPIPE);
    assert_string_equal(drain(), "");
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
}

/* Text from outside (a Redis error) reaches the terminal as text only:
 * ESC, BEL, NUL-free C0, DEL, C1 (as UTF-8 and raw) and broken UTF-8 are
 * written as \\xHH; valid UTF-8 stays as it is. */
static void test_escapes_controls(void **state)
{
    (void)state;
    char want[256];
    next_second();
    drain();
    ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_STDERR);
    ccap_log(CCAP_LOG_WARN, "redis: %s", "ERR \033[2J\033]0;owned\007 bell\x7f end");
    snprintf(want, sizeof want, "conncap[%d]: warn: redis: ERR \\x1b[2J\\x1b]0;owned\\x07 bell\\x7f end\n",
             (int)getpid());
    assert_string_equal(drain(), want);
    /* C1 CSI as UTF-8 (c2 9b) and raw (9b), an overlong '/', a lone
     * continuation byte, a truncated sequence; then valid UTF-8 */
    ccap_log(CCAP_LOG_WARN, "%s",
             "a\xc2\x9b b\x9b c\xc0\xaf d\x80 e\xe2\x82 f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    snprintf(
        want, sizeof want,
        "conncap[%d]: warn: a\\xc2\\x9b b\\x9b c\\xc0\\xaf d\\x80 e\\xe2\\x82 f caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n",
        (int)getpid());
    assert_string_equal(drain(), want);
    /* a long line of escapes is cut whole: it still ends in "...\n" */
    char big[2000];
    memset(big, '\033', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ccap_log(CCAP_LOG_WARN, "%s", big);
    const char *s = drain();
    size_t n = strlen(s);
    assert_true(n <= 1024);
    assert_memory_equal(s + n - 4, "...\n", 4);
    assert_null(strchr(s, '\033'));
}

/* One line per interval: the first call passes, those within the interval
 * are counted, the first after it passes with that count; take empties it. */
static void test_every(void **state)
{
    struct ccap_log_every e = { 0 };
    unsigned held = 99;
    (void)state;

    assert_true(ccap_log_every(&e, 1000, 10000, &held));
    assert_int_equal(held, 0);
    for (int i = 0; i < 19; i++)
        assert_false(ccap_log_every(&e, 1000 + i * 100, 10000, &held));
    assert_false(ccap_log_every(&e, 10999, 10000, &held));
    assert_true(ccap_log_every(&e, 11000, 10000, &held));
    assert_int_equal(held, 20);
    assert_false(ccap_log_every(&e, 11001, 10000, &held));
    assert_false(ccap_log_every(&e, 11002, 10000, &held));
    assert_int_equal(ccap_log_every_take(&e), 2);
    assert_int_equal(ccap_log_every_take(&e), 0);
    assert_true(ccap_log_every(&e, 30000, 10000, &held));
    assert_int_equal(held, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_level_parse),
        cmocka_unit_test(test_format_and_levels),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_rate_limit),
        cmocka_unit_test(test_threads_whole_lines),
        cmocka_unit_test(test_syslog_not_stderr),
        cmocka_unit_test(test_escapes_controls),
        cmocka_unit_test(test_flush_and_fork),
        cmocka_unit_test(test_every),
    };
    return cmocka_run_group_tests(tests, capture, restore);
}
