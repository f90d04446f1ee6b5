/* list.c -- a semaphore's live holders read in bounded pages: every Redis call costs O(log N + one page). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "ops.h"

/* Keeps REP (freed with the list); the entries point into it. */
static int keep_reply(struct ccap_ops_list *l, redisReply *rep)
{
    if (l->n_pages == l->cap_pages) {
        size_t cap = l->cap_pages ? l->cap_pages * 2 : 16;
        redisReply **p = realloc(l->pages, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->pages = p;
        l->cap_pages = cap;
    }
    l->pages[l->n_pages++] = rep;
    return 0;
}

static int add_entry(struct ccap_ops_list *l, const char *id, long long expiry)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        struct ccap_ops_entry *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (struct ccap_ops_entry){ id, expiry, -1 };
    return 0;
}

/* Returns E (-EPROTO: a reply of another shape, or -ENOMEM) with its text in R. */
static int fail(struct ccap_redis *r, int e)
{
    ccap_redis_set_err(r, "%s", e == -ENOMEM ? "out of memory" : "unexpected reply");
    return e;
}

/* Where the next page starts: LIMIT OFF entries from score MIN on
 * (inclusive), OFF being how many of the entries read had the last score
 * read (ZRANGEBYSCORE orders equal scores by id). Entries that come or go
 * meanwhile do not shift the rest, except within one score. */
struct cursor {
    char min[48];
    long long off;
    double last;    /* the last score read */
    const char *id; /* the last id read; NULL before the first page */
};

/* Appends one reply page [id, score, ...] to L and moves C past it.
 * Returns 0, or -EPROTO for a reply of another shape or a full page that
 * does not move forward (a server that ignores LIMIT), or -ENOMEM. */
static int add_page(struct ccap_ops_list *l, const redisReply *rep, struct cursor *c)
{
    size_t n = rep->elements / 2, trail = 0;
    for (size_t i = 0; i < n; i++) {
        const redisReply *id = rep->element[2 * i], *sc = rep->element[2 * i + 1];
        if (id->type != REDIS_REPLY_STRING || sc->type != REDIS_REPLY_STRING)
            return -EPROTO;
        if (add_entry(l, id->str, atoll(sc->str)) < 0)
            return -ENOMEM;
    }
    if (n < CCAP_OPS_PAGE)
        return 0;
    const char *id = rep->element[2 * n - 2]->str, *score = rep->element[2 * n - 1]->str;
    double last = strtod(score, NULL);
    if (c->id && (last < c->last || (last == c->last && strcmp(id, c->id) <= 0)))
        return -EPROTO;
    while (trail < n && strtod(rep->element[2 * (n - trail) - 1]->str, NULL) == last)
        trail++;
    c->off = c->id && last == c->last && trail == n ? c->off + (long long)n : (long long)trail;
    snprintf(c->min, sizeof c->min, "%s", score);
    c->last = last;
    c->id = id;
    return 0;
}

/* Reads every live entry of the sorted set KEY (score > NOW_MS) into L, in
 * pages of CCAP_OPS_PAGE. 0 or -errno, the error text in R. */
static int read_holders(struct ccap_redis *r, const char *key, long long now_ms, struct ccap_ops_list *l)
{
    char off[24], count[24];
    struct cursor c = { .id = NULL };
    snprintf(c.min, sizeof c.min, "(%lld", now_ms);
    snprintf(count, sizeof count, "%d", CCAP_OPS_PAGE);
    for (;;) {
        snprintf(off, sizeof off, "%lld", c.off);
        const char *a[] = { "ZRANGEBYSCORE", key, c.min, "+inf", "WITHSCORES", "LIMIT", off, count };
        redisReply *rep = NULL;
        int rc = ccap_redis_command(r, 8, a, &rep);
        if (rc < 0)
            return rc;
        bool ok = rep->type == REDIS_REPLY_ARRAY && rep->elements % 2 == 0;
        if (!ok || keep_reply(l, rep) < 0) {
            freeReplyObject(rep);
            return fail(r, ok ? -ENOMEM : -EPROTO);
        }
        size_t got = rep->elements / 2;
        rc = add_page(l, rep, &c);
        if (rc < 0 || got < CCAP_OPS_PAGE)
            return rc < 0 ? fail(r, rc) : 0;
    }
}

static int by_id(const void *a, const void *b)
{
    const struct ccap_ops_entry *x = a, *y = b;
    int d = strcmp(x->id, y->id);
    return d ? d : (x->expiry_ms > y->expiry_ms) - (x->expiry_ms < y->expiry_ms);
}

