/* renew.c -- keeping permits alive: the heartbeat's lease renewal, re-registration and fallback accounting. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "breaker.h"
#include "handoff.h"
#include "log.h"
#include "reload.h"
#include "rt_int.h"
#include "sem.h"
#include "wait.h"

#define BEAT_IDLE_MS 1000 /* no permit held: the next beat, while releases are kept or permits remain */
#define BEAT_MIN_MS 50    /* the shortest period between beats */

int ccap_rt_each_sem_batch(const struct ccap_handoff_entry *e, size_t n, ccap_rt_batch_fn *fn, void *arg)
{
    if (!n)
        return 0;
    const char **batch = malloc(n * sizeof(*batch));
    bool *done = calloc(n, sizeof(*done));
    int rc = batch && done ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (done[i])
            continue;
        size_t m = 0;
        int lease = 0;
        for (size_t j = i; j < n; j++) {
            if (done[j] || strcmp(e[j].sem, e[i].sem) != 0)
                continue;
            done[j] = true;
            batch[m++] = e[j].holder; /* a repeated holder (dup'ed socket) is harmless */
            if (e[j].lease_ms > lease)
                lease = e[j].lease_ms;
        }
        rc = fn(e[i].sem, batch, m, lease > 0 ? lease : 1, arg);
    }
    free(batch);
    free(done);
    return rc;
}

struct renew_call {
    const char *sem;
    const char **holders;
    size_t n;
    int lease_ms;
};

/* Renews on a master whose failovers this process acted on: one found on
 * the way (-ESTALE, not run) is acted on (failover.c renews these permits
 * there itself). */
static int renew_call(void *arg)
{
    const struct renew_call *c = arg;
    unsigned epoch;
    bool check = ccap_rt_epoch_of(ccap_rt_sem_index(c->sem), &epoch);
    int rc = ccap_sem_renew_at(ccap_rt.redis, ccap_rt.cfg->redis.key_prefix, c->sem, c->holders, c->n, c->lease_ms,
                               1, check ? &epoch : NULL);
    return rc == -ESTALE ? ccap_rt_failover(c->sem) : rc;
}

/* One semaphore's batch, through the breaker. ARG: a bool, true to log the
 * holders Redis had lost (the heartbeat's view; after a failed exec they
 * were released on purpose). Under rlock. */
static int renew_batch(const char *sem, const char **holders, size_t n, int lease_ms, void *arg)
{
    struct renew_call c = { sem, holders, n, lease_ms };
    int rc = ccap_breaker_call(renew_call, &c);
    if (rc > 0 && *(const bool *)arg)
        ccap_log(CCAP_LOG_WARN,
                 "re-registered %d permit(s) of %s that redis had lost (restart, failover, "
                 "or granted while it was down)",
                 rc, sem);
    return rc < 0 ? rc : 0;
}

int ccap_rt_renew_entries(const struct ccap_handoff_entry *e, size_t n)
{
    if (!n)
        return 0;
    if (!ccap_rt_config())
        return -EINVAL;
    bool warn = false;
    pthread_mutex_lock(&ccap_rt.rlock);
    int rc = ccap_rt_each_sem_batch(e, n, renew_batch, &warn);
    pthread_mutex_unlock(&ccap_rt.rlock);
    return rc;
}

/* ARG: per-semaphore counts of the permits registered now (stats), or NULL. */
static void clear_local_flags(struct ccap_permit *p, void *arg)
{
    if (p->flags & CCAP_PERMIT_LOCAL) {
        int i = ccap_rt_sem_index(p->sem);
        if (i >= 0)
            atomic_fetch_sub(&ccap_rt.local_used[i], 1);
        if (i >= 0 && arg)
            ((int *)arg)[i]++;
        p->flags &= ~CCAP_PERMIT_LOCAL;
    }
}

/* Clears the local flags of permits now registered in Redis and counts
 * them in each semaphore's fallback_granted. Under rlock. */
static void count_fallback(void)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    int *n = calloc(ccap_live_sem_slots(cfg), sizeof(*n)); /* room for any index a reload adds meanwhile */
    ccap_ptab_each(clear_local_flags, n);
    for (size_t i = 0; n && i < cfg->n_sems; i++)
        if (n[i] && ccap_sem_count_fallback(ccap_rt.redis, cfg->redis.key_prefix, cfg->sems[i].name, n[i]) < 0)
            ccap_log(CCAP_LOG_DEBUG, "fallback grants of %s not counted: %s", cfg->sems[i].name,
                     ccap_redis_errstr(ccap_rt.redis));
    free(n);
}

/* The heartbeat's copy of the table: what to renew, taken under the table
 * lock, renewed after it is released. */
struct beat {
    struct ccap_handoff_entry *e;
    size_t n, cap;
    int min_lease;
};

static void collect(struct ccap_permit *p, void *arg)
{
    struct beat *b = arg;
    if (b->n == b->cap)
        return;
    struct ccap_handoff_entry *e = &b->e[b->n++];
    p->flags |= CCAP_PERMIT_RENEWED; /* under the table lock, as clear_local_flags */
    memcpy(e->sem, p->sem, sizeof(e->sem));
    memcpy(e->holder, p->holder, sizeof(e->holder));
    e->lease_ms = p->lease_ms;
    if (!b->min_lease || p->lease_ms < b->min_lease)
        b->min_lease = p->lease_ms;
}

/* Renews every permit of the table and registers those granted locally;
 * fills B with what it renewed (B->n permits, their shortest lease; B->e
 * is the caller's to free, NULL when out of memory). Under rlock. */
static void renew_table(struct beat *b)
{
    b->cap = ccap_ptab_count();
    b->e = calloc(b->cap + 1, sizeof(*b->e));
    if (!b->e)
        return;
    ccap_ptab_each(collect, b);
    if (b->n && !ccap_breaker_open()) {
        bool warn = true;
        ccap_rt_each_sem_batch(b->e, b->n, renew_batch, &warn);
        if (!ccap_breaker_down())
            count_fallback(); /* all registered now */
    }
    if (!ccap_breaker_open())
        ccap_rt_failover_scan(); /* a failover a release found: the window, if this process had a stake */
}

int ccap_rt_heartbeat(void)
{
    if (!ccap_rt_config() || atomic_load(&ccap_rt.shutting_down))
        return -1; /* loads it for adopted permits */
    struct ccap_permit *orphans;
    ccap_ptab_sweep(&orphans);
    ccap_rt_release_list(orphans);
    pthread_mutex_lock(&ccap_rt.rlock);
    struct beat b = { 0 };
    renew_table(&b);
    size_t pending = ccap_rt_flush_releases();
    /* While Redis is down the beat comes when the circuit lets a probe
     * through, so that permits are registered again (and missed releases
     * sent) soon after Redis is back, not a third of a lease later. */
    long long probe = ccap_breaker_probe_in_ms();
    free(b.e);
    pthread_mutex_unlock(&ccap_rt.rlock);
    ccap_wait_reap(b.n ? CCAP_WAIT_IDLE_MS : 0); /* waiters' idle connections */
    if (probe >= 0 && probe < CCAP_BREAKER_MIN_MS)
        probe = CCAP_BREAKER_MIN_MS;
    if (!b.n) {
        if (pending)
            return probe > 0 && probe < BEAT_IDLE_MS ? (int)probe : BEAT_IDLE_MS;
        return ccap_ptab_count() ? BEAT_IDLE_MS : -1;
    }
    int ms = b.min_lease / 3;
    if (probe > 0 && probe < ms)
        ms = (int)probe;
    return ms < BEAT_MIN_MS ? BEAT_MIN_MS : ms;
}
