/* hooks.c -- the interposed socket calls: guard, classify, one runtime call, errno. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "runtime.h"
#include "handoff.h"
#include "queued.h"
#include "shim.h"
#include "fast.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define EXPORT __attribute__((visibility("default")))
#define LOAD CCAP_REAL_LOAD
#define REAL CCAP_REAL
/* Every hook: permits handed over by an exec are adopted at the first
 * interposed call of any kind, so they are renewed even if the new image
 * never connects again (one relaxed load when nothing waits); a thread
 * that came due starts (see ccap_later_poll). Never inside the guard: the
 * shim's own calls (its threads, its Redis I/O under its locks, a
 * sanitizer's report reading the binary) must not start threads. */
#define FIRST_NEED()                                                                                                \
    do {                                                                                                            \
        if (ccap_guard)                                                                                             \
            break;                                                                                                  \
        if (__builtin_expect(ccap_handoff_waiting(), 0))                                                            \
            ccap_shim_adopt();                                                                                      \
        ccap_later_poll();                                                                                          \
    } while (0)

__thread int ccap_guard __attribute__((tls_model("initial-exec")));
__thread int ccap_prog_cancel __attribute__((tls_model("initial-exec"))) = -1;
void ccap_shim_adopt(void)
{
    if (ccap_guard)
        return;
    int e = errno;
    GUARDED(ccap_handoff_adopt());
    errno = e;
}

/* connect(), close() and a Fast Open send are cancellation points: a cancel
 * pending when the program calls one acts here, before the shim does
 * anything, as glibc acts on it on entry (nothing sent, nothing closed).
 * From then on the shim's own work runs with cancellation disabled
 * (GUARDED), so a cancel arriving later acts in a wait's sleep (with its
 * cleanup: runtime/nap.h), or at the program's next cancellation point. */
#if defined(__SANITIZE_ADDRESS__)
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
/* A cancel acting here unwinds the hook's frame without its return, whose
 * red zones ASan would then find under its own landing in the program's
 * frame (a CHECK failure in its sigaltstack interceptor): unpoisoned first. */
static __attribute__((noinline)) void cancel_point(void)
{
    char here;
    __asan_unpoison_memory_region(&here, 8192);
    pthread_testcancel();
}
#define CANCEL_POINT() cancel_point()
#else
#define CANCEL_POINT() pthread_testcancel()
#endif

/* close() must work before anything is resolved (an allocator's or another
 * library's constructor may call it first): fall back to the system call. */
static int real_close(int fd)
{
    int (*c)(int) = LOAD(close);
    return c ? c(fd) : (int)syscall(SYS_close, fd);
}

/* Shared by connect() and the TCP Fast Open sends: take a permit for a
 * matched destination (or queue a non-blocking connect: in progress, the
 * queue makes the real call), run the call, give the permit back if it
 * failed. The Fast Open sends never queue: their data goes with the SYN. */
#define WITH_PERMIT(fd, sa, len, may_queue, call, ok)                                                               \
    do {                                                                                                            \
        struct ccap_ticket t_;                                                                                      \
        int saved_ = errno, rc_;                                                                                    \
        GUARDED_LIGHT(rc_ = ccap_rt_connect_pre(fd, sa, len, may_queue, &t_));                                      \
        if (rc_ < 0 || rc_ == CCAP_RT_QUEUED || rc_ == CCAP_RT_INTERRUPTED) {                                       \
            errno = rc_ < 0 ? -rc_ : rc_ == CCAP_RT_QUEUED ? EINPROGRESS : EINTR;                                   \
            return -1;                                                                                              \
        }                                                                                                           \
        errno = saved_;                                                                                             \
        __typeof__(call) r_ = call;                                                                                 \
        int e_ = errno;                                                                                             \
        if (t_.permit) /* else nothing to undo */                                                                   \
            GUARDED(ccap_rt_connect_post(fd, &t_, (ok) ? 0 : -1, e_));                                              \
        errno = e_;                                                                                                 \
        return r_;                                                                                                  \
    } while (0)

EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (ccap_guard)
        return REAL(connect)(fd, sa, len);
    CANCEL_POINT();
    FIRST_NEED();
    if (ccap_q_maybe(fd)) { /* a queued connect: EALREADY (a blocking one waits), or its failure once */
        int q;
        GUARDED(q = ccap_q_connect(fd));
        if (q < 0) {
            errno = -q;
            return -1;
        }
    }
    WITH_PERMIT(fd, sa, len, true, REAL(connect)(fd, sa, len), r_ == 0);
}

