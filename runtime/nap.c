/* nap.c -- a waiting connect's sleep: a timerfd read in a program's thread (its signals, its cancellation), else a condition. */
#include "nap.h"

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include "clock.h"
#include "park.h"
#include "rt_int.h"

#define NAP_MAX_MS (24LL * 3600 * 1000) /* a sleep without an end is armed a day ahead (and re-armed) */

void ccap_nap_init(struct ccap_nap *n)
{
    pthread_condattr_t a;

    atomic_init(&n->fd, -1);
    atomic_init(&n->kicked, false);
    n->program = false;
    n->shim = false;
    n->on_kick = NULL;
    n->on_kick_arg = NULL;
    n->dev = 0;
    n->ino = 0;
    pthread_mutex_init(&n->mu, NULL);
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&n->cv, &a);
    pthread_condattr_destroy(&a);
}

int ccap_nap_use_fd(struct ccap_nap *n)
{
    struct stat st;
    int fd;

    if (atomic_load(&n->fd) >= 0)
        return 0;
    fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    fd = ccap_park_move_high(fd); /* out of the numbers the program uses */
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    n->dev = st.st_dev;
    n->ino = st.st_ino;
    atomic_store(&n->fd, fd);
    return 0;
}

void ccap_nap_want_fd(struct ccap_nap *n)
{
    n->shim = false;
    n->program = true;
}

void ccap_nap_on_kick(struct ccap_nap *n, void (*fn)(void *), void *arg)
{
    n->on_kick_arg = arg;
    n->on_kick = fn;
}

void ccap_nap_shim(struct ccap_nap *n)
{
    n->shim = true;
}

/* Whether FD is still the timerfd N made (the program may have closed its
 * number and reused it: then it is never read, set or closed again). */
static bool still_ours(const struct ccap_nap *n, int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == n->dev && st.st_ino == n->ino;
}

void ccap_nap_destroy(struct ccap_nap *n)
{
    int fd = atomic_exchange(&n->fd, -1);

    if (fd >= 0 && still_ours(n, fd))
        close(fd);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
}

void ccap_nap_kick(struct ccap_nap *n)
{
    int fd;

    /* the flag first: a sleep that arms after this load sees it (its
     * check comes after its arming, which would clear a timer set here) */
    atomic_store(&n->kicked, true);
    if (n->on_kick) {
        n->on_kick(n->on_kick_arg);
        return;
    }
    fd = atomic_load(&n->fd);
    if (fd >= 0) {
        struct itimerspec now = { .it_value = { 0, 1 } }; /* relative: fires at once */
        timerfd_settime(fd, 0, &now, NULL);
        return;
    }
    pthread_mutex_lock(&n->mu);
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

static struct timespec mono_ts(long long ms)
{
    if (ms < 1)
        return (struct timespec){ 0, 1 }; /* in the past: fires at once (0 would disarm) */
    return (struct timespec){ ms / 1000, (ms % 1000) * 1000000L };
}

/* Without a timerfd: the condition, cancellation left as it is (disabled
 * in a program's thread), signals never seen. */
static int cond_sleep(struct ccap_nap *n, long long until_ms)
{
    struct timespec ts = mono_ts(until_ms);

    pthread_mutex_lock(&n->mu);
    while (!atomic_load(&n->kicked) && ccap_now_ms() < until_ms)
        if (pthread_cond_timedwait(&n->cv, &n->mu, &ts) == ETIMEDOUT)
            break;
    atomic_store(&n->kicked, false);
    pthread_mutex_unlock(&n->mu);
    return 0;
}

/* The blocking read of FD, armed for UNTIL_MS: the thread is the program's
 * meanwhile (a cancellation point, its handlers' calls its own). */
static int fd_sleep(struct ccap_nap *n, int fd, long long until_ms)
{
    long long cap = ccap_now_ms() + NAP_MAX_MS;
    struct itimerspec it = { .it_value = mono_ts(until_ms < cap ? until_ms : cap) };
    uint64_t ticks;
    ssize_t r;
    int e, back;

    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &it, NULL) != 0)
        return cond_sleep(n, until_ms);
    if (atomic_exchange(&n->kicked, false))
        return 0; /* kicked before the arming, which cleared the timer it set */
    back = ccap_rt.hooks.outside ? ccap_rt.hooks.outside() : -1;
    r = read(fd, &ticks, sizeof ticks);
    e = errno;
    if (ccap_rt.hooks.inside)
        ccap_rt.hooks.inside(back);
    atomic_store(&n->kicked, false);
    if (r < 0 && e == EINTR)
        return -EINTR; /* a handler without SA_RESTART: with it, the kernel restarted the read */
    return 0;
}

int ccap_nap_sleep(struct ccap_nap *n, long long until_ms)
{
    int fd = atomic_load(&n->fd);

    if (fd < 0 && n->program) {
        n->program = false; /* one try: a failure sleeps on the condition */
        if (ccap_nap_use_fd(n) == 0)
            fd = atomic_load(&n->fd);
        else
            ccap_log(CCAP_LOG_DEBUG, "no timerfd for a wait: signals and cancellation wait for its end");
    }

    if (fd >= 0 && !still_ours(n, fd)) {
        atomic_store(&n->fd, -1);
        fd = -1;
    }
    return fd >= 0 ? fd_sleep(n, fd, until_ms) : cond_sleep(n, until_ms);
}

#if defined(__SANITIZE_ADDRESS__)
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#define UNWOUND_STACK (32 * 1024) /* more than the frames of a wait's sleep */
#define HANDLER_STACK (64 * 1024) /* the frames above: the wait's, up to the program's */

/* A cleanup handler (core/cleanup.h) runs deep in glibc's unwinder, or in a
 * signal handler before its longjmp, neither of which ASan sees: the frames
 * left or about to be left keep their red zones, which the handler's own
 * calls, and ASan's own where the unwinding lands in the program's frame,
 * would be taken for overflowing. */
static __attribute__((noinline)) void unpoison_below(void)
{
    char here;
    __asan_unpoison_memory_region(&here - UNWOUND_STACK, UNWOUND_STACK + HANDLER_STACK);
}
#else
static void unpoison_below(void) {}
#endif

void ccap_nap_unwinding(void)
{
    unpoison_below();
    if (ccap_rt.hooks.inside)
        ccap_rt.hooks.inside(1);
}

void ccap_nap_unwound(void)
{
    if (ccap_rt.hooks.outside)
        ccap_rt.hooks.outside();
}
