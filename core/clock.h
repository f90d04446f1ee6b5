/* clock.h -- the monotonic clock every module measures deadlines and ages with. */
#ifndef CCAP_CLOCK_H
#define CCAP_CLOCK_H

#include <time.h>

/* Milliseconds of CLOCK_MONOTONIC: deadlines, timeouts, waits. Never goes
 * back, is not changed by settimeofday; async-signal-safe; thread-safe. */
static inline long long ccap_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds of CLOCK_MONOTONIC_COARSE (a few ms coarse, cheaper: no
 * syscall, no TSC read): for rate limits and polling intervals only. */
static inline long long ccap_now_coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CLOCK_MONOTONIC time MS (>= 0) milliseconds from now, as the
 * absolute deadline of a pthread_cond_timedwait on a condition variable
 * made with pthread_condattr_setclock(CLOCK_MONOTONIC). Thread-safe. */
static inline struct timespec ccap_deadline_ts(long long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

#endif
