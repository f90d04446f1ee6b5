/* test_env.c -- unit tests for the CONNCAP_* environment copy (core/env.c): taken once, immune to later changes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "env.h"

/* Builds a fresh environ from ENTRIES (writable copies, as the kernel's). */
static char **make_env(const char *const *entries, size_t n, char **strs)
{
    static char *arr[16];
    for (size_t i = 0; i < n; i++)
        arr[i] = strs[i] = strdup(entries[i]);
    arr[n] = NULL;
    environ = arr;
    return arr;
}

static void test_copy_survives_clearing(void **state)
{
    (void)state;
    const char *e[] = { "PATH=/bin", "CONNCAP_CONFIG=/etc/a.conf", "CONNCAP_PERMITS=1:42:", "CONNCAP_X=y",
                        "XCONNCAP_CONFIG=no" };
    char *strs[5];
    make_env(e, 5, strs);
    ccap_env_capture();
    /* what nginx does to its workers: a new, empty environ, the old strings overwritten */
    for (int i = 0; i < 5; i++)
        memset(strs[i], 'x', strlen(strs[i]));
    environ = NULL;
    assert_string_equal(ccap_env_get("CONNCAP_CONFIG"), "/etc/a.conf");
    assert_string_equal(ccap_env_get("CONNCAP_PERMITS"), "1:42:");
    assert_string_equal(ccap_env_get("CONNCAP_X"), "y");
    assert_null(ccap_env_get("CONNCAP_CONF")); /* a prefix of a name is not the name */
    assert_null(ccap_env_get("CONNCAP_Y"));
    assert_int_equal(ccap_env_dropped(), 0);
    for (int i = 0; i < 5; i++)
        free(strs[i]);
}

static void test_later_setenv_ignored(void **state)
{
    (void)state;
    const char *e[] = { "CONNCAP_CONFIG=/first", "CONNCAP_CONFIG=/second" };
    char *strs[2];
    make_env(e, 2, strs);
    ccap_env_capture();
    assert_string_equal(ccap_env_get("CONNCAP_CONFIG"), "/first"); /* the first wins, as getenv */
    environ = NULL;
    setenv("CONNCAP_CONFIG", "/later", 1);
    setenv("OTHER_PASSWORD", "pw", 1);
    assert_string_equal(ccap_env_get("CONNCAP_CONFIG"), "/first");
    assert_string_equal(ccap_env_get("OTHER_PASSWORD"), "pw"); /* not ours: read now */
    for (int i = 0; i < 2; i++)
        free(strs[i]);
}

/* Two values near the kernel's limit for one string both fit; a third big
 * one is left out and counted, never overflowing the copy. */
static void test_bounded(void **state)
{
    (void)state;
    size_t big = 128 * 1024 - 32;
    char *c = malloc(big + 16), *p = malloc(big + 16), *x = malloc(big + 16);
    strcpy(c, "CONNCAP_CONFIG=");
    memset(c + 15, 'c', big - 15);
    c[big] = '\0';
    strcpy(p, "CONNCAP_PERMITS=");
    memset(p + 16, 'p', big - 16);
    p[big] = '\0';
    strcpy(x, "CONNCAP_ZZZ=");
    memset(x + 12, 'z', big - 12);
    x[big] = '\0';
    char *arr[] = { x, c, p, NULL }; /* the unknown one first in environ */
    environ = arr;
    ccap_env_capture();
    assert_int_equal(strlen(ccap_env_get("CONNCAP_CONFIG")), big - 15);
    assert_int_equal(strlen(ccap_env_get("CONNCAP_PERMITS")), big - 16);
    assert_null(ccap_env_get("CONNCAP_ZZZ"));
    assert_int_equal(ccap_env_dropped(), 1);
    environ = NULL;
    free(c);
    free(p);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_survives_clearing),
        cmocka_unit_test(test_later_setenv_ignored),
        cmocka_unit_test(test_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
