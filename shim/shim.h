/* shim.h -- the interposition layer's internals: real symbols and the guard. */
#ifndef CCAP_SHIM_H
#define CCAP_SHIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include "clock.h"

/* Non-zero while this thread runs runtime or core code (or is one of the
 * shim's threads): the hooks then pass straight to the real call, so the
 * shim's own Redis connection and lookups never go through its own
 * interposition. This is the one exception to the layering (shim ->
 * runtime -> core; doc/ARCHITECTURE.md): core's libc calls do reach the
 * hooks, and rely on this guard to come straight back out. */
extern __thread int ccap_guard __attribute__((tls_model("initial-exec")));

/* The program's cancellation state (PTHREAD_CANCEL_ENABLE or _DISABLE) as
 * it was when the shim's work in this thread began; -1 in the shim's own
 * threads, which never enter from the program. */
extern __thread int ccap_prog_cancel __attribute__((tls_model("initial-exec")));

/* Whether the shim holds the program's signals blocked in this thread
 * (ccap_shim_hold_signals): 1 from the hold to the end of the shim's work,
 * but for a wait's sleeps; the program's mask meanwhile in ccap_sig_saved.
 * So a handler never runs inside the shim's work (a lock held, the guard
 * set, a wait half made), where its siglongjmp would leave it all so: it
 * runs in a sleep, where the thread is the program's and the wait's
 * cleanup (core/cleanup.h) undoes the wait, or when the work ends. */
extern __thread int ccap_sig_on __attribute__((tls_model("initial-exec")));

/* Blocks every signal but the synchronous ones (a fault's) in this thread,
 * the program's mask kept for ccap_shim_leave; no-op when held already, or
 * in a thread of the shim's (whose signals are blocked all along). */
void ccap_shim_hold_signals(void);

/* The hold itself, in a program's thread (ccap_shim_enter_as). */
void ccap_shim_sig_block(void);

/* Gives the program's mask back (ccap_sig_on 0). */
void ccap_shim_release_signals(void);

/* The next definitions of the interposed symbols (dlsym(RTLD_NEXT): libc's,
 * or another preloaded wrapper's that comes after this library), resolved
 * together by ccap_real_resolve() on first need (shim/real.c). */
struct hostent;
struct addrinfo;
struct ccap_real {
    int (*connect)(int, const struct sockaddr *, socklen_t);
    int (*close)(int);
    int (*dup)(int);
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*fcntl)(int, int, ...);
    int (*fcntl64)(int, int, ...);
    int (*close_range)(unsigned, unsigned, int);
    void (*closefrom)(int);
    int (*fclose)(FILE *);
    ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    ssize_t (*sendmsg)(int, const struct msghdr *, int);
    int (*sendmmsg)(int, struct mmsghdr *, unsigned, int);
    int (*execve)(const char *, char *const[], char *const[]);
    int (*execvpe)(const char *, char *const[], char *const[]);
    int (*fexecve)(int, char *const[], char *const[]);
    int (*execveat)(int, const char *, char *const[], char *const[], int);
    int (*getaddrinfo)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    struct hostent *(*gethostbyname)(const char *);
    struct hostent *(*gethostbyname2)(const char *, int);
    int (*gethostbyname_r)(const char *, struct hostent *, char *, size_t, struct hostent **, int *);
    int (*gethostbyname2_r)(const char *, int, struct hostent *, char *, size_t, struct hostent **, int *);
    int (*__libc_start_main)(int (*)(int, char **, char **), int, char **, void (*)(void), void (*)(void),
                             void (*)(void), void *);
    /* what a queued connect answers for (shim/qhooks.c) */
    int (*setsockopt)(int, int, int, const void *, socklen_t);
    int (*getsockopt)(int, int, int, void *, socklen_t *);
    int (*getsockname)(int, struct sockaddr *, socklen_t *);
    int (*shutdown)(int, int);
    int (*epoll_ctl)(int, int, int, struct epoll_event *);
    int (*epoll_create)(int);
    int (*epoll_create1)(int);
    int (*poll)(struct pollfd *, nfds_t, int);
    int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
    int (*__poll_chk)(struct pollfd *, nfds_t, int, size_t);
    int (*__ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t);
    int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
    int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
    long (*syscall)(long, ...);
    /* libraries loaded with RTLD_DEEPBIND (shim/deepbind.c) */
    void *(*dlopen)(const char *, int);
    void *(*dlmopen)(long, const char *, int);
};
/* Hidden, as every shared variable the hooks read: one PC-relative load, no
 * address from the GOT first (a declaration is default visibility unless said). */
