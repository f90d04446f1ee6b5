/* sem.c -- the distributed counting semaphore: keys, and calls to the Lua scripts. */
#include "sem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CCAP_KEY_MAX 512

int ccap_sem_key(char *out, size_t outlen, const char *prefix, const char *name, const char *suffix)
{
    int n = snprintf(out, outlen, "%s{%s}:%s", prefix ? prefix : "", name, suffix);

    if (n < 0 || (size_t)n >= outlen)
        return -ENAMETOOLONG;
    return n;
}

/* A reply element that must be an integer; stores it in *V. */
static int int_elem(const redisReply *e, long long *v)
{
    if (!e || e->type != REDIS_REPLY_INTEGER)
        return -EPROTO;
    *v = e->integer;
    return 0;
}

/* {granted, count, limit}: an array of three integers, granted 0 or 1. */
static int parse_acquire(const redisReply *rep, struct ccap_sem_result *res)
{
    long long g, c, l;

    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3)
        return -EPROTO;
    if (int_elem(rep->element[0], &g) || int_elem(rep->element[1], &c) || int_elem(rep->element[2], &l))
        return -EPROTO;
    if ((g != 0 && g != 1) || c < 0)
        return -EPROTO;
    res->granted = (int)g;
    res->count = c;
    res->limit = l;
    return 0;
}

int ccap_sem_acquire(struct ccap_redis *r, const char *prefix, const char *name, const char *holder,
                     int lease_ms, int limit, struct ccap_sem_result *res)
{
    char hkey[CCAP_KEY_MAX], lkey[CCAP_KEY_MAX], lease[16], lim[16];
    const char *args[5] = { hkey, lkey, holder, lease, lim };
    redisReply *rep;
    int rc;

    if (lease_ms <= 0 || !holder)
        return -EINVAL;
    if (ccap_sem_key(hkey, sizeof hkey, prefix, name, "holders") < 0 ||
        ccap_sem_key(lkey, sizeof lkey, prefix, name, "limit") < 0)
        return -ENAMETOOLONG;
    snprintf(lease, sizeof lease, "%d", lease_ms);
    snprintf(lim, sizeof lim, "%d", limit);

    rc = ccap_redis_script(r, CCAP_SCRIPT_ACQUIRE, 2, 5, args, &rep);
    if (rc < 0)
        return rc;
    rc = parse_acquire(rep, res);
    freeReplyObject(rep);
    return rc;
}

int ccap_sem_release(struct ccap_redis *r, const char *prefix, const char *name, const char *holder)
{
    char hkey[CCAP_KEY_MAX];
    const char *args[2] = { hkey, holder };
    redisReply *rep;
    long long v;
    int rc;

    if (!holder)
        return -EINVAL;
    if (ccap_sem_key(hkey, sizeof hkey, prefix, name, "holders") < 0)
        return -ENAMETOOLONG;
    rc = ccap_redis_script(r, CCAP_SCRIPT_RELEASE, 1, 2, args, &rep);
    if (rc < 0)
        return rc;
    rc = int_elem(rep, &v);
    if (rc == 0 && v != 0 && v != 1)
        rc = -EPROTO;
    freeReplyObject(rep);
    return rc < 0 ? rc : (int)v;
}

int ccap_sem_renew(struct ccap_redis *r, const char *prefix, const char *name, const char *const *holders,
                   size_t n, int lease_ms, int add_missing)
{
    char hkey[CCAP_KEY_MAX], lease[16];
    const char **args;
    redisReply *rep;
    long long v;
    int rc;

    if (lease_ms <= 0 || (n && !holders) || n > (size_t)(1 << 20))
        return -EINVAL;
    if (n == 0)
        return 0;
    if (ccap_sem_key(hkey, sizeof hkey, prefix, name, "holders") < 0)
        return -ENAMETOOLONG;
    args = malloc(sizeof *args * (n + 3));
    if (!args)
        return -ENOMEM;
    snprintf(lease, sizeof lease, "%d", lease_ms);
    args[0] = hkey;
    args[1] = lease;
    args[2] = add_missing ? "1" : "0";
    for (size_t i = 0; i < n; i++)
        args[3 + i] = holders[i];

    rc = ccap_redis_script(r, CCAP_SCRIPT_RENEW, 1, (int)(n + 3), args, &rep);
    free(args);
    if (rc < 0)
        return rc;
    rc = int_elem(rep, &v);
    if (rc == 0 && (v < 0 || (size_t)v > n))
        rc = -EPROTO;
    freeReplyObject(rep);
    return rc < 0 ? rc : (int)v;
}
