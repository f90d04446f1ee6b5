/* test_sem.c -- the leased semaphore against a private redis-server: limits, leases, TTL, renew. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sem.h"
#include "semcall.h"
#include "redis_fixture.h"

#define PFX "ccaptest:"

REDIS_FIXTURE_GROUP(fx)
static struct ccap_redis *R;
static redisContext *CLI; /* the test's own view of the server */

static struct ccap_redis *client_for(const char *sock)
{
    struct ccap_redis_conf c = { 0 };

    c.socket = (char *)sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 2000;
    return ccap_redis_new(&c);
}

static int setup(void **state)
{
    (void)state;

    if (!(CLI = redis_fixture_flushed_cli(&fx)))
        return -1;
    R = client_for(fx.sock);
    return R ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ccap_redis_free(R);
    R = NULL;
    if (CLI)
        redisFree(CLI);
    CLI = NULL;
    return 0;
}

/* ---- helpers: the test's view of the keys ---- */

static long long cli_int(const char *fmt, ...)
{
    redisReply *rep;
    long long v;
    va_list ap;

    va_start(ap, fmt);
    rep = redisvCommand(CLI, fmt, ap);
    va_end(ap);
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    v = rep->integer;
    freeReplyObject(rep);
    return v;
}

static void cli_ok(const char *fmt, ...)
{
    redisReply *rep;
    va_list ap;

    va_start(ap, fmt);
    rep = redisvCommand(CLI, fmt, ap);
    va_end(ap);
    assert_non_null(rep);
    assert_int_not_equal(rep->type, REDIS_REPLY_ERROR);
    freeReplyObject(rep);
}

static int has_holder(const char *name, const char *holder)
{
    redisReply *rep = redisCommand(CLI, "ZSCORE " PFX "{%s}:holders %s", name, holder);
    int present;

    assert_non_null(rep);
    present = rep->type != REDIS_REPLY_NIL;
    freeReplyObject(rep);
    return present;
}

static long long n_holders(const char *name)
{
    return cli_int("ZCARD " PFX "{%s}:holders", name);
}

static int key_exists(const char *name)
{
    return (int)cli_int("EXISTS " PFX "{%s}:holders", name);
}

/* The holders key's PTTL and the longest remaining lease, read at one
 * instant (inside one script, so no time passes between them). */
static void ttl_and_lease(const char *name, long long *pttl, long long *longest)
{
    static const char lua[] = "local t = redis.call('TIME') "
                              "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
                              "local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES') "
                              "local rem = 0 if top[2] then rem = tonumber(top[2]) - now end "
                              "return {redis.call('PTTL', KEYS[1]), rem}";
    redisReply *rep = redisCommand(CLI, "EVAL %s 1 " PFX "{%s}:holders", lua, name);

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->elements, 2);
    *pttl = rep->element[0]->integer;
    *longest = rep->element[1]->integer;
    freeReplyObject(rep);
}

/* The TTL invariant: the key lives at least as long as its longest lease. */
static void assert_ttl_covers_leases(const char *name)
{
    long long pttl, longest;

    ttl_and_lease(name, &pttl, &longest);
    assert_true(longest > 0);
    if (pttl < longest)
        fail_msg("%s: PTTL %lld < longest remaining lease %lld", name, pttl, longest);
}

static struct ccap_sem_result acq(const char *name, const char *holder, int lease_ms, int limit)
{
    struct ccap_sem_result res = { -1, -1, -1 };

    assert_int_equal(t_acquire(R, PFX, name, holder, lease_ms, limit, &res), 0);
    return res;
}

static int renew(const char *name, const char *const *h, size_t n, int lease_ms, int add_missing)
{
    return ccap_sem_renew(R, PFX, name, h, n, lease_ms, add_missing);
}

/* ---- tests ---- */

static void test_key(void **state)
{
    char buf[64];
    (void)state;

    assert_int_equal(ccap_sem_key(buf, sizeof buf, "conncap:", "db", "holders"), 20);
    assert_string_equal(buf, "conncap:{db}:holders");
    assert_int_equal(ccap_sem_key(buf, sizeof buf, NULL, "db", "limit"), 10);
    assert_string_equal(buf, "{db}:limit");
    assert_int_equal(ccap_sem_key(buf, 11, NULL, "db", "limit"), 10);
    assert_int_equal(ccap_sem_key(buf, 10, NULL, "db", "limit"), -ENAMETOOLONG);
}

static void test_bad_args(void **state)
{
    struct ccap_sem_result res;
    char longname[600];
    (void)state;

    assert_int_equal(t_acquire(R, PFX, "s", "a", 0, 3, &res), -EINVAL);
    assert_int_equal(ccap_sem_renew(R, PFX, "s", NULL, 0, 1000, 1), 0);
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(t_acquire(R, PFX, longname, "a", 1000, 3, &res), -ENAMETOOLONG);
    assert_int_equal(t_release(R, PFX, longname, "a"), -ENAMETOOLONG);
}

static void test_limit(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    res = acq("lim", "a", 10000, 3);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 1);
    assert_int_equal(res.limit, 3);
    assert_int_equal(acq("lim", "b", 10000, 3).count, 2);
    res = acq("lim", "c", 10000, 3);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 3);

    res = acq("lim", "d", 10000, 3);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.count, 3);
    assert_int_equal(res.limit, 3);
    assert_false(has_holder("lim", "d"));

    /* A holder asking again keeps its permit (its lease renewed), no second one. */
    res = acq("lim", "a", 10000, 3);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 3);
    assert_int_equal(n_holders("lim"), 3);

    /* Limit 0: nobody. */
    res = acq("zero", "a", 10000, 0);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.count, 0);
    assert_false(key_exists("zero"));
}

static void test_release(void **state)
{
    (void)state;

    assert_int_equal(acq("rel", "A", 10000, 5).granted, 1);
    assert_int_equal(acq("rel", "B", 10000, 5).granted, 1);

    assert_int_equal(t_release(R, PFX, "rel", "B"), 1);
    assert_true(has_holder("rel", "A"));
    assert_false(has_holder("rel", "B"));
    assert_int_equal(t_release(R, PFX, "rel", "B"), 0);
    assert_int_equal(t_release(R, PFX, "rel", "never"), 0);
    assert_int_equal(n_holders("rel"), 1);
    assert_true(has_holder("rel", "A"));
    assert_ttl_covers_leases("rel");

    /* Released the last: the key is gone. */
    assert_int_equal(t_release(R, PFX, "rel", "A"), 1);
    assert_false(key_exists("rel"));
    assert_int_equal(t_release(R, PFX, "rel", "A"), 0);
}

static void test_lease_expiry(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    assert_int_equal(acq("exp", "old", 300, 1).granted, 1);
    assert_int_equal(acq("exp", "new", 10000, 1).granted, 0);
    fx_sleep_ms(400);
    res = acq("exp", "new", 10000, 1);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 1);
    assert_false(has_holder("exp", "old"));
    assert_true(has_holder("exp", "new"));
}

static void test_runtime_limit(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    cli_ok("SET " PFX "{rt}:limit 1");
    res = acq("rt", "a", 10000, 3);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.limit, 1);
    res = acq("rt", "b", 10000, 3);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.limit, 1);
    assert_int_equal(res.count, 1);

    /* The override has no TTL: it is ops state. */
    assert_int_equal(cli_int("PTTL " PFX "{rt}:limit"), -1);

    cli_ok("DEL " PFX "{rt}:limit");
    res = acq("rt", "b", 10000, 3);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.limit, 3);
    assert_int_equal(res.count, 2);

    /* Lowering below the current count admits nobody new, removes nobody. */
    cli_ok("SET " PFX "{rt}:limit 0");
    res = acq("rt", "c", 10000, 3);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.limit, 0);
    assert_int_equal(res.count, 2);
    assert_true(has_holder("rt", "a") && has_holder("rt", "b"));

    /* Garbage in the override: the configured limit applies. */
    cli_ok("SET " PFX "{rt}:limit lots");
    res = acq("rt", "c", 10000, 3);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.limit, 3);
}

static int script_exists(enum ccap_script s)
{
    redisReply *rep = redisCommand(CLI, "SCRIPT EXISTS %s", ccap_script_sha(s));
    int v;

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    v = (int)rep->element[0]->integer;
    freeReplyObject(rep);
    return v;
}

static void test_noscript(void **state)
{
    const char *flush[] = { "SCRIPT", "FLUSH" };
    const char *h[] = { "a" };
    redisReply *rep;
    (void)state;

    assert_int_equal(acq("ns", "a", 10000, 3).granted, 1);
    assert_true(script_exists(CCAP_SCRIPT_ACQUIRE));

    assert_int_equal(ccap_redis_command(R, 2, flush, &rep), 0);
    freeReplyObject(rep);
    assert_false(script_exists(CCAP_SCRIPT_ACQUIRE));
    assert_int_equal(acq("ns", "b", 10000, 3).count, 2);
    assert_true(script_exists(CCAP_SCRIPT_ACQUIRE));

    assert_int_equal(ccap_redis_command(R, 2, flush, &rep), 0);
    freeReplyObject(rep);
    assert_int_equal(renew("ns", h, 1, 10000, 0), 0);
    assert_int_equal(t_release(R, PFX, "ns", "a"), 1);
    assert_true(script_exists(CCAP_SCRIPT_RENEW));
    assert_true(script_exists(CCAP_SCRIPT_RELEASE));
    assert_string_equal(ccap_redis_errstr(R), "");
}

/* Calls of COMMAND (lower case) since CONFIG RESETSTAT, from INFO commandstats. */
static long long cmd_calls(const char *command)
{
    redisReply *rep = redisCommand(CLI, "INFO commandstats");
    char key[64];
    const char *p;
    long long v = 0;

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    snprintf(key, sizeof key, "cmdstat_%s:calls=", command);
    if ((p = strstr(rep->str, key)))
        v = atoll(p + strlen(key));
    freeReplyObject(rep);
    return v;
}

/* With the library loaded every script runs as FCALL (none is loaded with
 * SCRIPT LOAD); once the library is flushed, the same client goes on with
 * EVALSHA without a failed call. */
