/* shutdown.c -- the end of a process or image: the kept releases reach Redis, every permit goes back at exit. */
#include "breaker.h"
#include "handoff.h"
#include "rt_int.h"
#include "waiting.h"

/* The breaker's gate around one flush. */
static int flush_call(void *arg)
{
    (void)arg;
    return ccap_redis_flush(ccap_rt.redis);
}

size_t ccap_rt_flush_releases(void)
{
    if (!ccap_redis_deferred(ccap_rt.redis))
        return 0;
    int rc = ccap_breaker_call(flush_call, NULL);
    return rc >= 0 ? (size_t)rc : ccap_redis_deferred(ccap_rt.redis);
}

void ccap_rt_flush(void)
{
    if (!ccap_rt.redis || !ccap_rt_owner())
        return;
    pthread_mutex_lock(&ccap_rt.rlock);
    ccap_rt_flush_releases();
    pthread_mutex_unlock(&ccap_rt.rlock);
}

void ccap_rt_shutdown(void)
{
    if (!ccap_rt_owner())
        return;
    if (ccap_handoff_waiting())
        ccap_handoff_adopt();
    if (!ccap_rt_stateful() || !ccap_rt_config())
        return; /* never used: nothing to load */
    atomic_store(&ccap_rt.shutting_down, true);
    ccap_rt_waits_drop(); /* the tickets of threads still waiting */
    ccap_rt_release_list(ccap_ptab_take_all());
    ccap_rt_flush(); /* the releases reach Redis before the process ends */
}
