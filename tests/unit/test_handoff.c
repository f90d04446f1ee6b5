/* test_handoff.c -- CONNCAP_PERMITS encoding/decoding (bad input too), envp copies, exec split/restore, adoption. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "handoff.h"
#include "permit.h"

static struct ccap_handoff_entry entry(int fd, unsigned long long dev, unsigned long long ino, int lease,
                                       const char *sem, const char *holder)
{
    struct ccap_handoff_entry e = { .fd = fd, .dev = (dev_t)dev, .ino = (ino_t)ino, .lease_ms = lease };
    snprintf(e.sem, sizeof(e.sem), "%s", sem);
    snprintf(e.holder, sizeof(e.holder), "%s", holder);
    return e;
}

/* The value part of an encoded "CONNCAP_PERMITS=..." string. */
static const char *value_of(const char *s)
{
    assert_int_equal(strncmp(s, CCAP_HANDOFF_ENV "=", strlen(CCAP_HANDOFF_ENV) + 1), 0);
    return s + strlen(CCAP_HANDOFF_ENV) + 1;
}

static void test_roundtrip(void **st)
{
    (void)st;
    struct ccap_handoff_entry in[3] = {
        entry(3, 2049, 123456789012ULL, 30000, "partner-api", "web-3/4711/3/10.0.0.5:443/5f3a9c01.12"),
        entry(7, 0, 1, 1, "a.b_c", "h/1/7/[2001:db8::1]:8080/00000001.0"),
        entry(1048575, ~0ULL, ~0ULL, INT_MAX, "x", "odd ,;%= \x01\xff holder"),
    };
    char *s;
    size_t kept;
    int len = ccap_handoff_encode(4711, in, 3, &s, &kept);
    assert_true(len > 0);
    assert_int_equal((size_t)len, strlen(s));
    assert_int_equal(kept, 3);
    assert_null(strchr(value_of(s), ' ')); /* escaped: one token in env */
    pid_t pid;
    struct ccap_handoff_entry *out;
    size_t n;
    assert_int_equal(ccap_handoff_decode(value_of(s), &pid, &out, &n), 0);
    assert_int_equal(pid, 4711);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(out[i].fd, in[i].fd);
        assert_true(out[i].dev == in[i].dev);
        assert_true(out[i].ino == in[i].ino);
        assert_int_equal(out[i].lease_ms, in[i].lease_ms);
        assert_string_equal(out[i].sem, in[i].sem);
        assert_string_equal(out[i].holder, in[i].holder);
    }
    assert_int_equal(ccap_handoff_pid(value_of(s)), 4711);
    free(out);
    free(s);
}

static void test_encode_rejects(void **st)
{
    (void)st;
    struct ccap_handoff_entry e = entry(3, 1, 2, 1000, "s", "h");
    char *s = (char *)1;
    assert_int_equal(ccap_handoff_encode(0, &e, 1, &s, NULL), -EINVAL);
    assert_null(s);
    assert_int_equal(ccap_handoff_encode(-3, &e, 1, &s, NULL), -EINVAL);
    assert_int_equal(ccap_handoff_encode(1, NULL, 1, &s, NULL), -EINVAL);
    e.fd = -1;
    assert_int_equal(ccap_handoff_encode(1, &e, 1, &s, NULL), -EINVAL);
}

static void test_encode_size_limit(void **st)
{
    (void)st;
    size_t n = 2000;
    struct ccap_handoff_entry *e = calloc(n, sizeof(*e));
    char holder[CCAP_HOLDER_MAX];
    memset(holder, ',', sizeof(holder) - 1); /* every byte escaped: 3 bytes each */
    holder[sizeof(holder) - 1] = '\0';
    for (size_t i = 0; i < n; i++)
        e[i] = entry((int)i, 1, i, 1000, "sem", holder);
    char *s;
    size_t kept;
    int len = ccap_handoff_encode(99, e, n, &s, &kept);
    assert_true(len > 0 && len < CCAP_HANDOFF_MAX_LEN);
    assert_true(kept > 10 && kept < n);
    pid_t pid;
    struct ccap_handoff_entry *out;
    size_t got;
    assert_int_equal(ccap_handoff_decode(value_of(s), &pid, &out, &got), 0);
    assert_int_equal(got, kept);
    assert_string_equal(out[kept - 1].holder, holder);
    free(out);
    free(s);
    free(e);
}

