/* test_renew.c -- the runtime's renewal batches: one call per semaphore, every holder, the longest lease; and the holder id format. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include "handoff.h"
#include "holder.h"
#include "rt_int.h"

struct seen {
    int calls, fail_at;
    char sem[4][CCAP_SEM_NAME_MAX];
    char holders[4][256];
    size_t n[4];
    int lease[4];
};

static int record(const char *sem, const char **holders, size_t n, int lease_ms, void *arg)
{
    struct seen *s = arg;
    int i = s->calls++;
    assert_true(i < 4);
    snprintf(s->sem[i], sizeof s->sem[i], "%s", sem);
    s->holders[i][0] = '\0';
    for (size_t k = 0; k < n; k++) {
        strcat(s->holders[i], holders[k]);
        strcat(s->holders[i], " ");
    }
    s->n[i] = n;
    s->lease[i] = lease_ms;
    return s->calls == s->fail_at ? -EIO : 0;
}

static struct ccap_handoff_entry entry(const char *sem, const char *holder, int lease_ms)
{
    struct ccap_handoff_entry e = { .lease_ms = lease_ms };
    snprintf(e.sem, sizeof e.sem, "%s", sem);
    snprintf(e.holder, sizeof e.holder, "%s", holder);
    return e;
}

/* Permits of one semaphore granted before and after a reload that changed
 * its lease_ms: the batch renews them all with the longest lease, whichever
 * comes first in the table, so that no permit's lease is cut below the one
 * it was granted. */
static void test_longest_lease(void **state)
{
    (void)state;
    struct ccap_handoff_entry e[] = {
        entry("api", "h1", 2000),
        entry("db", "h2", 500),
        entry("api", "h3", 30000),
        entry("api", "h1", 2000),
    };
    struct seen s = { 0 };
    assert_int_equal(ccap_rt_each_sem_batch(e, 4, record, &s), 0);
    assert_int_equal(s.calls, 2);
    assert_string_equal(s.sem[0], "api");
    assert_string_equal(s.holders[0], "h1 h3 h1 ");
    assert_int_equal(s.lease[0], 30000);
    assert_string_equal(s.sem[1], "db");
    assert_string_equal(s.holders[1], "h2 ");
    assert_int_equal(s.lease[1], 500);
}

/* The first failure stops the round (Redis is down: the breaker opened);
 * no entries, no call; a lease of 0 is renewed for 1 ms, never 0. */
static void test_stop_empty_zero(void **state)
{
    (void)state;
    struct ccap_handoff_entry e[] = { entry("a", "h1", 100), entry("b", "h2", 100), entry("c", "h3", 0) };
    struct seen s = { .fail_at = 1 };
    assert_int_equal(ccap_rt_each_sem_batch(e, 3, record, &s), -EIO);
    assert_int_equal(s.calls, 1);
    struct seen none = { 0 };
    assert_int_equal(ccap_rt_each_sem_batch(e, 0, record, &none), 0);
    assert_int_equal(none.calls, 0);
    struct seen z = { 0 };
    assert_int_equal(ccap_rt_each_sem_batch(&e[2], 1, record, &z), 0);
    assert_int_equal(z.lease[0], 1);
}

/* core/holder.c: what the shim builds, the CLI parses back part by part;
 * a new sequence number changes only the end. */
static void test_holder_round_trip(void **state)
{
    (void)state;
    struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(443) };
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(8443) };
    inet_pton(AF_INET, "192.0.2.7", &s4.sin_addr);
    inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
    char id[CCAP_HOLDER_MAX];
    struct ccap_holder h;
    size_t n =
        ccap_holder_format_prog(id, sizeof id, "web1", "nginx", 4242, 7, (struct sockaddr *)&s4, 0xab12cd34u, 9);
    assert_string_equal(id, "web1/4242/7/192.0.2.7:443/nginx/ab12cd34.9");
    assert_int_equal(n, strlen(id));
    assert_int_equal(ccap_holder_parse(id, &h), 0);
    assert_string_equal(h.host, "web1");
    assert_int_equal(h.pid, 4242);
    assert_int_equal(h.fd, 7);
    assert_string_equal(h.dest, "192.0.2.7:443");
    assert_string_equal(h.prog, "nginx");
    assert_string_equal(h.nonce, "ab12cd34.9");
    assert_int_equal(ccap_holder_set_seq(id, sizeof id, 12345), 0);
    assert_string_equal(id, "web1/4242/7/192.0.2.7:443/nginx/ab12cd34.12345");
    ccap_holder_format_prog(id, sizeof id, "h", "py.3", 1, 0, (struct sockaddr *)&s6, 1, 0);
    assert_string_equal(id, "h/1/0/[2001:db8::1]:8443/py.3/00000001.0");
    assert_int_equal(ccap_holder_parse(id, &h), 0);
    assert_string_equal(h.dest, "[2001:db8::1]:8443");
    assert_string_equal(h.prog, "py.3");
    assert_int_equal(ccap_holder_set_seq(id, sizeof id, 7), 0); /* the program's '.' is not the seq's */
    assert_string_equal(id, "h/1/0/[2001:db8::1]:8443/py.3/00000001.7");
    /* a program's name made safe: '/', ';', ',', spaces and bytes beyond ASCII become '_'; at most 15 bytes; "-" */
    ccap_holder_format_prog(id, sizeof id, "h", "a/b;c,d e\xc3\xa9-long-name-cut", 1, 0, (struct sockaddr *)&s4, 1,
                            0);
    assert_string_equal(id, "h/1/0/192.0.2.7:443/a_b_c_d_e__-lon/00000001.0");
    ccap_holder_format_prog(id, sizeof id, "h", "", 1, 0, (struct sockaddr *)&s4, 1, 0);
    assert_string_equal(id, "h/1/0/192.0.2.7:443/-/00000001.0");
    /* this process's own: the test's comm */
    ccap_holder_format(id, sizeof id, "h", 1, 0, (struct sockaddr *)&s4, 1, 0);
    assert_int_equal(ccap_holder_parse(id, &h), 0);
    assert_string_equal(h.prog, "test_renew");
    assert_string_equal(ccap_holder_program(), "test_renew");
    /* an id of before the program part still parses */
    assert_int_equal(ccap_holder_parse("web1/4242/7/192.0.2.7:443/ab12cd34.9", &h), 0);
    assert_string_equal(h.dest, "192.0.2.7:443");
    assert_string_equal(h.prog, "");
    /* cut to the buffer, NUL-terminated */
    char small[12];
    assert_int_equal(ccap_holder_format(small, sizeof small, "web1", 4242, 7, (struct sockaddr *)&s4, 1, 1), 11);
    assert_string_equal(small, "web1/4242/7");
    /* other shapes: no parts, a non-canonical pid, pid 0 */
    assert_int_equal(ccap_holder_parse("web1/04242/7/x/n.1", &h), -1);
    assert_int_equal(ccap_holder_parse("web1/0/7/x/n.1", &h), -1);
    assert_int_equal(ccap_holder_parse("web1/1/7", &h), -1);
    assert_string_equal(h.host, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_longest_lease),
        cmocka_unit_test(test_stop_empty_zero),
        cmocka_unit_test(test_holder_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
