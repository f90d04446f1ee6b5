/* watch.c -- the thread that notices config changes and refreshes resolve = true names; started by the first connect. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include "reload.h"
#include "clock.h"
#include "shim.h"

static pthread_mutex_t w_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t w_cond;
static pthread_once_t w_once = PTHREAD_ONCE_INIT;
static atomic_bool running; /* read without the lock by every connect */
static bool stopping;

static void *watch_main(void *arg)
{
    (void)arg;
    ccap_guard = 1; /* its lookups and connects are the shim's own */
    for (;;) {
        int ms = ccap_live_tick();
        pthread_mutex_lock(&w_lock);
        if (stopping || ms < 0) {
            atomic_store(&running, false);
            pthread_mutex_unlock(&w_lock);
            return NULL;
        }
        struct timespec ts = ccap_deadline_ts(ms);
        while (!stopping && pthread_cond_timedwait(&w_cond, &w_lock, &ts) == 0) {
        }
        pthread_mutex_unlock(&w_lock);
    }
}

static void cond_init(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w_cond, &ca);
    pthread_condattr_destroy(&ca);
}

void ccap_watch_forget(void)
{
    pthread_mutex_init(&w_lock, NULL);
    cond_init();
    atomic_store(&running, false);
    stopping = false;
}

void ccap_watch_start(void)
{
    if (atomic_load_explicit(&running, memory_order_relaxed))
        return;
    pthread_once(&w_once, cond_init);
    pthread_mutex_lock(&w_lock);
    if (!atomic_load(&running) && !stopping) {
        /* a larger stack: getaddrinfo and the config parser run here */
        atomic_store(&running, ccap_shim_spawn(watch_main, NULL, 256 * 1024));
    }
    pthread_mutex_unlock(&w_lock);
}

void ccap_watch_stop(void)
{
    pthread_mutex_lock(&w_lock);
    stopping = true;
    if (atomic_load(&running))
        pthread_cond_broadcast(&w_cond);
    pthread_mutex_unlock(&w_lock);
}