/* The Fast Open sends: a send without MSG_FASTOPEN, nothing owed, is only
 * the real call (SEND_FAST: loaded first, a tail call). */
#define SEND_FAST(fn, flags, args, slow)                                                                            \
    do {                                                                                                            \
        __typeof__(ccap_real.fn) real_ = LOAD(fn);                                                                  \
        if (__builtin_expect(real_ && !(flags & MSG_FASTOPEN) && nothing_owed(), 1))                                \
            return real_ args;                                                                                      \
        return slow args;                                                                                           \
    } while (0)

static __attribute__((noinline)) ssize_t sendto_slow(int fd, const void *buf, size_t n, int flags,
                                                     const struct sockaddr *sa, socklen_t len)
{
    FIRST_NEED();
    if (ccap_guard || !(flags & MSG_FASTOPEN) || !sa)
        return REAL(sendto)(fd, buf, n, flags, sa, len);
    CANCEL_POINT();
    WITH_PERMIT(fd, sa, len, false, REAL(sendto)(fd, buf, n, flags, sa, len), r_ >= 0);
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len)
{
    SEND_FAST(sendto, flags, (fd, buf, n, flags, sa, len), sendto_slow);
}

static __attribute__((noinline)) ssize_t sendmsg_slow(int fd, const struct msghdr *m, int flags)
{
    FIRST_NEED();
    if (ccap_guard || !(flags & MSG_FASTOPEN) || !m || !m->msg_name)
        return REAL(sendmsg)(fd, m, flags);
    CANCEL_POINT();
    WITH_PERMIT(fd, m->msg_name, m->msg_namelen, false, REAL(sendmsg)(fd, m, flags), r_ >= 0);
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    SEND_FAST(sendmsg, flags, (fd, m, flags), sendmsg_slow);
}

/* The kernel sends the messages one by one: the first one's msg_name is the
 * destination the Fast Open connect goes to, and sendmmsg fails (-1) only
 * when that first message failed; once it is sent the socket is connected
 * and the others need no permit. */
static __attribute__((noinline)) int sendmmsg_slow(int fd, struct mmsghdr *v, unsigned n, int flags)
{
    FIRST_NEED();
    if (ccap_guard || !(flags & MSG_FASTOPEN) || !v || !n || !v[0].msg_hdr.msg_name)
        return REAL(sendmmsg)(fd, v, n, flags);
    WITH_PERMIT(fd, v[0].msg_hdr.msg_name, v[0].msg_hdr.msg_namelen, false, REAL(sendmmsg)(fd, v, n, flags),
                r_ >= 1);
}

EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
    SEND_FAST(sendmmsg, flags, (fd, v, n, flags), sendmmsg_slow);
}

/* A close of the shim's own Redis descriptor waits for any Redis call in
 * flight, so that the shim never writes to a file put on that number. That
 * close holds the shim's Redis lock: it runs with cancellation disabled (a
 * cancel pending acts before it, as on glibc's close). */
static int close_untracked(int fd, int (*real)(int))
{
    if (!ccap_rt_own_fd_maybe((unsigned)fd))
        return real(fd);
    CANCEL_POINT();
    int cs;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
    bool l = ccap_rt_own_fd_begin((unsigned)fd, (unsigned)fd);
    int rc = real(fd), e = errno;
    ccap_rt_own_fd_end(l);
    pthread_setcancelstate(cs, NULL);
    errno = e;
    return rc;
}

/* FD is about to stop referring to what it refers to: a queued connect
 * forgets it (its wait ends with its last number). */
static void q_forget(int fd)
{
    if (ccap_q_maybe(fd)) {
        int e = errno;
        GUARDED(ccap_q_forget(fd));
        errno = e;
    }
}

/* close(), and the raw close of syscall(SYS_close): REAL closes. From
 * forgetting the descriptor's permit to giving it back, one piece of the
 * shim's work: no cancel can end the thread with the permit taken out of
 * the table and never released. */
int ccap_shim_close(int fd, int (*real)(int))
{
    bool tracked = ccap_ptab_maybe(fd);
    if (tracked || ccap_q_maybe(fd))
        CANCEL_POINT();
    q_forget(fd);
    if (!tracked)
        return close_untracked(fd, real);
    int saved = errno, rc, e;
    struct ccap_permit *p;
    GUARDED(p = ccap_rt_close_pre(fd); errno = saved; rc = real(fd); e = errno; ccap_rt_release(p));
    errno = e;
    return rc;
}

static __attribute__((noinline)) int close_slow(int fd)
{
    if (ccap_guard)
        return real_close(fd);
    FIRST_NEED();
    return ccap_shim_close(fd, real_close);
}

