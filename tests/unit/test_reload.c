/* test_reload.c -- unit tests for the live configuration (runtime/reload.c): recorded names, hot reload, threads. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime.h"
#include "reload.h"

static char path[64];

static void write_conf(const char *text)
{
    char tmp[80];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0); /* a new inode: seen as a change at once */
}

static struct sockaddr_in sa4(const char *ip, int port)
{
    struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    assert_int_equal(inet_pton(AF_INET, ip, &s.sin_addr), 1);
    return s;
}

/* The index of the rule the live config gives IP:PORT, or -1. */
static int rule_for(const char *ip, int port)
{
    const struct ccap_config *cfg = ccap_live_current();
    struct sockaddr_in s = sa4(ip, port);
    const struct ccap_rule *r = ccap_live_match(cfg, (struct sockaddr *)&s, sizeof s);
    return r ? (int)(r - cfg->rules) : -1;
}

/* A program's getaddrinfo(NODE) answered IP. */
static void resolved(const char *node, int flags, const char *ip)
{
    struct sockaddr_in s = sa4(ip, 0);
    struct addrinfo ai = {
        .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_addr = (struct sockaddr *)&s, .ai_addrlen = sizeof s
    };
    ccap_live_resolved_addrinfo(node, flags, &ai);
}

static void nap_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Ticks until the config in force is not OLD (at most 5 s). */
static const struct ccap_config *tick_until_changed(const struct ccap_config *old)
{
    for (int i = 0; i < 100 && ccap_live_current() == old; i++) {
        ccap_live_tick();
        nap_ms(50);
    }
    return ccap_live_current();
}

#define REDIS1 "redis = { host = \"127.0.0.1\"; port = 1; key_prefix = \"one:\"; };\n"
#define REDIS2 "redis = { host = \"127.0.0.1\"; port = 2; key_prefix = \"two:\"; };\n"

static void test_names_and_reload(void **state)
{
    (void)state;
    write_conf(REDIS1 "semaphores = ( { name = \"a\"; limit = 1; }, { name = \"b\"; limit = 2; } );\n"
                      "rules = ( { semaphore = \"a\"; match = ( \"*.partner.test:443\" ); },\n"
                      "          { semaphore = \"b\"; match = ( \"10.0.0.0/8\" ); } );\n");
    assert_true(ccap_rt_active());
    const struct ccap_config *v1 = ccap_live_current();
    assert_non_null(v1);
    assert_true(v1->has_names);

    /* names the program resolved decide; numeric hosts and bad names do not count */
    assert_int_equal(rule_for("192.0.2.1", 443), -1);
    resolved("X.Partner.Test.", 0, "192.0.2.1");
    assert_int_equal(rule_for("192.0.2.1", 443), 0);
    assert_int_equal(rule_for("192.0.2.1", 80), -1);
    resolved("192.0.2.2", 0, "192.0.2.2");
    resolved("y.partner.test", AI_NUMERICHOST, "192.0.2.3");
    resolved("bad name.partner.test", 0, "192.0.2.4");
    resolved("127.1", 0, "192.0.2.5");
    assert_int_equal(rule_for("192.0.2.2", 443), -1);
    assert_int_equal(rule_for("192.0.2.3", 443), -1);
    assert_int_equal(rule_for("192.0.2.4", 443), -1);
    assert_int_equal(rule_for("192.0.2.5", 443), -1);
    /* gethostbyname*() results too */
    struct in_addr in;
    inet_pton(AF_INET, "192.0.2.6", &in);
    char *list[] = { (char *)&in, NULL };
    struct hostent he = { .h_name = "z.partner.test", .h_addrtype = AF_INET, .h_length = 4, .h_addr_list = list };
    ccap_live_resolved_hostent("z.partner.test", &he);
    assert_int_equal(rule_for("192.0.2.6", 443), 0);
    /* an address rule still matches by address */
    assert_int_equal(rule_for("10.1.2.3", 443), 1);

    /* reload: the limit changes, a semaphore leaves, one arrives, rules move */
    write_conf(REDIS2 "semaphores = ( { name = \"c\"; limit = 7; }, { name = \"b\"; limit = 5; } );\n"
                      "rules = ( { semaphore = \"b\"; match = ( \"*.partner.test:443\" ); },\n"
                      "          { semaphore = \"c\"; match = ( \"10.0.0.0/8\" ); } );\n"
                      "on_timeout = \"EAGAIN\";\n");
    const struct ccap_config *v2 = tick_until_changed(v1);
    assert_ptr_not_equal(v2, v1);
    assert_int_equal(v2->on_timeout_errno, EAGAIN);
    /* indices are stable: a and b where they were, c appended */
    assert_int_equal(v2->n_sems, 3);
    assert_string_equal(v2->sems[0].name, "a");
    assert_int_equal(v2->sems[0].limit, 1); /* left the file: kept as it was, no rule uses it */
    assert_string_equal(v2->sems[1].name, "b");
    assert_int_equal(v2->sems[1].limit, 5);
    assert_string_equal(v2->sems[2].name, "c");
    assert_int_equal(v2->rules[0].sem, 1);
    assert_int_equal(v2->rules[1].sem, 2);
    assert_int_equal(ccap_config_sem_index(v2, "b"), 1);
    /* Redis settings need a restart: the running ones stay */
    assert_string_equal(v2->redis.key_prefix, "one:");
    assert_int_equal(v2->redis.port, 1);
    assert_ptr_equal(v2->redis.key_prefix, v1->redis.key_prefix);
    /* the names recorded before still count, under the new rules */
    assert_int_equal(rule_for("192.0.2.1", 443), 0);
    assert_int_equal(rule_for("10.1.2.3", 443), 1);

    /* a broken file keeps the rules in force */
    write_conf("semaphores = ( { name = \"b\"; limit = 1; }\nrules = ( );\n");
    for (int i = 0; i < 30; i++) {
        ccap_live_tick();
        nap_ms(50);
    }
    assert_ptr_equal(ccap_live_current(), v2);
    /* ... and so does a missing one */
    unlink(path);
    for (int i = 0; i < 30; i++) {
        ccap_live_tick();
        nap_ms(50);
    }
    assert_ptr_equal(ccap_live_current(), v2);
    /* a config without host names: matching by address only */
    write_conf(REDIS1 "semaphores = ( { name = \"b\"; limit = 3; } );\n"
                      "rules = ( { semaphore = \"b\"; match = ( \"192.0.2.0/24:443\" ); } );\n");
    const struct ccap_config *v3 = tick_until_changed(v2);
    assert_false(v3->has_names);
    assert_int_equal(v3->rules[0].sem, 1);
    assert_int_equal(rule_for("192.0.2.1", 443), 0);
    assert_int_equal(rule_for("192.0.2.1", 80), -1);
}

