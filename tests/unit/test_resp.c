/* test_resp.c -- the reply scanner's caps and grammar, and sem.c's range checks on parsed replies (no Redis needed). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "redis.h"
#include "redis_int.h"
#include "resp.h"
#include "sem.h"

static const struct ccap_resp_caps small = { .bulk = 16, .elements = 8, .depth = 2, .bytes = 128 };

/* Scans S whole, then byte by byte: both must agree. Returns the result. */
static int scan(const struct ccap_resp_caps *caps, const char *s, size_t n, unsigned long long *replies)
{
    struct ccap_resp_scan a, b;
    int ra, rb = 0;

    ccap_resp_scan_init(&a, caps);
    ccap_resp_scan_init(&b, caps);
    ra = ccap_resp_scan(&a, s, n);
    for (size_t i = 0; i < n && rb == 0; i++)
        rb = ccap_resp_scan(&b, s + i, 1);
    assert_int_equal(ra, rb);
    assert_true(ra == 0 ? a.err == NULL : a.err != NULL);
    if (replies)
        *replies = a.replies;
    return ra;
}

#define SCAN(caps, lit, rep) scan(caps, lit, sizeof lit - 1, rep)

static void test_well_formed(void **state)
{
    unsigned long long n;

    (void)state;
    assert_int_equal(SCAN(&ccap_resp_caps_shim, "*5\r\n:1\r\n:1\r\n:10\r\n:0\r\n:-1\r\n", &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(SCAN(&small, "+OK\r\n-ERR x\r\n$-1\r\n*-1\r\n*0\r\n$0\r\n\r\n$3\r\na\r\n\r\n", &n), 0);
    assert_int_equal(n, 7);
    assert_int_equal(SCAN(&small, ":-9223372036854775808\r\n:9223372036854775807\r\n:0\r\n", &n), 0);
    assert_int_equal(n, 3);
    /* a reply cut anywhere is fine so far */
    assert_int_equal(SCAN(&small, "*2\r\n$3\r\nab", &n), 0);
    assert_int_equal(n, 0);
    /* the caps count per reply: eight elements in each of three replies */
    assert_int_equal(SCAN(&small,
                          "*8\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n"
                          "*8\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n",
                          &n),
                     0);
    assert_int_equal(n, 2);
}

static void test_caps(void **state)
{
    (void)state;
    assert_int_equal(SCAN(&ccap_resp_caps_shim, "*2147483647\r\n", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&ccap_resp_caps_cli, "*2147483647\r\n", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&ccap_resp_caps_shim, "$2000000000\r\nxx", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&ccap_resp_caps_cli, "$2000000000\r\nxx", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&small, "$17\r\n", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&small, "$16\r\n", NULL), 0);
    assert_int_equal(SCAN(&small, "+12345678901234567\r\n", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&small, "*9\r\n", NULL), -EMSGSIZE);
    /* elements count at every level */
    assert_int_equal(SCAN(&small, "*2\r\n*4\r\n:1\r\n:1\r\n:1\r\n:1\r\n*3\r\n", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&small, "*1\r\n*1\r\n*1\r\n", NULL), -EMSGSIZE);
    assert_int_equal(SCAN(&small, "*1\r\n*1\r\n:1\r\n", NULL), 0);
    /* total bytes of one reply */
    assert_int_equal(SCAN(&small,
                          "*8\r\n$16\r\n0123456789abcdef\r\n$16\r\n0123456789abcdef\r\n"
                          "$16\r\n0123456789abcdef\r\n$16\r\n0123456789abcdef\r\n$16\r\n0123456789abcdef\r\n"
                          "$16\r\n0123456789abcdef\r\n",
                          NULL),
                     -EMSGSIZE);
}

static void test_malformed(void **state)
{
    static const char *const bad[] = {
        "%2\r\n",
        "_\r\n",
        "\0",
        "x",
        ":\r\n",
        ":-\r\n",
        ":1x\r\n",
        ":1\rx",
        ":99999999999999999999\r\n",
        ":9223372036854775808\r\n",
        ":-9223372036854775809\r\n",
        "$-2\r\n",
        "*-2\r\n",
        "$+1\r\n",
        "$1\r\nab\r\n",
        "$1\r\na\rx",
        ":12345678901234567890123456\r\n",
        /* not canonical: hiredis's reader refuses a bulk length "000" (found by fuzz_reply) */
        "$000\r\n\r\n",
        "*01\r\n:1\r\n",
        "$-0\r\n",
        ":007\r\n",
    };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t n = strlen(bad[i]) ? strlen(bad[i]) : 1;

        if (scan(&ccap_resp_caps_shim, bad[i], n, NULL) != -EPROTO)
            fail_msg("accepted: %s", bad[i]);
    }
}

static void test_error_is_final(void **state)
{
    struct ccap_resp_scan s;

    (void)state;
    ccap_resp_scan_init(&s, &small);
    assert_int_equal(ccap_resp_scan(&s, "*9\r\n", 4), -EMSGSIZE);
    assert_int_equal(ccap_resp_scan(&s, "+OK\r\n", 5), -EMSGSIZE);
    assert_non_null(s.err);
}

/* sem.c's parsing: a reply element out of its field's range is refused */
static redisReply *int_reply(long long v)
{
    redisReply *r = calloc(1, sizeof *r);

    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}

static redisReply *acquire_reply(long long g, long long c, long long l, long long retry, long long wake,
                                 long long full)
{
    redisReply *r = calloc(1, sizeof *r);

    r->type = REDIS_REPLY_ARRAY;
    r->elements = 6;
    r->element = calloc(6, sizeof *r->element);
    r->element[5] = int_reply(full);
    r->element[0] = int_reply(g);
    r->element[1] = int_reply(c);
    r->element[2] = int_reply(l);
    r->element[3] = int_reply(retry);
    r->element[4] = int_reply(wake);
    return r;
}

static int parse_full(long long g, long long c, long long l, long long retry, long long wake, long long full,
                      struct ccap_sem_result *res)
{
    redisReply *r = acquire_reply(g, c, l, retry, wake, full);
    int rc = ccap_sem_parse_acquire(NULL, r, res);

    freeReplyObject(r);
    return rc;
}

static int parse(long long g, long long c, long long l, long long retry, long long wake, struct ccap_sem_result *res)
{
    redisReply *r = acquire_reply(g, c, l, retry, wake, 0);
    int rc = ccap_sem_parse_acquire(NULL, r, res);

    freeReplyObject(r);
    return rc;
}

/* A 7-element reply, denied, with QLEN tickets queued. */
static int parse_qlen(long long qlen, struct ccap_sem_result *res)
{
    redisReply *r = acquire_reply(0, 1, 1, 0, 0, 0);
    int rc;

    r->element = realloc(r->element, 7 * sizeof *r->element);
    r->element[6] = int_reply(qlen);
    r->elements = 7;
    rc = ccap_sem_parse_acquire(NULL, r, res);
    freeReplyObject(r);
    return rc;
}

/* The 3-element reply, {granted, count, limit}: a grant only. */
static int parse_short(long long g, long long c, long long l, struct ccap_sem_result *res)
{
    redisReply *r = acquire_reply(g, c, l, 0, 0, 0);
    int rc;

    r->elements = 3;
    rc = ccap_sem_parse_acquire(NULL, r, res);
    r->elements = 6; /* (freed as made) */
    freeReplyObject(r);
    return rc;
}

static void test_acquire_ranges(void **state)
{
    struct ccap_sem_result res;

    (void)state;
    memset(&res, 0x55, sizeof res);
    assert_int_equal(parse_short(1, 2, 8, &res), 0);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 2);
    assert_int_equal(res.limit, 8);
    assert_int_equal(res.retry_ms, 0);
    assert_int_equal(res.wake_ms, -1);
    assert_int_equal(res.queue_full, 0);
    assert_int_equal(res.queue_len, 0);
    assert_int_equal(parse_short(0, 2, 8, &res), -EPROTO); /* a refusal always says more */
    assert_int_equal(parse_short(1, -1, 8, &res), -EPROTO);
    assert_int_equal(parse(1, 3, 4, 0, -1, &res), 0);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.wake_ms, -1);
    assert_int_equal(parse(0, INT_MAX, INT_MAX, CCAP_SEM_MS_MAX, CCAP_SEM_MS_MAX, &res), 0);
    assert_int_equal(res.wake_ms, CCAP_SEM_MS_MAX);
    /* each of these overflowed or misled the wait loop */
    assert_int_equal(parse(0, 1, 1, 0, LLONG_MAX, &res), -EPROTO);
    assert_int_equal(parse(0, 1, 1, 0, CCAP_SEM_MS_MAX + 1, &res), -EPROTO);
    assert_int_equal(parse(0, 1, 1, 0, -2, &res), -EPROTO);
    assert_int_equal(parse(0, 1, 1, LLONG_MIN, 0, &res), -EPROTO);
    assert_int_equal(parse(0, 1, 1, -1, 0, &res), -EPROTO);
    assert_int_equal(parse(2, 1, 1, 0, 0, &res), -EPROTO);
    assert_int_equal(parse(0, -1, 1, 0, 0, &res), -EPROTO);
    /* the limit is shown as the limit key says, whatever it is */
    assert_int_equal(parse(0, 1, -3, 0, 0, &res), 0);
    assert_int_equal(res.limit, -3);
    assert_int_equal(parse_full(0, 1, 1, 0, 0, 1, &res), 0);
    assert_int_equal(res.queue_full, 1);
    assert_int_equal(parse_full(0, 1, 1, 0, 0, 2, &res), -EPROTO);
    assert_int_equal(parse_full(0, 1, 1, 0, 0, -1, &res), -EPROTO);
    /* the queue length: a 7th element, optional (a library of before it says 6) */
    assert_int_equal(parse(0, 1, 1, 0, 0, &res), 0);
    assert_int_equal(res.queue_len, -1);
    assert_int_equal(parse_qlen(3, &res), 0);
    assert_int_equal(res.queue_len, 3);
    assert_int_equal(parse_qlen(0, &res), 0);
    assert_int_equal(res.queue_len, 0);
    assert_int_equal(parse_qlen(-1, &res), -EPROTO);
    assert_int_equal(parse_qlen((long long)INT_MAX + 1, &res), -EPROTO);
}