static void test_decode_bad_input(void **st)
{
    (void)st;
    static const char *bad[] = {
        "",
        "1",
        "1:",
        "1::",
        "2:5:",
        "1:0:",
        "1:-5:",
        "1:+5:",
        "1: 5:",
        "1:abc:",
        "1:5",
        "1:99999999999999999999:",
        "1:5:3",
        "1:5:3,",
        "1:5:3,1,2,1000,s",
        "1:5:3,1,2,1000,s,",
        "1:5:3,1,2,1000,,h",
        "1:5:x,1,2,1000,s,h",
        "1:5:-3,1,2,1000,s,h",
        "1:5:1048576,1,2,1000,s,h",
        "1:5:3,18446744073709551616,2,1000,s,h",
        "1:5:3,1,2,0,s,h",
        "1:5:3,1,2,2147483648,s,h",
        "1:5:3,1,2,1000,s,h;",
        "1:5:3,1,2,1000,s,h;;4,1,2,1000,s,h",
        "1:5:3,1,2,1000,s,h,extra",
        "1:5:3,1,2,1000,s,h h",
        "1:5:3,1,2,1000,s,%G1",
        "1:5:3,1,2,1000,s,%4",
        "1:5:3,1,2,1000,s,%00",
        "1:5:3,1,2,1000,s,h\n",
        "1:5:;3,1,2,1000,s,h",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pid_t pid = 0;
        struct ccap_handoff_entry *out = (void *)1;
        size_t n = 9;
        if (ccap_handoff_decode(bad[i], &pid, &out, &n) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_null(out);
        assert_int_equal(n, 0);
    }
    /* a field one byte too long */
    char v[512];
    char sem[CCAP_SEM_NAME_MAX + 8];
    memset(sem, 's', CCAP_SEM_NAME_MAX);
    sem[CCAP_SEM_NAME_MAX] = '\0';
    snprintf(v, sizeof(v), "1:5:3,1,2,1000,%s,h", sem);
    pid_t pid;
    struct ccap_handoff_entry *out;
    size_t n;
    assert_int_equal(ccap_handoff_decode(v, &pid, &out, &n), -EINVAL);
    sem[71] = '\0';
    snprintf(v, sizeof(v), "1:5:3,1,2,1000,%s,h", sem);
    assert_int_equal(ccap_handoff_decode(v, &pid, &out, &n), 0);
    assert_int_equal(n, 1);
    free(out);
    /* no entries at all is well formed */
    assert_int_equal(ccap_handoff_decode("1:5:", &pid, &out, &n), 0);
    assert_int_equal(n, 0);
    assert_null(out);
    assert_int_equal(ccap_handoff_pid(NULL), -EINVAL);
    assert_int_equal(ccap_handoff_pid("1:0:"), -EINVAL);
    assert_int_equal(ccap_handoff_pid("1:2147483648:"), -EINVAL);
}

static void test_decode_too_many(void **st)
{
    (void)st;
    size_t n = CCAP_HANDOFF_MAX_ENTRIES + 1;
    char *v = malloc(n * 16 + 16), *p = v;
    p += sprintf(p, "1:5:");
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s3,1,2,9,s,h", i ? ";" : "");
    pid_t pid;
    struct ccap_handoff_entry *out;
    size_t got;
    assert_int_equal(ccap_handoff_decode(v, &pid, &out, &got), -EINVAL);
    free(v);
}

static void test_envp(void **st)
{
    (void)st;
    char *envp[] = {
        "A=1", CCAP_HANDOFF_ENV "=1:2:", "B=2", CCAP_HANDOFF_ENV "=old", "CONNCAP_PERMITSX=keep", NULL
    };
    assert_true(ccap_handoff_in_envp(envp));
    char **e = ccap_handoff_envp(envp, CCAP_HANDOFF_ENV "=new");
    assert_non_null(e);
    assert_string_equal(e[0], "A=1");
    assert_string_equal(e[1], "B=2");
    assert_string_equal(e[2], "CONNCAP_PERMITSX=keep");
    assert_string_equal(e[3], CCAP_HANDOFF_ENV "=new");
    assert_null(e[4]);
    free(e);
    e = ccap_handoff_envp(NULL, NULL);
    assert_non_null(e);
    assert_null(e[0]);
    free(e);
    char *plain[] = { "A=1", NULL };
    assert_false(ccap_handoff_in_envp(plain));
    assert_false(ccap_handoff_in_envp(NULL));
}

static struct ccap_permit *permit_for(int fd, const char *holder)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    struct ccap_permit *p = ccap_permit_new();
    p->dev = st.st_dev;
    p->ino = st.st_ino;
    p->lease_ms = 5000;
    snprintf(p->sem, sizeof(p->sem), "sem");
    snprintf(p->holder, sizeof(p->holder), "%s", holder);
    assert_int_equal(ccap_ptab_attach(fd, p), 0);
    return p;
}

