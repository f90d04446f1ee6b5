/* heartbeat.c -- the thread that renews leases; started with the first permit, its first beat at the renewal (see later.c). */
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>
#include "runtime.h"
#include "clock.h"
#include "shim.h"

static pthread_mutex_t hb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hb_cond;
static bool hb_cond_ready;
static atomic_bool running;  /* written under hb_lock */
static atomic_bool stopping; /* read by the thread between beats, without the lock */
static unsigned long kicks;
static int first_ms;               /* the thread's wait before its first beat (ccap_heartbeat_start_in) */
static unsigned long urgent;       /* starts that want a beat at once (ccap_heartbeat_start) */
static unsigned long first_urgent; /* urgent when it was started: a later one ends that wait */

/* Before the first beat of a thread started by ccap_heartbeat_start_in:
 * waits FIRST_MS, unless ccap_heartbeat_start or the stop comes first.
 * Under hb_lock. */
static void first_wait(void)
{
    if (first_ms <= 0)
        return;
    struct timespec ts = ccap_deadline_ts(first_ms);
    while (!stopping && urgent == first_urgent && pthread_cond_timedwait(&hb_cond, &hb_lock, &ts) == 0) {
    }
    first_ms = 0;
}

static void *hb_main(void *arg)
{
    (void)arg;
    ccap_guard = 1; /* everything this thread does is the shim's own */
    pthread_mutex_lock(&hb_lock);
    first_wait();
    pthread_mutex_unlock(&hb_lock);
    for (;;) {
        pthread_mutex_lock(&hb_lock);
        unsigned long seen = kicks;
        pthread_mutex_unlock(&hb_lock);
        int ms = atomic_load(&stopping) ? -1 : ccap_rt_heartbeat();
        pthread_mutex_lock(&hb_lock);
        if (stopping || (ms < 0 && seen == kicks)) {
            running = false;
            pthread_mutex_unlock(&hb_lock);
            return NULL;
        }
        if (ms > 0) {
            struct timespec ts = ccap_deadline_ts(ms);
            while (!stopping && pthread_cond_timedwait(&hb_cond, &hb_lock, &ts) == 0) {
            }
        }
        pthread_mutex_unlock(&hb_lock);
    }
}

bool ccap_heartbeat_running(void)
{
    return atomic_load(&running);
}

/* Starts the thread, its first beat in FIRST (ms; 0: at once), or kicks
 * the running one (FIRST 0 also ends its first wait). Under hb_lock. */
static void start_locked(int first)
{
    kicks++;
    if (!first) {
        urgent++;
        if (running)
            pthread_cond_broadcast(&hb_cond); /* ends a first wait; a beat's wait ignores it */
    }
    if (running)
        return;
    if (stopping)
        return;
    if (!hb_cond_ready) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&hb_cond, &ca);
        pthread_condattr_destroy(&ca);
        hb_cond_ready = true;
    }
    first_ms = first;
    first_urgent = urgent;
    running = ccap_shim_spawn(hb_main, NULL, 128 * 1024);
}

void ccap_heartbeat_start(void)
{
    pthread_mutex_lock(&hb_lock);
    start_locked(0);
    pthread_mutex_unlock(&hb_lock);
}

void ccap_heartbeat_start_in(int ms)
{
    pthread_mutex_lock(&hb_lock);
    start_locked(ms);
    pthread_mutex_unlock(&hb_lock);
}

struct tramp {
    void *(*fn)(void *);
    void *arg;
};

/* A guarded thread's start: every call it makes is the shim's own. */
static void *tramp_main(void *a)
{
    struct tramp t = *(struct tramp *)a;
    free(a);
    ccap_guard = 1;
    return t.fn(t.arg);
}

bool ccap_shim_spawn_guarded(void *(*fn)(void *), void *arg)
{
    struct tramp *t = malloc(sizeof *t);
    if (!t)
        return false;
    *t = (struct tramp){ fn, arg };
    if (ccap_shim_spawn(tramp_main, t, 128 * 1024))
        return true;
    free(t);
    return false;
}

bool ccap_shim_spawn(void *(*fn)(void *), void *arg, size_t stack)
{
    /* The thread must not take the program's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, stack);
    pthread_t t;
    bool ok = pthread_create(&t, &a, fn, arg) == 0;
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

void ccap_heartbeat_stop(void)
{
    pthread_mutex_lock(&hb_lock);
    stopping = true;
    if (hb_cond_ready)
        pthread_cond_broadcast(&hb_cond);
    pthread_mutex_unlock(&hb_lock);
}

void ccap_heartbeat_forget(void)
{
    /* Only the forking thread exists in the child; the lock may have been
     * held by the heartbeat thread at fork time, so start it afresh. */
    pthread_mutex_init(&hb_lock, NULL);
    hb_cond_ready = false;
    running = false;
    stopping = false;
    first_ms = 0;
    ccap_later_forget();
}