EXPORT int close(int fd)
{
    int (*c)(int) = LOAD(close);
    if (__builtin_expect(c && plain_fd(fd, true), 1)) /* the guard's calls too: the slow path sees it */
        return c(fd);
    return close_slow(fd);
}

/* glibc closes the descriptor inside fclose without calling close(). */
static __attribute__((noinline)) int fclose_slow(FILE *fp)
{
    if (ccap_guard)
        return REAL(fclose)(fp);
    FIRST_NEED();
    int fd = fp ? fileno(fp) : -1;
    if (ccap_q_maybe(fd) || ccap_ptab_maybe(fd))
        CANCEL_POINT();
    q_forget(fd);
    if (!ccap_ptab_maybe(fd))
        return REAL(fclose)(fp);
    struct ccap_permit *p;
    int saved = errno, rc, e;
    GUARDED(p = ccap_rt_close_pre(fd); errno = saved; rc = REAL(fclose)(fp); e = errno; ccap_rt_release(p));
    errno = e;
    return rc;
}

EXPORT int fclose(FILE *fp)
{
    int (*f)(FILE *) = LOAD(fclose);
    if (__builtin_expect(f && fp && plain_fd(fileno_unlocked(fp), true), 1))
        return f(fp);
    return fclose_slow(fp);
}

/* After a successful dup: NEWFD shares OLDFD's permit; whatever NEWFD held
 * before is given back (it was closed by the call). */
static int after_dup(int oldfd, int newfd)
{
    if (newfd >= 0 && !ccap_guard && ccap_q_maybe(oldfd)) {
        int e = errno;
        GUARDED(ccap_q_dup(oldfd, newfd));
        errno = e;
    }
    if (newfd < 0 || ccap_guard || (!ccap_ptab_maybe(oldfd) && !ccap_ptab_maybe(newfd)))
        return newfd;
    int e = errno;
    GUARDED(ccap_rt_release_list(ccap_rt_dup(oldfd, newfd)));
    errno = e;
    return newfd;
}

/* dup2/dup3 may put another file on the shim's own descriptor: as close(). */
#define ONTO(fd2, call)                                                                                             \
    do {                                                                                                            \
        if (ccap_guard)                                                                                             \
            return call;                                                                                            \
        FIRST_NEED();                                                                                               \
        if ((fd2) != fd)                                                                                            \
            q_forget(fd2);                                                                                          \
        bool l_ = ccap_ptab_maybe(fd2) ? false : ccap_rt_own_fd_begin((unsigned)(fd2), (unsigned)(fd2));            \
        int r_ = call, e_ = errno;                                                                                  \
        ccap_rt_own_fd_end(l_);                                                                                     \
        errno = e_;                                                                                                 \
        return after_dup(fd, r_);                                                                                   \
    } while (0)

/* The slow paths, out of line: a hook's fast path (plain_fd) stays a tail
 * call of the real function. A dup of a plain descriptor needs no after_dup:
 * the new number's stale entry, if any (a counted socket closed behind the
 * shim's back), is dropped by the identity check of whoever looks next. */
static __attribute__((noinline)) int dup_slow(int fd)
{
    FIRST_NEED();
    return after_dup(fd, REAL(dup)(fd));
}

static __attribute__((noinline)) int dup2_slow(int fd, int fd2)
{
    ONTO(fd2, REAL(dup2)(fd, fd2));
}

static __attribute__((noinline)) int dup3_slow(int fd, int fd2, int flags)
{
    ONTO(fd2, REAL(dup3)(fd, fd2, flags));
}

EXPORT int dup(int fd)
{
    int (*d)(int) = LOAD(dup);
    if (__builtin_expect(d && plain_fd(fd, false), 1))
        return d(fd);
    return dup_slow(fd);
}

EXPORT int dup2(int fd, int fd2)
{
    int (*d)(int, int) = LOAD(dup2);
    if (__builtin_expect(d && plain_fd(fd, false) && untracked_fd(fd2, true), 1))
        return d(fd, fd2);
    return dup2_slow(fd, fd2);
}

EXPORT int dup3(int fd, int fd2, int flags)
{
    int (*d)(int, int, int) = LOAD(dup3);
    if (__builtin_expect(d && plain_fd(fd, false) && untracked_fd(fd2, true), 1))
        return d(fd, fd2, flags);
    return dup3_slow(fd, fd2, flags);
}

static __attribute__((noinline)) int fcntl_slow(bool is64, int fd, int cmd, void *arg)
{
    int (*real)(int, int, ...) = is64 && REAL(fcntl64) ? LOAD(fcntl64) : REAL(fcntl);
    FIRST_NEED();
    int rc = real(fd, cmd, arg);
    return cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC ? after_dup(fd, rc) : rc;
}

