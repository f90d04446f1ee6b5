/* test_permit.c -- the permit table: references, identity, sweep, ranges. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "permit.h"

static struct ccap_permit *permit_for(int fd, const char *holder)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    struct ccap_permit *p = ccap_permit_new();
    assert_non_null(p);
    p->dev = st.st_dev;
    p->ino = st.st_ino;
    snprintf(p->holder, sizeof(p->holder), "%s", holder);
    return p;
}

static int sock(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    return fd;
}

static void test_untracked_is_definite(void **st)
{
    (void)st;
    int fd = sock();
    assert_false(ccap_ptab_maybe(fd));
    assert_false(ccap_ptab_maybe(-1));
    assert_false(ccap_ptab_maybe(CCAP_PTAB_MAX_FD + 5));
    assert_null(ccap_ptab_detach(fd));
    close(fd);
}

static void test_dup_keeps_until_last(void **st)
{
    (void)st;
    int fd = sock();
    struct ccap_permit *p = permit_for(fd, "a"), *o;
    assert_int_equal(ccap_ptab_attach(fd, p), 0);
    assert_int_equal(ccap_ptab_count(), 1);
    int fd2 = dup(fd);
    assert_null(ccap_ptab_dup(fd, fd2));
    assert_int_equal(p->refs, 2);
    assert_ptr_equal(ccap_ptab_get(fd2, &o), p);
    assert_null(o);
    assert_null(ccap_ptab_detach(fd)); /* one copy left */
    assert_int_equal(ccap_ptab_count(), 1);
    close(fd);
    assert_ptr_equal(ccap_ptab_detach(fd2), p); /* last copy: released once */
    assert_null(ccap_ptab_detach(fd2));
    assert_int_equal(ccap_ptab_count(), 0);
    close(fd2);
    free(p);
}

static void test_dup_over_holder_gives_back(void **st)
{
    (void)st;
    int a = sock(), b = sock();
    struct ccap_permit *pa = permit_for(a, "a"), *pb = permit_for(b, "b");
    ccap_ptab_attach(a, pa);
    ccap_ptab_attach(b, pb);
    dup2(a, b); /* b's socket is gone */
    assert_ptr_equal(ccap_ptab_dup(a, b), pb);
    assert_int_equal(pa->refs, 2);
    assert_ptr_equal(ccap_ptab_detach(b), NULL);
    assert_ptr_equal(ccap_ptab_detach(a), pa);
    close(a);
    close(b);
    free(pa);
    free(pb);
}

static void test_reused_number_is_not_the_old_socket(void **st)
{
    (void)st;
    int fd = sock();
    struct ccap_permit *p = permit_for(fd, "a"), *o;
    ccap_ptab_attach(fd, p);
    close(fd); /* behind the table's back */
    int fd2 = open("/dev/null", O_RDONLY);
    assert_int_equal(fd2, fd); /* same number, other file */
    assert_null(ccap_ptab_get(fd2, &o));
    assert_ptr_equal(o, p); /* handed back as an orphan */
    assert_false(ccap_ptab_maybe(fd2));
    close(fd2);
    free(p);
}

static void test_sweep_finds_closed(void **st)
{
    (void)st;
    int a = sock(), b = sock();
    struct ccap_permit *pa = permit_for(a, "a"), *pb = permit_for(b, "b"), *orph;
    ccap_ptab_attach(a, pa);
    ccap_ptab_attach(b, pb);
    close(b);
    assert_int_equal(ccap_ptab_sweep(&orph), 1);
    assert_ptr_equal(orph, pb);
    assert_null(orph->next);
    assert_int_equal(ccap_ptab_count(), 1);
    assert_int_equal(ccap_ptab_sweep(&orph), 0);
    assert_ptr_equal(ccap_ptab_detach(a), pa);
    close(a);
    free(pa);
    free(pb);
}

static void test_range(void **st)
{
    (void)st;
    int fds[4];
    struct ccap_permit *ps[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = sock();
        ps[i] = permit_for(fds[i], "r");
        ccap_ptab_attach(fds[i], ps[i]);
    }
    struct ccap_permit *l = ccap_ptab_detach_range((unsigned)fds[1], ~0U);
    int n = 0;
    for (struct ccap_permit *p = l; p; p = p->next)
        n++;
    assert_int_equal(n, 3);
    assert_int_equal(ccap_ptab_count(), 1);
    assert_true(ccap_ptab_maybe(fds[0]));
    assert_ptr_equal(ccap_ptab_detach(fds[0]), ps[0]);
    for (int i = 0; i < 4; i++) {
        close(fds[i]);
        free(ps[i]);
    }
}

