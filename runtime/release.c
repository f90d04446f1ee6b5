/* release.c -- giving permits back: when a socket's last descriptor ends, sent without waiting, kept until Redis ran it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "breaker.h"
#include "clock.h"
#include "log.h"
#include "rt_int.h"
#include "sem.h"

struct ccap_permit *ccap_rt_close_pre(int fd)
{
    return ccap_rt_owner() ? ccap_ptab_detach(fd) : NULL;
}

struct ccap_permit *ccap_rt_dup(int oldfd, int newfd)
{
    return ccap_rt_owner() ? ccap_ptab_dup(oldfd, newfd) : NULL;
}

struct ccap_permit *ccap_rt_close_range(unsigned lo, unsigned hi)
{
    return !ccap_ptab_empty() && ccap_rt_owner() ? ccap_ptab_detach_range(lo, hi) : NULL;
}

void ccap_rt_release_list(struct ccap_permit *p)
{
    while (p) {
        struct ccap_permit *n = p->next;
        ccap_rt_release(p);
        p = n;
    }
}

void ccap_rt_release(struct ccap_permit *p)
{
    ccap_rt_unregister(p);
    free(p);
}

void ccap_rt_release_kept(const char *sem, int i, const char *holder, bool renewed, long long until)
{
    bool send = !ccap_breaker_open();
    struct ccap_sem_rel rel = { holder, i >= 0 ? ccap_rt.cfg->sems[i].limit : -1, ccap_rt_audit_maxlen(), renewed };
    size_t kept = ccap_redis_deferred(ccap_rt.redis);
    int rc = ccap_sem_release_defer(ccap_rt.redis, ccap_rt.cfg->redis.key_prefix, sem, &rel, until, send);
    if (rc == -ENOMEM && ccap_redis_deferred(ccap_rt.redis) <= kept) {
        /* not even kept (no memory to): the permit stays in Redis until its lease ends */
        ccap_log(CCAP_LOG_WARN, "release of %s not sent (out of memory): it expires with its lease", holder);
    } else if (rc < 0 && send) { /* kept: sent again when redis answers */
        ccap_breaker_note(rc);
        ccap_log(CCAP_LOG_INFO, "release of %s not sent (%s): sent again when redis answers", holder, strerror(-rc));
    } else if (!send) { /* the circuit was open already: the same, told the same way */
        ccap_log(CCAP_LOG_INFO, "release of %s not sent (redis down): sent again when redis answers", holder);
    }
    ccap_rt_note_use(i);
    if (rc < 0 || !send || ccap_redis_epochs(ccap_rt.redis) != ccap_rt.epochs_seen)
        ccap_rt_kick(); /* the heartbeat sends it once redis answers, or acts on the failover it found */
}

/* The release goes out without waiting for Redis's reply (a matched close
 * costs one write, not a round trip); the reply is read before the next
 * command. While the circuit is open it is only kept. Kept either way
 * until Redis ran it (core/redis_defer.c): one lost with its connection,
 * or that Redis missed while down, is sent again -- by the next command,
 * or by the heartbeat once Redis answers -- unless the lease has ended by
 * then. A locally granted permit is released only while Redis answers
 * (see below). */
void ccap_rt_unregister(struct ccap_permit *p)
{
    if (!p || !ccap_rt_config())
        return; /* loads it for a permit adopted across exec */
    int i = ccap_rt_sem_index(p->sem);
    if (!ccap_rt.redis) {
        if ((p->flags & CCAP_PERMIT_LOCAL) && i >= 0)
            atomic_fetch_sub(&ccap_rt.local_used[i], 1);
        return;
    }
    pthread_mutex_lock(&ccap_rt.rlock);
    bool send = !ccap_breaker_open();
    /* Read under rlock: the heartbeat registers local permits and clears
     * the flag under it. One closed between the heartbeat's renew (which
     * registered it) and the clearing is still flagged: while Redis
     * answers it is released like any other (a release of a holder Redis
     * never had changes nothing). While it does not, one that no renewal
     * named was never registered, and nothing is sent; one that a renewal
     * named (CCAP_PERMIT_RENEWED) may be: a renew that timed out in a
     * stalled Redis still runs when Redis wakes and adds it, so its release
     * is kept, as any other's, and sent when Redis answers. */
    if (p->flags & CCAP_PERMIT_LOCAL) {
        if (i >= 0)
            atomic_fetch_sub(&ccap_rt.local_used[i], 1);
        if (!send && !(p->flags & CCAP_PERMIT_RENEWED)) {
            pthread_mutex_unlock(&ccap_rt.rlock);
            return;
        }
    }
    ccap_rt_release_kept(p->sem, i, p->holder, p->flags & CCAP_PERMIT_RENEWED, ccap_now_ms() + p->lease_ms);
    pthread_mutex_unlock(&ccap_rt.rlock);
}