static void test_exec_split_restore(void **st)
{
    (void)st;
    int keep = socket(AF_INET, SOCK_STREAM, 0);                /* survives */
    int gone = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* released */
    int mixed = socket(AF_INET, SOCK_STREAM, 0);               /* survives via one fd */
    int mixed2 = fcntl(mixed, F_DUPFD_CLOEXEC, 0);
    int stale = socket(AF_INET, SOCK_STREAM, 0);
    permit_for(keep, "keep");
    struct ccap_permit *pg = permit_for(gone, "gone");
    struct ccap_permit *pm = permit_for(mixed, "mixed");
    assert_null(ccap_ptab_dup(mixed, mixed2));
    permit_for(stale, "stale");
    close(stale);
    int reused = open("/dev/null", O_RDONLY); /* stale's number, another file */
    assert_int_equal(reused, stale);
    assert_int_equal(ccap_ptab_count(), 4);

    struct ccap_handoff_entry *surv;
    struct ccap_ptab_ent *g;
    struct ccap_permit *released, *orphans;
    size_t nsurv, ngone;
    assert_int_equal(ccap_ptab_exec_split(&surv, &nsurv, &g, &ngone, &released, &orphans), 0);
    assert_int_equal(nsurv, 2); /* keep, mixed (not mixed2) */
    for (size_t i = 0; i < nsurv; i++) {
        assert_true(surv[i].fd == keep || surv[i].fd == mixed);
        assert_string_equal(surv[i].holder, surv[i].fd == keep ? "keep" : "mixed");
        assert_int_equal(surv[i].lease_ms, 5000);
    }
    assert_int_equal(ngone, 1);
    assert_int_equal(g[0].fd, gone);
    assert_ptr_equal(released, pg);
    assert_null(released->next);
    assert_non_null(orphans);
    assert_string_equal(orphans->holder, "stale");
    free(orphans);
    assert_int_equal(ccap_ptab_count(), 2); /* keep and mixed stay */
    assert_false(ccap_ptab_maybe(gone));
    assert_int_equal(pm->refs, 2);

    /* the exec failed: the released permit comes back on its descriptor */
    assert_null(ccap_ptab_exec_restore(g, ngone));
    assert_true(ccap_ptab_maybe(gone));
    assert_int_equal(ccap_ptab_count(), 3);
    free(g);
    free(surv);

    /* again, but the socket is gone before the restore: returned as dead */
    assert_int_equal(ccap_ptab_exec_split(&surv, &nsurv, &g, &ngone, &released, &orphans), 0);
    assert_ptr_equal(released, pg);
    close(gone);
    struct ccap_permit *dead = ccap_ptab_exec_restore(g, ngone);
    assert_ptr_equal(dead, pg);
    free(dead);
    free(g);
    free(surv);
    struct ccap_permit *all = ccap_ptab_take_all();
    while (all) {
        struct ccap_permit *n = all->next;
        free(all);
        all = n;
    }
    close(keep);
    close(mixed);
    close(mixed2);
    close(reused);
}

static void test_dup_of_stale_entry(void **st)
{
    (void)st;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct ccap_permit *p = permit_for(s, "old");
    close(s); /* behind the table's back */
    int f = open("/dev/null", O_RDONLY);
    assert_int_equal(f, s);
    int d = dup(f);
    struct ccap_permit *gone = ccap_ptab_dup(f, d);
    assert_ptr_equal(gone, p); /* dropped, not shared with d */
    assert_false(ccap_ptab_maybe(d));
    assert_false(ccap_ptab_maybe(f));
    free(gone);
    close(d);
    close(f);
}

static void test_adopt(void **st)
{
    (void)st;
    int a = socket(AF_INET, SOCK_STREAM, 0), b = socket(AF_INET, SOCK_STREAM, 0);
    int a2 = dup(a);
    struct stat sa, sb;
    fstat(a, &sa);
    fstat(b, &sb);
    struct ccap_handoff_entry e[4] = {
        entry(a, sa.st_dev, sa.st_ino, 1000, "s", "holder-a"),
        entry(a2, sa.st_dev, sa.st_ino, 1000, "s", "holder-a"),
        entry(b, sb.st_dev, sb.st_ino + 1, 1000, "s", "holder-b"), /* not that socket any more */
        entry(b, sb.st_dev, sb.st_ino, 1000, "t", "holder-c"),
    };
    char *s;
    assert_true(ccap_handoff_encode(getpid(), e, 4, &s, NULL) > 0);
    setenv("CONNCAP_CONFIG", "/nonexistent/conncap.conf", 1); /* orphans: no Redis */
    putenv(s);
    ccap_handoff_record();
    assert_true(ccap_handoff_waiting());
    ccap_handoff_adopt();
    assert_false(ccap_handoff_waiting());
    struct ccap_permit *o, *p = ccap_ptab_get(a, &o);
    assert_non_null(p);
    assert_string_equal(p->holder, "holder-a");
    assert_int_equal(p->refs, 2);
    assert_ptr_equal(ccap_ptab_get(a2, &o), p);
    p = ccap_ptab_get(b, &o);
    assert_non_null(p);
    assert_string_equal(p->holder, "holder-c");
    assert_int_equal(ccap_ptab_count(), 2);
    ccap_handoff_adopt(); /* once only */
    assert_int_equal(ccap_ptab_count(), 2);
    struct ccap_permit *all = ccap_ptab_take_all();
    while (all) {
        struct ccap_permit *n = all->next;
        free(all);
        all = n;
    }
    unsetenv(CCAP_HANDOFF_ENV);
    free(s);
    close(a);
    close(a2);
    close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_encode_size_limit),
        cmocka_unit_test(test_decode_bad_input),
        cmocka_unit_test(test_decode_too_many),
        cmocka_unit_test(test_envp),
        cmocka_unit_test(test_exec_split_restore),
        cmocka_unit_test(test_dup_of_stale_entry),
        cmocka_unit_test(test_adopt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