static void test_functions(void **state)
{
    const char *h[] = { "a" };
    redisReply *rep = redisCommand(CLI, "FUNCTION LOAD REPLACE %s", ccap_function_library());
    (void)state;

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    assert_true(strncmp(rep->str, "conncap_", 8) == 0 && strcmp(rep->str + 8, ccap_function_version()) == 0);
    freeReplyObject(rep);
    cli_ok("SCRIPT FLUSH");
    cli_ok("CONFIG RESETSTAT");

    assert_int_equal(acq("fn", "a", 10000, 1).granted, 1);
    assert_int_equal(acq("fn", "b", 10000, 1).granted, 0);
    assert_int_equal(renew("fn", h, 1, 10000, 0), 0);
    assert_int_equal(ccap_sem_timeout(R, PFX, "fn", "b", 5, t_audit), 0);
    assert_int_equal(t_release_defer(R, PFX, "fn", "a", 1, 1LL << 60, true), 0);
    assert_int_equal(ccap_redis_flush(R), 0);
    assert_int_equal(ccap_sem_count_fallback(R, PFX, "fn", 2), 0);
    assert_int_equal(cli_int("ZCARD " PFX "{fn}:holders"), 0);
    assert_int_equal(cli_int("HINCRBY " PFX "{fn}:stats fallback_granted 0"), 2);
    assert_int_equal(cmd_calls("fcall"), 7); /* b's acquire: acquire.lua's short call, then the full one */
    assert_int_equal(cmd_calls("evalsha") + cmd_calls("script|load") + cmd_calls("script"), 0);
    for (int s = 0; s < CCAP_SCRIPT_COUNT; s++)
        assert_false(script_exists((enum ccap_script)s));
    /* a function runs only on the keys of one semaphore, in its order */
    const char *wrong[][4] = { { PFX "{fn}:holders", PFX "{fn}:other" },
                               { PFX "{fn}:stats", PFX "{fn}:holders" },
                               { PFX "{x}:holders", PFX "{fn}:limit" },
                               { "fn:holders", "fn:limit" } };
    for (size_t i = 0; i < 4; i++) {
        const char *av[] = {
            "FCALL", ccap_script_function(CCAP_SCRIPT_ACQUIRE), "2", wrong[i][0], wrong[i][1], "h", "1000", "100000"
        };
        rep = redisCommandArgv(CLI, 8, av, NULL);
        assert_non_null(rep);
        assert_int_equal(rep->type, REDIS_REPLY_ERROR);
        assert_non_null(strstr(rep->str, "ERR conncap: "));
        freeReplyObject(rep);
    }
    assert_int_equal(cli_int("EXISTS " PFX "{fn}:other " PFX "{x}:holders fn:holders"), 0);
    /* the library remembers the key sets it found good (mk/embed-lua.sh):
     * a first key seen before does not let other keys through, more keys
     * than the script's are refused, fewer pass, and so it stays once
     * the memo started afresh (256 first keys) */
    const char *more[] = { "FCALL",
                           ccap_script_function(CCAP_SCRIPT_RELEASE),
                           "11",
                           PFX "{fn}:holders",
                           PFX "{fn}:stats",
                           PFX "{fn}:since",
                           PFX "{fn}:audit",
                           PFX "{fn}:limit",
                           PFX "{fn}:queue",
                           PFX "{fn}:qexp",
                           PFX "{fn}:qexp",
                           PFX "{fn}:qexp",
                           PFX "{fn}:qexp",
                           PFX "{fn}:qexp",
                           "h" };
    rep = redisCommandArgv(CLI, 15, more, NULL);
    assert_int_equal(rep->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(rep->str, "ERR conncap: 11 keys, not 1..10"));
    freeReplyObject(rep);
    const char *fewer[] = { "FCALL", ccap_script_function(CCAP_SCRIPT_RELEASE), "1", PFX "{fn}:holders", "h" };
    rep = redisCommandArgv(CLI, 5, fewer, NULL); /* past the check (then the script needs its queue key) */
    assert_true(rep->type != REDIS_REPLY_ERROR || !strstr(rep->str, "ERR conncap: "));
    freeReplyObject(rep);
    for (int round = 0; round < 2; round++) {
        const char *av[] = { "FCALL",
                             ccap_script_function(CCAP_SCRIPT_ACQUIRE),
                             "3",
                             PFX "{fn}:holders",
                             PFX "{fn}:limit",
                             PFX "{fn}:since",
                             "h",
                             "1000",
                             "100000" };
        rep = redisCommandArgv(CLI, 9, av, NULL);
        assert_int_equal(rep->type, REDIS_REPLY_ERROR);
        assert_non_null(strstr(rep->str, "ERR conncap: key 3 is not <prefix>{name}:stats"));
        freeReplyObject(rep);
        for (int i = 0; i < 300; i++) {
            char name[16];
            snprintf(name, sizeof name, "m%d", i);
            assert_int_equal(acq(name, "a", 10000, 1).granted, 1);
        }
    }
    assert_int_equal(acq("fn", "d", 10000, 1).granted, 1);
    assert_int_equal(t_release(R, PFX, "fn", "d"), 1);

    cli_ok("FUNCTION FLUSH");
    assert_int_equal(acq("fn", "c", 10000, 1).granted, 1);
    assert_int_equal(t_release(R, PFX, "fn", "c"), 1);
    assert_true(script_exists(CCAP_SCRIPT_ACQUIRE));
    assert_true(cmd_calls("evalsha") >= 2);
    assert_string_equal(ccap_redis_errstr(R), "");
}

static void test_ttl_covers_leases(void **state)
{
    const char *a[] = { "A" };
    long long pttl, longest;
    (void)state;

    /* A long lease, then a short one: the short must not cut the TTL. */
    assert_int_equal(acq("ttl", "A", 5000, 10).granted, 1);
    assert_ttl_covers_leases("ttl");
    assert_int_equal(acq("ttl", "B", 300, 10).granted, 1);
    assert_ttl_covers_leases("ttl");
    ttl_and_lease("ttl", &pttl, &longest);
    assert_true(longest > 4000);

    /* Renewing with a longer lease lengthens the TTL with it. */
    assert_int_equal(renew("ttl", a, 1, 20000, 0), 0);
    assert_ttl_covers_leases("ttl");
    ttl_and_lease("ttl", &pttl, &longest);
    assert_true(longest > 15000);

    /* Release of the longest holder: the rest stay covered. */
    assert_int_equal(acq("ttl", "C", 8000, 10).granted, 1);
    assert_int_equal(t_release(R, PFX, "ttl", "A"), 1);
    assert_ttl_covers_leases("ttl");

    /* A later acquire with a short lease, after sweeping B (at the limit
     * with B: below it, the short call would leave B to a later sweep). */
    fx_sleep_ms(350);
    assert_int_equal(acq("ttl", "D", 300, 2).count, 2); /* C and D; B swept */
    assert_false(has_holder("ttl", "B"));
    assert_ttl_covers_leases("ttl");
}

static void test_idle_key_vanishes(void **state)
{
    (void)state;

    /* Nobody calls after the leases end: the key expires by itself. */
    assert_int_equal(acq("idle", "A", 300, 5).granted, 1);
    assert_int_equal(acq("idle", "B", 300, 5).granted, 1);
    assert_true(key_exists("idle"));
    fx_sleep_ms(300 + 300 + 400); /* lease + margin + slack */
    assert_false(key_exists("idle"));

    /* Expired holders are swept by the next acquire that finds the
     * semaphore at its limit with them. */
    assert_int_equal(acq("idle", "A", 300, 5).granted, 1);
    fx_sleep_ms(400);
    assert_int_equal(acq("idle", "C", 10000, 1).count, 1);
    assert_false(has_holder("idle", "A"));
}

/* A key-wide EXPIRE counter never gives back a crashed holder's permit while
 * others keep coming: here it comes back after its lease. */
static void test_crashed_holder_reclaimed(void **state)
{
    struct ccap_sem_result res;
    long long t0;
    int rounds = 0;
    (void)state;

    assert_int_equal(acq("crash", "C", 1000, 2).granted, 1); /* never released */
    t0 = fx_now_ms();
    assert_int_equal(acq("crash", "X", 10000, 2).granted, 1);
    assert_int_equal(acq("crash", "Y", 10000, 2).granted, 0); /* C still counts */
    assert_int_equal(t_release(R, PFX, "crash", "X"), 1);

    /* Steady traffic through and past C's lease. */
    while (fx_now_ms() - t0 < 1600 || rounds < 10) {
        res = acq("crash", "X", 10000, 2);
        assert_true(res.count <= 2);
        res = acq("crash", "Y", 10000, 2);
        assert_true(res.count <= 2);
        if (res.granted)
            assert_int_equal(t_release(R, PFX, "crash", "Y"), 1);
        assert_int_equal(t_release(R, PFX, "crash", "X"), 1);
        rounds++;
        fx_sleep_ms(20);
    }

    assert_int_equal(acq("crash", "X", 10000, 2).granted, 1);
    res = acq("crash", "Y", 10000, 2);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 2);
    assert_false(has_holder("crash", "C"));
}

/* A key-wide EXPIRE counter can vanish under live holders when traffic
 * pauses: here holders kept alive by renew stay, with no other calls. */
static void test_renewed_holders_survive_pause(void **state)
{
    const char *h[] = { "A", "B" };
    long long t0 = fx_now_ms();
    (void)state;

    assert_int_equal(acq("pause", "A", 600, 2).granted, 1);
    assert_int_equal(acq("pause", "B", 600, 2).granted, 1);
    while (fx_now_ms() - t0 < 1800) { /* three leases long */
        fx_sleep_ms(100);
        assert_int_equal(renew("pause", h, 2, 600, 0), 0);
        assert_int_equal(n_holders("pause"), 2);
        assert_ttl_covers_leases("pause");
    }
    assert_int_equal(acq("pause", "C", 600, 2).granted, 0);

    /* Renewal stops: the leases run out and the idle key goes. */
    fx_sleep_ms(600 + 600 + 400);
    assert_false(key_exists("pause"));
    assert_int_equal(acq("pause", "C", 600, 2).granted, 1);
}

static void test_renew_add_missing(void **state)
{
    const char *abc[] = { "A", "B", "C" };
    const char *ab[] = { "A", "B" };
    (void)state;

    for (int i = 0; i < 3; i++)
        assert_int_equal(acq("ren", abc[i], 10000, 3).granted, 1);
    assert_int_equal(renew("ren", abc, 3, 10000, 1), 0);

    /* Lost (as by a restart): counted, and re-added only when asked. */
    cli_ok("DEL " PFX "{ren}:holders");
    assert_int_equal(renew("ren", abc, 3, 10000, 0), 3);
    assert_false(key_exists("ren"));
    assert_int_equal(renew("ren", abc, 3, 10000, 1), 3);
    assert_int_equal(n_holders("ren"), 3);
    assert_ttl_covers_leases("ren");
    assert_int_equal(renew("ren", abc, 3, 10000, 1), 0);

    /* Partly lost. */
    cli_ok("ZREM " PFX "{ren}:holders B");
    assert_int_equal(renew("ren", abc, 3, 10000, 0), 1);
    assert_false(has_holder("ren", "B"));
    assert_int_equal(renew("ren", abc, 3, 10000, 1), 1);
    assert_true(has_holder("ren", "B"));

    /* FLUSHALL, new holders fill the limit meanwhile: the old ones come back
     * above the limit (they hold live connections), nobody new gets in. */
    cli_ok("FLUSHALL");
    assert_int_equal(acq("ren", "X", 10000, 2).granted, 1);
    assert_int_equal(acq("ren", "Y", 10000, 2).granted, 1);
    assert_int_equal(renew("ren", ab, 2, 10000, 1), 2);
    assert_int_equal(n_holders("ren"), 4);
    assert_int_equal(acq("ren", "Z", 10000, 2).granted, 0);
    assert_ttl_covers_leases("ren");
}

