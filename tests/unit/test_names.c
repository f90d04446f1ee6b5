/* test_names.c -- unit tests for the address -> names map (core/names.c): bounds, expiry, eviction, precedence, threads. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "names.h"

static struct ccap_addr A(const char *ip) {
    struct ccap_addr a;
    memset(&a, 0, sizeof a);
    if (inet_pton(AF_INET, ip, a.addr) == 1) {
        a.family = AF_INET;
    } else {
        assert_int_equal(inet_pton(AF_INET6, ip, a.addr), 1);
        a.family = AF_INET6;
    }
    return a;
}

/* Collects the names of an address, newest first, into one string "a,b,". */
struct collect {
    char buf[1024];
    int stop_after; /* 0: never */
    int seen;
};

static bool collect_fn(const char *name, void *arg)
{
    struct collect *c = arg;
    strncat(c->buf, name, sizeof c->buf - strlen(c->buf) - 2);
    strcat(c->buf, ",");
    return c->stop_after && ++c->seen >= c->stop_after;
}

static const char *names_of(struct ccap_names *m, const char *ip, long long now)
{
    static struct collect c;
    memset(&c, 0, sizeof c);
    struct ccap_addr a = A(ip);
    ccap_names_each(m, &a, now, collect_fn, &c);
    return c.buf;
}

static int add(struct ccap_names *m, const char *ip, const char *name, long long now, int ttl)
{
    struct ccap_addr a = A(ip);
    return ccap_names_add(m, &a, name, now, ttl);
}

static void test_add_and_lookup(void **state)
{
    (void)state;
    struct ccap_names *m = ccap_names_new(16);
    assert_non_null(m);
    assert_int_equal(add(m, "127.0.0.1", "api.partner.test", 0, 1000), 1);
    assert_int_equal(add(m, "127.0.0.1", "other.test", 0, 1000), 1);
    assert_int_equal(add(m, "::1", "six.test", 0, 1000), 1);
    assert_int_equal(ccap_names_count(m), 3);
    /* several names per address, newest first */
    assert_string_equal(names_of(m, "127.0.0.1", 1), "other.test,api.partner.test,");
    assert_string_equal(names_of(m, "::1", 1), "six.test,");
    assert_string_equal(names_of(m, "127.0.0.2", 1), "");
    /* IPv4 and IPv6 keys never mix, even with the same leading bytes */
    assert_string_equal(names_of(m, "7f00:1::", 1), "");
    /* recording again refreshes: no new entry, and it becomes the newest */
    assert_int_equal(add(m, "127.0.0.1", "api.partner.test", 5, 1000), 0);
    assert_int_equal(ccap_names_count(m), 3);
    assert_string_equal(names_of(m, "127.0.0.1", 6), "api.partner.test,other.test,");
    /* the walk stops when asked */
    struct collect c = { .stop_after = 1 };
    struct ccap_addr a = A("127.0.0.1");
    assert_int_equal(ccap_names_each(m, &a, 6, collect_fn, &c), 1);
    assert_string_equal(c.buf, "api.partner.test,");
    ccap_names_free(m);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct ccap_names *m = ccap_names_new(4);
    struct ccap_addr a = A("10.0.0.1");
    assert_null(ccap_names_new(0));
    assert_int_equal(ccap_names_add(NULL, &a, "x.test", 0, 10), -EINVAL);
    assert_int_equal(ccap_names_add(m, NULL, "x.test", 0, 10), -EINVAL);
    assert_int_equal(ccap_names_add(m, &a, NULL, 0, 10), -EINVAL);
    assert_int_equal(ccap_names_add(m, &a, "", 0, 10), -EINVAL);
    assert_int_equal(ccap_names_add(m, &a, "x.test", 0, 0), -EINVAL);
    assert_int_equal(ccap_names_add(m, &a, "x.test", 0, -5), -EINVAL);
    char longname[300];
    memset(longname, 'a', sizeof longname);
    longname[254] = '\0';
    assert_int_equal(ccap_names_add(m, &a, longname, 0, 10), -EINVAL);
    longname[253] = '\0';
    assert_int_equal(ccap_names_add(m, &a, longname, 0, 10), 1);
    struct ccap_addr bad = a;
    bad.family = AF_UNIX;
    assert_int_equal(ccap_names_add(m, &bad, "x.test", 0, 10), -EINVAL);
    assert_int_equal(ccap_names_each(m, &bad, 0, collect_fn, &(struct collect){ 0 }), 0);
    /* a NULL map is an empty one */
    assert_int_equal(ccap_names_each(NULL, &a, 0, collect_fn, &(struct collect){ 0 }), 0);
    assert_int_equal(ccap_names_count(NULL), 0);
    assert_int_equal(ccap_names_expire(NULL, 0), 0);
    ccap_names_free(NULL);
    ccap_names_free(m);
}