static void test_parse_int(void **state)
{
    redisReply *r = int_reply(5), nil = { .type = REDIS_REPLY_NIL };
    long long v = -7;

    (void)state;
    assert_int_equal(ccap_sem_parse_int(NULL, "x", r, 0, 5, &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(ccap_sem_parse_int(NULL, "x", r, 0, 4, &v), -EPROTO);
    assert_int_equal(ccap_sem_parse_int(NULL, "x", &nil, 0, 4, &v), -EPROTO);
    assert_int_equal(ccap_sem_parse_int(NULL, "x", NULL, 0, 4, &v), -EPROTO);
    freeReplyObject(r);
}

/* Every "cannot serve now" error reply is -EAGAIN (the breaker's), the
 * credentials ones -EACCES, the rest -EPROTO: matched on the whole prefix. */
static void test_error_classes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int rc;
    } cases[] = {
        { "ERR max number of clients reached", -EAGAIN },
        { "LOADING Redis is loading", -EAGAIN },
        { "OOM command not allowed", -EAGAIN },
        { "BUSY Redis is busy", -EAGAIN },
        { "NOAUTH Authentication required.", -EACCES },
        { "WRONGPASS invalid", -EACCES },
        { "ERR max number", -EPROTO },
        { "ERR unknown command", -EPROTO },
    };
    struct ccap_redis_conf conf = { .host = (char *)"127.0.0.1", .port = 1, .key_prefix = (char *)"t:" };
    struct ccap_redis *r = ccap_redis_new(&conf);
    assert_non_null(r);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        redisReply rep = { .type = REDIS_REPLY_ERROR, .str = (char *)cases[i].text, .len = strlen(cases[i].text) };
        assert_int_equal(ccap_redis_error_rc(r, &rep), cases[i].rc);
        assert_string_equal(ccap_redis_errstr(r), cases[i].text);
    }
    ccap_redis_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed),    cmocka_unit_test(test_caps),
        cmocka_unit_test(test_malformed),      cmocka_unit_test(test_error_is_final),
        cmocka_unit_test(test_acquire_ranges), cmocka_unit_test(test_parse_int),
        cmocka_unit_test(test_error_classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