static void test_renew_batch(void **state)
{
    enum { N = 200 };
    static char names[N][16];
    const char *h[N];
    (void)state;

    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "holder-%d", i);
        h[i] = names[i];
    }
    for (int i = 0; i < N; i += 2)
        assert_int_equal(acq("batch", h[i], 10000, N).granted, 1);
    assert_int_equal(renew("batch", h, N, 10000, 0), N / 2);
    assert_int_equal(n_holders("batch"), N / 2);
    assert_int_equal(renew("batch", h, N, 10000, 1), N / 2);
    assert_int_equal(n_holders("batch"), N);
}

static void test_wrong_type(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    cli_ok("SET " PFX "{wt}:holders notazset");
    assert_int_equal(t_acquire(R, PFX, "wt", "a", 1000, 3, &res), -EPROTO);
    assert_non_null(strstr(ccap_redis_errstr(R), "WRONGTYPE"));
    assert_int_equal(t_release(R, PFX, "wt", "a"), -EPROTO);
}

static void test_server_restart(void **state)
{
    const char *ab[] = { "A", "B" };
    struct ccap_sem_result res;
    int rc;
    (void)state;

    assert_int_equal(acq("rs", "A", 10000, 2).granted, 1);
    assert_int_equal(acq("rs", "B", 10000, 2).granted, 1);
    redisFree(CLI);
    CLI = NULL;
    redis_fixture_kill(&fx);
    assert_int_equal(redis_fixture_restart(&fx), 0);
    CLI = redis_fixture_cli(&fx);
    assert_non_null(CLI);

    /* The old connection is dead: one transport error, then a new one;
     * the restarted server has neither scripts nor holders. */
    rc = renew("rs", ab, 2, 10000, 1);
    if (rc < 0)
        rc = renew("rs", ab, 2, 10000, 1);
    assert_int_equal(rc, 2);
    assert_int_equal(n_holders("rs"), 2);
    res = acq("rs", "C", 10000, 2);
    assert_int_equal(res.granted, 0);
}

/* ---- a fake server that answers every command with a canned reply ---- */

static const char *_Atomic canned;
static int fake_lfd = -1;

static void *fake_server(void *arg)
{
    char buf[65536];
    int cfd;
    (void)arg;

    while ((cfd = accept(fake_lfd, NULL, NULL)) >= 0) {
        ssize_t n;

        while ((n = read(cfd, buf, sizeof buf)) > 0) {
            const char *rep = canned;

            if (write(cfd, rep, strlen(rep)) < 0)
                break;
        }
        close(cfd);
    }
    return NULL;
}

static void test_malformed_replies(void **state)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    struct ccap_sem_result res;
    struct ccap_redis *fr;
    const char *ab[] = { "a", "b" };
    pthread_t th;
    char path[300];
    (void)state;

    snprintf(path, sizeof path, "%s/fake.sock", fx.dir);
    assert_true(strlen(path) < sizeof sun.sun_path);
    memcpy(sun.sun_path, path, strlen(path) + 1);
    fake_lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fake_lfd >= 0);
    assert_int_equal(bind(fake_lfd, (struct sockaddr *)&sun, sizeof sun), 0);
    assert_int_equal(listen(fake_lfd, 4), 0);
    assert_int_equal(pthread_create(&th, NULL, fake_server, NULL), 0);
    fr = client_for(sun.sun_path);

    static const char *const bad_acquire[] = {
        "*2\r\n:1\r\n:2\r\n",            /* too short */
        "*3\r\n:1\r\n$1\r\nx\r\n:3\r\n", /* a string inside */
        "*3\r\n:2\r\n:1\r\n:3\r\n",      /* granted not 0/1 */
        "*3\r\n:1\r\n:-1\r\n:3\r\n",     /* negative count */
        "$3\r\nabc\r\n",                 /* not an array */
        ":1\r\n",
        "*-1\r\n",                                     /* nil array */
        "*3\r\n*0\r\n:1\r\n:1\r\n",                    /* nested */
        "*3\r\n:0\r\n:2\r\n:3\r\n",                    /* three elements: a grant only */
        "*6\r\n:1\r\n:2\r\n:3\r\n:0\r\n:-1\r\n:2\r\n", /* queue_full not 0/1 */
        "*6\r\n:1\r\n:2\r\n:3\r\n:0\r\n:-2\r\n:0\r\n", /* wake_ms below -1 */
    };
    for (size_t i = 0; i < sizeof bad_acquire / sizeof *bad_acquire; i++) {
        canned = bad_acquire[i];
        assert_int_equal(t_acquire(fr, PFX, "s", "a", 1000, 3, &res), -EPROTO);
    }
    canned = "*6\r\n:0\r\n:2\r\n:3\r\n:0\r\n:-1\r\n:1\r\n"; /* well-formed: the same link still works */
    assert_int_equal(t_acquire(fr, PFX, "s", "a", 1000, 3, &res), 0);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.count, 2);
    assert_int_equal(res.limit, 3);
    assert_int_equal(res.queue_full, 1);

    canned = "-ERR boom\r\n";
    assert_int_equal(t_acquire(fr, PFX, "s", "a", 1000, 3, &res), -EPROTO);
    assert_string_equal(ccap_redis_errstr(fr), "ERR boom");

    canned = ":2\r\n";
    assert_int_equal(t_release(fr, PFX, "s", "a"), -EPROTO);
    canned = "+OK\r\n";
    assert_int_equal(t_release(fr, PFX, "s", "a"), -EPROTO);
    canned = "$-1\r\n";
    assert_int_equal(t_release(fr, PFX, "s", "a"), -EPROTO);

    canned = ":3\r\n"; /* more missing than asked about */
    assert_int_equal(ccap_sem_renew(fr, PFX, "s", ab, 2, 1000, 1), -EPROTO);
    canned = ":-1\r\n";
    assert_int_equal(ccap_sem_renew(fr, PFX, "s", ab, 2, 1000, 1), -EPROTO);
    canned = "*1\r\n:1\r\n";
    assert_int_equal(ccap_sem_renew(fr, PFX, "s", ab, 2, 1000, 1), -EPROTO);
    canned = ":2\r\n";
    assert_int_equal(ccap_sem_renew(fr, PFX, "s", ab, 2, 1000, 1), 2);

    /* NOSCRIPT even to the EVAL with the source is an error, not a loop. */
    canned = "-NOSCRIPT No matching script.\r\n";
    assert_int_equal(t_release(fr, PFX, "s", "a"), -EPROTO);

    ccap_redis_free(fr);
    shutdown(fake_lfd, SHUT_RDWR);
    pthread_join(th, NULL);
    close(fake_lfd);
    fake_lfd = -1;
}

/* ---- ops stats (issue 7): counters, histogram, acquire times, waiters, audit ---- */

/* A reply that is a number in a string (ZSCORE, HGET) as a number; -1 for nil. */
static long long cli_num(const char *fmt, ...)
{
    redisReply *rep;
    long long v = -1;
    va_list ap;

    va_start(ap, fmt);
    rep = redisvCommand(CLI, fmt, ap);
    va_end(ap);
    assert_non_null(rep);
    if (rep->type == REDIS_REPLY_STRING)
        v = atoll(rep->str);
    else
        assert_int_equal(rep->type, REDIS_REPLY_NIL);
    freeReplyObject(rep);
    return v;
}

/* A field of NAME's stats hash as a number; -1 when absent. */
static long long stat_of(const char *name, const char *field)
{
    return cli_num("HGET " PFX "{%s}:stats %s", name, field);
}

static long long server_now_ms(void)
{
    redisReply *rep = redisCommand(CLI, "TIME");
    long long v;

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    v = atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
    freeReplyObject(rep);
    return v;
}

static struct ccap_sem_result acq_wait(const char *name, const char *holder, int limit, long long waited,
                                       long long left)
{
    struct ccap_sem_result res = { -1, -1, -1 };

    assert_int_equal(t_acquire_wait(R, PFX, name, holder, 10000, limit, waited, left, &res), 0);
    return res;
}

static struct ccap_sem_result queue_up(const char *name, const char *who, int lease_ms, int limit, bool grants,
                                       double rate);

static void test_stats_counters(void **state)
{
    (void)state;

    /* A grant that never waited counts in acquired only (readers add it
     * as a wait of 0 ms); it fills the semaphore: full_since, full_limit. */
    assert_int_equal(acq_wait("st", "A", 1, 0, 0).granted, 1);
    assert_int_equal(stat_of("st", CCAP_STAT_ACQUIRED), 1);
    assert_int_equal(stat_of("st", "wait_le_1"), -1);
    assert_int_equal(stat_of("st", CCAP_STAT_WAIT_COUNT), -1);
    assert_int_equal(stat_of("st", CCAP_STAT_WAIT_SUM), -1);
    assert_int_equal(stat_of("st", CCAP_STAT_DENIED), -1);
    assert_int_equal(stat_of("st", CCAP_STAT_FULL_LIMIT), 1);
    assert_true(stat_of("st", CCAP_STAT_FULL_SINCE) > 0);

    /* Re-asking holder: no second grant counted. */
    assert_int_equal(acq_wait("st", "A", 1, 0, 0).granted, 1);
    assert_int_equal(stat_of("st", CCAP_STAT_ACQUIRED), 1);

    /* B is refused twice while waiting, listed as a waiter, then gives up. */
    assert_int_equal(acq_wait("st", "B", 1, 0, 600).granted, 0);
    assert_int_equal(acq_wait("st", "B", 1, 300, 300).granted, 0);
    assert_int_equal(stat_of("st", CCAP_STAT_DENIED), 2);
    assert_int_equal(cli_int("ZCARD " PFX "{st}:waiters"), 1);
    assert_true(cli_int("PTTL " PFX "{st}:waiters") > 0);
    assert_int_equal(ccap_sem_timeout(R, PFX, "st", "B", 700, t_audit), 0);
    assert_int_equal(stat_of("st", CCAP_STAT_TIMED_OUT), 1);
    assert_int_equal(stat_of("st", "wait_le_1000"), 1);
    assert_int_equal(stat_of("st", CCAP_STAT_WAIT_COUNT), 1);
    assert_int_equal(stat_of("st", CCAP_STAT_WAIT_SUM), 700);
    assert_int_equal(cli_int("EXISTS " PFX "{st}:waiters"), 0);
    assert_int_equal(n_holders("st"), 1); /* a timeout touches no holder */

    /* A refusal of an acquirer that will not wait lists no waiter. */
    assert_int_equal(acq_wait("st", "C", 1, 0, 0).granted, 0);
    assert_int_equal(cli_int("EXISTS " PFX "{st}:waiters"), 0);

    /* A waiter that gets its permit leaves the waiters set, its wait counted. */
    assert_int_equal(acq_wait("st", "D", 1, 0, 5000).granted, 0);
    assert_int_equal(t_release(R, PFX, "st", "A"), 1);
    assert_int_equal(t_release(R, PFX, "st", "A"), 0);
    assert_int_equal(stat_of("st", CCAP_STAT_RELEASED), 1);
    assert_int_equal(acq_wait("st", "D", 1, 42, 4958).granted, 1);
    assert_int_equal(cli_int("EXISTS " PFX "{st}:waiters"), 0);
    assert_int_equal(stat_of("st", "wait_le_50"), 1); /* a grant after a wait feeds the histogram */
    assert_int_equal(stat_of("st", CCAP_STAT_ACQUIRED), 2);
    assert_int_equal(stat_of("st", CCAP_STAT_WAIT_COUNT), 2);
    assert_int_equal(stat_of("st", CCAP_STAT_WAIT_SUM), 742);

    /* A waiter giving up early (its socket closed: its holder id released)
     * leaves the waiters set with its ticket, not at its wait's end. */
    assert_int_equal(acq_wait("st", "G", 1, 0, 30000).granted, 0);
    assert_true(cli_num("ZSCORE " PFX "{st}:waiters G") > 0);
    assert_int_equal(t_release(R, PFX, "st", "G"), 0);
    assert_int_equal(cli_num("ZSCORE " PFX "{st}:waiters G"), -1);
    assert_int_equal(cli_int("EXISTS " PFX "{st}:waiters"), 0);
    assert_int_equal(queue_up("st", "Q", 10000, 1, true, 0).granted, 0); /* with a ticket */
    assert_true(cli_num("ZSCORE " PFX "{st}:waiters Q") > 0);
    assert_int_equal(t_release(R, PFX, "st", "Q"), 0);
    assert_int_equal(cli_int("EXISTS " PFX "{st}:waiters " PFX "{st}:queue " PFX "{st}:qexp " PFX "{st}:grant"), 0);

    /* A waiter that crashed (no timeout call) drops out when its wait ends. */
    assert_int_equal(acq_wait("st", "E", 1, 0, 1).granted, 0);
    assert_int_equal(cli_int("ZCARD " PFX "{st}:waiters"), 1);
    fx_sleep_ms(1200);
    assert_int_equal(acq_wait("st", "F", 1, 0, 0).granted, 0);
    assert_int_equal(cli_int("EXISTS " PFX "{st}:waiters"), 0);

    /* Counters are monotonic (Prometheus counters): the hash has no TTL. */
    assert_int_equal(cli_int("PTTL " PFX "{st}:stats"), -1);
    assert_int_equal(t_release(R, PFX, "st", "D"), 1);
    assert_false(key_exists("st"));
    assert_int_equal(stat_of("st", CCAP_STAT_ACQUIRED), 2);
    assert_int_equal(stat_of("st", CCAP_STAT_RELEASED), 2);
}

