/* waiting.h -- waiting for a permit (runtime/waiting.c). Runtime-internal. */
#ifndef CCAP_WAITING_H
#define CCAP_WAITING_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include "config.h"
#include "permit.h"

/* How a connect waits: a blocking socket (or a queued non-blocking one's
 * wait, in a thread of the shim's), up to wait_timeout_ms, failing with
 * on_timeout's errno; a non-blocking socket under nonblocking = "wait", the
 * same with nonblocking_errno; under "fail", one attempt without a ticket. */
enum ccap_wait_mode { CCAP_WAIT_BLOCK, CCAP_WAIT_NONBLOCK, CCAP_WAIT_AT_ONCE };

/* How the thread that runs a wait waits (FLAGS below). */
/* A program's thread (its connect()): the wait's sleeps are the program's
 * (runtime/nap.h). A pthread_cancel acts in a sleep and nowhere else: the
 * wait then ends as a failed one, its ticket released, P freed, and the
 * thread unwinds (the hooks' guard given back). Without it: a thread of the
 * shim's. */
#define CCAP_WAIT_PROGRAM 1
/* With CCAP_WAIT_PROGRAM, a blocking connect: a signal handler installed
 * without SA_RESTART that interrupts a sleep ends the call with -EINTR and
 * the wait still in progress, for the caller to hand on (a real connect
 * goes on asynchronously after EINTR) or abandon. A handler with SA_RESTART
 * (the kernel restarts the sleep), a blocked or an ignored signal leave the
 * wait as it is. Without it, no signal ends a wait. */
#define CCAP_WAIT_INTR 2

/* Waits for a permit of semaphore S (index SEM in the configuration in
 * force) for P, a permit named but not yet in the table, of a connect to SA
 * (LEN bytes; AF_INET or AF_INET6: its refusal's log line names it), as
 * MODE says. Each attempt is one acquire call
 * on the shared connection; in between, the thread sleeps until the
 * process's waker hands it a token (runtime/wait.h), the rate's next slot,
 * the earliest lease end, its ticket's refresh (at 2/3 of its TTL, about a
 * lease), or the deadline; no periodic re-check. A queue already holding
 * max_waiters tickets fails the connect at once. Returns 1 granted (P flagged
 * CCAP_PERMIT_LOCAL when on_redis_down granted it), or -errno: on_timeout's
 * (nonblocking_errno's for a non-blocking socket), or on_redis_down's.
 * May give P a new holder id. FLAGS: CCAP_WAIT_PROGRAM or 0 (CCAP_WAIT_INTR
 * is ignored: no signal ends this wait). Thread-safe; blocks up to the
 * semaphore's wait_timeout_ms. */
int ccap_rt_wait_for_permit(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p,
                            const struct sockaddr *sa, socklen_t len, int mode, int flags);

/* The TTL of a waiter's ticket on semaphore S, unless refreshed: about a
 * lease (at least 3 s). */
int ccap_rt_ticket_ttl_ms(const struct ccap_sem_conf *s);

/* A wait that goes on in another thread (a queued connect). */
struct ccap_wait;

/* Starts a CCAP_WAIT_BLOCK wait without sleeping: one attempt, which takes
 * a ticket in the queue when no permit is free. Returns 1 granted or -errno
 * (done, as ccap_rt_wait_for_permit), or 0 with *OUT the wait in progress:
 * its owner must end it with ccap_rt_wait_resume. Out of memory: waits in
 * the calling thread instead (a program's: CCAP_WAIT_PROGRAM). Thread-safe. */
int ccap_rt_wait_start(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p, const struct sockaddr *sa,
                       socklen_t len, struct ccap_wait **out);

/* Goes on with WS until it ends, in any one thread, FLAGS saying how that
 * thread waits: returns 1 granted or -errno (-ECANCELED: cancelled, its
 * ticket released), and frees WS; or, with CCAP_WAIT_INTR,
 * CCAP_WAIT_INTERRUPTED with WS still in progress (its ticket kept), for
 * another ccap_rt_wait_resume (in any thread) or ccap_rt_wait_abandon. */
