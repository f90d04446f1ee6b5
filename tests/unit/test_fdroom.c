/* test_fdroom.c -- the shim's descriptors above the soft RLIMIT_NOFILE: where they land, the limit left as it was, no room, EMFILE. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdroom.h"

#define SOFT 64

static struct rlimit saved;

static int setup(void **state)
{
    (void)state;
    getrlimit(RLIMIT_NOFILE, &saved);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    setrlimit(RLIMIT_NOFILE, &saved);
    return 0;
}

/* Sets the soft limit to SOFT (the hard one as it is); skips when the hard
 * limit leaves no room above it. */
static void soft_limit(void)
{
    struct rlimit rl = { SOFT, saved.rlim_max };

    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max <= 2 * SOFT)
        skip();
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static rlim_t soft_now(void)
{
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    return rl.rlim_cur;
}

/* A copy lands at or above the soft limit, with FD_CLOEXEC, and the soft
 * limit is back; errno is the caller's. */
static void test_dup_above_soft(void **state)
{
    (void)state;
    soft_limit();
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0 && s < SOFT);
    errno = EINTR;
    int d = ccap_fdroom_dup(s);
    assert_int_equal(errno, EINTR);
    assert_true(d >= SOFT);
    assert_int_equal(soft_now(), SOFT);
    assert_true(fcntl(d, F_GETFD) & FD_CLOEXEC);
    int type = 0;
    socklen_t l = sizeof type;
    assert_int_equal(getsockopt(d, SOL_SOCKET, SO_TYPE, &type, &l), 0); /* valid above the limit */
    assert_int_equal(type, SOCK_STREAM);
    close(s);
    close(d);
}

/* dup3 onto a number above the soft limit (where dup3 alone fails with
 * EBADF); a bad OLDFD is still EBADF. */
static void test_dup3_above_soft(void **state)
{
    (void)state;
    soft_limit();
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    assert_int_equal(dup3(s, SOFT + 5, O_CLOEXEC), -1);
    assert_int_equal(errno, EBADF);
    errno = EINTR;
    assert_int_equal(ccap_fdroom_dup3(s, SOFT + 5, O_CLOEXEC), SOFT + 5);
    assert_int_equal(errno, EINTR);
    assert_int_equal(soft_now(), SOFT);
    assert_true(fcntl(SOFT + 5, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(ccap_fdroom_dup3(SOFT + 20, SOFT + 6, 0), -EBADF);
    close(SOFT + 5);
    close(s);
}

/* Soft == hard: no room, nothing changed. */
static void test_no_room(void **state)
{
    (void)state;
    struct rlimit rl = { SOFT, SOFT };
    if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < SOFT)
        skip();
    /* (lowering the hard limit cannot be undone unprivileged: in a child) */
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        int ok = setrlimit(RLIMIT_NOFILE, &rl) == 0 && ccap_fdroom_dup(0) == -ENOSPC && soft_now() == SOFT;
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(p, &st, 0), p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Every number below the soft limit taken: socket() fails with EMFILE, and
 * ccap_fdroom_socket makes it in the room; the program's next open still
 * fails with EMFILE, as it would without the shim. */
static void test_socket_at_emfile(void **state)
{
    (void)state;
    soft_limit();
    int held[SOFT], n = 0, fd;
    while (n < SOFT && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        held[n++] = fd;
    assert_int_equal(open("/dev/null", O_RDONLY), -1);
    assert_int_equal(errno, EMFILE);
    int s = ccap_fdroom_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s >= SOFT);
    assert_int_equal(soft_now(), SOFT);
    assert_int_equal(open("/dev/null", O_RDONLY), -1);
    assert_int_equal(errno, EMFILE);
    close(s);
    while (n > 0)
        close(held[--n]);
}

/* The room starts at the soft limit in force at each call: one the program
 * raised since is its own, and stays. */
static void test_program_limit_kept(void **state)
{
    (void)state;
    soft_limit();
    int d = ccap_fdroom_dup(0);
    assert_true(d >= SOFT);
    close(d);
    struct rlimit rl = { SOFT + 10, saved.rlim_max };
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    d = ccap_fdroom_dup(0);
    assert_true(d >= SOFT + 10);
    assert_int_equal(soft_now(), SOFT + 10);
    close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dup_above_soft, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dup3_above_soft, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_room, setup, teardown),
        cmocka_unit_test_setup_teardown(test_socket_at_emfile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_program_limit_kept, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