/* Every bound of CCAP_WAIT_BOUNDS_MS is the one the scripts use: a wait of
 * exactly B lands in wait_le_B, one of B + 1 in the next bucket. */
static void test_stats_histogram_bounds(void **state)
{
    static const int bounds[] = CCAP_WAIT_BOUNDS_MS;
    char field[32], h[32];
    long long sum = 0, n = 0;
    (void)state;

    assert_int_equal(sizeof bounds / sizeof *bounds, CCAP_WAIT_N_BOUNDS);
    for (int i = 0; i < CCAP_WAIT_N_BOUNDS; i++) {
        snprintf(h, sizeof h, "g%d", i);
        assert_int_equal(acq_wait("hist", h, 1000, bounds[i], 0).granted, 1);
        snprintf(h, sizeof h, "t%d", i);
        assert_int_equal(ccap_sem_timeout(R, PFX, "hist", h, bounds[i] + 1, t_audit), 0);
        sum += 2LL * bounds[i] + 1;
        n += 2;
    }
    for (int i = 0; i < CCAP_WAIT_N_BOUNDS; i++) {
        snprintf(field, sizeof field, "wait_le_%d", bounds[i]);
        /* B itself, plus the timeout of the previous bound + 1 when that is <= B */
        assert_int_equal(stat_of("hist", field), i == 0 ? 1 : 2);
    }
    assert_int_equal(stat_of("hist", "wait_le_inf"), 1);
    assert_int_equal(stat_of("hist", CCAP_STAT_WAIT_COUNT), n);
    assert_int_equal(stat_of("hist", CCAP_STAT_WAIT_SUM), sum);
    assert_int_equal(stat_of("hist", CCAP_STAT_TIMED_OUT), CCAP_WAIT_N_BOUNDS);
    assert_int_equal(stat_of("hist", CCAP_STAT_ACQUIRED), CCAP_WAIT_N_BOUNDS);
}

static void test_stats_since_and_reclaimed(void **state)
{
    const char *y[] = { "Y" };
    long long t0 = server_now_ms(), at;
    (void)state;

    assert_int_equal(acq("since", "old", 300, 5).granted, 1);
    assert_int_equal(acq("since", "Y", 10000, 5).granted, 1);
    fx_sleep_ms(400);
    /* The sweep in acquire reclaims "old" and forgets its acquire time. */
    assert_int_equal(acq("since", "Z", 300, 5).count, 2);
    assert_int_equal(stat_of("since", CCAP_STAT_RECLAIMED), 1);
    assert_int_equal(cli_int("HEXISTS " PFX "{since}:since old"), 0);
    assert_int_equal(cli_int("HLEN " PFX "{since}:since"), 0); /* a grant writes none */
    fx_sleep_ms(400);
    /* The sweep in renew reclaims "Z"; Y's first renewal writes its
     * acquire time: its score before the renewal minus the lease. */
    assert_int_equal(renew("since", y, 1, 10000, 0), 0);
    assert_int_equal(stat_of("since", CCAP_STAT_RECLAIMED), 2);
    assert_int_equal(cli_int("HEXISTS " PFX "{since}:since Z"), 0);
    /* The acquire time is the server's, and stays put on renew. */
    assert_int_equal(cli_int("HEXISTS " PFX "{since}:since Y"), 1);
    redisReply *rep = redisCommand(CLI, "HGET " PFX "{since}:since Y");
    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_STRING);
    at = atoll(rep->str);
    freeReplyObject(rep);
    assert_true(at >= t0 - 5 && at <= t0 + 5000);
    /* It lives exactly as long as the holders key. */
    assert_true(cli_int("PTTL " PFX "{since}:since") > 0);
    assert_true(cli_int("PTTL " PFX "{since}:since") <= cli_int("PTTL " PFX "{since}:holders") + 50);
    /* A second renewal keeps it. */
    assert_int_equal(renew("since", y, 1, 10000, 0), 0);
    assert_int_equal(cli_num("HGET " PFX "{since}:since Y"), at);
    /* The release of a renewed holder deletes it. */
    struct ccap_sem_rel rel = { "Y", 5, 0, true };
    assert_int_equal(ccap_sem_release(R, PFX, "since", &rel), 1);
    assert_int_equal(cli_int("EXISTS " PFX "{since}:since"), 0);
}

static void test_stats_reregistered_and_fallback(void **state)
{
    const char *ab[] = { "A", "B" };
    (void)state;

    assert_int_equal(acq("rr", "A", 10000, 3).granted, 1);
    assert_int_equal(acq("rr", "B", 10000, 3).granted, 1);
    cli_ok("DEL " PFX "{rr}:holders " PFX "{rr}:since");
    assert_int_equal(renew("rr", ab, 2, 10000, 0), 2); /* only counted as missing */
    assert_int_equal(stat_of("rr", CCAP_STAT_REREGISTERED), -1);
    assert_int_equal(renew("rr", ab, 2, 10000, 1), 2);
    assert_int_equal(stat_of("rr", CCAP_STAT_REREGISTERED), 2);
    assert_int_equal(cli_int("HLEN " PFX "{rr}:since"), 2); /* age restarts at re-registration */
    assert_int_equal(renew("rr", ab, 2, 10000, 1), 0);
    assert_int_equal(stat_of("rr", CCAP_STAT_REREGISTERED), 2);

    assert_int_equal(ccap_sem_count_fallback(R, PFX, "rr", 0), 0);
    assert_int_equal(stat_of("rr", CCAP_STAT_FALLBACK), -1);
    assert_int_equal(ccap_sem_count_fallback(R, PFX, "rr", 3), 0);
    assert_int_equal(ccap_sem_count_fallback(R, PFX, "rr", 2), 0);
    assert_int_equal(stat_of("rr", CCAP_STAT_FALLBACK), 5);
    assert_int_equal(ccap_sem_count_fallback(R, PFX, "rr", -1), -EINVAL);
}

static void test_stats_full_since(void **state)
{
    long long t0 = server_now_ms(), fs;
    (void)state;

    assert_int_equal(acq("full", "A", 10000, 2).granted, 1);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_SINCE), -1);
    assert_int_equal(acq("full", "B", 10000, 2).granted, 1); /* fills it */
    fs = stat_of("full", CCAP_STAT_FULL_SINCE);
    assert_true(fs >= t0 - 5 && fs <= t0 + 5000);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_LIMIT), 2);
    fx_sleep_ms(20);
    assert_int_equal(acq("full", "C", 10000, 2).granted, 0);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_SINCE), fs); /* kept, not moved */
    /* A release leaves it (readers show it only while full); the grant that
     * fills the semaphore again sets it anew. */
    assert_int_equal(t_release(R, PFX, "full", "B"), 1);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_SINCE), fs);
    assert_int_equal(acq("full", "B", 10000, 2).granted, 1);
    long long fs2 = stat_of("full", CCAP_STAT_FULL_SINCE);
    assert_true(fs2 >= fs + 15);
    /* Raising the limit frees a permit: grants below it leave it alone. */
    cli_ok("SET " PFX "{full}:limit 5");
    assert_int_equal(acq("full", "C", 10000, 2).granted, 1);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_SINCE), fs2);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_LIMIT), 2);
    /* Lowered under the live holders: the first refusal sees another limit
     * and sets it anew; a release keeps it. */
    fx_sleep_ms(20);
    cli_ok("SET " PFX "{full}:limit 1");
    assert_int_equal(acq("full", "D", 10000, 2).granted, 0);
    long long fs3 = stat_of("full", CCAP_STAT_FULL_SINCE);
    assert_true(fs3 >= fs2 + 15);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_LIMIT), 1);
    assert_int_equal(acq("full", "D", 10000, 2).granted, 0);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_SINCE), fs3);
    assert_int_equal(t_release(R, PFX, "full", "C"), 1);
    assert_int_equal(stat_of("full", CCAP_STAT_FULL_SINCE), fs3);
}

/* A holder that comes back without a grant (added again by its renewal,
 * or renewed after its lease ended) deletes full_since: the semaphore was
 * not full all the time since the fill it dates. A plain renewal keeps it. */
