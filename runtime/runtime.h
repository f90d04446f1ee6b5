/* runtime.h -- the shim's per-process runtime: what the hooks call to classify a connect, take and give back permits. */
/* Layering: the shim calls this; the runtime calls core, and the shim only
 * through struct ccap_rt_hooks. Every call is made with the shim's guard
 * held (shim/shim.h: ccap_guard), on which core's own libc calls -- that
 * pass through the shim's hooks -- rely, and, in a program's thread, with
 * cancellation disabled: pthread_cancel never ends a thread inside the
 * runtime (a lock held, half a Redis command written). Only a wait's sleeps
 * act on a cancel (runtime/nap.h), each with a cleanup handler that undoes
 * the wait. */
#ifndef CCAP_RUNTIME_H
#define CCAP_RUNTIME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include "permit.h"

/* What connect_pre hands to connect_post. */
struct ccap_ticket {
    struct ccap_permit *permit; /* taken by this call, or NULL */
};

/* Callbacks the shim gives the core (set once, before any other call). */
struct ccap_rt_hooks {
    void (*need_heartbeat)(void);       /* a permit is held: make sure renewal runs */
    void (*permit_taken)(int lease_ms); /* one registered in Redis: renewal runs by its first renewal */
    void (*fork_child)(void); /* after fork, in the child (runtime/lifecycle.c gives its place in the order) */
    void (*need_watch)(void); /* config loaded: make sure the reload/resolve thread runs (cheap when it does) */
    void (*waiting)(void);    /* a connect waits for a permit: reloads must run meanwhile */
    /* starts FN(ARG) as a thread of the shim's own (guarded, no signals);
     * true if it started: the runtime's own threads (the waker) */
    bool (*spawn)(void *(*fn)(void *), void *arg);
    /* A wait's sleep in a program's thread (runtime/nap.h): OUTSIDE gives
     * the thread back to the program until INSIDE(what OUTSIDE returned) --
     * no guard, so a signal handler's calls meanwhile are the program's, and
     * the program's cancellation state, so a cancel acts there. OUTSIDE
     * returns -1 (nothing changed) in a thread of the shim's. */
    int (*outside)(void);
    void (*inside)(int back);
    /* The program's signals held until the shim's work in this thread ends
     * (but in its sleeps: OUTSIDE gives the program's mask back): called
     * once a connect's destination is matched, whose work takes locks and
     * waits -- a handler's siglongjmp out of it would leave them so. */
    void (*hold_signals)(void);
};

/* Installs HOOKS. No I/O, no locks, no allocation: safe in a constructor.
 * The process that loads the library does not thereby own anything: the
 * state belongs to the process that creates it (ccap_rt_claim). */
void ccap_rt_set_hooks(const struct ccap_rt_hooks *hooks);

/* From the library's constructor, after ccap_env_capture and before the
 * program can drop privileges or change its environment: reads the
 * configuration file ($CONNCAP_CONFIG, or conncap run's hand-over named by
 * CONNCAP_CONFIG_FD) into memory, and when it names other files (an
 * @include, a password_file, TLS files) or environment variables
 * (password_env), loads it whole now, those included. Fork children
 * inherit what it read. The first connect puts it in force. I/O and
 * allocation bounded by the configuration's size; no thread, no lock, no
 * log line (a failure is said at the first connect), nothing on stdout. */
void ccap_rt_boot(void);

/* True if the calling process owns the shim's state (permit table, Redis
 * connection, heartbeat, holder ids' pid and nonce). Before any state exists
 * every process does (a prefork child forked before its parent ever
 * connected owns what it creates). False in a child that shares the
 * parent's memory (vfork(), clone(CLONE_VM), posix_spawn's helper) once the
 * parent has any state: such a child must pass every call straight
 * through, or it would release the parent's permits. A fork() child owns
 * its own (empty) state: the fork handlers switch the owner. Costs one
 * getpid(). Async-signal-safe. */
bool ccap_rt_owner(void);

/* The process is about to create state (a permit, an adopted handoff, the
 * Redis client): makes it the owner, registers the one set of fork
 * handlers once (runtime/lifecycle.c) and remembers where the Redis
 * descriptor will live. Never from a constructor. Thread-safe. */
void ccap_rt_claim(void);

/* The program is about to close or replace descriptors LO..HI (close,
 * dup2, dup3, close_range, closefrom). If that range may hold the shim's
 * Redis descriptor, waits (at most 2 s) until no Redis call is in flight
 * and returns true: the caller then makes its call and calls
 * ccap_rt_own_fd_end(true), so that the shim never writes to a file the
 * program put on that number (the next Redis call sees the change by the
 * identity check and reconnects). Returns false at once otherwise (two
 * atomic loads), and in a process that does not own the state (a vfork
 * child's descriptors are its own). */
bool ccap_rt_own_fd_begin(unsigned lo, unsigned hi);
/* The lowest number the shim's Redis descriptor may have (INT32_MAX before
 * any state): a range ending below it is the program's alone. */
extern atomic_int ccap_rt_own_fd_low __attribute__((visibility("hidden")));
static inline bool ccap_rt_own_fd_maybe(unsigned hi)
{
    return hi >= (unsigned)atomic_load_explicit(&ccap_rt_own_fd_low, memory_order_relaxed);
}
void ccap_rt_own_fd_end(bool locked);

/* A permit is held: makes sure the heartbeat runs. */
void ccap_rt_kick(void);

