/* nap.h -- a waiting connect's sleep: woken by a kick or a time, and in a program's thread the program's (its signals, its cancellation). Runtime-internal. */
#ifndef CCAP_NAP_H
#define CCAP_NAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

/* A blocking connect() sleeps in the kernel, where a signal handler
 * installed without SA_RESTART makes it fail with EINTR, one installed with
 * SA_RESTART makes the kernel restart it, a blocked or ignored signal does
 * nothing, and pthread_cancel ends the thread (connect() is a cancellation
 * point). A connect waiting for a permit sleeps here instead, and behaves the
 * same way: its sleep is a blocking read() of a timerfd, which the kernel
 * treats exactly as it treats connect() (-ERESTARTSYS: restarted or EINTR as
 * the handler's SA_RESTART says; read() is a cancellation point), armed for
 * the sleep's end and set to fire at once by a kick. So no handler of the
 * program is looked at or changed, the thread's own signal mask applies, and
 * the program's dispositions decide.
 *
 * In a program's thread the sleep is the one point where the program's
 * signals and cancellation reach the wait: the shim's own work runs with
 * cancellation disabled and the signals held (shim/shim.h, GUARDED), and
 * around the read the thread is given back to the program
 * (ccap_rt_hooks.outside/inside: no guard, the program's cancellation state
 * and mask). The caller holds no lock then and has nothing half-done; a
 * cancellation acts there, and a handler may longjmp out of there: either
 * runs the caller's cleanup handler (CCAP_CLEANUP_PUSH, core/cleanup.h),
 * which must undo the wait.
 *
 * Without a timerfd (a thread of the shim's, or no descriptor left) the nap
 * sleeps on a condition variable: kicks and times as above, but signals
 * never end it and cancellation does not act in it (cancellation stays
 * disabled; a pending cancel is acted upon at the program's next
 * cancellation point after the connect). */
struct ccap_nap {
    _Atomic int fd;     /* the timerfd (CLOCK_MONOTONIC, CLOEXEC, high), -1 none */
    atomic_bool kicked; /* a kick not yet seen by a sleep (apart from the plain flags below: */
                        /* a read of both of them may be one wider load, TSan sees it race) */
    dev_t dev;          /* its identity (every timerfd shares one inode: this */
    ino_t ino;          /* tells only that the number is still a timerfd) */
    bool program;       /* ccap_nap_want_fd: the first sleep makes the timerfd */
    bool shim;          /* ccap_nap_shim: its sleeper is a thread of the shim's */
    pthread_mutex_t mu; /* the condition's, without a timerfd */
    pthread_cond_t cv;
    void (*on_kick)(void *); /* ccap_nap_on_kick: a kick calls it, nobody sleeps on N */
    void *on_kick_arg;
};

/* Makes N (no descriptor yet). No I/O, cannot fail. */
void ccap_nap_init(struct ccap_nap *n);

/* Gives N a timerfd, so that its sleeps are the program's (see above).
 * Returns 0, or -errno (N then sleeps on its condition). Call it only in the
 * thread that sleeps on N, before its first sleep. */
int ccap_nap_use_fd(struct ccap_nap *n);

/* As ccap_nap_use_fd, made by N's first sleep (in the thread that sleeps
 * on N), not now: a wait that never sleeps on N (a lone waiter blocks on
 * its wake list, runtime/wait.h) makes no timerfd. No I/O. */
void ccap_nap_want_fd(struct ccap_nap *n);

/* N's sleeper is a thread of the shim's (the queue's: every signal blocked,
 * never cancelled, its cancellation disabled): no program's rule to keep,
 * so a lone waiter on N may block on its wake list itself (runtime/wait.h),
 * without a timerfd (no descriptor per queued connect).
 * ccap_nap_want_fd undoes it. Call it in the thread that sleeps on N,
 * before that thread joins a waker. No I/O. */
void ccap_nap_shim(struct ccap_nap *n);

/* N is never slept on: a kick calls FN(ARG) instead (after setting N's
 * flag), from the kicking thread with whatever locks it holds -- FN may
 * take only a lock of its own, held briefly, and must not block. For a
 * thread that runs many waits on one sleep of its own (runtime/qrun.h).
 * Before any kick can reach N. */
void ccap_nap_on_kick(struct ccap_nap *n, void (*fn)(void *), void *arg);
/* Frees what N holds (its descriptor, closed only if it is still ours). No
 * kick may run meanwhile. */
void ccap_nap_destroy(struct ccap_nap *n);

/* Ends N's sleep now, or makes its next one return at once. From any thread,
 * with any lock held; no allocation. */
void ccap_nap_kick(struct ccap_nap *n);

/* Sleeps until UNTIL_MS (monotonic ms; at once if past) or a kick made since
 * the last sleep ended. Returns 0, or -EINTR when a signal handler installed
 * without SA_RESTART interrupted it (only with a timerfd). In a program's
 * thread with a timerfd, a cancellation point (see above). The caller holds
 * no lock. Only one thread sleeps on N at a time. */
int ccap_nap_sleep(struct ccap_nap *n, long long until_ms);

/* For a cleanup handler (core/cleanup.h) that runs when a nap was
 * cancelled, or a signal handler's longjmp left it: the thread is the
 * shim's again (guard set, signals held) for the handler's own work; then
 * ccap_nap_unwound gives it back to the program (its mask as it was), whose
 * own cleanup handlers run next, or whose jump goes on. */
void ccap_nap_unwinding(void);
void ccap_nap_unwound(void);

#endif