static void test_renew_back_forgets_full_since(void **state)
{
    (void)state;

    assert_int_equal(acq("fb", "A", 10000, 2).granted, 1);
    assert_int_equal(acq("fb", "B", 10000, 2).granted, 1); /* fills it */
    long long fs = stat_of("fb", CCAP_STAT_FULL_SINCE);
    assert_true(fs > 0);
    assert_int_equal(renew("fb", (const char *[]){ "A", "B" }, 2, 10000, 1), 0);
    assert_int_equal(stat_of("fb", CCAP_STAT_FULL_SINCE), fs);
    cli_ok("ZREM " PFX "{fb}:holders B"); /* Redis lost B */
    assert_int_equal(renew("fb", (const char *[]){ "A", "B" }, 2, 10000, 1), 1);
    assert_int_equal(stat_of("fb", CCAP_STAT_FULL_SINCE), -1);
    assert_int_equal(stat_of("fb", CCAP_STAT_FULL_LIMIT), -1);
    /* B's lease ended, nobody swept it: its renewal brings it back */
    assert_int_equal(t_release(R, PFX, "fb", "B"), 1);
    assert_int_equal(acq("fb", "B", 300, 2).granted, 1); /* fills it again */
    assert_true(stat_of("fb", CCAP_STAT_FULL_SINCE) > 0);
    fx_sleep_ms(400);
    assert_int_equal(renew("fb", (const char *[]){ "B" }, 1, 10000, 1), 0);
    assert_int_equal(stat_of("fb", CCAP_STAT_FULL_SINCE), -1);
}

/* ---- the scripts' fast path: what it skips must stay true ---- */

/* The shim's acquire (queue and rate keys, no rate), trying once. */
static struct ccap_sem_result acq_fair(const char *name, const char *holder, int lease_ms, int limit)
{
    struct ccap_sem_req q = { .holder = holder, .lease_ms = lease_ms, .limit = limit };
    struct ccap_sem_result res = { -1, -1, -1, -1, -2 };

    assert_int_equal(ccap_sem_acquire(R, PFX, name, &q, &res), 0);
    return res;
}

/* since, when it exists, has the holders key's TTL (read in one script). */
static void assert_since_ttl_matches(const char *name)
{
    static const char lua[] = "return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}";
    redisReply *rep = redisCommand(CLI, "EVAL %s 2 " PFX "{%s}:holders " PFX "{%s}:since", lua, name, name);
    long long h, s;

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    h = rep->element[0]->integer;
    s = rep->element[1]->integer;
    freeReplyObject(rep);
    if (s == -2)
        return; /* none written: only renewals write acquire times */
    if (s <= 0 || h <= 0 || s > h + 5 || s < h - 5)
        fail_msg("%s: since PTTL %lld, holders PTTL %lld", name, s, h);
}

/* Grants raise the holders key's TTL only when less than their lease is
 * left on it. With short and long leases mixed, and expired ones swept on
 * the way, every lease stays covered, the TTL stays bounded (two of the
 * longest lease at most) and since keeps the same TTL. */
static void test_ttl_threshold_mixed_leases(void **state)
{
    long long pttl, longest, t0;
    char h[16];
    int i = 0;
    (void)state;

    assert_int_equal(acq_fair("mix", "S", 300, 100).granted, 1);
    assert_int_equal(acq_fair("mix", "L", 3000, 100).granted, 1); /* the longer lease raises it */
    assert_ttl_covers_leases("mix");
    ttl_and_lease("mix", &pttl, &longest);
    assert_true(longest > 2500);
    assert_since_ttl_matches("mix");
    t0 = fx_now_ms();
    while (fx_now_ms() - t0 < 3600) { /* past L's lease */
        snprintf(h, sizeof h, "s%d", i++);
        assert_int_equal(acq_fair("mix", h, 300, 100).granted, 1);
        assert_ttl_covers_leases("mix");
        ttl_and_lease("mix", &pttl, &longest);
        if (pttl > 2 * 3000)
            fail_msg("PTTL %lld beyond two of the longest lease", pttl);
        assert_since_ttl_matches("mix");
        fx_sleep_ms(40);
    }
    assert_false(has_holder("mix", "L"));
    assert_false(has_holder("mix", "S"));
    assert_true(stat_of("mix", CCAP_STAT_RECLAIMED) >= 2);

    /* One lease length: idle, the key and since go at most a lease after the last lease. */
    for (i = 0; i < 20; i++) {
        snprintf(h, sizeof h, "o%d", i);
        assert_int_equal(acq_fair("one", h, 300, 100).granted, 1);
        assert_ttl_covers_leases("one");
        assert_since_ttl_matches("one");
        fx_sleep_ms(30);
    }
    fx_sleep_ms(300 + 300 + 400); /* lease + margin + slack */
    assert_false(key_exists("one"));
    assert_int_equal(cli_int("EXISTS " PFX "{one}:since"), 0);
}

/* since never lacks a TTL, nor the holders key, when one of the two was
 * lost (evicted, deleted) while the other lived on. */
static void test_ttl_after_lost_key(void **state)
{
    (void)state;

    const char *ab[] = { "A", "B" };

    assert_int_equal(acq_fair("lost", "A", 10000, 5).granted, 1);
    assert_int_equal(renew("lost", ab, 1, 10000, 0), 0);
    assert_since_ttl_matches("lost");
    cli_ok("DEL " PFX "{lost}:since");
    assert_int_equal(acq_fair("lost", "B", 10000, 5).granted, 1);
    assert_int_equal(renew("lost", ab, 2, 10000, 0), 0);
    assert_int_equal(cli_int("HEXISTS " PFX "{lost}:since A"), 1);
    assert_int_equal(cli_int("HEXISTS " PFX "{lost}:since B"), 1);
    assert_since_ttl_matches("lost");
    assert_ttl_covers_leases("lost");

    /* holders gone, since left: a short lease starts anew; since goes with
     * its own TTL (at most two leases of the renewal that set it) */
    cli_ok("DEL " PFX "{lost}:holders");
    assert_int_equal(acq_fair("lost", "C", 300, 5).count, 1);
    assert_ttl_covers_leases("lost");
    assert_true(cli_int("PTTL " PFX "{lost}:since") <= 2 * 10000);
    fx_sleep_ms(300 + 300 + 400);
    assert_false(key_exists("lost"));
}

/* A holder asking again below the limit keeps its one permit: lease
 * renewed, no second grant counted, its acquire time kept. */
static void test_reask_below_limit(void **state)
{
    long long exp1, at;
    struct ccap_sem_result res;
    (void)state;

    assert_int_equal(acq_fair("again", "A", 10000, 5).granted, 1);
    exp1 = cli_num("ZSCORE " PFX "{again}:holders A");
    at = cli_num("HGET " PFX "{again}:since A");
    assert_int_equal(at, -1); /* granted at its score - lease */
    fx_sleep_ms(20);
    res = acq_fair("again", "A", 10000, 5);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 1);
    assert_true(cli_num("ZSCORE " PFX "{again}:holders A") >= exp1 + 15);
    assert_int_equal(stat_of("again", CCAP_STAT_ACQUIRED), 1);
    assert_int_equal(cli_num("HGET " PFX "{again}:since A"), at);
    assert_int_equal(n_holders("again"), 1);
    assert_since_ttl_matches("again");
}

/* The sweep runs on a refusal too: every expired holder reclaimed; a
 * refusal under another limit sets full_since anew. */
static void test_reclaimed_on_refusal(void **state)
{
    struct ccap_sem_result res;
    (void)state;

    assert_int_equal(acq_fair("recl", "e1", 300, 4).granted, 1);
    assert_int_equal(acq_fair("recl", "e2", 300, 4).granted, 1);
    assert_int_equal(acq_fair("recl", "e3", 300, 4).granted, 1);
    assert_int_equal(acq_fair("recl", "L", 10000, 4).granted, 1);
    assert_true(stat_of("recl", CCAP_STAT_FULL_SINCE) > 0);
    assert_int_equal(stat_of("recl", CCAP_STAT_RECLAIMED), -1);
    fx_sleep_ms(400);
    res = acq_fair("recl", "N", 10000, 1); /* configured limit now 1: L fills it */
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.count, 1);
    assert_int_equal(stat_of("recl", CCAP_STAT_RECLAIMED), 3);
    assert_int_equal(stat_of("recl", CCAP_STAT_DENIED), 1);
    assert_int_equal(stat_of("recl", CCAP_STAT_FULL_LIMIT), 1);
    assert_int_equal(cli_int("HLEN " PFX "{recl}:since"), 0);
    assert_true(stat_of("recl", CCAP_STAT_FULL_SINCE) > 0);
    assert_int_equal(t_release_wake(R, PFX, "recl", "L", 1), 1);
    assert_int_equal(stat_of("recl", CCAP_STAT_RELEASED), 1);
    assert_false(key_exists("recl"));
    assert_int_equal(cli_int("EXISTS " PFX "{recl}:since"), 0);
}

/* The limit override in whatever form it has: the reply carries the
 * integer part of the limit in force, from the fast path and the stats-only
 * call alike. */
static void test_stats_limit_text(void **state)
{
    static const struct {
        const char *set;
        long long reply;
    } cases[] = {
        { NULL, 4 },  { "07", 7 }, { "1e3", 1000 }, { "2.5", 2 }, { "0.1", 0 }, { "1e16", 10000000000000000LL },
        { "-3", -3 }, { "0", 0 },  { "-0", 0 },
    };
    struct ccap_sem_result res;
    (void)state;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].set)
            cli_ok("SET " PFX "{ltext}:limit %s", cases[i].set);
        res = acq_fair("ltext", "A", 10000, 4);
        assert_int_equal(res.limit, cases[i].reply);
        res = acq("ltext", "B", 10000, 4);
        assert_int_equal(res.limit, cases[i].reply);
    }
}

static void test_reset(void **state)
{
    (void)state;

    for (int i = 0; i < 3; i++) {
        char h[8];
        snprintf(h, sizeof h, "h%d", i);
        assert_int_equal(acq("rst", h, 10000, 3).granted, 1);
    }
    assert_true(stat_of("rst", CCAP_STAT_FULL_SINCE) > 0);
    assert_int_equal(ccap_sem_reset(R, PFX, "rst", "test", t_audit), 3);
    assert_false(key_exists("rst"));
    assert_int_equal(cli_int("EXISTS " PFX "{rst}:since"), 0);
    assert_int_equal(stat_of("rst", CCAP_STAT_FULL_SINCE), -1);
    assert_int_equal(stat_of("rst", CCAP_STAT_RESET_DROPPED), 3);
    assert_int_equal(stat_of("rst", CCAP_STAT_ACQUIRED), 3); /* counters stay */
    assert_int_equal(ccap_sem_reset(R, PFX, "rst", "test", t_audit), 0);
    assert_int_equal(acq("rst", "n", 10000, 3).count, 1);
}

/* The event list of NAME's audit stream, as "event:holder" words. */
static void audit_events(const char *name, char *out, size_t n)
{
    redisReply *rep = redisCommand(CLI, "XRANGE " PFX "{%s}:audit - +", name);

    assert_non_null(rep);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    out[0] = '\0';
    for (size_t i = 0; i < rep->elements; i++) {
        redisReply *f = rep->element[i]->element[1];
        const char *ev = "?", *who = "";
        for (size_t j = 0; j + 1 < f->elements; j += 2) {
            if (!strcmp(f->element[j]->str, "event"))
                ev = f->element[j + 1]->str;
            if (!strcmp(f->element[j]->str, "holder") || !strcmp(f->element[j]->str, "by"))
                who = f->element[j + 1]->str;
        }
        snprintf(out + strlen(out), n - strlen(out), "%s%s:%s", i ? " " : "", ev, who);
    }
    freeReplyObject(rep);
}