extern struct ccap_real ccap_real __attribute__((visibility("hidden")));

/* Resolves every entry of ccap_real not resolved yet. Lock-free; safe from
 * any thread, before main, and again. */
void ccap_real_resolve(void);

/* The entry for F (NULL when not resolved yet, or absent from libc). */
#define CCAP_REAL_LOAD(f) __atomic_load_n(&ccap_real.f, __ATOMIC_RELAXED)
/* The entry for F, resolving the table first if needed (NULL only when
 * the symbol does not exist). */
#define CCAP_REAL(f) (CCAP_REAL_LOAD(f) ? CCAP_REAL_LOAD(f) : (ccap_real_resolve(), CCAP_REAL_LOAD(f)))

/* What one outermost entry into the shim's work saves: the program's
 * cancellation state (-1 when nested), and a hold of the signals found on
 * (a handler's call inside a wait's sleep of the shim's, which it puts back
 * at its end; or a hold a siglongjmp left, whose mask is stale). */
struct ccap_shim_frame {
    int cs;
    int on;
    sigset_t saved;
};

/* The hold found on at an entry into F, kept there (ccap_sig_on 0 then);
 * put back at its end. (shim/lifecycle.c) */
void ccap_shim_sig_push(struct ccap_shim_frame *f);
void ccap_shim_sig_pop(const struct ccap_shim_frame *f);

/* The shim's own work begins in this thread: the guard taken and, entered
 * from the program (the guard was not held), cancellation disabled, so that
 * pthread_cancel never ends the thread in the middle of it (a lock held,
 * half a Redis command written, a permit taken and not recorded), and when
 * HOLD the program's signals held (ccap_sig_on). The program's state is
 * kept in ccap_prog_cancel for the waits' sleeps, the one place where a
 * cancel acts (runtime/nap.h). F is what ccap_shim_leave takes. */
static inline void ccap_shim_enter_as(bool hold, struct ccap_shim_frame *f)
{
    int old;

    f->cs = -1;
    if (ccap_guard) {
        ccap_guard++;
        return;
    }
    f->on = ccap_sig_on;
    if (f->on)
        ccap_shim_sig_push(f);
    if (hold)
        ccap_shim_sig_block(); /* before the guard: a handler never runs with it held */
    ccap_guard = 1;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    ccap_prog_cancel = old;
    f->cs = old;
}

/* Ends what ccap_shim_enter_as began. The guard goes first: a cancel that
 * the restored state acts on at once (asynchronous cancellation) unwinds a
 * thread that is the program's again; the mask last: a handler held back
 * then runs in the program's thread. */
static inline void ccap_shim_leave(const struct ccap_shim_frame *f)
{
    ccap_guard--;
    if (f->cs < 0)
        return;
    pthread_setcancelstate(f->cs, NULL);
    if (ccap_sig_on)
        ccap_shim_release_signals();
    if (f->on)
        ccap_shim_sig_pop(f);
}

/* Runs STMT as the shim's own work: with the guard held, every libc call
 * it makes passes the hooks straight to the real symbol; cancellation is
 * disabled and the program's signals held meanwhile (ccap_shim_enter_as). */
#define GUARDED(stmt)                                                                                               \
    do {                                                                                                            \
        struct ccap_shim_frame f_;                                                                                  \
        ccap_shim_enter_as(true, &f_);                                                                              \
        stmt;                                                                                                       \
        ccap_shim_leave(&f_);                                                                                       \
    } while (0)

/* GUARDED without the hold: for the connect of every destination, whose
 * runtime holds them once the destination is matched (hooks.hold_signals:
 * two system calls are more than an unmatched connect's budget). */
#define GUARDED_LIGHT(stmt)                                                                                         \
    do {                                                                                                            \
        struct ccap_shim_frame f_;                                                                                  \
        ccap_shim_enter_as(false, &f_);                                                                             \
        stmt;                                                                                                       \
        ccap_shim_leave(&f_);                                                                                       \
    } while (0)

