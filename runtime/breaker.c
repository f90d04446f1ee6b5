/* breaker.c -- the circuit breaker in front of Redis: open on failure, back off with jitter, close on success. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include "breaker.h"
#include "clock.h"
#include "log.h"
#include "rt_int.h"

/* Under the runtime's rlock, but for the atomics. */
static struct {
    bool down;
    long long retry_at_ms;
    int backoff_ms;
    long long down_since_ms;
    bool local_logged;   /* said that the process is out of descriptors for Redis */
    atomic_uint granted; /* this outage: permits on_redis_down granted */
    atomic_uint refused; /* this outage: connects it failed */
} breaker;

bool ccap_breaker_open(void)
{
    return breaker.down && ccap_now_ms() < breaker.retry_at_ms;
}

bool ccap_breaker_down(void)
{
    return breaker.down;
}

long long ccap_breaker_probe_in_ms(void)
{
    return breaker.down ? breaker.retry_at_ms - ccap_now_ms() : -1;
}

void ccap_breaker_count(bool granted)
{
    atomic_fetch_add(granted ? &breaker.granted : &breaker.refused, 1);
}

void ccap_breaker_fork_child(void)
{
    breaker.down = false;
    breaker.retry_at_ms = 0;
}

/* The longest backoff: CCAP_BREAKER_MAX_MS, but at most a quarter of the
 * shortest lease, so that a holder's heartbeat probes often enough to renew
 * its leases before they run out once Redis is back (an outage shorter than
 * about 3/4 of a lease then costs no lease). */
static int max_backoff_ms(void)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    int m = CCAP_BREAKER_MAX_MS;
    for (size_t i = 0; i < cfg->n_sems; i++)
        if (cfg->sems[i].lease_ms / 4 < m)
            m = cfg->sems[i].lease_ms / 4;
    return m < CCAP_BREAKER_MIN_MS ? CCAP_BREAKER_MIN_MS : m;
}

/* A call failed because Redis could not serve it: open the circuit, or
 * keep it open with the next backoff. Only the opening is logged, with
 * Redis's reason. */
static void failure(int rc)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    int max = max_backoff_ms();
    if (!breaker.down) {
        bool reached = rc == -EAGAIN || rc == -EPROTO || rc == -EACCES;
        ccap_log(CCAP_LOG_WARN, "redis %s (%s): on_redis_down=\"%s\" until it answers",
                 reached ? "cannot serve" : "unreachable",
                 ccap_redis_errstr(ccap_rt.redis)[0] ? ccap_redis_errstr(ccap_rt.redis) : strerror(-rc),
                 cfg->on_redis_down == CCAP_DOWN_OPEN     ? "open"
                 : cfg->on_redis_down == CCAP_DOWN_CLOSED ? "closed"
                                                          : "local");
        breaker.down = true;
        breaker.down_since_ms = ccap_now_ms();
        atomic_store(&breaker.granted, 0);
        atomic_store(&breaker.refused, 0);
        breaker.backoff_ms = CCAP_BREAKER_MIN_MS;
    } else if (breaker.backoff_ms < max) {
        breaker.backoff_ms = breaker.backoff_ms * 2 > max ? max : breaker.backoff_ms * 2;
    }
    /* full jitter over the upper half: avoids a fleet probing in step */
    breaker.retry_at_ms = ccap_now_ms() + breaker.backoff_ms / 2 + ccap_rt_rand32() % (breaker.backoff_ms / 2 + 1);
}

/* Redis answered: close the circuit; the end of an outage is logged once,
 * with what on_redis_down decided meanwhile. */
static void success(void)
{
    if (breaker.down)
        ccap_log(
            CCAP_LOG_WARN,
            "redis reachable again after %lld ms: permits are counted globally "
            "(meanwhile on_redis_down granted %u, refused %u; granted ones are registered at the next heartbeat)",
            ccap_now_ms() - breaker.down_since_ms, atomic_load(&breaker.granted), atomic_load(&breaker.refused));
    breaker.down = false;
    breaker.backoff_ms = 0;
}

/* The process has no descriptor (or memory) left for the connection:
 * Redis was not asked, so it is not down; on_redis_down decides this call
 * alone, and the next one tries Redis again. Said once until a call works. */
static void local_failure(int rc)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    if (breaker.local_logged)
        return;
    breaker.local_logged = true;
    ccap_log(CCAP_LOG_WARN,
             "redis not tried (%s): on_redis_down=\"%s\" decides until a connection to it can be made",
             ccap_redis_errstr(ccap_rt.redis)[0] ? ccap_redis_errstr(ccap_rt.redis) : strerror(-rc),
             cfg->on_redis_down == CCAP_DOWN_OPEN     ? "open"
             : cfg->on_redis_down == CCAP_DOWN_CLOSED ? "closed"
                                                      : "local");
}

void ccap_breaker_note(int rc)
{
    if (rc >= 0 || rc == -ESTALE) { /* -ESTALE: a new master answered (core/redis.h ccap_redis_expect_epoch) */
        success();
        breaker.local_logged = false;
    } else if (rc == -EMFILE || rc == -ENFILE) {
        local_failure(rc);
    } else if (rc != -EINVAL && rc != -ENOMEM && rc != -ENAMETOOLONG) {
        failure(rc);
    }
}

int ccap_breaker_call(int (*call)(void *), void *arg)
{
    if (ccap_breaker_open())
        return -ECONNREFUSED;
    int rc = call(arg);
    ccap_breaker_note(rc);
    return rc;
}
