/* lifecycle.c -- the one place fork() is routed: a single pthread_atfork registration calling every module in order. */
#include <pthread.h>
#include "breaker.h"
#include "handoff.h"
#include "permit.h"
#include "queued.h"
#include "redis.h"
#include "reload.h"
#include "rt_int.h"
#include "wait.h"
#include "waiting.h"

/* The order, and why:
 *   prepare: the queued connects' lock -> the waits' -> waiters' pool -> live configuration (its lock, then the name
 *            map's) -> the runtime's rlock -> permit table.
 *            Outer locks first: a thread holding rlock never takes the
 *            reload lock or the pool's, so this order cannot deadlock.
 *   parent:  the reverse of prepare (each unlocks what it locked).
 *   child:   runtime first -- its rlock is made afresh before anything
 *            that may close a descriptor (a close at the Redis descriptor's
 *            number takes rlock), then the owner (the child owns its own,
 *            empty, state), the permit table, the Redis client, counters,
 *            breaker, holder nonce, exec hand-over -- then the live
 *            configuration, the shim's threads (hooks.fork_child: the
 *            heartbeat and watch threads are gone; the shim replaces
 *            the queued connects' descriptors, ccap_q_fork_child), core's Redis fork
 *            counter, and the waiters' pool last.
 * Each handler is safe when its module was never used. */
static void fork_prepare(void)
{
    ccap_q_fork_prepare();
    ccap_rt_waits_fork_prepare();
    ccap_wait_fork_prepare();
    ccap_live_fork_prepare();
    pthread_mutex_lock(&ccap_rt.rlock);
    ccap_ptab_fork_prepare();
}

static void fork_parent(void)
{
    ccap_ptab_fork_parent();
    pthread_mutex_unlock(&ccap_rt.rlock);
    ccap_live_fork_parent();
    ccap_wait_fork_parent();
    ccap_rt_waits_fork_parent();
    ccap_q_fork_parent();
}

static void fork_child(void)
{
    pthread_mutex_init(&ccap_rt.rlock, NULL);
    ccap_rt_owner_fork_child();
    ccap_ptab_fork_child();
    ccap_rt_state_fork_child();
    ccap_breaker_fork_child();
    ccap_rt_ident_fork_child();
    ccap_handoff_fork_child();
    ccap_live_fork_child();
    if (ccap_rt.hooks.fork_child)
        ccap_rt.hooks.fork_child();
    ccap_redis_fork_child();
    ccap_wait_fork_child();
    ccap_rt_waits_fork_child();
}

void ccap_rt_lifecycle_init(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