/* fcntl's third argument is an int, a pointer or absent: passing it on as
 * a pointer-sized value is what glibc's own wrappers do. On x86_64 and
 * aarch64 a variadic call passes it as a fixed argument would, so the hooks
 * take it as one (no va_list on the fast path). They carry explicit symbol
 * names because <fcntl.h> may redirect fcntl to fcntl64. */
#if defined(__x86_64__) || defined(__aarch64__)
#define FCNTL_PARAMS int fd, int cmd, void *arg
#define FCNTL_ARG() (void)0
#else
#define FCNTL_PARAMS int fd, int cmd, ...
#define FCNTL_ARG()                                                                                                 \
    va_list ap;                                                                                                     \
    va_start(ap, cmd);                                                                                              \
    void *arg = va_arg(ap, void *);                                                                                 \
    va_end(ap)
#endif
EXPORT int hook_fcntl(FCNTL_PARAMS) __asm__("fcntl");
EXPORT int hook_fcntl64(FCNTL_PARAMS) __asm__("fcntl64");

EXPORT int hook_fcntl(FCNTL_PARAMS)
{
    FCNTL_ARG();
    int (*f)(int, int, ...) = LOAD(fcntl);
    if (__builtin_expect(f && plain_fd(fd, false), 1))
        return f(fd, cmd, arg);
    return fcntl_slow(false, fd, cmd, arg);
}

EXPORT int hook_fcntl64(FCNTL_PARAMS)
{
    FCNTL_ARG();
    int (*f)(int, int, ...) = LOAD(fcntl64);
    if (__builtin_expect(f && plain_fd(fd, false), 1))
        return f(fd, cmd, arg);
    return fcntl_slow(true, fd, cmd, arg);
}

/* The range is forgotten only after the call succeeded: a stale entry in
 * between is caught by the identity check of whoever looks next. */
static void after_close_range(unsigned lo, unsigned hi)
{
    int e = errno;
    GUARDED(ccap_rt_release_list(ccap_rt_close_range(lo, hi)));
    errno = e;
}

static int sys_close_range(unsigned lo, unsigned hi, int flags)
{
    return REAL(close_range) ? LOAD(close_range)(lo, hi, flags) : (int)syscall(SYS_close_range, lo, hi, flags);
}

/* The real close_range of [LO, HI], serialised with the shim's Redis I/O
 * when the range may hold its Redis descriptor. Returns 0 or -errno. */
static int range_closer(unsigned lo, unsigned hi, int flags)
{
    bool l = ccap_rt_own_fd_begin(lo, hi);
    int rc = sys_close_range(lo, hi, flags) == 0 ? 0 : -errno;
    ccap_rt_own_fd_end(l);
    return rc;
}

/* A range the program closes: with connects queued, they forget its
 * numbers and the queue's own descriptors in it are left open (the
 * program did not open them; runtime/queued.h). Returns 0 or -errno. */
static int close_range_as_asked(unsigned lo, unsigned hi, int flags)
{
    int rc;

    if (!ccap_q_any())
        return range_closer(lo, hi, flags);
    GUARDED(rc = ccap_q_close_range(lo, hi, flags, range_closer));
    return rc;
}

static __attribute__((noinline)) int close_range_slow(unsigned first, unsigned last, int flags)
{
    FIRST_NEED();
    if (ccap_guard || (flags & CLOSE_RANGE_CLOEXEC))
        return sys_close_range(first, last, flags);
    int rc = close_range_as_asked(first, last, flags);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    after_close_range(first, last);
    return 0;
}

/* One plain descriptor (the range of a single number) is only the real call. */
EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    int (*c)(unsigned, unsigned, int) = LOAD(close_range);
    if (c && first == last && first <= INT32_MAX && plain_fd((int)first, true))
        return c(first, last, flags);
    return close_range_slow(first, last, flags);
}

EXPORT void closefrom(int lowfd)
{
    if (ccap_guard || lowfd < 0) {
        REAL(closefrom)(lowfd);
        return;
    }
    FIRST_NEED();
    int e = errno;
    if (!ccap_q_any() || close_range_as_asked((unsigned)lowfd, ~0U, 0) == -ENOSYS) {
        bool l = ccap_rt_own_fd_begin((unsigned)lowfd, ~0U);
        REAL(closefrom)(lowfd); /* also where close_range does not exist (Linux < 5.9) */
        ccap_rt_own_fd_end(l);
    }
    errno = e;
    after_close_range((unsigned)lowfd, ~0U);
}