/* A wait's sleep in a program's thread (runtime/nap.h): the thread is the
 * program's until ccap_shim_inside(what ccap_shim_outside returned) -- no
 * guard, its cancellation state and its signal mask its own. -1 (nothing
 * changed) in a thread of the shim's. (shim/lifecycle.c) */
int ccap_shim_outside(void);
void ccap_shim_inside(int back);

/* close(FD) as the hooks make it, the real close being REAL (close(), or
 * the raw system call for syscall(SYS_close)): a queued connect forgets FD,
 * a permit goes back once the descriptor is gone. (shim/hooks.c) */
int ccap_shim_close(int fd, int (*real)(int));

/* Adopts permits handed over across exec, unless the guard is held;
 * preserves errno. For the hooks' FIRST_NEED. */
void ccap_shim_adopt(void);

/* Starts FN(ARG) as a detached thread with STACK bytes of stack and every
 * signal blocked (the shim's threads never take the program's signals).
 * Returns true if it started. (shim/heartbeat.c) */
bool ccap_shim_spawn(void *(*fn)(void *), void *arg, size_t stack);

/* As ccap_shim_spawn with a 128 KiB stack, FN(ARG) running with the guard
 * set: for the runtime's threads (struct ccap_rt_hooks.spawn). */
bool ccap_shim_spawn_guarded(void *(*fn)(void *), void *arg);

/* Starts the heartbeat thread if it is not running (shim/heartbeat.c). */
void ccap_heartbeat_start(void);
/* The same, its first beat in MS unless kicked meanwhile (a permit just
 * taken needs no renewal before a third of its lease); kicks a running one. */
void ccap_heartbeat_start_in(int ms);
/* Whether it runs now. Thread-safe. */
bool ccap_heartbeat_running(void);
/* Stops it (at exit); does not wait for it. */
void ccap_heartbeat_stop(void);
/* After fork, in the child: the thread is gone; forget it. */
void ccap_heartbeat_forget(void);

/* Starts the reload/resolve thread if it is not running (shim/watch.c):
 * one atomic load when it is. Never from a constructor. */
void ccap_watch_start(void);
/* Stops it (at exit); does not wait for it. */
void ccap_watch_stop(void);
/* After fork, in the child: the thread is gone (the next connect starts
 * one); the lock and the condition start afresh (the parent's thread may
 * have held the one and waited on the other: a condition that counts a
 * waiter gone with the fork may block its next broadcast). */
void ccap_watch_forget(void);

/* shim/lifecycle.c: an exec's runtime part, for shim/exec.c. Begin (guard
 * taken inside): hands over or releases the permits and returns the
 * environment to exec with (ccap_handoff_exec_pre); e2big: the environment
 * for a retry after E2BIG, or NULL; end: after a failed exec, restores
 * them (ccap_handoff_exec_post). Only in the process that owns the state. */
struct ccap_exec;
char *const *ccap_shim_exec_begin(char *const *envp, struct ccap_exec *x);
char *const *ccap_shim_exec_e2big(struct ccap_exec *x);
void ccap_shim_exec_end(struct ccap_exec *x);

/* shim/later.c: when the threads above start. A permit just taken starts
 * the heartbeat, its first beat at the permit's first renewal (a third of
 * LEASE_MS); with CONNCAP_HEARTBEAT=lazy, in a process younger than that,
 * the heartbeat is only owed from then on. A connect owes the reload/resolve
 * thread at the first check of the configuration file (at once when
 * resolve = true names must be looked up).
 * What is owed starts at the first interposed call made once it is due
 * (ccap_later_poll, in every hook). Thread-safe; preserve errno. */
void ccap_later_heartbeat(int lease_ms);
void ccap_later_watch(void);
/* After fork, in the child: nothing is owed. */
void ccap_later_forget(void);
/* Starts what is due. For ccap_later_poll. */
void ccap_later_run(void);
/* The CLOCK_MONOTONIC_COARSE ms when a thread is owed, 0 when none. */
extern _Atomic long long ccap_later_at __attribute__((visibility("hidden")));

/* In every hook, outside the guard: one relaxed load when nothing is owed. */
static inline void ccap_later_poll(void)
{
    long long at = atomic_load_explicit(&ccap_later_at, memory_order_relaxed);
    if (__builtin_expect(at != 0, 0) && ccap_now_coarse_ms() >= at)
        ccap_later_run();
}

#endif