static void test_audit(void **state)
{
    char ev[1024];
    (void)state;

    assert_int_equal(acq("aud", "A", 10000, 1).granted, 1); /* audit off: nothing */
    assert_int_equal(cli_int("EXISTS " PFX "{aud}:audit"), 0);
    t_audit = 50;
    assert_int_equal(acq("aud", "B", 10000, 1).granted, 0); /* refusals are not events */
    assert_int_equal(ccap_sem_timeout(R, PFX, "aud", "B", 12, t_audit), 0);
    assert_int_equal(t_release(R, PFX, "aud", "A"), 1);
    assert_int_equal(t_release(R, PFX, "aud", "A"), 0); /* nothing released: no event */
    assert_int_equal(acq_wait("aud", "C", 1, 7, 100).granted, 1);
    assert_int_equal(ccap_sem_reset(R, PFX, "aud", "ops@box", t_audit), 1);
    audit_events("aud", ev, sizeof ev);
    assert_string_equal(ev, "timeout:B release:A acquire:C reset:ops@box");
    redisReply *rep = redisCommand(CLI, "XREVRANGE " PFX "{aud}:audit + - COUNT 2");
    assert_non_null(rep);
    assert_int_equal(rep->elements, 2);
    redisReply *f = rep->element[1]->element[1]; /* the acquire */
    assert_string_equal(f->element[4]->str, "wait_ms");
    assert_string_equal(f->element[5]->str, "7");
    freeReplyObject(rep);

    /* Bounded: MAXLEN ~ trims whole stream nodes (100 entries by default). */
    for (int i = 0; i < 400; i++) {
        assert_int_equal(acq("aud", "X", 10000, 1).granted, 1);
        assert_int_equal(t_release(R, PFX, "aud", "X"), 1);
    }
    long long len = cli_int("XLEN " PFX "{aud}:audit");
    assert_true(len >= 50 && len <= 50 + 200);
    t_audit = 0;
    assert_int_equal(acq("aud", "Y", 10000, 1).granted, 1);
    assert_int_equal(cli_int("XLEN " PFX "{aud}:audit"), len);
}

/* ---- bounded work per call ---- */

/* Adds N holders "<tag><i>" to NAME whose leases ended 1 s ago, and their
 * acquire times. */
static void add_expired(const char *name, const char *tag, int n)
{
    long long past = server_now_ms() - 1000;

    for (int i = 0; i < n; i++) {
        assert_int_equal(cli_int("ZADD " PFX "{%s}:holders %lld %s%d", name, past, tag, i), 1);
        assert_int_equal(cli_int("HSET " PFX "{%s}:since %s%d %lld", name, tag, i, past - 1000), 1);
    }
}

/* Many expired holders: one acquire drops only CCAP_SEM_SWEEP_MAX of them,
 * yet counts only the live ones (their permits are free at once), and the
 * next calls drop the rest; reclaimed counts each exactly once. */
static void test_sweep_bounded(void **state)
{
    struct ccap_sem_result res;
    const int dead = 5 * CCAP_SEM_SWEEP_MAX / 2; /* swept by three calls */
    (void)state;

    add_expired("bsw", "dead", dead);
    res = acq("bsw", "A", 10000, 2);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 1);
    assert_int_equal(cli_int("ZCARD " PFX "{bsw}:holders"), dead - CCAP_SEM_SWEEP_MAX + 1);
    assert_int_equal(cli_int("HLEN " PFX "{bsw}:since"), dead - CCAP_SEM_SWEEP_MAX);
    assert_int_equal(stat_of("bsw", CCAP_STAT_RECLAIMED), CCAP_SEM_SWEEP_MAX);
    res = acq("bsw", "B", 10000, 2);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 2);
    assert_int_equal(acq("bsw", "C", 10000, 2).granted, 0); /* full: two live holders */
    assert_int_equal(cli_int("ZCARD " PFX "{bsw}:holders"), 2);
    assert_int_equal(cli_int("HLEN " PFX "{bsw}:since"), 0);
    assert_int_equal(stat_of("bsw", CCAP_STAT_RECLAIMED), dead);
}

/* A holder whose lease ended, still in the set behind more than a sweep's
 * worth of expired ones, asks again: it is a newcomer (counted, and refused
 * when no permit is free), not a holder renewing its lease. */
static void test_sweep_bounded_reask(void **state)
{
    (void)state;

    assert_int_equal(acq("bre", "L", 10000, 1).granted, 1);
    add_expired("bre", "d", CCAP_SEM_SWEEP_MAX);
    assert_int_equal(cli_int("ZADD " PFX "{bre}:holders %lld zz-mine", server_now_ms() - 1), 1);
    assert_int_equal(acq("bre", "zz-mine", 10000, 1).granted, 0);
    assert_int_equal(cli_num("ZSCORE " PFX "{bre}:holders zz-mine"), -1);
}

/* renew drops at most a sweep's worth of expired holders per call, and
 * renews in batches: 1,200 holders, several script calls, all renewed. */
static void test_renew_bounded(void **state)
{
    enum { N = 1200 };
    static char ids[N][16];
    const char *h[N];
    (void)state;

    add_expired("brn", "dead", 150);
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "h%d", i);
        h[i] = ids[i];
    }
    assert_int_equal(renew("brn", h, N, 10000, 1), N); /* all missing: re-added */
    assert_int_equal(stat_of("brn", CCAP_STAT_REREGISTERED), N);
    /* each batch swept up to CCAP_SEM_SWEEP_MAX of the 150 */
    assert_int_equal(stat_of("brn", CCAP_STAT_RECLAIMED), 150);
    assert_int_equal(cli_int("ZCARD " PFX "{brn}:holders"), N);
    assert_int_equal(renew("brn", h, N, 10000, 0), 0);
    assert_int_equal(cli_int("ZCOUNT " PFX "{brn}:holders (%lld +inf", server_now_ms() + 5000), N);
    assert_int_equal(cli_int("HLEN " PFX "{brn}:since"), N);
}

/* A failover window (failover.lua) on the master that took over: opened
 * once per server; while open, newcomers wait (retry_ms) and holders asking
 * again keep their permits, renewals re-register; then the first acquire
 * drops the holders nobody renewed since it opened (a release lost with
 * the old master, a dead process), counts them in reclaimed, and removes
 * the marker, which no reader of live holders ever sees. */
static void test_failover_window(void **state)
{
    const char *a[] = { "A" }, *d[] = { "D" };
    struct ccap_sem_result res;
    (void)state;

    for (int i = 0; i < 3; i++) /* as replicated: three holders */
        assert_int_equal(acq("fo", (const char *[]){ "A", "B", "C" }[i], 10000, 3).granted, 1);
    usleep(5 * 1000); /* a lease granted in the very ms the window opens counts as re-registered */
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fo", 400, 10000, 10000, "10.0.0.2:6379"), 1);
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fo", 400, 10000, 10000, "10.0.0.2:6379"), 0); /* joined */
    assert_int_equal(cli_num("ZSCORE " PFX "{fo}:holders " CCAP_FAILOVER_MARK), 0);
    assert_int_equal(cli_int("ZCOUNT " PFX "{fo}:holders %lld +inf", server_now_ms()), 3); /* live: not the marker */
    /* A re-registers; D, granted by the old master after the promotion, is added */
    assert_int_equal(renew("fo", a, 1, 10000, 1), 0);
    assert_int_equal(renew("fo", d, 1, 10000, 1), 1);
    assert_int_equal(cli_num("ZSCORE " PFX "{fo}:holders " CCAP_FAILOVER_MARK), 0); /* renew's sweep skips it */
    res = acq("fo", "E", 10000, 9); /* a free permit, but the window holds it back */
    assert_int_equal(res.granted, 0);
    assert_true(res.retry_ms > 0 && res.retry_ms <= 400);
    assert_int_equal(res.count, 4);
    assert_int_equal(acq("fo", "A", 10000, 3).granted, 1); /* a holder asking again keeps its permit */
    usleep(450 * 1000);
    res = acq("fo", "E", 10000, 3); /* B and C: nobody renewed them */
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.count, 3);
    assert_true(has_holder("fo", "A") && has_holder("fo", "D") && has_holder("fo", "E"));
    assert_false(has_holder("fo", "B") || has_holder("fo", "C"));
    assert_int_equal(stat_of("fo", CCAP_STAT_RECLAIMED), 2);
    assert_int_equal(cli_num("ZSCORE " PFX "{fo}:holders " CCAP_FAILOVER_MARK), -1);
    assert_int_equal(acq("fo", "F", 10000, 3).granted, 0); /* the cap again */
    /* the same failover noticed late opens nothing; another server's does */
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fo", 400, 10000, 10000, "10.0.0.2:6379"), 0);
    assert_int_equal(cli_num("ZSCORE " PFX "{fo}:holders " CCAP_FAILOVER_MARK), -1);
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fo", 400, 10000, 10000, "10.0.0.3:6379"), 1);
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fo", 0, 10000, 10000, "x"), -EINVAL);
    /* on an empty semaphore: the marker keeps the key for the window */
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fo2", 300, 10000, 10000, "s"), 1);
    assert_true(cli_int("PTTL " PFX "{fo2}:holders") > 300);
    assert_int_equal(acq("fo2", "X", 10000, 3).granted, 0);
    usleep(350 * 1000);
    assert_int_equal(acq("fo2", "X", 10000, 3).granted, 1);
    assert_int_equal(n_holders("fo2"), 1);
}

/* A ticket replicated from the old master whose waiter never tried again
 * on the new one (it got its permit there, or is gone) is dropped when
 * the window ends, so the waiter behind it is not held back until its TTL. */
static void test_failover_window_tickets(void **state)
{
    const char *h[] = { "H" };
    struct ccap_sem_result res;
    struct ccap_sem_req q = { .lease_ms = 10000, .limit = 1, .ticket_ttl_ms = 10000, .wait_left_ms = 10000 };
    (void)state;

    assert_int_equal(acq("fot", "H", 10000, 1).granted, 1);
    q.holder = "W1"; /* first in line */
    assert_int_equal(ccap_sem_acquire(R, PFX, "fot", &q, &res), 0);
    q.holder = "W2";
    assert_int_equal(ccap_sem_acquire(R, PFX, "fot", &q, &res), 0);
    assert_int_equal(res.granted, 0);
    usleep(5 * 1000);
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fot", 200, 10000, 10000, "s"), 1);
    assert_int_equal(renew("fot", h, 1, 10000, 1), 0);
    assert_int_equal(ccap_sem_acquire(R, PFX, "fot", &q, &res), 0); /* W2 tries again in the window */
    assert_int_equal(res.granted, 0);
    usleep(250 * 1000);
    assert_int_equal(ccap_sem_acquire(R, PFX, "fot", &q, &res), 0); /* the window ends: W1's ticket goes */
    assert_int_equal(cli_num("ZSCORE " PFX "{fot}:queue W1"), -1);
    assert_int_equal(cli_num("ZSCORE " PFX "{fot}:holders " CCAP_FAILOVER_MARK), -1);
    assert_true(has_holder("fot", "H")); /* renewed in the window: kept */
    assert_int_equal(t_release_wake(R, PFX, "fot", "H", 1), 1);
    assert_int_equal(ccap_sem_acquire(R, PFX, "fot", &q, &res), 0);
    assert_int_equal(res.granted, 1); /* W2, now first */
}

