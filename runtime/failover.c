/* failover.c -- after a Sentinel or Cluster failover: this process registers its permits on the new master and opens the re-registration window, before any other call of it there. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "breaker.h"
#include "clock.h"
#include "log.h"
#include "rt_int.h"
#include "sem.h"
#include "waiting.h"

/* The window: one heartbeat (a third of the lease) and a margin for a
 * heartbeat that comes late (a reconnect, a probe after a failed call):
 * a tenth of the lease, 250 ms to 2 s. */
static int window_ms(int lease_ms)
{
    int m = lease_ms / 10;

    if (m < 250)
        m = 250;
    if (m > 2000)
        m = 2000;
    return lease_ms / 3 + m;
}

/* This process's permits of one semaphore, for ccap_ptab_each. */
struct mine {
    const char *sem;
    const char **holders;
    char (*ids)[CCAP_HOLDER_MAX];
    size_t n, cap;
    int lease_min, lease_max;
};

static void collect(struct ccap_permit *p, void *arg)
{
    struct mine *m = arg;

    if (m->n == m->cap || strcmp(p->sem, m->sem) != 0)
        return;
    memcpy(m->ids[m->n], p->holder, sizeof m->ids[m->n]);
    m->holders[m->n] = m->ids[m->n];
    m->n++;
    p->flags |= CCAP_PERMIT_RENEWED; /* it may get an acquire time in Redis (lua/renew.lua) */
    if (!m->lease_min || p->lease_ms < m->lease_min)
        m->lease_min = p->lease_ms;
    if (p->lease_ms > m->lease_max)
        m->lease_max = p->lease_ms;
}

void ccap_rt_note_use(int i)
{
    if (i >= 0 && ccap_rt.sem_used_ms)
        ccap_rt.sem_used_ms[i] = ccap_now_coarse_ms();
}

bool ccap_rt_epoch_of(int i, unsigned *epoch)
{
    if (i < 0 || !ccap_rt.sem_epoch)
        return false;
    *epoch = ccap_rt.sem_epoch[i];
    return true;
}

int ccap_rt_failover(const char *sem)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    int i = ccap_rt_sem_index(sem), rc = 0, opened = 0, back = 0;
    const struct ccap_sem_conf *s = i >= 0 ? &cfg->sems[i] : NULL;
    unsigned cur = ccap_sem_epoch(ccap_rt.redis, cfg->redis.key_prefix, sem);
    struct mine m = { .sem = sem };
    char server[320];

    if (i < 0 || !ccap_rt.sem_epoch)
        return 0; /* a semaphore no longer configured: nothing to wait for */
    m.cap = ccap_ptab_count();
    m.holders = calloc(m.cap + 1, sizeof *m.holders);
    m.ids = calloc(m.cap + 1, sizeof *m.ids);
    if (!m.holders || !m.ids) {
        rc = -ENOMEM;
        goto out;
    }
    ccap_ptab_each(collect, &m);
    /* A process with no permit of it, and none given back within a lease,
     * has nothing the new master may miss or keep wrongly: it only takes
     * note (so that a process idle for long never opens a late window). */
    if (m.n || ccap_now_coarse_ms() - ccap_rt.sem_used_ms[i] < s->lease_ms) {
        int lo = m.n && m.lease_min < s->lease_ms ? m.lease_min : s->lease_ms;
        int hi = m.lease_max > s->lease_ms ? m.lease_max : s->lease_ms;

        snprintf(server, sizeof server, "%s", ccap_sem_server(ccap_rt.redis, cfg->redis.key_prefix, sem));
        opened = rc = ccap_sem_failover_open(ccap_rt.redis, cfg->redis.key_prefix, sem, window_ms(hi), lo,
                                             ccap_rt_ticket_ttl_ms(s), server);
        if (rc == -EACCES || rc == -EPROTO) {
            /* refused for good (an ACL without :failover, a script error):
             * no window, as before there were any; the permits still go */
            static atomic_bool told;
            if (!atomic_exchange(&told, true))
                ccap_log(CCAP_LOG_WARN,
                         "redis failover: no re-registration window on %s (%s): holders nobody holds any more "
                         "keep their permits until their leases end (the worker user needs GET and SET on "
                         "<prefix>{name}:failover: see examples/redis-acl.conf)",
                         server[0] ? server : "the new master", ccap_redis_errstr(ccap_rt.redis));
            rc = opened = 0;
        }
        if (rc >= 0 && m.n)
            back = rc = ccap_sem_renew_at(ccap_rt.redis, cfg->redis.key_prefix, sem, m.holders, m.n, hi, 1, &cur);
        if (rc < 0)
            goto out;
        ccap_log(CCAP_LOG_WARN,
                 "redis failover: %s is served by %s now: %s a re-registration window of %d ms "
                 "(new permits wait for it; holders nobody renews meanwhile are dropped after it); "
                 "%zu permit(s) of this process renewed there, %d of them missing",
                 sem, server[0] ? server : "a new master", opened ? "opened" : "joined", window_ms(hi), m.n, back);
    }
    ccap_rt.sem_epoch[i] = cur;
out:
    free(m.holders);
    free(m.ids);
    return rc < 0 ? rc : 0;
}

void ccap_rt_failover_scan(void)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    unsigned all = ccap_redis_epochs(ccap_rt.redis);

    if (all == ccap_rt.epochs_seen || !ccap_rt.sem_epoch)
        return;
    for (size_t i = 0; i < cfg->n_sems; i++) {
        if (ccap_rt.sem_epoch[i] == ccap_sem_epoch(ccap_rt.redis, cfg->redis.key_prefix, cfg->sems[i].name))
            continue;
        int rc = ccap_rt_failover(cfg->sems[i].name);
        ccap_breaker_note(rc);
        if (rc < 0)
            return; /* tried again at the next beat */
    }
    ccap_rt.epochs_seen = all;
}
