/* names.c -- the address -> host names map: hash buckets, an age list for eviction, a read-write lock. */
#include "names.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    struct entry *hnext;         /* bucket chain, newest first */
    struct entry *older, *newer; /* age list: order of last recording */
    long long expires_ms;
    uint32_t hash;
    uint8_t family;
    uint8_t addr[16];
    char name[]; /* normalised host name */
};

struct ccap_names {
    pthread_rwlock_t lock;
    struct entry **buckets;
    size_t mask; /* buckets - 1 (a power of two) */
    size_t count, max;
    struct entry *oldest, *newest;
};

/* FNV-1a over the family and the address bytes (RFC draft-eastlake-fnv). */
static uint32_t addr_hash(const struct ccap_addr *a)
{
    uint32_t h = 2166136261u;
    size_t n = a->family == AF_INET ? 4 : 16;
    h = (h ^ (uint8_t)a->family) * 16777619u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ a->addr[i]) * 16777619u;
    return h;
}

static bool same_addr(const struct entry *e, const struct ccap_addr *a)
{
    return e->family == a->family && !memcmp(e->addr, a->addr, a->family == AF_INET ? 4 : 16);
}

static int lock_init(pthread_rwlock_t *l)
{
    pthread_rwlockattr_t at;
    pthread_rwlockattr_init(&at);
    /* connects only read: without this a steady stream of them could keep
     * a resolver's write waiting for ever */
    pthread_rwlockattr_setkind_np(&at, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(l, &at);
    pthread_rwlockattr_destroy(&at);
    return rc;
}

struct ccap_names *ccap_names_new(size_t max_entries)
{
    if (max_entries < 1)
        return NULL;
    struct ccap_names *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    size_t nb = 16;
    while (nb < max_entries / 2 && nb < ((size_t)1 << 30))
        nb <<= 1;
    m->buckets = calloc(nb, sizeof *m->buckets);
    int rc = lock_init(&m->lock);
    if (!m->buckets || rc != 0) {
        free(m->buckets);
        free(m);
        return NULL;
    }
    m->mask = nb - 1;
    m->max = max_entries;
    return m;
}

void ccap_names_free(struct ccap_names *m)
{
    if (!m)
        return;
    for (struct entry *e = m->oldest, *n; e; e = n) {
        n = e->newer;
        free(e);
    }
    pthread_rwlock_destroy(&m->lock);
    free(m->buckets);
    free(m);
}

/* ---- under the write lock ---- */

static void age_unlink(struct ccap_names *m, struct entry *e)
{
    if (e->older)
        e->older->newer = e->newer;
    else
        m->oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        m->newest = e->older;
    e->older = e->newer = NULL;
}

static void age_append(struct ccap_names *m, struct entry *e)
{
    e->older = m->newest;
    e->newer = NULL;
    if (m->newest)
        m->newest->newer = e;
    else
        m->oldest = e;
    m->newest = e;
}

static void chain_unlink(struct ccap_names *m, struct entry *e)
{
    struct entry **pp = &m->buckets[e->hash & m->mask];
    while (*pp && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = e->hnext;
    e->hnext = NULL;
}

static void chain_push(struct ccap_names *m, struct entry *e)
{
    struct entry **head = &m->buckets[e->hash & m->mask];
    e->hnext = *head;
    *head = e;
}

static void drop(struct ccap_names *m, struct entry *e)
{
    chain_unlink(m, e);
    age_unlink(m, e);
    m->count--;
    free(e);
}

int ccap_names_add(struct ccap_names *m, const struct ccap_addr *a, const char *name, long long now_ms, int ttl_ms)
{
    if (!m || !a || !name || !*name || ttl_ms <= 0 || (a->family != AF_INET && a->family != AF_INET6))
        return -EINVAL;
    size_t len = strnlen(name, 254);
    if (len > 253)
        return -EINVAL;
    uint32_t h = addr_hash(a);
    long long exp = now_ms + ttl_ms;
    int rc = 1;

    pthread_rwlock_wrlock(&m->lock);
    for (struct entry *e = m->buckets[h & m->mask]; e; e = e->hnext)
        if (e->hash == h && same_addr(e, a) && !strcmp(e->name, name)) {
            if (exp > e->expires_ms)
                e->expires_ms = exp;
            chain_unlink(m, e);
            chain_push(m, e);
            age_unlink(m, e);
            age_append(m, e);
            rc = 0;
            goto out;
        }
    while (m->oldest && m->oldest->expires_ms <= now_ms)
        drop(m, m->oldest);
    if (m->count >= m->max)
        drop(m, m->oldest);
    struct entry *e = malloc(sizeof *e + len + 1);
    if (!e) {
        rc = -ENOMEM;
        goto out;
    }
    memset(e, 0, sizeof *e);
    e->hash = h;
    e->family = (uint8_t)a->family;
    memcpy(e->addr, a->addr, a->family == AF_INET ? 4 : 16);
    e->expires_ms = exp;
    memcpy(e->name, name, len + 1);
    chain_push(m, e);
    age_append(m, e);
    m->count++;
out:
    pthread_rwlock_unlock(&m->lock);
    return rc;
}

size_t ccap_names_expire(struct ccap_names *m, long long now_ms)
{
    size_t n = 0;
    if (!m)
        return 0;
    pthread_rwlock_wrlock(&m->lock);
    for (struct entry *e = m->oldest, *next; e; e = next) {
        next = e->newer;
        if (e->expires_ms <= now_ms) {
            drop(m, e);
            n++;
        }
    }
    pthread_rwlock_unlock(&m->lock);
    return n;
}

/* ---- readers ---- */

size_t ccap_names_each(const struct ccap_names *m, const struct ccap_addr *a, long long now_ms, ccap_names_fn fn,
                       void *arg)
{
    size_t n = 0;
    if (!m || !a || !fn || (a->family != AF_INET && a->family != AF_INET6))
        return 0;
    struct ccap_names *w = (struct ccap_names *)m; /* the lock is not part of the value */
    uint32_t h = addr_hash(a);
    pthread_rwlock_rdlock(&w->lock);
    for (const struct entry *e = m->buckets[h & m->mask]; e; e = e->hnext)
        if (e->hash == h && same_addr(e, a) && e->expires_ms > now_ms) {
            n++;
            if (fn(e->name, arg))
                break;
        }
    pthread_rwlock_unlock(&w->lock);
    return n;
}

size_t ccap_names_count(const struct ccap_names *m)
{
    if (!m)
        return 0;
    struct ccap_names *w = (struct ccap_names *)m;
    pthread_rwlock_rdlock(&w->lock);
    size_t n = m->count;
    pthread_rwlock_unlock(&w->lock);
    return n;
}

struct match_ctx {
    const struct ccap_config *cfg;
    const struct sockaddr *sa;
    socklen_t len;
    const struct ccap_rule *best;
    char *name; /* NULL, or where the name that gave BEST goes ("" when its address did) */
    size_t cap;
};

static bool match_one(const char *name, void *arg)
{
    struct match_ctx *c = arg;
    const struct ccap_rule *r = ccap_config_match(c->cfg, c->sa, c->len, &name, 1);
    if (r && (!c->best || r < c->best)) {
        c->best = r;
        if (c->name)
            snprintf(c->name, c->cap, "%s", name);
    }
    return c->best == &c->cfg->rules[0]; /* nothing can come before the first rule */
}

const struct ccap_rule *ccap_names_match(const struct ccap_names *m, const struct ccap_config *cfg,
                                         const struct sockaddr *sa, socklen_t len, long long now_ms)
{
    return ccap_names_match_name(m, cfg, sa, len, now_ms, NULL, 0);
}

const struct ccap_rule *ccap_names_match_name(const struct ccap_names *m, const struct ccap_config *cfg,
                                              const struct sockaddr *sa, socklen_t len, long long now_ms, char *name,
                                              size_t cap)
{
    struct ccap_addr a;
    if (name && cap)
        name[0] = '\0';
    if (!cfg || ccap_addr_from_sa(sa, len, &a) < 0)
        return NULL;
    struct match_ctx c = { cfg, sa, len, ccap_config_match(cfg, sa, len, NULL, 0), cap ? name : NULL, cap };
    if (m && !(c.best && c.best == &cfg->rules[0]))
        ccap_names_each(m, &a, now_ms, match_one, &c);
    return c.best;
}

void ccap_names_fork_prepare(struct ccap_names *m)
{
    if (m)
        pthread_rwlock_wrlock(&m->lock);
}

void ccap_names_fork_parent(struct ccap_names *m)
{
    if (m)
        pthread_rwlock_unlock(&m->lock);
}

/* Not an unlock: glibc tells a writer's unlock from a reader's by the
 * writer's thread id, which the forking thread no longer has in the child,
 * so an unlock there left the map write-locked and the child's next lookup
 * waited for ever. Only this thread exists: the lock starts afresh. */
void ccap_names_fork_child(struct ccap_names *m)
{
    if (m)
        lock_init(&m->lock);
}
