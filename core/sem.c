/* sem.c -- the distributed counting semaphore: keys, and calls to the Lua scripts. */
#include "sem.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define CCAP_KEY_MAX 512

/* Three memcpy, not snprintf: a matched connect+close builds 17 keys, and
 * snprintf is several times dearer per key. */
int ccap_sem_key(char *out, size_t outlen, const char *prefix, const char *name, const char *suffix)
{
    size_t lp = prefix ? strlen(prefix) : 0, ln = strlen(name), ls = strlen(suffix);
    size_t n = lp + 1 + ln + 2 + ls;
    char *p = out;

    if (n >= outlen || n > INT_MAX)
        return -ENAMETOOLONG;
    memcpy(p, prefix ? prefix : "", lp);
    p += lp;
    *p++ = '{';
    memcpy(p, name, ln);
    p += ln;
    *p++ = '}';
    *p++ = ':';
    memcpy(p, suffix, ls + 1);
    return (int)n;
}

/* Fills KEYS[i] with the key of SUFFIX[i] and points ARGS[i] at it, for
 * the first N scripts' keys. Returns 0 or -ENAMETOOLONG. */
static int sem_keys(char (*keys)[CCAP_KEY_MAX], const char **args, const char *const *suffix, int n,
                    const char *prefix, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (ccap_sem_key(keys[i], sizeof keys[i], prefix, name, suffix[i]) < 0)
            return -ENAMETOOLONG;
        args[i] = keys[i];
    }
    return 0;
}

/* The trailing arguments of a script that may be left out: ARGS[MIN..N-1]
 * that equal their default DEF[i - MIN] are dropped from the end. Returns
 * the number of arguments to send. */
static int trim_defaults(const char *const *args, int min, int n, const char *const *def)
{
    while (n > min && !strcmp(args[n - 1], def[n - 1 - min]))
        n--;
    return n;
}

static const char *type_name(const redisReply *e)
{
    static const char *const names[] = { "?", "a string", "an array", "an integer", "nil", "a status", "an error" };

    if (!e)
        return "missing";
    return e->type >= 1 && e->type <= 6 ? names[e->type] : names[0];
}

int ccap_sem_parse_int(struct ccap_redis *r, const char *what, const redisReply *e, long long min, long long max,
                       long long *v)
{
    if (!e || e->type != REDIS_REPLY_INTEGER) {
        if (r)
            ccap_redis_set_err(r, "redis: %s: %s, not an integer", what, type_name(e));
        return -EPROTO;
    }
    if (e->integer < min || e->integer > max) {
        if (r)
            ccap_redis_set_err(r, "redis: %s: %lld, out of range %lld..%lld", what, e->integer, min, max);
        return -EPROTO;
    }
    *v = e->integer;
    return 0;
}

int ccap_sem_parse_acquire(struct ccap_redis *r, const redisReply *rep, struct ccap_sem_result *res)
{
    long long g, c, l, full, qlen = -1;

    if (!rep || rep->type != REDIS_REPLY_ARRAY || (rep->elements != 3 && rep->elements != 6 && rep->elements != 7)) {
        if (rep && rep->type == REDIS_REPLY_ARRAY)
            ccap_redis_set_err(r, "redis: acquire reply: an array of %zu, not of 3, 6 or 7", rep->elements);
        else
            ccap_redis_set_err(r, "redis: acquire reply: %s, not an array", type_name(rep));
        return -EPROTO;
    }
    if (ccap_sem_parse_int(r, "acquire reply: granted", rep->element[0], rep->elements == 3, 1, &g) ||
        ccap_sem_parse_int(r, "acquire reply: count", rep->element[1], 0, INT_MAX, &c) ||
        ccap_sem_parse_int(r, "acquire reply: limit", rep->element[2], LLONG_MIN, LLONG_MAX, &l))
        return -EPROTO;
    res->retry_ms = 0;
    res->wake_ms = -1;
    full = 0;
    qlen = rep->elements == 3 ? 0 : -1;
    if (rep->elements > 3 &&
        (ccap_sem_parse_int(r, "acquire reply: retry_ms", rep->element[3], 0, CCAP_SEM_MS_MAX, &res->retry_ms) ||
         ccap_sem_parse_int(r, "acquire reply: wake_ms", rep->element[4], -1, CCAP_SEM_MS_MAX, &res->wake_ms) ||
         ccap_sem_parse_int(r, "acquire reply: queue_full", rep->element[5], 0, 1, &full) ||
         (rep->elements == 7 &&
          ccap_sem_parse_int(r, "acquire reply: queue_len", rep->element[6], 0, INT_MAX, &qlen))))
        return -EPROTO;
    res->granted = (int)g;
    res->count = c;
    res->limit = l;
    res->queue_full = (int)full;
    res->queue_len = qlen;
    return 0;
}