/* Before the real connect(FD, SA, LEN). Loads the configuration on first
 * use. For an AF_INET/AF_INET6 TCP socket to a matched destination, takes a
 * permit and stores it in *T. A blocking socket waits up to the semaphore's
 * wait_timeout_ms (a fair FIFO queue, runtime/waiting.h). A non-blocking one
 * under nonblocking = "queue" (the default) and MAY_QUEUE makes one attempt
 * and, with no permit free, is queued (runtime/queued.h): returns
 * CCAP_RT_QUEUED, and the hook returns -1/EINPROGRESS without the real
 * connect (which the queue makes when the permit comes). Under "wait" it
 * waits as a blocking one; under "fail" it fails at once (after one Redis
 * round trip) with nonblocking_errno. Returns 0 to go on with the real
 * connect, CCAP_RT_QUEUED, CCAP_RT_INTERRUPTED, or -errno to fail it
 * without any SYN: the configured on_timeout errno when no permit came in
 * time (nonblocking_errno under "wait" and "fail"), -ECONNREFUSED when
 * Redis is down and on_redis_down is "closed". Unmatched destinations cost
 * a rule scan: no Redis call, no lock. A socket that already holds a permit
 * (connect called again) takes no second one. Thread-safe. */
#define CCAP_RT_QUEUED 1
/* A blocking connect whose wait a signal handler installed without
 * SA_RESTART interrupted: the hook returns -1/EINTR without the real connect,
 * and the connect goes on in the queue, as a real one goes on after EINTR
 * (runtime/acquire.c). A cancel in the wait unwinds the thread (its ticket
 * released, the socket untouched: as a cancel acted upon on connect()'s
 * entry leaves it). */
#define CCAP_RT_INTERRUPTED 2
/* How long a placeholder outlives its wait's deadline (then the kernel ends
 * it with ETIMEDOUT, if nothing else did). */
#define CCAP_Q_SPARE_MS 5000
int ccap_rt_connect_pre(int fd, const struct sockaddr *sa, socklen_t len, bool may_queue, struct ccap_ticket *t);

/* Puts granted permit P in the table for FD and makes sure renewal runs.
 * Returns 0, or -errno (FD beyond the table: P is still the caller's). */
int ccap_rt_permit_attach(int fd, struct ccap_permit *p);

/* After the real connect returned RC with errno ERR: a permit taken by this
 * call is given back at once unless the connect succeeded or is still in
 * progress (EINPROGRESS, EINTR). Preserves nothing: the shim restores errno. */
void ccap_rt_connect_post(int fd, struct ccap_ticket *t, int rc, int err);

/* Before the real close(FD) (or anything that ends the descriptor): forgets
 * FD and returns the permit to give back once the descriptor is really gone,
 * or NULL. */
struct ccap_permit *ccap_rt_close_pre(int fd);

/* dup2/dup3/F_DUPFD: NEWFD now refers to what OLDFD refers to. Returns the
 * permits to give back with ccap_rt_release_list (one NEWFD held before,
 * one a stale OLDFD entry held), or NULL. Nothing in a non-owner. */
struct ccap_permit *ccap_rt_dup(int oldfd, int newfd);

/* close_range/closefrom: forgets every descriptor in [LO, HI]; returns the
 * permits to give back (linked by next) with ccap_rt_release_list. */
struct ccap_permit *ccap_rt_close_range(unsigned lo, unsigned hi);

/* Gives back every permit of a list linked by next. */
void ccap_rt_release_list(struct ccap_permit *list);

/* Gives back P in Redis (if it was counted there) and frees it. NULL is
 * fine. Errors are logged; an unreturned permit expires with its lease.
 * Loads the configuration if needed (an adopted permit). */
void ccap_rt_release(struct ccap_permit *p);

/* Gives back P in Redis like ccap_rt_release but keeps P (for an exec
 * that may fail: see ccap_rt_renew_entries). */
void ccap_rt_unregister(struct ccap_permit *p);

/* Makes sure the releases sent without waiting reached Redis: reads
 * their replies, and sends now those not sent yet (Redis was down, or the
 * connection was lost). Call before the process ends or execs. Blocks up
 * to about command_timeout_ms per command; thread-safe; a no-op in a
 * process that does not own the state (vfork child). */
void ccap_rt_flush(void);

struct ccap_handoff_entry;

/* Renews the leases of the N holders in E (grouped by semaphore, one call
 * per semaphore) and adds again those Redis does not have (an exec that
 * failed after their release, a Redis restart). Returns 0 or the first
 * -errno (the heartbeat retries later). Thread-safe; Redis I/O. */
int ccap_rt_renew_entries(const struct ccap_handoff_entry *e, size_t n);

/* One heartbeat: drops table entries whose descriptors were closed behind
 * the shim's back, renews the leases of all live permits (re-adding any that
 * Redis lost), registers permits granted locally while Redis was down.
 * Returns the ms until the next beat (a third of the shortest lease), or -1
 * when no permit is held and the thread may stop. */
int ccap_rt_heartbeat(void);

/* At normal exit: gives back every permit this process holds (adopting a
 * waiting handoff first, so that those are given back too). Nothing in a
 * non-owner. */
void ccap_rt_shutdown(void);

/* The end of the process image (exit, exec): reports the refusals whose log
 * line was held back (one line per semaphore per interval) and no later line
 * counted, then the lines the log's rate limit held back (ccap_log_flush).
 * Preserves errno. */
void ccap_rt_log_flush(void);

/* The counter of permits of semaphore SEM this process holds, for a
 * permit's held field (permit.h), or NULL (no such semaphore, or no usable
 * configuration). Loads the configuration if needed. Thread-safe. */
atomic_int *ccap_rt_held_count(const char *sem);

/* True once the configuration was loaded and is usable. */
bool ccap_rt_active(void);

#endif