static void test_beyond_table(void **st)
{
    (void)st;
    struct ccap_permit *p = ccap_permit_new();
    assert_int_equal(ccap_ptab_attach(CCAP_PTAB_MAX_FD, p), -EBADF);
    assert_int_equal(ccap_ptab_attach(-3, p), -EBADF);
    free(p);
}

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        int fd = sock();
        struct ccap_permit *p = permit_for(fd, "t");
        ccap_ptab_attach(fd, p);
        int d = dup(fd);
        free(ccap_ptab_dup(fd, d));
        assert_null(ccap_ptab_detach(fd));
        close(fd);
        assert_ptr_equal(ccap_ptab_detach(d), p);
        close(d);
        free(p);
    }
    return NULL;
}

static void test_threads(void **st)
{
    (void)st;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, hammer, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(ccap_ptab_count(), 0);
}

static void test_take_all(void **st)
{
    (void)st;
    int a = sock(), b = sock();
    ccap_ptab_attach(a, permit_for(a, "a"));
    ccap_ptab_attach(b, permit_for(b, "b"));
    struct ccap_permit *l = ccap_ptab_take_all();
    int n = 0;
    while (l) {
        struct ccap_permit *x = l->next;
        free(l);
        l = x;
        n++;
    }
    assert_int_equal(n, 2);
    assert_false(ccap_ptab_maybe(a));
    assert_int_equal(ccap_ptab_count(), 0);
    close(a);
    close(b);
}

/* A permit's held counter counts it while it is in the table, whatever
 * way it joins or leaves: attach, dup, detach of the last copy, sweep,
 * range, take_all, an exec split and restore. */
static void test_held_count(void **st)
{
    (void)st;
    atomic_int held = 0;
    int a = sock(), b = sock(), c = sock();
    struct ccap_permit *pa = permit_for(a, "a"), *pb = permit_for(b, "b"), *pc = permit_for(c, "c"), *o;
    pa->held = pb->held = pc->held = &held;
    ccap_ptab_attach(a, pa);
    ccap_ptab_attach(b, pb);
    ccap_ptab_attach(c, pc);
    assert_int_equal(held, 3);
    int a2 = dup(a);
    assert_null(ccap_ptab_dup(a, a2));
    assert_int_equal(held, 3); /* two descriptors, one permit */
    assert_null(ccap_ptab_detach(a));
    assert_int_equal(held, 3);
    assert_ptr_equal(ccap_ptab_detach(a2), pa);
    assert_int_equal(held, 2);
    close(b); /* behind the table's back */
    assert_int_equal(ccap_ptab_sweep(&o), 1);
    assert_ptr_equal(o, pb);
    assert_int_equal(held, 1);
    struct ccap_handoff_entry *surv;
    struct ccap_ptab_ent *gone;
    struct ccap_permit *rel, *orph;
    size_t ns, ng;
    fcntl(c, F_SETFD, FD_CLOEXEC); /* does not survive an exec: split off */
    assert_int_equal(ccap_ptab_exec_split(&surv, &ns, &gone, &ng, &rel, &orph), 0);
    assert_ptr_equal(rel, pc);
    assert_int_equal(held, 0);
    assert_null(ccap_ptab_exec_restore(gone, ng)); /* the exec failed: back in the table */
    assert_int_equal(held, 1);
    free(gone);
    free(surv);
    assert_ptr_equal(ccap_ptab_take_all(), pc);
    assert_int_equal(held, 0);
    ccap_ptab_attach(c, pc);
    assert_ptr_equal(ccap_ptab_detach_range(0, ~0u), pc);
    assert_int_equal(held, 0);
    close(a);
    close(a2);
    close(c);
    free(pa);
    free(pb);
    free(pc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_untracked_is_definite),
        cmocka_unit_test(test_dup_keeps_until_last),
        cmocka_unit_test(test_dup_over_holder_gives_back),
        cmocka_unit_test(test_reused_number_is_not_the_old_socket),
        cmocka_unit_test(test_sweep_finds_closed),
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_beyond_table),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_take_all),
        cmocka_unit_test(test_held_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
