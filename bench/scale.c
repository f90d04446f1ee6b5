/* scale.c -- Redis time of the semaphore scripts at fleet scale, from Redis's own accounting (linked with core/). */
/* Usage: scale SOCK calls      -- the longest single call (SLOWLOG) in each scale case
 *        scale SOCK pairs N    -- Redis time per acquire+release pair (INFO commandstats)
 * SOCK: the Unix socket of a private redis-server (its SLOWLOG and stats are
 * reset). "calls" prints one line per case, "CASE MAX P99 P50 CALLS OVER_1MS
 * BASE" (us): the longest, 99th and 50th percentile script call of the
 * case, how many script calls it made and how many took over 1 ms, and the
 * longest plain ZCARD of the same phase (one command's floor and noise).
 * "pairs" prints "ours redis_semaphore counter" in us of Redis time per pair,
 * the fastest of 5 interleaved rounds of N pairs each: ours as the shim
 * calls them (acquire.lua with its queue keys and a ticket TTL, release.lua),
 * as FCALLs of the function library, loaded first as `conncap setup` does
 * (until issue 26 this row ran EVALSHA, without the library's key check);
 * redis-semaphore's acquire script (ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE)
 * then its release (ZREM); the counter script (GET, INCR, EXPIRE) then DECR.
 * A command run inside a script is counted by Redis twice (in the script's
 * usec and in its own): only top-level commands are summed. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "sem.h"

#define PFX "scale:"
static redisContext *A;      /* plain commands: set-up and accounting */
static struct ccap_redis *R; /* the shim's calls */

static redisReply *cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(A, fmt, ap);
    va_end(ap);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "scale: %s: %s\n", fmt, rep ? rep->str : A->errstr);
        exit(1);
    }
    return rep;
}
static void run(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(A, fmt, ap);
    va_end(ap);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "scale: %s: %s\n", fmt, rep ? rep->str : A->errstr);
        exit(1);
    }
    freeReplyObject(rep);
}

static long long server_ms(void)
{
    redisReply *t = cmd("TIME");
    long long v = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    return v;
}

/* Sends "VERB KEY" with N pairs: (VALUE, "<tag><i>") for ZADD, ("<tag><i>",
 * VALUE) for HSET, in commands of 1000 pairs, pipelined. */