static void test_expiry(void **state)
{
    (void)state;
    struct ccap_names *m = ccap_names_new(16);
    add(m, "10.0.0.1", "a.test", 1000, 500);
    add(m, "10.0.0.1", "b.test", 1000, 2000);
    assert_string_equal(names_of(m, "10.0.0.1", 1499), "b.test,a.test,");
    /* expired entries are invisible at once, dropped when swept */
    assert_string_equal(names_of(m, "10.0.0.1", 1500), "b.test,");
    assert_int_equal(ccap_names_count(m), 2);
    assert_int_equal(ccap_names_expire(m, 1500), 1);
    assert_int_equal(ccap_names_count(m), 1);
    /* a refresh extends, never shortens */
    assert_int_equal(add(m, "10.0.0.1", "b.test", 2000, 100), 0);
    assert_string_equal(names_of(m, "10.0.0.1", 2999), "b.test,");
    assert_int_equal(add(m, "10.0.0.1", "b.test", 2900, 1000), 0);
    assert_string_equal(names_of(m, "10.0.0.1", 3800), "b.test,");
    assert_string_equal(names_of(m, "10.0.0.1", 3900), "");
    assert_int_equal(ccap_names_expire(m, 3900), 1);
    assert_int_equal(ccap_names_count(m), 0);
    ccap_names_free(m);
}

static void test_bounded_eviction(void **state)
{
    (void)state;
    struct ccap_names *m = ccap_names_new(3);
    add(m, "10.0.0.1", "one.test", 0, 100000);
    add(m, "10.0.0.2", "two.test", 1, 100000);
    add(m, "10.0.0.3", "three.test", 2, 100000);
    /* recording one.test again makes two.test the oldest */
    assert_int_equal(add(m, "10.0.0.1", "one.test", 3, 100000), 0);
    assert_int_equal(add(m, "10.0.0.4", "four.test", 4, 100000), 1);
    assert_int_equal(ccap_names_count(m), 3);
    assert_string_equal(names_of(m, "10.0.0.2", 5), "");
    assert_string_equal(names_of(m, "10.0.0.1", 5), "one.test,");
    assert_string_equal(names_of(m, "10.0.0.3", 5), "three.test,");
    assert_string_equal(names_of(m, "10.0.0.4", 5), "four.test,");
    /* many more than fit: the count never passes the bound, the newest stay */
    char name[64], ip[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "n%d.test", i);
        snprintf(ip, sizeof ip, "10.1.%d.%d", i / 250, i % 250);
        assert_true(add(m, ip, name, 10 + i, 100000) >= 0);
        assert_true(ccap_names_count(m) <= 3);
    }
    assert_string_equal(names_of(m, "10.1.3.249", 2000), "n999.test,");
    assert_string_equal(names_of(m, "10.1.3.246", 2000), "");
    /* expired entries go first, before anything live is evicted */
    struct ccap_names *e = ccap_names_new(2);
    add(e, "10.0.0.1", "short.test", 0, 10);
    add(e, "10.0.0.2", "long.test", 0, 100000);
    add(e, "10.0.0.3", "new.test", 20, 100000);
    assert_string_equal(names_of(e, "10.0.0.2", 21), "long.test,");
    assert_string_equal(names_of(e, "10.0.0.3", 21), "new.test,");
    assert_int_equal(ccap_names_count(e), 2);
    ccap_names_free(e);
    ccap_names_free(m);
}

/* ---- precedence: ccap_names_match over a real config ---- */

static struct ccap_config *load(const char *text)
{
    char path[] = "/tmp/ccap-names-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char err[512];
    struct ccap_config *cfg = NULL;
    int rc = ccap_config_load(path, &cfg, err, sizeof err);
    unlink(path);
    if (rc < 0)
        fail_msg("config rejected: %s", err);
    return cfg;
}

/* With NAMED set (one thread only), match() also writes the host name it
 * found its rule by into LAST_NAME ("" by address). */
static bool named;
static char last_name[256];