/* Writes FLAGS (CCAP_SEM_*) as acquire.lua's flag letters into OUT (4). */
static void flag_arg(char *out, int flags)
{
    int n = 0;

    if (flags & CCAP_SEM_UNBLOCK)
        out[n++] = 'u';
    if (flags & CCAP_SEM_LEAVE)
        out[n++] = 'l';
    if (flags & CCAP_SEM_GRANTS)
        out[n++] = 'g';
    out[n] = '\0';
}

/* Whether the last acquire of a semaphore found it busy (it was refused,
 * or left a queue), by a hash of its prefix and name (two that share a
 * slot share the guess). While not, a plain request goes as acquire.lua's
 * short call (5 keys, 3 arguments: a third less work for Redis), which
 * grants as the full call would or, writing nothing, answers
 * ACQUIRE_SHORT_NO: the full call follows. A wrong guess costs one call or
 * the full call's keys, never another outcome. */
#define ACQUIRE_SHORT_KEYS 5
#define ACQUIRE_SHORT_NO 12
static _Atomic unsigned char sem_busy[64];
/* Set once Redis refused the short call itself (an error reply, -EPROTO or
 * -EACCES: most likely a worker ACL written before it, without EXISTS; not
 * a failure to reach Redis): the full call follows at once and from then
 * on, in the whole process, with one warning; the cap holds either way,
 * only Redis's work per call differs. */
static atomic_bool short_refused;