static int by_expiry(const void *a, const void *b)
{
    const struct ccap_ops_entry *x = a, *y = b;
    if (x->expiry_ms != y->expiry_ms)
        return x->expiry_ms < y->expiry_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* A holder renewed while the pages were read shows twice: keeps its later
 * lease end; leaves L ordered by lease end, then id. */
static void dedupe(struct ccap_ops_list *l)
{
    size_t k = 0;
    if (l->n < 2)
        return; /* (no list at all is NULL: qsort's base must not be) */
    qsort(l->v, l->n, sizeof(*l->v), by_id);
    for (size_t i = 0; i < l->n; i++) {
        if (k && !strcmp(l->v[k - 1].id, l->v[i].id))
            k--;
        l->v[k++] = l->v[i];
    }
    l->n = k;
    qsort(l->v, l->n, sizeof(*l->v), by_expiry);
}

/* Fills the acquire times of L's entries from the hash KEY (HMGET in
 * pages). 0 or -errno, the error text in R. */
static int read_since(struct ccap_redis *r, const char *key, struct ccap_ops_list *l)
{
    const char *a[CCAP_OPS_PAGE + 2] = { "HMGET", key };
    for (size_t at = 0; at < l->n; at += CCAP_OPS_PAGE) {
        size_t n = l->n - at < CCAP_OPS_PAGE ? l->n - at : CCAP_OPS_PAGE;
        for (size_t i = 0; i < n; i++)
            a[i + 2] = l->v[at + i].id;
        redisReply *rep = NULL;
        int rc = ccap_redis_command(r, (int)n + 2, a, &rep);
        if (rc < 0)
            return rc;
        rc = rep->type == REDIS_REPLY_ARRAY && rep->elements == n ? 0 : -EPROTO;
        for (size_t i = 0; rc == 0 && i < n; i++)
            if (rep->element[i]->type == REDIS_REPLY_STRING)
                l->v[at + i].since_ms = atoll(rep->element[i]->str);
        freeReplyObject(rep);
        if (rc < 0)
            return fail(r, rc);
    }
    return 0;
}

/* The since hash holds the acquire times of holders renewed at least once
 * (lua/renew.lua); a grant writes none (it would cost a call per connect).
 * One not renewed yet was granted at its lease expiry minus its own lease,
 * taken as NAME's lease_ms in CFG; and as its first renewal comes at a
 * third of its own lease, it is younger than half the lease it has left
 * (its age a <= L/3 and lease left L - a >= 2L/3). The later of the two
 * bounds is its acquire time: exact when the holder's lease is CFG's, and
 * at most half its lease left off when it was granted a shorter one (a
 * scripts' configuration), instead of the difference of the leases. NOW_MS:
 * server time of the reading. */
static void granted_at(const struct ccap_config *cfg, const char *name, long long now_ms, struct ccap_ops_list *l)
{
    int i = ccap_config_sem_index(cfg, name);
    if (i < 0)
        return;
    for (size_t k = 0; k < l->n; k++) {
        struct ccap_ops_entry *e = &l->v[k];
        long long left = e->expiry_ms - now_ms, by_lease = e->expiry_ms - cfg->sems[i].lease_ms;
        long long by_left = now_ms - (left > 0 ? left : 0) / 2;
        if (e->since_ms < 0)
            e->since_ms = by_lease > by_left ? by_lease : by_left;
    }
}

int ccap_ops_list_holders(struct ccap_redis *r, const struct ccap_config *cfg, const char *name, long long now_ms,
                          bool since, struct ccap_ops_list *out)
{
    char hk[600], sk[600];
    memset(out, 0, sizeof(*out));
    if (ccap_sem_key(hk, sizeof hk, cfg->redis.key_prefix, name, CCAP_KEY_HOLDERS) < 0 ||
        ccap_sem_key(sk, sizeof sk, cfg->redis.key_prefix, name, CCAP_KEY_SINCE) < 0) {
        ccap_redis_set_err(r, "key too long");
        return -ENAMETOOLONG;
    }
    int rc = read_holders(r, hk, now_ms, out);
    if (rc == 0)
        dedupe(out);
    if (rc == 0 && since)
        rc = read_since(r, sk, out);
    if (rc == 0 && (out->end_ms = ccap_ops_server_ms(r)) < 0)
        rc = -EIO;
    if (out->end_ms < now_ms)
        out->end_ms = now_ms;
    if (rc == 0 && since)
        granted_at(cfg, name, out->end_ms, out);
    if (rc < 0)
        ccap_ops_list_free(out);
    return rc;
}

void ccap_ops_list_free(struct ccap_ops_list *l)
{
    for (size_t i = 0; i < l->n_pages; i++)
        freeReplyObject(l->pages[i]);
    free(l->pages);
    free(l->v);
    memset(l, 0, sizeof(*l));
}
