/* later.c -- when the shim's threads start: the watch thread when first due, the heartbeat lazily if asked. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "clock.h"
#include "env.h"
#include "permit.h"
#include "reload.h"
#include "shim.h"

/* CLOCK_MONOTONIC_COARSE ms at which a thread is owed (0: none): the
 * earliest of the two below. Read by every hook (ccap_later_poll). */
_Atomic long long ccap_later_at;
static _Atomic long long hb_at, watch_at;
static atomic_bool watch_started; /* it runs (or ran): not owed again */

/* Sets ccap_later_at to the earliest of hb_at and watch_at. Every writer
 * of those calls it after its write: the last call to finish has seen the
 * last values (a CAS made with sources that changed meanwhile is redone). */
static void refresh(void)
{
    for (;;) {
        long long h = atomic_load(&hb_at), w = atomic_load(&watch_at);
        long long next = h && w ? (h < w ? h : w) : h ? h : w;
        long long cur = atomic_load(&ccap_later_at);
        if (cur != next && !atomic_compare_exchange_strong(&ccap_later_at, &cur, next))
            continue;
        if (h == atomic_load(&hb_at) && w == atomic_load(&watch_at))
            return;
    }
}

/* Lowers *AT to WHEN (if unset or later). */
static void owe(_Atomic long long *at, long long when)
{
    long long cur = atomic_load(at);
    while ((!cur || when < cur) && !atomic_compare_exchange_weak(at, &cur, when)) {
    }
    refresh();
}

static long long born_ms; /* when the shim was loaded: the process's age */

__attribute__((constructor)) static void later_born(void)
{
    born_ms = ccap_now_coarse_ms();
}

/* CONNCAP_HEARTBEAT=lazy: a short-lived process starts no heartbeat (see
 * doc/shortlived.md for what that costs programs that hold a connection
 * silently). Read once; a race reads the same value. */
static bool lazy(void)
{
    static atomic_int mode = -1;
    int m = atomic_load_explicit(&mode, memory_order_relaxed);
    if (m < 0) {
        const char *v = ccap_env_get("CONNCAP_HEARTBEAT");
        atomic_store_explicit(&mode, m = v && !strcmp(v, "lazy"), memory_order_relaxed);
    }
    return m;
}

/* A permit with a lease of LEASE_MS was taken. The heartbeat starts, its
 * first beat at the permit's first renewal (a third of the lease, the
 * heartbeat's period): a permit given back before that costs no renewal.
 * With CONNCAP_HEARTBEAT=lazy, in a process younger than that renewal, the
 * heartbeat is only owed from then on, at the first interposed call: a
 * permit given back before that costs no thread either (a shell loop's
 * curl). An older process is not short-lived: its heartbeat starts as
 * above. A running thread is only kicked, as before (its first beat is
 * not brought forward). */
void ccap_later_heartbeat(int lease_ms)
{
    long long now = ccap_now_coarse_ms(), renew = lease_ms / 3 > 50 ? lease_ms / 3 : 50;
    if (ccap_heartbeat_running() || !lazy() || now - born_ms >= renew) {
        ccap_heartbeat_start_in((int)renew);
    } else {
        owe(&hb_at, now + renew);
    }
}

/* The heartbeat, unless every permit was given back meanwhile. */
static void start_heartbeat(void)
{
    if (!ccap_ptab_empty())
        ccap_heartbeat_start();
}

/* The configuration is used by a connect (before it is matched): the
 * reload/resolve thread is owed now when resolve = true names must be
 * looked up before rules apply (a connect waits for that), else when the
 * configuration file is first due to be checked (CCAP_WATCH_PERIOD_MS).
 * A heartbeat owed starts now: this connect may wait for a permit (up to
 * wait_timeout_ms) while the process holds one, and nothing else would
 * start it meanwhile. */
void ccap_later_watch(void)
{
    const struct ccap_config *cfg = ccap_live_current();
    long long h = atomic_load_explicit(&hb_at, memory_order_relaxed);
    if (h && atomic_compare_exchange_strong(&hb_at, &h, 0)) {
        start_heartbeat();
        refresh();
    }
    if (atomic_load_explicit(&watch_started, memory_order_relaxed))
        return;
    if (cfg && cfg->has_resolve) {
        atomic_store(&watch_started, true);
        ccap_watch_start();
        return;
    }
    if (!atomic_load_explicit(&watch_at, memory_order_relaxed))
        owe(&watch_at, ccap_now_coarse_ms() + CCAP_WATCH_PERIOD_MS);
}

/* Starts the thread *AT owes if it is due by NOW. */
static void start_due(_Atomic long long *at, long long now, void (*start)(void))
{
    long long when = atomic_load(at);
    if (when && when <= now && atomic_compare_exchange_strong(at, &when, 0))
        start();
}

static void start_watch(void)
{
    atomic_store(&watch_started, true);
    ccap_watch_start();
}

void ccap_later_run(void)
{
    int e = errno;
    long long now = ccap_now_coarse_ms();
    GUARDED(start_due(&hb_at, now, start_heartbeat); start_due(&watch_at, now, start_watch); refresh());
    errno = e;
}

void ccap_later_forget(void)
{
    atomic_store(&hb_at, 0);
    atomic_store(&watch_at, 0);
    atomic_store(&watch_started, false);
    atomic_store(&ccap_later_at, 0);
}
