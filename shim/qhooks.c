/* qhooks.c -- the calls a queued connect must answer for: socket options and names, epoll, poll/select, shutdown, syscall(). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "queued.h"
#include "runtime.h"
#include "shim.h"
#include "fast.h"

#define EXPORT __attribute__((visibility("default")))
#define REAL CCAP_REAL

/* Each hook: a descriptor that is not the queue's (ccap_q_maybe: one load
 * while nothing is queued) goes straight to the real call (Q_FAST: loaded
 * first, a tail call, no register saved); otherwise, out of line (Q_CALL),
 * one call of runtime/queued.c, its -errno made errno. */
#define Q_FAST(fn, fd, args, slow)                                                                                  \
    do {                                                                                                            \
        __typeof__(ccap_real.fn) real_ = CCAP_REAL_LOAD(fn);                                                        \
        if (__builtin_expect(real_ && (!ccap_q_maybe(fd) || ccap_guard), 1))                                        \
            return real_ args;                                                                                      \
        return slow args;                                                                                           \
    } while (0)
#define SLOW static __attribute__((noinline))

#define Q_CALL(fd, real_call, q_call)                                                                               \
    do {                                                                                                            \
        if (ccap_guard || !ccap_q_maybe(fd))                                                                        \
            return real_call;                                                                                       \
        int rc_;                                                                                                    \
        GUARDED(rc_ = q_call);                                                                                      \
        if (rc_ < 0) {                                                                                              \
            errno = -rc_;                                                                                           \
            return -1;                                                                                              \
        }                                                                                                           \
        return rc_;                                                                                                 \
    } while (0)

SLOW int setsockopt_slow(int fd, int level, int name, const void *val, socklen_t len)
{
    Q_CALL(fd, REAL(setsockopt)(fd, level, name, val, len), ccap_q_setsockopt(fd, level, name, val, len));
}

EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    Q_FAST(setsockopt, fd, (fd, level, name, val, len), setsockopt_slow);
}

SLOW int getsockopt_slow(int fd, int level, int name, void *val, socklen_t *len)
{
    Q_CALL(fd, REAL(getsockopt)(fd, level, name, val, len), ccap_q_getsockopt(fd, level, name, val, len));
}

EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    Q_FAST(getsockopt, fd, (fd, level, name, val, len), getsockopt_slow);
}

SLOW int getsockname_slow(int fd, struct sockaddr *sa, socklen_t *len)
{
    Q_CALL(fd, REAL(getsockname)(fd, sa, len), ccap_q_getsockname(fd, sa, len));
}

EXPORT int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
    Q_FAST(getsockname, fd, (fd, sa, len), getsockname_slow);
}

SLOW int epoll_ctl_slow(int epfd, int op, int fd, struct epoll_event *ev)
{
    Q_CALL(fd, REAL(epoll_ctl)(epfd, op, fd, ev), ccap_q_epoll_ctl(epfd, op, fd, ev));
}

EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    Q_FAST(epoll_ctl, fd, (epfd, op, fd, ev), epoll_ctl_slow);
}

/* A shutdown of a connecting socket disconnects it: a queued connect ends,
 * the program's socket is back on the number, unconnected, and the shutdown
 * is done (a valid HOW). */
SLOW int shutdown_slow(int fd, int how)
{
    if (!ccap_guard && ccap_q_maybe(fd) && how >= SHUT_RD && how <= SHUT_RDWR) {
        int e = errno, done;
        GUARDED(done = ccap_q_shutdown(fd));
        errno = e;
        if (done)
            return 0;
    }
    return REAL(shutdown)(fd, how);
}

EXPORT int shutdown(int fd, int how)
{
    Q_FAST(shutdown, fd, (fd, how), shutdown_slow);
}

/* New epoll descriptors are remembered: a swap re-registers its number in
 * every set it is in (the program may add a socket before connecting). */
static int epoll_made(int epfd)
{
    ccap_q_epoll_created(epfd);
    return epfd;
}

EXPORT int epoll_create(int size)
{
    return epoll_made(REAL(epoll_create)(size));
}

EXPORT int epoll_create1(int flags)
{
    return epoll_made(REAL(epoll_create1)(flags));
}

/* The program's poll inside the queue's: a sleep of the program's, as a
 * wait's (no guard, its cancellation state and mask: a signal handler's
 * connect or close meanwhile is the program's). */
static int real_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
    int back = ccap_shim_outside(), r = REAL(ppoll)(fds, n, tmo, mask), e = errno;
    ccap_shim_inside(back);
    errno = e;
    return r;
}

/* Some descriptor of FDS is queued: the queue's poll, the shim's work but
 * for the program's poll inside it (its joining and leaving of the queued
 * connects take the queue's lock: a handler's poll or close there would
 * wait for it forever). */
static int q_poll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
    int rc;
    GUARDED(rc = ccap_q_poll(fds, n, tmo, mask, real_ppoll));
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    return rc;
}

static struct timespec ms_ts(int ms)
{
    return (struct timespec){ ms / 1000, (ms % 1000) * 1000000L };
}

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (ccap_guard || !ccap_q_any())
        return REAL(poll)(fds, n, timeout);
    struct timespec ts = ms_ts(timeout);
    return q_poll(fds, n, timeout < 0 ? NULL : &ts, NULL);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
    if (ccap_guard || !ccap_q_any())
        return REAL(ppoll)(fds, n, tmo, mask);
    return q_poll(fds, n, tmo, mask);
}