/* The holders a window leaves behind are dropped SWEEP per acquire, while
 * grants go on (a grant's lease ends past the threshold: never dropped). */
static void test_failover_window_bounded(void **state)
{
    enum { N = 120 };
    long long live = server_now_ms() + 10000;
    (void)state;

    for (int i = 0; i < N; i++)
        assert_int_equal(cli_int("ZADD " PFX "{fob}:holders %lld s%d", live, i), 1);
    usleep(5 * 1000);
    assert_int_equal(ccap_sem_failover_open(R, PFX, "fob", 100, 30000, 30000, "s"), 1);
    usleep(150 * 1000);
    assert_int_equal(acq("fob", "X", 30000, 1000).granted, 1);
    assert_int_equal(cli_int("ZCOUNT " PFX "{fob}:holders (0 +inf"), N - CCAP_SEM_SWEEP_MAX + 1);
    assert_int_equal(cli_num("ZSCORE " PFX "{fob}:holders " CCAP_FAILOVER_MARK), 0); /* more to drop */
    assert_int_equal(acq("fob", "Y", 30000, 1000).granted, 1);
    assert_int_equal(acq("fob", "Z", 30000, 1000).granted, 1);
    assert_int_equal(cli_int("ZCARD " PFX "{fob}:holders"), 3);
    assert_int_equal(cli_num("ZSCORE " PFX "{fob}:holders " CCAP_FAILOVER_MARK), -1);
    assert_int_equal(stat_of("fob", CCAP_STAT_RECLAIMED), N);
}

/* The reply names the tickets queued after the call: a newcomer counts
 * itself, a waiter that leaves (its last attempt) does not. */
static void test_queue_len(void **state)
{
    struct ccap_sem_result res;
    struct ccap_sem_req q = { .lease_ms = 10000, .limit = 1, .ticket_ttl_ms = 10000, .wait_left_ms = 10000 };
    (void)state;

    res = acq("ql", "H", 10000, 1);
    assert_int_equal(res.granted, 1);
    assert_int_equal(res.queue_len, 0);
    q.holder = "W1";
    assert_int_equal(ccap_sem_acquire(R, PFX, "ql", &q, &res), 0);
    assert_int_equal(res.queue_len, 1);
    q.holder = "W2";
    assert_int_equal(ccap_sem_acquire(R, PFX, "ql", &q, &res), 0);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.queue_len, 2);
    q.flags = CCAP_SEM_LEAVE;
    assert_int_equal(ccap_sem_acquire(R, PFX, "ql", &q, &res), 0);
    assert_int_equal(res.queue_len, 1);
    assert_int_equal(res.count, 1);
    assert_int_equal(res.limit, 1);
}

/* ---- grants: a release admits the head waiter (issue 26) ---- */

/* WHO queues on NAME (limit LIMIT, lease LEASE_MS), taking grants if
 * GRANTS, under RATE (0: none). Returns its result (refused). */
static struct ccap_sem_result queue_up(const char *name, const char *who, int lease_ms, int limit, bool grants,
                                       double rate)
{
    struct ccap_sem_req q = { .holder = who,
                              .lease_ms = lease_ms,
                              .limit = limit,
                              .ticket_ttl_ms = 10000,
                              .wait_left_ms = 10000,
                              .flags = grants ? CCAP_SEM_GRANTS : 0,
                              .rate = rate };
    struct ccap_sem_result res = { -1, -1, -1, -1, -2 };

    assert_int_equal(ccap_sem_acquire(R, PFX, name, &q, &res), 0);
    return res;
}

/* The token in WHO's wake list on NAME ("" when none). */
static const char *token_of(const char *name, const char *who, char *out, size_t n)
{
    redisReply *rep = redisCommand(CLI, "LINDEX " PFX "{%s}:wake:%s 0", name, who);

    assert_non_null(rep);
    snprintf(out, n, "%s", rep->type == REDIS_REPLY_STRING ? rep->str : "");
    freeReplyObject(rep);
    return out;
}

static int rel(const char *name, const char *who, int limit)
{
    struct ccap_sem_rel r = { .holder = who, .limit = limit };

    return ccap_sem_release(R, PFX, name, &r);
}

extern const char ccap_lua_acquire[];

/* acquire.lua's short call as sem.c makes it (5 keys, 3 arguments, EXTRA
 * more if not NULL): its reply. */
static redisReply *short_acq(const char *name, const char *holder, const char *limit, const char *extra)
{
    char k[5][64];
    const char *sfx[5] = { "holders", "limit", "stats", "queue", "failover" };
    const char *av[12] = { "EVAL", ccap_lua_acquire, "5" };
    int n = 3;

    for (int i = 0; i < 5; i++) {
        snprintf(k[i], sizeof k[i], PFX "{%s}:%s", name, sfx[i]);
        av[n++] = k[i];
    }
    av[n++] = holder;
    av[n++] = "10000";
    av[n++] = limit;
    if (extra)
        av[n++] = extra;
    redisReply *rep = redisCommandArgv(CLI, n, av, NULL);
    assert_non_null(rep);
    return rep;
}

/* The short call grants as the full call does, and wherever the full call
 * would do more (a queue, no permit free, a holder to sweep, an argument
 * past its three) it writes nothing and answers 12; ccap_sem_acquire then
 * makes the full call, with the full call's outcome. */
static void test_short_call(void **state)
{
    struct ccap_sem_result res;
    redisReply *rep;
    (void)state;

    rep = short_acq("sc", "A", "2", NULL);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->elements, 3); /* a grant with nothing more to say */
    assert_int_equal(rep->element[0]->integer, 1);
    assert_int_equal(rep->element[1]->integer, 1);
    assert_int_equal(rep->element[2]->integer, 2);
    freeReplyObject(rep);
    assert_true(has_holder("sc", "A"));
    assert_ttl_covers_leases("sc");
    assert_int_equal(cli_int("HINCRBY " PFX "{sc}:stats acquired 0"), 1);
    /* the limit key: its limit, read only when it is there */
    cli_ok("SET " PFX "{sc}:limit 1");
    rep = short_acq("sc", "B", "2", NULL);
    assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
    assert_int_equal(rep->integer, 12);
    freeReplyObject(rep);
    cli_ok("SET " PFX "{sc}:limit 3");
    rep = short_acq("sc", "B", "2", NULL);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->element[1]->integer, 2);
    assert_int_equal(rep->element[2]->integer, 3);
    freeReplyObject(rep);
    cli_ok("DEL " PFX "{sc}:limit");
    /* no permit free: nothing written (no denied, no waiter), then the full call refuses */
    rep = short_acq("sc", "C", "2", NULL);
    assert_int_equal(rep->integer, 12);
    freeReplyObject(rep);
    assert_int_equal(cli_int("HINCRBY " PFX "{sc}:stats denied 0"), 0);
    assert_int_equal(cli_int("EXISTS " PFX "{sc}:waiters"), 0);
    struct ccap_sem_req q = {
        .holder = "C", .lease_ms = 10000, .limit = 2, .ticket_ttl_ms = 5000, .wait_left_ms = 5000
    };
    assert_int_equal(ccap_sem_acquire(R, PFX, "sc", &q, &res), 0);
    assert_int_equal(res.granted, 0);
    assert_int_equal(res.queue_len, 1);
    assert_int_equal(cli_int("HINCRBY " PFX "{sc}:stats denied 0"), 1);
    /* a queue: not for the short call, even with a permit free */
    assert_int_equal(t_release(R, PFX, "sc", "A"), 1);
    rep = short_acq("sc", "D", "2", NULL);
    assert_int_equal(rep->integer, 12);
    freeReplyObject(rep);
    assert_false(has_holder("sc", "D"));
    /* an ended lease: below the limit with it, a grant that sweeps
     * nothing; at the limit, the full call's, which sweeps it (and counts
     * it) and grants */
    rep = short_acq("sx", "E", "2", NULL);
    freeReplyObject(rep);
    cli_ok("ZADD " PFX "{sx}:holders 1 E");
    rep = short_acq("sx", "F", "2", NULL);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->element[0]->integer, 1);
    assert_int_equal(rep->element[1]->integer, 2);
    freeReplyObject(rep);
    assert_true(has_holder("sx", "E") && has_holder("sx", "F"));
    assert_ttl_covers_leases("sx");
    rep = short_acq("sx", "G", "2", NULL);
    assert_int_equal(rep->integer, 12);
    freeReplyObject(rep);
    assert_false(has_holder("sx", "G"));
    assert_int_equal(acq("sx", "G", 10000, 2).granted, 1);
    assert_false(has_holder("sx", "E"));
    assert_true(has_holder("sx", "F") && has_holder("sx", "G"));
    assert_int_equal(cli_int("HINCRBY " PFX "{sx}:stats reclaimed 0"), 1);
    /* a failover window (its key): the full call's, whatever else is there */
    cli_ok("SET " PFX "{sf}:failover x");
    rep = short_acq("sf", "H", "2", NULL);
    assert_int_equal(rep->integer, 12);
    freeReplyObject(rep);
    assert_int_equal(cli_int("EXISTS " PFX "{sf}:holders " PFX "{sf}:stats"), 0);
    rep = short_acq("sf2", "H", "2", NULL);
    freeReplyObject(rep);
    cli_ok("SET " PFX "{sf2}:failover x");
    rep = short_acq("sf2", "I", "2", NULL);
    assert_int_equal(rep->integer, 12);
    freeReplyObject(rep);
    assert_false(has_holder("sf2", "I"));
    /* more than its three arguments: the full call's */
    rep = short_acq("sy", "G", "2", "5000");
    assert_int_equal(rep->integer, 12);
    freeReplyObject(rep);
    assert_int_equal(cli_int("EXISTS " PFX "{sy}:holders"), 0);
}

extern const char ccap_lua_release[];

/* release.lua's short call (KEYS[1..3], ARGV[1]) as sem.c makes it, run as
 * FCALL when FN, else EVAL: its integer reply. */
