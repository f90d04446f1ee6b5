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

#endif
