/* test_cli_ops.c -- unit tests for the CLI's holder id parser (cli/ops.c ccap_ops_parse_holder). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "ops.h"

static void test_holder_ids_the_shim_writes(void **state)
{
    (void)state;
    struct ccap_ops_holder h;
    assert_int_equal(ccap_ops_parse_holder("web1/4242/7/10.0.0.5:443/0a1b2c3d.0", &h), 0);
    assert_string_equal(h.host, "web1");
    assert_int_equal(h.pid, 4242);
    assert_int_equal(h.fd, 7);
    assert_string_equal(h.dest, "10.0.0.5:443");
    assert_string_equal(h.nonce, "0a1b2c3d.0");
    assert_int_equal(ccap_ops_parse_holder("db/2147483647/0/[2001:db8::1]:5432/ffffffff.9", &h), 0);
    assert_int_equal(h.pid, 2147483647);
    assert_int_equal(h.fd, 0);
    assert_string_equal(h.dest, "[2001:db8::1]:5432");
    assert_string_equal(h.prog, ""); /* an id of before the program part */
    /* with the program (host/pid/fd/destination/program/nonce.seq) */
    assert_int_equal(ccap_ops_parse_holder("web1/4242/7/10.0.0.5:443/nginx/0a1b2c3d.0", &h), 0);
    assert_string_equal(h.host, "web1");
    assert_int_equal(h.pid, 4242);
    assert_int_equal(h.fd, 7);
    assert_string_equal(h.dest, "10.0.0.5:443");
    assert_string_equal(h.prog, "nginx");
    assert_string_equal(h.nonce, "0a1b2c3d.0");
    assert_int_equal(ccap_ops_parse_holder("db/1/0/[2001:db8::1]:5432/python3.11/ffffffff.9", &h), 0);
    assert_string_equal(h.dest, "[2001:db8::1]:5432");
    assert_string_equal(h.prog, "python3.11");
    assert_int_equal(ccap_ops_parse_holder("h/5/1/d//n.1", &h), -1); /* an empty program */
    assert_string_equal(h.prog, "");
}

/* Numbers the shim never writes: out of int range (the fuzzer's find: an
 * fd of 3555555555512 was shown as such), signs, spaces, leading zeros. */
static void test_holder_ids_with_other_numbers(void **state)
{
    (void)state;
    static const char *bad[] = {
        "h/12/3555555555512/55z/dest",
        "h/99999999999999999999/1/d/n",
        "h/2147483648/1/d/n",
        "h/1/2147483648/d/n",
        "h/+5/1/d/n",
        "h/ 5/1/d/n",
        "h/5/-0/d/n",
        "h/05/1/d/n",
        "h/5/01/d/n",
        "h/0/1/d/n",
        "h/5/1 /d/n",
        "h/5//d/n",
        "h//1/d/n",
        "/5/1/d/n",
        "h/5/1//n",
        "h/5/1/d/",
        "h/5/1/d",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ccap_ops_holder h;
        memset(&h, 0x55, sizeof h);
        if (ccap_ops_parse_holder(bad[i], &h) != -1)
            fail_msg("accepted \"%s\" (pid %ld fd %ld)", bad[i], h.pid, h.fd);
        assert_int_equal(h.pid, 0);
        assert_int_equal(h.fd, 0);
        assert_string_equal(h.host, "");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holder_ids_the_shim_writes),
        cmocka_unit_test(test_holder_ids_with_other_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