/* _FORTIFY_SOURCE's checked poll/ppoll (an array of known size). */
EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
    if (ccap_guard || !ccap_q_any())
        return REAL(__poll_chk)(fds, n, timeout, fdslen);
    if (fdslen / sizeof *fds < n)
        return REAL(__poll_chk)(fds, n, timeout, fdslen); /* its own failure */
    return poll(fds, n, timeout);
}

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask, size_t fdslen)
{
    if (ccap_guard || !ccap_q_any() || fdslen / sizeof *fds < n)
        return REAL(__ppoll_chk)(fds, n, tmo, mask, fdslen);
    return q_poll(fds, n, tmo, mask);
}

/* True if a descriptor below NFDS in one of the sets is queued. */
static bool sets_queued(int nfds, const fd_set *r, const fd_set *w, const fd_set *x)
{
    for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++)
        if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (x && FD_ISSET(fd, x))) && ccap_q_maybe(fd))
            return true;
    return false;
}

static int q_select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timespec *tmo, const sigset_t *mask)
{
    int rc;
    GUARDED(rc = ccap_q_select(nfds, r, w, x, tmo, mask, real_ppoll));
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    return rc;
}

/* The slow paths out of line: the hooks' fast path stays a tail call. */
static __attribute__((noinline)) int select_queued(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
    struct timespec ts = tv ? (struct timespec){ tv->tv_sec, tv->tv_usec * 1000L } : (struct timespec){ 0, 0 };
    int rc = q_select(nfds, r, w, x, tv ? &ts : NULL, NULL);
    if (tv && rc >= 0)
        *tv = (struct timeval){ ts.tv_sec, ts.tv_nsec / 1000 };
    return rc;
}

static __attribute__((noinline)) int pselect_queued(int nfds, fd_set *r, fd_set *w, fd_set *x,
                                                    const struct timespec *tmo, const sigset_t *mask)
{
    struct timespec ts = tmo ? *tmo : (struct timespec){ 0, 0 };
    return q_select(nfds, r, w, x, tmo ? &ts : NULL, mask); /* pselect leaves its timeout as it was */
}

/* Five and six arguments: the fast path loads the real symbol first, so
 * that nothing is called before the tail call (no argument saved). */
EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
    int (*real)(int, fd_set *, fd_set *, fd_set *, struct timeval *) = CCAP_REAL_LOAD(select);
    if (__builtin_expect(real && (ccap_guard || !ccap_q_any()), 1))
        return real(nfds, r, w, x, tv);
    if (ccap_guard || !ccap_q_any() || !sets_queued(nfds, r, w, x))
        return REAL(select)(nfds, r, w, x, tv);
    return select_queued(nfds, r, w, x, tv);
}

EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *x, const struct timespec *tmo, const sigset_t *mask)
{
    int (*real)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *) =
        CCAP_REAL_LOAD(pselect);
    if (__builtin_expect(real && (ccap_guard || !ccap_q_any()), 1))
        return real(nfds, r, w, x, tmo, mask);
    if (ccap_guard || !ccap_q_any() || !sets_queued(nfds, r, w, x))
        return REAL(pselect)(nfds, r, w, x, tmo, mask);
    return pselect_queued(nfds, r, w, x, tmo, mask);
}

/* The raw system call, for syscall() before the real one is resolved (an
 * allocator's early call must not enter dlsym). */
static long raw_syscall(long nr, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    if (ret < 0 && ret > -4096) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
#else
    return REAL(syscall)(nr, a, b, c, d, e, f);
#endif
}

static long next_syscall(long nr, long a, long b, long c, long d, long e, long f)
{
    long (*real)(long, ...) = CCAP_REAL_LOAD(syscall);
    return real ? real(nr, a, b, c, d, e, f) : raw_syscall(nr, a, b, c, d, e, f);
}

static int sys_close(int fd)
{
    return (int)next_syscall(SYS_close, fd, 0, 0, 0, 0, 0);
}

/* libuv (node) closes with syscall(SYS_close): routed as close() is, so a
 * permit or a queued connect is seen to end at once. Every other call
 * passes through with its six argument registers, as glibc's own does. On
 * x86_64 and aarch64 a variadic call passes integers as a fixed one does,
 * so the hook takes them as fixed arguments (no va_list on the hot path;
 * an argument the caller did not pass is whatever its register held, as in
 * glibc). Its C name differs from <unistd.h>'s prototype; the symbol is
 * syscall. */
#if defined(__x86_64__) || defined(__aarch64__)
EXPORT long hook_syscall(long nr, long a, long b, long c, long d, long e, long f) __asm__("syscall");
EXPORT long hook_syscall(long nr, long a, long b, long c, long d, long e, long f)
{
    if (__builtin_expect(nr == SYS_close, 0) && !plain_fd((int)a, true) && !ccap_guard)
        return ccap_shim_close((int)a, sys_close);
    return next_syscall(nr, a, b, c, d, e, f);
}
#else
EXPORT long syscall(long nr, ...)
{
    va_list ap;
    long a[6];

    va_start(ap, nr);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_close && !plain_fd((int)a[0], true) && !ccap_guard)
        return ccap_shim_close((int)a[0], sys_close);
    return next_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
#endif