static const struct ccap_rule *match(struct ccap_names *m, const struct ccap_config *cfg, const char *ip, int port,
                                     long long now)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        len = sizeof *s4;
    } else {
        assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        len = sizeof *s6;
    }
    if (named) /* the same walk, and the name it found its rule by */
        return ccap_names_match_name(m, cfg, (struct sockaddr *)&ss, len, now, last_name, sizeof last_name);
    return ccap_names_match(m, cfg, (struct sockaddr *)&ss, len, now);
}

static int rule_no(const struct ccap_config *cfg, const struct ccap_rule *r)
{
    return r ? (int)(r - cfg->rules) : -1;
}

/* The name a rule matched by, for messages: "" when the address did. */
static void test_matched_name(void **state)
{
    (void)state;
    struct ccap_config *cfg = load("semaphores = ( { name = \"a\"; limit = 1; }, { name = \"b\"; limit = 1; } );\n"
                                   "rules = (\n"
                                   "  { semaphore = \"a\"; match = ( \"10.0.0.1:443\" ); },\n"
                                   "  { semaphore = \"b\"; match = ( \"*.partner.test\" ); }\n"
                                   ");\n");
    struct ccap_names *m = ccap_names_new(64);
    named = true;
    add(m, "10.0.0.1", "api.partner.test", 0, 1000);
    add(m, "10.0.0.2", "other.test", 0, 1000);
    add(m, "10.0.0.2", "web.partner.test", 0, 1000);
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.0.0.1", 443, 1)), 0); /* by address, first */
    assert_string_equal(last_name, "");
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.0.0.1", 80, 1)), 1);
    assert_string_equal(last_name, "api.partner.test");
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.0.0.2", 80, 1)), 1);
    assert_string_equal(last_name, "web.partner.test");
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.0.0.3", 80, 1)), -1);
    assert_string_equal(last_name, "");
    char small[4] = "xyz";
    struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(80) };
    inet_pton(AF_INET, "10.0.0.2", &a4.sin_addr);
    assert_non_null(ccap_names_match_name(m, cfg, (struct sockaddr *)&a4, sizeof a4, 1, small, sizeof small));
    assert_string_equal(small, "web"); /* cut to fit */
    named = false;
    ccap_names_free(m);
    ccap_config_free(cfg);
}

static void test_precedence(void **state)
{
    (void)state;
    struct ccap_config *cfg = load(
        "semaphores = ( { name = \"a\"; limit = 1; }, { name = \"b\"; limit = 1; }, { name = \"c\"; limit = 1; } );\n"
        "rules = (\n"
        "  { semaphore = \"a\"; match = ( \"api.partner.test:443\" ); },\n"
        "  { semaphore = \"b\"; match = ( \"10.0.0.0/8\" ); },\n"
        "  { semaphore = \"c\"; match = ( \"*.partner.test\" ); }\n"
        ");\n");
    assert_true(cfg->has_names);
    assert_false(cfg->has_resolve);
    struct ccap_names *m = ccap_names_new(64);
    /* by address only */
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.1.1.1", 443, 0)), 1);
    assert_int_equal(rule_no(cfg, match(NULL, cfg, "10.1.1.1", 443, 0)), 1);
    assert_int_equal(rule_no(cfg, match(m, cfg, "192.0.2.1", 443, 0)), -1);
    /* a name rule before the address rule wins, on its port only */
    add(m, "10.1.1.1", "api.partner.test", 0, 1000);
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.1.1.1", 443, 1)), 0);
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.1.1.1", 80, 1)), 1);
    /* several names for one address: the earliest rule any of them matches */
    add(m, "192.0.2.1", "x.partner.test", 0, 1000);
    assert_int_equal(rule_no(cfg, match(m, cfg, "192.0.2.1", 443, 1)), 2);
    add(m, "192.0.2.1", "api.partner.test", 0, 1000);
    add(m, "192.0.2.1", "other.test", 0, 1000);
    assert_int_equal(rule_no(cfg, match(m, cfg, "192.0.2.1", 443, 1)), 0);
    assert_int_equal(rule_no(cfg, match(m, cfg, "192.0.2.1", 80, 1)), 2);
    /* unmatched names change nothing */
    add(m, "192.0.2.9", "other.test", 0, 1000);
    assert_int_equal(rule_no(cfg, match(m, cfg, "192.0.2.9", 443, 1)), -1);
    /* the IPv4-mapped form finds the names of the IPv4 address */
    assert_int_equal(rule_no(cfg, match(m, cfg, "::ffff:192.0.2.1", 443, 1)), 0);
    /* expired names no longer match */
    assert_int_equal(rule_no(cfg, match(m, cfg, "192.0.2.1", 443, 1000)), -1);
    assert_int_equal(rule_no(cfg, match(m, cfg, "10.1.1.1", 443, 1000)), 1);
    ccap_names_free(m);
    ccap_config_free(cfg);

    /* has_names / has_resolve flags */
    cfg = load("semaphores = ( { name = \"a\"; limit = 1; } );\n"
               "rules = ( { semaphore = \"a\"; match = ( \"10.0.0.0/8\" ); resolve = true; } );\n");
    assert_false(cfg->has_names);
    assert_false(cfg->has_resolve); /* nothing to look up */
    ccap_config_free(cfg);
    cfg = load("semaphores = ( { name = \"a\"; limit = 1; } );\n"
               "rules = ( { semaphore = \"a\"; match = ( \"*.x.test\" ); resolve = true; },\n"
               "          { semaphore = \"a\"; match = ( \"y.test:80\" ); } );\n");
    assert_true(cfg->has_names);
    assert_false(cfg->has_resolve); /* wildcards cannot be looked up */
    ccap_config_free(cfg);
    cfg = load("semaphores = ( { name = \"a\"; limit = 1; } );\n"
               "rules = ( { semaphore = \"a\"; match = ( \"*.x.test\", \"y.test\" ); resolve = true; } );\n");
    assert_true(cfg->has_names);
    assert_true(cfg->has_resolve);
    ccap_config_free(cfg);
}