#define CCAP_WAIT_INTERRUPTED 2
int ccap_rt_wait_resume(struct ccap_wait *ws, int flags);

/* ---- a wait polled by a thread that runs many (runtime/qrun.h) ----
 * Instead of ccap_rt_wait_resume, which sleeps: WS's kicks (a token, a
 * cancel, a nudge, a reload) call FN(ARG), from the kicking thread with
 * the runtime's locks held (FN takes only a lock of its own, briefly, and
 * never blocks), and the runner calls ccap_rt_wait_poll when FN was called
 * or the time it asked for came. Before the first poll. Thread-safe. */
void ccap_rt_wait_on_kick(struct ccap_wait *ws, void (*fn)(void *), void *arg);
/* Advances WS without sleeping, in a thread of the shim's (no signal ends
 * it, no cancel): when its sleep is over (as ccap_rt_wait_resume's would
 * be), one attempt; a refusal arms its next sleep (joins its waker).
 * Returns 1 granted or -errno (-ECANCELED: cancelled, its ticket released):
 * WS ended and freed, as by ccap_rt_wait_resume; or 0, WS in progress,
 * with *NEXT_MS the monotonic ms at which to poll again unless FN is
 * called first. Only one thread polls WS at a time. */
int ccap_rt_wait_poll(struct ccap_wait *ws, long long *next_ms);
/* Ends WS (in progress) as a failed wait: its ticket released, WS freed;
 * its permit stays the caller's. */
void ccap_rt_wait_abandon(struct ccap_wait *ws);

/* With CCAP_WAIT_INTR, ccap_rt_wait_resume also stops at monotonic
 * AT_MS (not granted by then): CCAP_WAIT_INTERRUPTED, WS in progress, and
 * ccap_rt_wait_yielded(WS) true -- a blocking connect's SO_SNDTIMEO, after
 * which a real one fails with EINPROGRESS and goes on. 0: no such bound.
 * Before ccap_rt_wait_resume. */
void ccap_rt_wait_yield_at(struct ccap_wait *ws, long long at_ms);
bool ccap_rt_wait_yielded(const struct ccap_wait *ws);

/* WS's id, for ccap_rt_wait_cancel (unique in the process). */
unsigned long long ccap_rt_wait_id(const struct ccap_wait *ws);

/* While WS sleeps, ALIVE(ARG) is asked every second or so (without any of
 * the runtime's locks held); false ends the wait as cancelled. Before
 * ccap_rt_wait_resume. */
void ccap_rt_wait_watch(struct ccap_wait *ws, bool (*alive)(void *), void *arg);

/* Ends the wait of id ID, if it is still in progress, as soon as its thread
 * looks (at once when it sleeps on its waker, within a second otherwise).
 * Takes the waits' lock. Thread-safe. */
void ccap_rt_wait_cancel(unsigned long long id);

/* Before the image ends (an exec, a normal exit): releases (kept, sent by
 * the caller's flush) the holder id of every wait in progress (it may have
 * a ticket in a queue), so that no ticket of a thread that ends with the
 * image blocks the queue until its TTL. Returns true when it released one.
 * A wait that goes on (the exec failed) takes a fresh holder id at its next
 * attempt. Takes the waits' lock, then rlock. Thread-safe. */
bool ccap_rt_waits_drop(void);

/* A reload swapped the configuration: every wait in progress re-checks
 * now, with the settings in force (a raised limit lets it in at once),
 * instead of at its next token, lease end or ticket refresh. Takes the
 * waits' lock, then the waker pool's. Thread-safe. */
void ccap_rt_waits_nudge(void);

/* After an exec failed: wakes the waits ccap_rt_waits_drop released, so
 * that they queue again at once under fresh ids. Thread-safe. */
void ccap_rt_waits_exec_failed(void);

/* fork(): prepare takes the waits' lock, parent releases it, child
 * forgets the waits (their threads stayed in the parent). For the runtime's
 * fork handlers (runtime/lifecycle.c): prepare before rlock. */
void ccap_rt_waits_fork_prepare(void);
void ccap_rt_waits_fork_parent(void);
void ccap_rt_waits_fork_child(void);

#endif
