/* test_tls.c -- the TLS layer without a server: OpenSSL loaded only on demand, no SIGPIPE from a write to a closed peer, clear errors for bad files. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "tls.h"

static struct ccap_tls_conf conf(void)
{
    struct ccap_tls_conf c = { .enabled = true, .verify = true, .sentinels = true };
    return c;
}

/* Nothing loads OpenSSL before the first context. */
static void test_loaded_on_demand(void **state)
{
    (void)state;
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    bool mapped = false;
    assert_false(ccap_tls_loaded());
    assert_non_null(maps);
    while (fgets(line, sizeof line, maps))
        mapped |= strstr(line, "libssl.so") != NULL;
    fclose(maps);
    assert_false(mapped);
    struct ccap_tls *t = NULL;
    struct ccap_tls_conf c = conf();
    char err[256];
    assert_int_equal(ccap_tls_new(&c, &t, err, sizeof err), 0);
    assert_true(ccap_tls_loaded());
    ccap_tls_free(t);
}

/* A handshake towards a peer that is gone: an error, never SIGPIPE (the
 * default action, which ends the process, is in force). */
static void test_no_sigpipe(void **state)
{
    (void)state;
    int sv[2];
    struct ccap_tls *t = NULL;
    struct ccap_tls_conn *cn = NULL;
    struct ccap_tls_conf c = conf();
    char err[256] = "";
    short want = 0;
    signal(SIGPIPE, SIG_DFL);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[1]);
    assert_int_equal(ccap_tls_new(&c, &t, err, sizeof err), 0);
    assert_int_equal(ccap_tls_conn_new(t, sv[0], "redis.example", &cn, err, sizeof err), 0);
    int rc = ccap_tls_handshake(cn, &want, err, sizeof err);
    assert_true(rc == -EPIPE || rc == -EIO || rc == -EPROTO);
    char buf[16];
    assert_true(ccap_tls_write(cn, "PING\r\n", 6, &want, err, sizeof err) < 0);
    assert_true(ccap_tls_read(cn, buf, sizeof buf, &want, err, sizeof err) <= 0);
    ccap_tls_conn_free(cn);
    ccap_tls_free(t);
    close(sv[0]);
}

/* Files OpenSSL cannot use: -EINVAL and which one. */
static void test_bad_files(void **state)
{
    (void)state;
    struct ccap_tls *t = (void *)1;
    struct ccap_tls_conf c = conf();
    char err[256];
    c.ca_file = "/dev/null";
    assert_int_equal(ccap_tls_new(&c, &t, err, sizeof err), -EINVAL);
    assert_null(t);
    assert_non_null(strstr(err, "TLS: cannot load ca_file"));
    c.ca_file = NULL;
    c.cert_file = "/etc/hostname";
    c.key_file = "/etc/hostname";
    assert_int_equal(ccap_tls_new(&c, &t, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "TLS: cannot load cert_file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loaded_on_demand),
        cmocka_unit_test(test_no_sigpipe),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