/* ---- readers while the config is swapped (run under TSan too) ---- */

static atomic_bool stop;

static void *reader(void *arg)
{
    (void)arg;
    unsigned long n = 0;
    char name[32];
    while (!atomic_load(&stop)) {
        const struct ccap_config *cfg = ccap_live_current();
        struct sockaddr_in s = sa4("192.0.2.1", 443);
        const struct ccap_rule *r = ccap_live_match(cfg, (struct sockaddr *)&s, sizeof s);
        if (r && (r < cfg->rules || r >= cfg->rules + cfg->n_rules || r->sem >= cfg->n_sems))
            return (void *)1;
        if (r)
            (void)cfg->sems[r->sem].limit;
        snprintf(name, sizeof name, "h%lu.partner.test", n++ % 97);
        resolved(name, 0, "192.0.2.1");
    }
    return NULL;
}

static void test_swap_under_readers(void **state)
{
    (void)state;
    pthread_t t[4];
    atomic_store(&stop, false);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader, NULL), 0);
    const struct ccap_config *cur = ccap_live_current();
    for (int k = 0; k < 3; k++) {
        char text[512];
        snprintf(text, sizeof text,
                 REDIS1
                 "semaphores = ( { name = \"s%d\"; limit = %d; }, { name = \"b\"; limit = 1; } );\n"
                 "rules = ( { semaphore = \"s%d\"; match = ( \"*.partner.test:443\", \"10.0.0.0/8\" ); } );\n",
                 k, k + 1, k);
        write_conf(text);
        const struct ccap_config *next = tick_until_changed(cur);
        assert_ptr_not_equal(next, cur);
        assert_int_equal(next->sems[next->rules[0].sem].limit, k + 1);
        cur = next;
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 4; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        assert_null(rv);
    }
    assert_int_equal(rule_for("192.0.2.1", 443), 0);
}

int main(void)
{
    snprintf(path, sizeof path, "/tmp/ccap-reload-%d.conf", (int)getpid());
    setenv("CONNCAP_CONFIG", path, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_reload),
        cmocka_unit_test(test_swap_under_readers),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(path);
    return rc;
}