static _Atomic unsigned char *busy_of(const char *prefix, const char *name)
{
    unsigned h = 2166136261u;

    for (const char *p = prefix ? prefix : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return &sem_busy[h % (sizeof sem_busy / sizeof sem_busy[0])];
}

/* The short call, for a plain request Q (ARGS: the full call's keys, then
 * ARGV[1..3]) while *BUSY says free. Returns 1 when it did not decide (the
 * full call follows), else as ccap_sem_acquire. */
static int acquire_short(struct ccap_redis *r, const struct ccap_sem_req *q, const char *const *args,
                         struct ccap_sem_result *res, _Atomic unsigned char *busy)
{
    const char *av[ACQUIRE_SHORT_KEYS + 3] = { args[0], args[1],  args[2],  args[3],
                                               args[4], args[12], args[13], args[14] };
    redisReply *rep;
    int rc;

    if (q->check_epoch)
        ccap_redis_expect_epoch(r, q->epoch);
    rc = ccap_redis_script(r, CCAP_SCRIPT_ACQUIRE, ACQUIRE_SHORT_KEYS, ACQUIRE_SHORT_KEYS + 3, av, &rep);
    if ((rc == -EPROTO || rc == -EACCES) && ccap_redis_err_replied(r)) { /* (not a connect's EACCES) */
        if (!atomic_exchange(&short_refused, true))
            ccap_log(CCAP_LOG_WARN,
                     "redis refused acquire's short call (%s): the full call from now on; "
                     "a worker ACL without +exists on ~conncap:*? (examples/redis-acl.conf)",
                     ccap_redis_errstr(r));
        return 1;
    }
    if (rc < 0)
        return rc;
    if (rep->type == REDIS_REPLY_INTEGER && rep->integer == ACQUIRE_SHORT_NO) {
        freeReplyObject(rep);
        atomic_store_explicit(busy, 1, memory_order_relaxed);
        return 1;
    }
    rc = ccap_sem_parse_acquire(r, rep, res);
    freeReplyObject(rep);
    return rc;
}

/* acquire.lua's call (see its header): its 12 keys, then 12 arguments,
 * those past ARGV[3] that keep their default left out from the end; first
 * its short call when that may do (above). */
int ccap_sem_acquire(struct ccap_redis *r, const char *prefix, const char *name, const struct ccap_sem_req *q,
                     struct ccap_sem_result *res)
{
    static const char *const suffix[12] = { CCAP_KEY_HOLDERS,  CCAP_KEY_LIMIT, CCAP_KEY_STATS,   CCAP_KEY_QUEUE,
                                            CCAP_KEY_FAILOVER, CCAP_KEY_SINCE, CCAP_KEY_WAITERS, CCAP_KEY_AUDIT,
                                            CCAP_KEY_QEXP,     CCAP_KEY_RATE,  CCAP_KEY_EPOCH,   CCAP_KEY_GRANT };
    static const char *const def[9] = { "0", "0", "0", "", "0", "1", "0", "0", "0" }; /* ARGV[4..12] */
    char keys[12][CCAP_KEY_MAX], num[9][24], flags[4], rate[32];
    const char *args[24], **argv = args + 12;
    _Atomic unsigned char *busy;
    redisReply *rep;
    int rc;

    if (!q || q->lease_ms <= 0 || !q->holder || !(q->rate >= 0) || q->ticket_ttl_ms < 0 || q->grace_ms < 0 ||
        q->max_waiters < 0)
        return -EINVAL;
    if (sem_keys(keys, args, suffix, 12, prefix, name) < 0)
        return -ENAMETOOLONG;
    if (q->rate > 0)
        snprintf(rate, sizeof rate, "%.6f", q->rate);
    else
        strcpy(rate, "0");
    flag_arg(flags, q->flags);
    argv[0] = q->holder;
    argv[1] = ccap_fmt_ll(num[0], q->lease_ms);
    argv[2] = ccap_fmt_ll(num[1], q->limit);
    argv[3] = ccap_fmt_ll(num[2], q->ticket_ttl_ms);
    argv[4] = ccap_fmt_ll(num[3], q->wait_left_ms > 0 ? q->wait_left_ms : 0);
    argv[5] = ccap_fmt_ll(num[4], q->waited_ms > 0 ? q->waited_ms : 0);
    argv[6] = flags;
    argv[7] = rate;
    argv[8] = ccap_fmt_ll(num[5], q->burst > 0 ? q->burst : 1);
    argv[9] = ccap_fmt_ll(num[6], q->grace_ms);
    argv[10] = ccap_fmt_ll(num[7], q->max_waiters);
    argv[11] = ccap_fmt_ll(num[8], q->audit_maxlen > 0 ? q->audit_maxlen : 0);
    busy = busy_of(prefix, name);
    if (q->rate <= 0 && q->grace_ms == 0 && q->audit_maxlen <= 0 && q->waited_ms <= 0 &&
        !(q->flags & ~CCAP_SEM_GRANTS) && !atomic_load_explicit(busy, memory_order_relaxed) &&
        !atomic_load_explicit(&short_refused, memory_order_relaxed) &&
        (rc = acquire_short(r, q, args, res, busy)) <= 0)
        return rc;
    if (q->check_epoch)
        ccap_redis_expect_epoch(r, q->epoch);
    rc = ccap_redis_script(r, CCAP_SCRIPT_ACQUIRE, 12, 12 + trim_defaults(argv, 3, 12, def), args, &rep);
    if (rc < 0)
        return rc;
    rc = ccap_sem_parse_acquire(r, rep, res);
    freeReplyObject(rep);
    if (rc == 0)
        atomic_store_explicit(busy, !res->granted || res->queue_len != 0, memory_order_relaxed);
    return rc;
}

#define RELEASE_KEYS 10
#define RELEASE_SHORT_KEYS 3

/* release.lua's keys and its arguments for REL on NAME into KEYS, ARGS
 * (14) and NUM: its short call (KEYS[1..3], ARGV[1]) for a holder never
 * renewed, without audit, while the last acquire of the semaphore found
 * no queue (busy_of: a wrong guess costs the script three more key names,
 * never another outcome); else its 8 keys, then since for a renewed
 * holder, then audit for an audited one (those the script needs: its
 * header), then the arguments from ARGS + *NKEYS. Returns the number of
 * keys and arguments, -EINVAL or -ENAMETOOLONG. */
static int release_args(char (*keys)[CCAP_KEY_MAX], const char **args, char (*num)[16], const char *prefix,
                        const char *name, const struct ccap_sem_rel *rel, int *nkeys)
{
    static const char *const suffix[10] = { CCAP_KEY_HOLDERS, CCAP_KEY_STATS,   CCAP_KEY_QUEUE, CCAP_KEY_LIMIT,
                                            CCAP_KEY_QEXP,    CCAP_KEY_WAITERS, CCAP_KEY_EPOCH, CCAP_KEY_GRANT,
                                            CCAP_KEY_SINCE,   CCAP_KEY_AUDIT };
    static const char *const def[2] = { "", "0" }; /* ARGV[3..4] */
    int n;

    if (!rel || !rel->holder)
        return -EINVAL;
    n = rel->audit_maxlen > 0 ? 10 : rel->renewed ? 9 : 8;
    if (n == 8 && !atomic_load_explicit(busy_of(prefix, name), memory_order_relaxed))
        n = RELEASE_SHORT_KEYS;
    if (sem_keys(keys, args, suffix, n, prefix, name) < 0)
        return -ENAMETOOLONG;
    const char **argv = args + n;
    argv[0] = rel->holder;
    *nkeys = n;
    if (n == RELEASE_SHORT_KEYS)
        return n + 1;
    argv[1] = ccap_fmt_ll(num[0], rel->limit);
    argv[2] = rel->renewed ? "r" : "";
    argv[3] = ccap_fmt_ll(num[1], rel->audit_maxlen > 0 ? rel->audit_maxlen : 0);
    return n + trim_defaults(argv, 2, 4, def);
}

int ccap_sem_release(struct ccap_redis *r, const char *prefix, const char *name, const struct ccap_sem_rel *rel)
{
    char keys[RELEASE_KEYS][CCAP_KEY_MAX], num[2][16];
    const char *args[RELEASE_KEYS + 4];
    redisReply *rep;
    long long v;
    int rc, n, nkeys;

    if ((n = release_args(keys, args, num, prefix, name, rel, &nkeys)) < 0)
        return n;
    rc = ccap_redis_script(r, CCAP_SCRIPT_RELEASE, nkeys, n, args, &rep);
    if (rc < 0)
        return rc;
    rc = ccap_sem_parse_int(r, "release reply", rep, 0, 1, &v);
    freeReplyObject(rep);
    return rc < 0 ? rc : (int)v;
}

int ccap_sem_release_defer(struct ccap_redis *r, const char *prefix, const char *name,
                           const struct ccap_sem_rel *rel, long long until_ms, bool send)
{
    char keys[RELEASE_KEYS][CCAP_KEY_MAX], num[2][16];
    const char *args[RELEASE_KEYS + 4];
    int n, nkeys;

    if ((n = release_args(keys, args, num, prefix, name, rel, &nkeys)) < 0)
        return n;
    return ccap_redis_script_defer(r, CCAP_SCRIPT_RELEASE, nkeys, n, args, until_ms, send);
}

/* One renew.lua call for the N (<= CCAP_SEM_RENEW_BATCH) HOLDERS, with
 * ARGS (n + 5 slots) whose keys and lease are filled, on a master of
 * failover epoch *EPOCH if not NULL. Returns the number missing or -errno. */
static int renew_batch(struct ccap_redis *r, const char **args, const char *const *holders, size_t n,
                       const unsigned *epoch)
{
    redisReply *rep;
    long long v;
    int rc;

    for (size_t i = 0; i < n; i++)
        args[5 + i] = holders[i];
    if (epoch)
        ccap_redis_expect_epoch(r, *epoch);
    rc = ccap_redis_script(r, CCAP_SCRIPT_RENEW, 3, (int)(n + 5), args, &rep);
    if (rc < 0)
        return rc;
    rc = ccap_sem_parse_int(r, "renew reply", rep, 0, (long long)n, &v);
    freeReplyObject(rep);
    return rc < 0 ? rc : (int)v;
}

int ccap_sem_renew(struct ccap_redis *r, const char *prefix, const char *name, const char *const *holders, size_t n,
                   int lease_ms, int add_missing)
{
    return ccap_sem_renew_at(r, prefix, name, holders, n, lease_ms, add_missing, NULL);
}

int ccap_sem_renew_at(struct ccap_redis *r, const char *prefix, const char *name, const char *const *holders,
                      size_t n, int lease_ms, int add_missing, const unsigned *epoch)
{
    static const char *const suffix[3] = { CCAP_KEY_HOLDERS, CCAP_KEY_STATS, CCAP_KEY_SINCE };
    char keys[3][CCAP_KEY_MAX], lease[16];
    const char *args[CCAP_SEM_RENEW_BATCH + 5];
    int missing = 0;

    if (lease_ms <= 0 || (n && !holders) || n > (size_t)(1 << 20))
        return -EINVAL;
    if (sem_keys(keys, args, suffix, 3, prefix, name) < 0)
        return -ENAMETOOLONG;
    args[3] = ccap_fmt_ll(lease, lease_ms);
    args[4] = add_missing ? "1" : "0";
    for (size_t i = 0; i < n; i += CCAP_SEM_RENEW_BATCH) {
        size_t m = n - i < CCAP_SEM_RENEW_BATCH ? n - i : CCAP_SEM_RENEW_BATCH;
        int rc = renew_batch(r, args, holders + i, m, epoch);
        if (rc < 0)
            return rc;
        missing += rc;
    }
    return missing;
}

unsigned ccap_sem_epoch(const struct ccap_redis *r, const char *prefix, const char *name)
{
    char key[CCAP_KEY_MAX];

    return ccap_sem_key(key, sizeof key, prefix, name, CCAP_KEY_HOLDERS) < 0 ? 0 : ccap_redis_key_epoch(r, key);
}

const char *ccap_sem_server(struct ccap_redis *r, const char *prefix, const char *name)
{
    char key[CCAP_KEY_MAX];

    return ccap_sem_key(key, sizeof key, prefix, name, CCAP_KEY_HOLDERS) < 0 ? "" : ccap_redis_key_server(r, key);
}

int ccap_sem_failover_open(struct ccap_redis *r, const char *prefix, const char *name, int window_ms, int lease_ms,
                           int ticket_ttl_ms, const char *server)
{
    static const char *const suffix[2] = { CCAP_KEY_HOLDERS, CCAP_KEY_FAILOVER };
    char keys[2][CCAP_KEY_MAX], w[16], l[16], t[16];
    const char *args[6] = { [2] = w, l, server ? server : "", t };
    redisReply *rep;
    long long v;
    int rc;

    if (window_ms <= 0 || lease_ms <= 0 || ticket_ttl_ms <= 0)
        return -EINVAL;
    if (sem_keys(keys, args, suffix, 2, prefix, name) < 0)
        return -ENAMETOOLONG;
    ccap_fmt_ll(w, window_ms);
    ccap_fmt_ll(l, lease_ms);
    ccap_fmt_ll(t, ticket_ttl_ms);
    rc = ccap_redis_script(r, CCAP_SCRIPT_FAILOVER, 2, 6, args, &rep);
    if (rc < 0)
        return rc;
    rc = ccap_sem_parse_int(r, "failover reply", rep, 0, 1, &v);
    freeReplyObject(rep);
    return rc < 0 ? rc : (int)v;
}

int ccap_sem_timeout(struct ccap_redis *r, const char *prefix, const char *name, const char *holder,
                     long long waited_ms, int audit_maxlen)
{
    static const char *const suffix[3] = { CCAP_KEY_STATS, CCAP_KEY_WAITERS, CCAP_KEY_AUDIT };
    char keys[3][CCAP_KEY_MAX], waited[24], audit[16];
    const char *args[6] = { [3] = holder, waited, audit };
    redisReply *rep;
    int rc;

    if (!holder)
        return -EINVAL;
    if (sem_keys(keys, args, suffix, 3, prefix, name) < 0)
        return -ENAMETOOLONG;
    ccap_fmt_ll(waited, waited_ms > 0 ? waited_ms : 0);
    ccap_fmt_ll(audit, audit_maxlen > 0 ? audit_maxlen : 0);
    rc = ccap_redis_script(r, CCAP_SCRIPT_TIMEOUT, 3, 6, args, &rep);
    if (rc < 0)
        return rc;
    freeReplyObject(rep);
    return 0;
}

int ccap_sem_count_fallback(struct ccap_redis *r, const char *prefix, const char *name, int n)
{
    char skey[CCAP_KEY_MAX], num[16];
    const char *args[2] = { skey, num };
    redisReply *rep;
    int rc;

    if (n <= 0)
        return n < 0 ? -EINVAL : 0;
    if (ccap_sem_key(skey, sizeof skey, prefix, name, CCAP_KEY_STATS) < 0)
        return -ENAMETOOLONG;
    ccap_fmt_ll(num, n);
    rc = ccap_redis_script(r, CCAP_SCRIPT_FALLBACK, 1, 2, args, &rep);
    if (rc < 0)
        return rc;
    rc = ccap_sem_parse_int(r, "fallback reply", rep, LLONG_MIN, LLONG_MAX, &(long long){ 0 });
    freeReplyObject(rep);
    return rc;
}

/* Runs ARGV (a plain command) and, when INT_OUT, parses its integer reply
 * (WHAT in errors). Returns 0 or -errno as ccap_redis_command. */
static int sem_cmd(struct ccap_redis *r, const char *what, int argc, const char **argv, long long *int_out)
{
    redisReply *rep;
    int rc = ccap_redis_command(r, argc, argv, &rep);

    if (rc < 0)
        return rc;
    if (int_out)
        rc = ccap_sem_parse_int(r, what, rep, 0, LLONG_MAX, int_out);
    freeReplyObject(rep);
    return rc;
}

/* Plain commands, not a script: the library holds only what a worker may
 * run, and an operator needs no Lua rights. ZREMRANGEBYRANK removes and
 * counts the holders in one step; the rest follows it. */
int ccap_sem_reset(struct ccap_redis *r, const char *prefix, const char *name, const char *who, int audit_maxlen)
{
    static const char *const suffix[4] = { CCAP_KEY_HOLDERS, CCAP_KEY_SINCE, CCAP_KEY_STATS, CCAP_KEY_AUDIT };
    char keys[4][CCAP_KEY_MAX], audit[16], num[24];
    const char *k[4];
    long long n;
    int rc;

    if (sem_keys(keys, k, suffix, 4, prefix, name) < 0)
        return -ENAMETOOLONG;
    ccap_fmt_ll(audit, audit_maxlen > 0 ? audit_maxlen : 0);
    if ((rc = sem_cmd(r, "ZREMRANGEBYRANK reply", 4, (const char *[]){ "ZREMRANGEBYRANK", k[0], "0", "-1" }, &n)) <
        0)
        return rc;
    ccap_fmt_ll(num, n);
    if ((rc = sem_cmd(r, NULL, 2, (const char *[]){ "DEL", k[1] }, NULL)) < 0 ||
        (rc = sem_cmd(r, NULL, 4, (const char *[]){ "HDEL", k[2], CCAP_STAT_FULL_SINCE, CCAP_STAT_FULL_LIMIT },
                      NULL)) < 0 ||
        (rc = sem_cmd(r, NULL, 4, (const char *[]){ "HINCRBY", k[2], CCAP_STAT_RESET_DROPPED, num }, NULL)) < 0)
        return rc;
    if (strcmp(audit, "0") != 0 && (rc = sem_cmd(r, NULL, 12,
                                                 (const char *[]){ "XADD", k[3], "MAXLEN", "~", audit, "*", "event",
                                                                   "reset", "by", who ? who : "", "dropped", num },
                                                 NULL)) < 0)
        return rc;
    return n > INT_MAX ? INT_MAX : (int)n;
}

int ccap_sem_wake_key(char *out, size_t outlen, const char *prefix, const char *name, const char *holder)
{
    char suffix[CCAP_KEY_MAX];

    if ((size_t)snprintf(suffix, sizeof suffix, CCAP_KEY_WAKE "%s", holder) >= sizeof suffix)
        return -ENAMETOOLONG;
    return ccap_sem_key(out, outlen, prefix, name, suffix);
}
