/* test_fileset.c -- unit tests for the files a configuration is made of (core/fileset.c): recorded once, served again, handed over. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "fileset.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/ccap-test-fileset.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* DIR/NAME with TEXT in it; returns a static path (one of two, alternating). */
static const char *put(const char *name, const char *text)
{
    static char paths[2][160];
    static int k;
    char *p = paths[k++ % 2];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

/* A recording set keeps what it read from disk; a file removed afterwards
 * is still served from it, with its stat; HEAD cuts, a whole read past CAP
 * is -EFBIG. */
static void test_record_and_serve(void **state)
{
    (void)state;
    struct ccap_fileset fs = { .record = true };
    char *out, why[128];
    size_t len;
    struct stat st;
    const char *a = put("a.txt", "hello\nworld\n");
    assert_int_equal(ccap_fileset_read(&fs, a, 100, false, &out, &len, &st, why, sizeof why), 0);
    assert_int_equal(len, 12);
    free(out);
    assert_int_equal(fs.n, 1);
    ino_t ino = st.st_ino;
    unlink(a);
    assert_int_equal(ccap_fileset_read(&fs, a, 100, false, &out, &len, &st, why, sizeof why), 0);
    assert_string_equal(out, "hello\nworld\n");
    assert_int_equal(st.st_ino, ino);
    free(out);
    assert_int_equal(ccap_fileset_read(&fs, a, 5, true, &out, &len, NULL, why, sizeof why), 0);
    assert_string_equal(out, "hello");
    free(out);
    assert_int_equal(ccap_fileset_read(&fs, a, 5, false, &out, &len, NULL, why, sizeof why), -EFBIG);
    assert_null(out);
    /* a file it does not have, and that is not on disk */
    assert_int_equal(ccap_fileset_read(&fs, a + 1, 100, false, &out, &len, NULL, why, sizeof why), -ENOENT);
    assert_string_equal(why, "cannot open: No such file or directory");
    assert_int_equal(fs.n, 1);
    ccap_fileset_free(&fs);
    assert_int_equal(fs.n, 0);
}

/* encode then decode gives the same files, bytes (a NUL and a newline
 * within them too) and stat; every truncation of the encoding, and a
 * few forgeries, are refused. */
static void test_roundtrip(void **state)
{
    (void)state;
    struct ccap_fileset fs = { .record = true }, back;
    char *out, *enc, why[128];
    size_t len, n;
    assert_int_equal(ccap_fileset_read(&fs, put("one", "x = 1;\n"), 100, false, &out, &len, NULL, why, 128), 0);
    free(out);
    const char *two = put("two", "");
    FILE *f = fopen(two, "w");
    fwrite("a\0b\nE\n", 1, 6, f); /* a NUL, and what looks like the end mark */
    fclose(f);
    assert_int_equal(ccap_fileset_read(&fs, two, 100, false, &out, &len, NULL, why, 128), 0);
    assert_int_equal(len, 6);
    free(out);
    assert_int_equal(ccap_fileset_encode(&fs, &enc, &n), 0);
    assert_int_equal(ccap_fileset_decode(enc, n, &back), 0);
    assert_int_equal(back.n, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(back.v[i].path, fs.v[i].path);
        assert_int_equal(back.v[i].len, fs.v[i].len);
        assert_memory_equal(back.v[i].data, fs.v[i].data, fs.v[i].len);
        assert_int_equal(back.v[i].st.st_ino, fs.v[i].st.st_ino);
        assert_int_equal(back.v[i].st.st_mtim.tv_nsec, fs.v[i].st.st_mtim.tv_nsec);
        assert_int_equal(back.v[i].st.st_mode, fs.v[i].st.st_mode);
    }
    ccap_fileset_free(&back);
    for (size_t cut = 0; cut < n; cut++) {
        assert_int_equal(ccap_fileset_decode(enc, cut, &back), -EINVAL);
        ccap_fileset_free(&back);
    }
    static const char *const forged[] = {
        "conncap-files 2\nE\n",
        "conncap-files 1\nF 1 1 0 0 0 0 0 0 0 0\nab\nF 1 1 0 0 0 0 0 0 0 0\nab\nE\n", /* one path twice */
        "conncap-files 1\nF 0 1 0 0 0 0 0 0 0 0\nb\nE\n",                             /* an empty path */
        "conncap-files 1\nF 1 9 0 0 0 0 0 0 0 0\nab\nE\n",                            /* longer than the buffer */
        "conncap-files 1\nF 1 1 0 0 0 0 0 1000000000 0 0\nab\nE\n",                   /* nanoseconds */
        "conncap-files 1\nF 1 1 0 0 0 0 0 0 0\nab\nE\n",                              /* a field short */
        "conncap-files 1\nF 1 1 0 0 0 0 0 0 0 0 0\nab\nE\n",                          /* a field more */
        "conncap-files 1\nF 1 -1 0 0 0 0 0 0 0 0\nab\nE\n",
        "conncap-files 1\nF 1 1 0 0 0 0 0 0 0 0\nabE\n",
        "conncap-files 1\nE\nx",
    };
    for (size_t i = 0; i < sizeof forged / sizeof *forged; i++) {
        int rc = ccap_fileset_decode(forged[i], strlen(forged[i]), &back);
        if (rc != -EINVAL)
            fail_msg("forgery %zu decoded (%d)", i, rc);
        ccap_fileset_free(&back);
    }
    assert_int_equal(ccap_fileset_decode("conncap-files 1\nF 1 1 0 0 0 0 0 0 0 0\nab\nE\n", 43, &back), 0);
    assert_string_equal(back.v[0].path, "a");
    assert_string_equal(back.v[0].data, "b");
    ccap_fileset_free(&back);
    explicit_bzero(enc, n);
    free(enc);
    ccap_fileset_free(&fs);
}

/* A configuration loaded through a recording set can be loaded again from
 * the set alone: the file, its @include, its password file and its TLS
 * file gone from the disk. */
static void test_config_from_set(void **state)
{
    (void)state;
    char text[1024], inc[160], pw[160], ca[160], err[512];
    snprintf(inc, sizeof inc, "%s", put("inc.conf", "semaphores = ( { name = \"s\"; limit = 2; } );\n"));
    snprintf(pw, sizeof pw, "%s", put("pw", "sekrit\nsecond line\n"));
    chmod(pw, 0600);
    snprintf(ca, sizeof ca, "%s", put("ca.pem", "CA BYTES"));
    snprintf(text, sizeof text,
             "redis = { host = \"h\"; password_file = \"%s\"; tls = { ca_file = \"%s\"; }; };\n"
             "@include \"inc.conf\"\nrules = ( { semaphore = \"s\"; match = ( \"1.2.3.4\" ); } );\n",
             pw, ca);
    const char *top = put("top.conf", text);
    struct ccap_fileset fs = { .record = true };
    struct ccap_config *cfg = NULL;
    assert_int_equal(ccap_config_load_from(top, &fs, 0, &cfg, err, sizeof err), 0);
    assert_int_equal(fs.n, 4);
    ccap_config_free(cfg);
    unlink(inc); /* gone from the disk: served from the set */
    unlink(pw);
    unlink(ca);
    unlink(top);
    assert_int_equal(ccap_config_load_from(top, &fs, 0, &cfg, err, sizeof err), 0);
    assert_string_equal(cfg->redis.password, "sekrit");
    assert_string_equal(cfg->redis.tls.ca_pem, "CA BYTES");
    assert_int_equal(cfg->sems[0].limit, 2);
    ccap_config_free(cfg);
    assert_int_equal(ccap_config_load_from(top, NULL, 0, &cfg, err, sizeof err) < 0, 1);
    assert_null(cfg);
    ccap_fileset_free(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_and_serve),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_config_from_set),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