static long long short_rel(const char *name, const char *holder, bool fn)
{
    char k[3][64];
    const char *sfx[3] = { "holders", "stats", "queue" };
    const char *av[7] = { fn ? "FCALL" : "EVAL", fn ? ccap_script_function(CCAP_SCRIPT_RELEASE) : ccap_lua_release,
                          "3" };

    for (int i = 0; i < 3; i++) {
        snprintf(k[i], sizeof k[i], PFX "{%s}:%s", name, sfx[i]);
        av[3 + i] = k[i];
    }
    av[6] = holder;
    redisReply *rep = redisCommandArgv(CLI, 7, av, NULL);
    assert_non_null(rep);
    if (rep->type != REDIS_REPLY_INTEGER)
        fail_msg("short release: %s", rep->type == REDIS_REPLY_ERROR ? rep->str : "not an integer");
    long long v = rep->integer;
    freeReplyObject(rep);
    return v;
}

/* The short release that finds a queue after all (another process's
 * waiters: its own last acquire found none) does what the full call does:
 * it admits a head waiter that takes grants, wakes one that does not,
 * takes a waiter that gives up out of the queue; as EVAL and as FCALL
 * (the library lets its three keys through). The common one touches
 * holders and stats only. */
static void test_short_release(void **state)
{
    char tok[8];
    (void)state;

    for (int fn = 0; fn < 2; fn++) {
        const char *name = fn ? "srf" : "sre";
        char key[64];

        if (fn) {
            redisReply *rep = redisCommand(CLI, "FUNCTION LOAD REPLACE %s", ccap_function_library());
            assert_non_null(rep);
            assert_int_equal(rep->type, REDIS_REPLY_STRING);
            freeReplyObject(rep);
        }
        assert_int_equal(acq(name, "A", 10000, 1).granted, 1);
        assert_int_equal(short_rel(name, "A", fn), 1);
        assert_int_equal(short_rel(name, "A", fn), 0);
        snprintf(key, sizeof key, PFX "{%s}:holders", name);
        assert_int_equal(cli_int("EXISTS %s", key), 0);
        assert_int_equal(acq(name, "A", 10000, 1).granted, 1);
        assert_int_equal(queue_up(name, "W1", 7000, 1, true, 0).granted, 0);
        assert_int_equal(queue_up(name, "W2", 7000, 1, false, 0).granted, 0);
        assert_int_equal(queue_up(name, "W3", 7000, 1, false, 0).granted, 0);
        assert_int_equal(short_rel(name, "A", fn), 1);
        assert_true(has_holder(name, "W1"));
        assert_string_equal(token_of(name, "W1", tok, sizeof tok), CCAP_SEM_TOKEN_GRANT);
        assert_string_equal(token_of(name, "W2", tok, sizeof tok), "");
        assert_ttl_covers_leases(name);
        /* W3 gives up: out of the queue and the waiters, nobody woken (no permit freed) */
        snprintf(key, sizeof key, PFX "{%s}:waiters", name);
        assert_true(cli_num("ZSCORE %s W3", key) > 0);
        assert_int_equal(short_rel(name, "W3", fn), 0);
        assert_true(cli_num("ZSCORE %s W3", key) == -1);
        snprintf(key, sizeof key, PFX "{%s}:queue", name);
        assert_int_equal(cli_int("ZCARD %s", key), 1);
        snprintf(key, sizeof key, PFX "{%s}:qexp", name);
        assert_int_equal(cli_int("ZCARD %s", key), 1);
        /* W1 leaves: W2, which takes no grants, is woken to re-check */
        assert_int_equal(short_rel(name, "W1", fn), 1);
        assert_false(has_holder(name, "W2"));
        assert_string_equal(token_of(name, "W2", tok, sizeof tok), "w");
        snprintf(key, sizeof key, PFX "{%s}:stats", name);
        assert_int_equal(cli_int("HINCRBY %s released 0", key), 3);
    }
}

static void test_release_grants(void **state)
{
    char tok[8];
    (void)state;

    assert_int_equal(acq("gr", "A", 10000, 1).granted, 1);
    assert_int_equal(queue_up("gr", "W1", 7000, 1, true, 0).granted, 0);
    assert_int_equal(queue_up("gr", "W2", 7000, 1, true, 0).granted, 0);
    assert_string_equal(token_of("gr", "W1", tok, sizeof tok), "");
    assert_int_equal(rel("gr", "A", 1), 1);
    /* W1, the head, holds the permit with its own lease; W2 still waits */
    assert_true(has_holder("gr", "W1"));
    assert_false(has_holder("gr", "A") || has_holder("gr", "W2"));
    long long left = cli_num("ZSCORE " PFX "{gr}:holders W1") - server_now_ms();
    assert_true(left > 6000 && left <= 7000);
    assert_string_equal(token_of("gr", "W1", tok, sizeof tok), CCAP_SEM_TOKEN_GRANT);
    assert_int_equal(cli_int("ZCARD " PFX "{gr}:queue"), 1);
    assert_int_equal(cli_int("HEXISTS " PFX "{gr}:grant W1"), 0);
    assert_int_equal(cli_int("HEXISTS " PFX "{gr}:grant W2"), 1);
    assert_int_equal(cli_num("ZSCORE " PFX "{gr}:waiters W1"), -1); /* no longer waiting */
    assert_ttl_covers_leases("gr");
    /* counted once, as a grant after a wait */
    assert_int_equal(stat_of("gr", CCAP_STAT_ACQUIRED), 2);
    assert_int_equal(stat_of("gr", "wait_count"), 1);
    /* W1 asking again (a re-check racing the token) keeps it: no second grant */
    assert_int_equal(acq_wait("gr", "W1", 1, 5, 1000).granted, 1);
    assert_int_equal(stat_of("gr", CCAP_STAT_ACQUIRED), 2);
    assert_int_equal(n_holders("gr"), 1);
    /* W2's release-grant comes with W1's release */
    assert_int_equal(rel("gr", "W1", 1), 1);
    assert_true(has_holder("gr", "W2"));
    assert_int_equal(cli_int("EXISTS " PFX "{gr}:queue " PFX "{gr}:qexp " PFX "{gr}:grant"), 0);
    assert_int_equal(rel("gr", "W2", 1), 1);
    assert_int_equal(n_holders("gr"), 0);
    assert_int_equal(stat_of("gr", CCAP_STAT_ACQUIRED), stat_of("gr", CCAP_STAT_RELEASED));
}

/* The release woke HOLDER of SEM ('w') and did not make it a holder. */
static void assert_only_woken(const char *sem, const char *holder)
{
    char tok[8];

    assert_false(has_holder(sem, holder));
    assert_string_equal(token_of(sem, holder, tok, sizeof tok), CCAP_SEM_TOKEN_WAKE);
}

/* Where the waiter's own acquire would not admit it, a release only wakes:
 * an older shim's ticket (no "g"), a waiter under a rate, a restart grace,
 * a failover window, a limit lowered below the holders. */
static void test_release_grant_rules(void **state)
{
    char tok[8];
    (void)state;

    /* no "g" (an older shim), or under a rate: 'w' */
    assert_int_equal(acq("g1", "A", 10000, 1).granted, 1);
    assert_int_equal(queue_up("g1", "OLD", 10000, 1, false, 0).granted, 0);
    assert_int_equal(rel("g1", "A", 1), 1);
    assert_only_woken("g1", "OLD");
    assert_int_equal(acq("g2", "A", 10000, 1).granted, 1);
    assert_int_equal(queue_up("g2", "R", 10000, 1, true, 100).granted, 0);
    assert_int_equal(cli_int("EXISTS " PFX "{g2}:grant"), 0);
    assert_int_equal(rel("g2", "A", 1), 1);
    assert_only_woken("g2", "R");
    /* a restart grace running */
    assert_int_equal(acq("g3", "A", 10000, 1).granted, 1);
    assert_int_equal(queue_up("g3", "W", 10000, 1, true, 0).granted, 0);
    cli_ok("SET " PFX "{g3}:epoch %lld", server_now_ms() + 60000);
    assert_int_equal(rel("g3", "A", 1), 1);
    assert_only_woken("g3", "W");
    /* a failover window open */
    assert_int_equal(acq("g4", "A", 10000, 1).granted, 1);
    assert_int_equal(acq("g4", "B", 10000, 2).granted, 1);
    assert_int_equal(queue_up("g4", "W", 10000, 2, true, 0).granted, 0);
    assert_int_equal(ccap_sem_failover_open(R, PFX, "g4", 5000, 10000, 10000, "s"), 1);
    assert_int_equal(rel("g4", "A", 2), 1);
    assert_only_woken("g4", "W");
    /* the limit key lowered to 1 under 2 holders: one release frees none */
    assert_int_equal(acq("g5", "A", 10000, 2).granted, 1);
    assert_int_equal(acq("g5", "B", 10000, 2).granted, 1);
    assert_int_equal(queue_up("g5", "W", 10000, 2, true, 0).granted, 0);
    cli_ok("SET " PFX "{g5}:limit 1");
    assert_int_equal(rel("g5", "A", 2), 1);
    assert_false(has_holder("g5", "W"));
    assert_int_equal(rel("g5", "B", 2), 1);
    assert_true(has_holder("g5", "W")); /* now below it */
    assert_int_equal(n_holders("g5"), 1);
    /* FIFO: a waiter only woken (an older shim's) keeps its place ahead of a
     * granted one; here the releaser's limit (3) is above theirs (2) */
    assert_int_equal(acq("g6", "A", 10000, 2).granted, 1);
    assert_int_equal(acq("g6", "B", 10000, 2).granted, 1);
    assert_int_equal(queue_up("g6", "OLD", 10000, 2, false, 0).granted, 0);
    assert_int_equal(queue_up("g6", "NEW", 10000, 2, true, 0).granted, 0);
    cli_ok("ZADD " PFX "{g6}:queue 1 DEAD"); /* a dead ticket at the head: one more place freed */
    cli_ok("ZADD " PFX "{g6}:qexp 1 DEAD");
    assert_int_equal(rel("g6", "A", 3), 1);
    assert_false(has_holder("g6", "NEW"));
    assert_string_equal(token_of("g6", "OLD", tok, sizeof tok), CCAP_SEM_TOKEN_WAKE);
    assert_string_equal(token_of("g6", "NEW", tok, sizeof tok), CCAP_SEM_TOKEN_WAKE);
    assert_int_equal(acq_wait("g6", "OLD", 2, 5, 1000).granted, 1); /* its place was kept */
    /* a waiter that stops taking grants (a rate set by a reload) loses its entry */
    assert_int_equal(queue_up("g6", "NEW", 10000, 2, false, 0).granted, 0);
    assert_int_equal(cli_int("HEXISTS " PFX "{g6}:grant NEW"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key),
        cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_len, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runtime_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noscript, setup, teardown),
        cmocka_unit_test_setup_teardown(test_functions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_covers_leases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_key_vanishes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crashed_holder_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renewed_holders_survive_pause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renew_add_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renew_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_replies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_histogram_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_since_and_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_reregistered_and_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_full_since, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renew_back_forgets_full_since, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_threshold_mixed_leases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_after_lost_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reask_below_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reclaimed_on_refusal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats_limit_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_audit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_bounded_reask, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renew_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover_window_tickets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failover_window_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_grants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_grant_rules, setup, teardown),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