static void fill_verb(const char *verb, const char *key, const char *tag, int n, long long value)
{
    int sent = 0;
    for (int i = 0; i < n; i += 1000, sent++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        int m = n - i < 1000 ? n - i : 1000;
        fprintf(f, "*%d\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", 2 + 2 * m, strlen(verb), verb, strlen(key), key);
        for (int j = i; j < i + m; j++) {
            char v[32], id[64];
            snprintf(v, sizeof v, "%lld", value);
            snprintf(id, sizeof id, "%s%d", tag, j);
            if (!strcmp(verb, "ZADD"))
                fprintf(f, "$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(v), v, strlen(id), id);
            else
                fprintf(f, "$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(id), id, strlen(v), v);
        }
        fclose(f);
        redisAppendFormattedCommand(A, buf, len);
        free(buf);
    }
    for (int i = 0; i < sent; i++) {
        redisReply *rep;
        if (redisGetReply(A, (void **)&rep) != REDIS_OK)
            exit(1);
        freeReplyObject(rep);
    }
}

/* Adds N members "<tag><i>" with score SCORE to KEY, and their acquire
 * times to the hash SINCE when not NULL. */
static void fill(const char *key, const char *since, const char *tag, int n, long long score)
{
    fill_verb("ZADD", key, tag, n, score);
    if (since)
        fill_verb("HSET", since, tag, n, score - 1000);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* Prints "NAME MAX_US P99_US P50_US CALLS OVER_1MS BASE_MAX_US" of the
 * script calls in SLOWLOG since the last reset (BASE: the plain ZCARDs),
 * then resets it. */
static void report(const char *name)
{
    redisReply *l = cmd("SLOWLOG GET -1");
    long long *us = calloc(l->elements + 1, sizeof *us), base = 0;
    int n = 0, over = 0;
    for (size_t i = 0; i < l->elements; i++) {
        redisReply *e = l->element[i], *argv = e->element[3];
        long long d = e->element[2]->integer;
        const char *c = argv->elements ? argv->element[0]->str : "";
        if (!strcasecmp(c, "evalsha") || !strcasecmp(c, "fcall") || !strcasecmp(c, "eval")) {
            us[n++] = d;
            over += d > 1000;
            if (getenv("SCALE_DEBUG") && d > 1000)
                fprintf(stderr, "scale: %lld us: %s %s\n", d, c, argv->elements > 3 ? argv->element[3]->str : "");
        } else if (!strcasecmp(c, "zcard") && d > base) {
            base = d;
        }
    }
    qsort(us, n, sizeof *us, cmp_ll);
    printf("%s %lld %lld %lld %d %d %lld\n", name, n ? us[n - 1] : 0, n ? us[(n * 99) / 100] : 0, n ? us[n / 2] : 0,
           n, over, base);
    free(us);
    freeReplyObject(l);
    run("SLOWLOG RESET");
}

static void baseline(void)
{
    for (int i = 0; i < 20; i++)
        run("ZCARD " PFX "{base}:holders");
}

static void acquire_as(const char *sem, const char *holder, int limit, int ticket_ttl, int waited_ms,
                       struct ccap_sem_result *res)
{
    struct ccap_sem_req q = { .holder = holder,
                              .lease_ms = 30000,
                              .limit = limit,
                              .ticket_ttl_ms = ticket_ttl,
                              .wait_left_ms = ticket_ttl,
                              .waited_ms = waited_ms };
    if (ccap_sem_acquire(R, PFX, sem, &q, res) < 0) {
        fprintf(stderr, "scale: acquire: %s\n", ccap_redis_errstr(R));
        exit(1);
    }
}

static void acquire(const char *sem, const char *holder, int limit, int ticket_ttl, struct ccap_sem_result *res)
{
    acquire_as(sem, holder, limit, ticket_ttl, 0, res);
}

static void release(const char *sem, const char *holder, int limit)
{
    if (ccap_sem_release(R, PFX, sem, &(struct ccap_sem_rel){ holder, limit, 0 }) < 0)
        exit(1);
}

/* 100,000 holders whose leases ended (a crashed fleet): the acquires that
 * sweep them, until none is left; then 100,000 live holders. */
static void case_sweep(void)
{
    struct ccap_sem_result res;
    char h[32];
    fill(PFX "{sw}:holders", PFX "{sw}:since", "dead", 100000, server_ms() - 1000);
    run("SLOWLOG RESET");
    baseline();
    for (int i = 0; i < 100000 / CCAP_SEM_SWEEP_MAX + 10; i++) {
        snprintf(h, sizeof h, "x%d", i);
        /* (as a waiter's retry: a full call; the short call sweeps
         * nothing while the holders are below the limit) */
        acquire_as("sw", h, 200000, 0, 1, &res);
        release("sw", h, 200000);
        redisReply *z = cmd("ZCARD " PFX "{sw}:holders");
        long long left = z->integer;
        freeReplyObject(z);
        if (left == 0)
            break;
    }
    report("sweep_100k_expired");
    fill(PFX "{live}:holders", PFX "{live}:since", "live", 100000, server_ms() + 600000);
    run("SLOWLOG RESET");
    baseline();
    for (int i = 0; i < 200; i++) {
        snprintf(h, sizeof h, "y%d", i);
        acquire("live", h, 200000, 0, &res);
        release("live", h, 200000);
    }
    report("pairs_at_100k_live");
}

/* One process renewing 10,000 permits: first all missing (Redis lost
 * them: re-added), then all present. */
static void case_renew(void)
{
    static char ids[10000][24];
    static const char *h[10000];
    for (int i = 0; i < 10000; i++) {
        snprintf(ids[i], sizeof ids[i], "p%d", i);
        h[i] = ids[i];
    }
    run("SLOWLOG RESET");
    baseline();
    if (ccap_sem_renew(R, PFX, "rn", h, 10000, 30000, 1) != 10000)
        exit(1);
    if (ccap_sem_renew(R, PFX, "rn", h, 10000, 30000, 1) != 0)
        exit(1);
    report("renew_10k_permits");
}

/* 10,000 waiters: the limit raised to 20,000 and a permit released (the
 * wake-up fan-out), then their tickets dead (the acquires that drop them). */
static void case_waiters(void)
{
    struct ccap_sem_result res;
    char h[32];
    long long now = server_ms();
    acquire("wq", "H", 1, 0, &res);
    fill(PFX "{wq}:queue", NULL, "w", 10000, now * 1000);
    fill(PFX "{wq}:qexp", NULL, "w", 10000, now + 600000);
    run("PEXPIRE " PFX "{wq}:queue 600000");
    run("PEXPIRE " PFX "{wq}:qexp 600000");
    run("SLOWLOG RESET");
    baseline();
    run("SET " PFX "{wq}:limit 20000");
    release("wq", "H", 1);
    redisReply *n =
        cmd("EVAL %s 0",
            "local n = 0 for _, k in ipairs(redis.call('KEYS', 'scale:{wq}:wake:*')) do n = n + 1 end return n");
    long long woken = n->integer;
    freeReplyObject(n);
    for (int i = 0; i < 20; i++) { /* the woken ones come, each passes the wake-up on */
        snprintf(h, sizeof h, "w%d", i);
        acquire("wq", h, 1, 5000, &res);
    }
    report("wake_10k_waiters");
    fprintf(stderr, "scale: the release woke %lld of 10000 waiters\n", woken);
    fill(PFX "{wq}:qexp", NULL, "w", 10000, server_ms() - 1);
    run("SLOWLOG RESET");
    baseline();
    for (int i = 0; i < 120; i++) {
        snprintf(h, sizeof h, "n%d", i);
        acquire("wq", h, 1, 0, &res);
    }
    report("dead_tickets_10k");
}

/* Sum of the usec of the top-level commands NAMES in INFO commandstats. */
static double usec_of(const char *const *names)
{
    redisReply *r = cmd("INFO commandstats");
    double total = 0;
    for (const char *const *n = names; *n; n++) {
        char pat[64];
        snprintf(pat, sizeof pat, "cmdstat_%s:", *n);
        const char *p = strstr(r->str, pat);
        const char *u = p ? strstr(p, "usec=") : NULL;
        if (u)
            total += atof(u + 5);
    }
    freeReplyObject(r);
    return total;
}

static double round_ours(int n)
{
    static const char *const names[] = { "evalsha", "fcall", NULL };
    struct ccap_sem_result res;
    char h[32];
    run("CONFIG RESETSTAT");
    for (int i = 0; i < n; i++) {
        snprintf(h, sizeof h, "o%d", i);
        acquire("pp", h, 1000, 5000, &res);
        release("pp", h, 1000);
    }
    return usec_of(names) / n;
}

static double round_script(int n, const char *sha, const char *rel, const char *key, const char *const *names)
{
    run("CONFIG RESETSTAT");
    for (int i = 0; i < n; i++) {
        char h[32];
        snprintf(h, sizeof h, "o%d", i);
        run("EVALSHA %s 1 %s %s 1000 30000", sha, key, h);
        if (!strcmp(rel, "ZREM"))
            run("ZREM %s %s", key, h);
        else
            run("DECR %s", key);
    }
    return usec_of(names) / n;
}

static void case_pairs(int n)
{
    static const char rs[] = /* redis-semaphore's acquire (its Lua, in substance) */
        "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "
        "redis.call('zremrangebyscore', KEYS[1], '-inf', now - ARGV[3]) "
        "if redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then "
        "redis.call('zadd', KEYS[1], now, ARGV[1]) redis.call('pexpire', KEYS[1], ARGV[3]) return 1 end return 0";
    static const char ctr[] = /* the counter design: GET, INCR, EXPIRE */
        "local c = tonumber(redis.call('GET', KEYS[1]) or '0') "
        "if c < tonumber(ARGV[2]) then redis.call('INCR', KEYS[1]) redis.call('EXPIRE', KEYS[1], 30) return 1 end return 0";
    static const char *const rs_names[] = { "evalsha", "zrem", NULL }, *const ctr_names[] = { "evalsha", "decr",
                                                                                              NULL };
    run("FUNCTION LOAD REPLACE %s", ccap_function_library());
    redisReply *a = cmd("SCRIPT LOAD %s", rs), *b = cmd("SCRIPT LOAD %s", ctr);
    double best[3] = { 1e9, 1e9, 1e9 };
    for (int r = 0; r < 5; r++) {
        double o = round_ours(n), s = round_script(n, a->str, "ZREM", PFX "{rs}:holders", rs_names),
               c = round_script(n, b->str, "DECR", PFX "{ctr}:count", ctr_names);
        if (o < best[0])
            best[0] = o;
        if (s < best[1])
            best[1] = s;
        if (c < best[2])
            best[2] = c;
    }
    printf("%.2f %.2f %.2f\n", best[0], best[1], best[2]);
    freeReplyObject(a);
    freeReplyObject(b);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: scale SOCK calls | scale SOCK pairs N\n");
        return 2;
    }
    A = redisConnectUnix(argv[1]);
    struct ccap_redis_conf c = { 0 };
    c.socket = argv[1];
    c.connect_timeout_ms = 5000;
    c.command_timeout_ms = 5000;
    R = ccap_redis_new(&c);
    if (!A || A->err || !R)
        return 1;
    if (!strcmp(argv[2], "pairs") && argc == 4) {
        case_pairs(atoi(argv[3]));
        return 0;
    }
    run("CONFIG SET slowlog-log-slower-than 0");
    run("CONFIG SET slowlog-max-len 100000");
    case_sweep();
    case_renew();
    case_waiters();
    run("CONFIG SET slowlog-log-slower-than 10000");
    return 0;
}