/* ---- threads: writers, readers and sweepers at once (run under TSan too) ---- */

#define THREAD_OPS 20000

static struct ccap_names *shared;
static const struct ccap_config *shared_cfg;

static void *writer(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    char name[32], ip[32];
    for (int i = 0; i < THREAD_OPS; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned k = (seed >> 8) % 200;
        snprintf(name, sizeof name, "h%u.partner.test", k % 50);
        snprintf(ip, sizeof ip, "10.0.%u.%u", k / 100, k % 100);
        struct ccap_addr a = A(ip);
        int rc = ccap_names_add(shared, &a, name, i, 50 + (int)(k % 100));
        if (rc < 0)
            return (void *)1;
        if (i % 1000 == 0)
            ccap_names_expire(shared, i);
    }
    return NULL;
}

static bool count_fn(const char *name, void *arg)
{
    if (strncmp(name, "h", 1))
        (*(int *)arg) = -1000000; /* a torn name would show here */
    else
        (*(int *)arg)++;
    return false;
}

static void *reader(void *arg)
{
    (void)arg;
    char ip[32];
    for (int i = 0; i < THREAD_OPS; i++) {
        unsigned k = (unsigned)i % 200;
        snprintf(ip, sizeof ip, "10.0.%u.%u", k / 100, k % 100);
        struct ccap_addr a = A(ip);
        int n = 0;
        ccap_names_each(shared, &a, i, count_fn, &n);
        if (n < 0 || n > 64)
            return (void *)1;
        (void)match(shared, shared_cfg, ip, 443, i);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    struct ccap_config *cfg = load("semaphores = ( { name = \"a\"; limit = 1; } );\n"
                                   "rules = ( { semaphore = \"a\"; match = ( \"*.partner.test\" ); } );\n");
    shared = ccap_names_new(64);
    shared_cfg = cfg;
    pthread_t t[8];
    for (uintptr_t i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, i % 2 ? reader : writer, (void *)(i + 1)), 0);
    for (int i = 0; i < 8; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        assert_null(rv);
    }
    assert_true(ccap_names_count(shared) <= 64);
    /* still a consistent map: every address is findable, sweeping empties it */
    int total = 0;
    char ip[32];
    for (unsigned k = 0; k < 200; k++) {
        snprintf(ip, sizeof ip, "10.0.%u.%u", k / 100, k % 100);
        struct ccap_addr a = A(ip);
        ccap_names_each(shared, &a, 0, count_fn, &total);
    }
    assert_int_equal(total, (int)ccap_names_count(shared));
    ccap_names_expire(shared, 1LL << 40);
    assert_int_equal(ccap_names_count(shared), 0);
    ccap_names_free(shared);
    ccap_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_and_lookup), cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_expiry),         cmocka_unit_test(test_bounded_eviction),
        cmocka_unit_test(test_matched_name),   cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
