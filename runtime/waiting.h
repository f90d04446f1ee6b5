/* waiting.h -- waiting for a permit (runtime/waiting.c). Runtime-internal. */
#ifndef CCAP_WAITING_H
#define CCAP_WAITING_H

#include <stdbool.h>
#include <stddef.h>
#include "config.h"
#include "permit.h"

/* Waits for a permit of semaphore S (index SEM in the configuration in
 * force) for P, a permit named but not yet in the table, connecting
 * descriptor FD (its O_NONBLOCK flag decides whether and how long to wait:
 * see ccap_rt_connect_pre in runtime.h). Each attempt is one acquire call
 * on the shared connection; in between, the thread sleeps until the
 * process's waker hands it a token (runtime/wait.h), the rate's next slot,
 * the earliest lease end, its ticket's refresh (at 2/3 of its TTL, about a
 * lease), or the deadline; no periodic re-check. A queue already holding
 * max_waiters tickets fails the connect at once. Returns 1 granted (P flagged
 * CCAP_PERMIT_LOCAL when on_redis_down granted it), or -errno: on_timeout's
 * (nonblocking_errno's for a non-blocking socket), or on_redis_down's.
 * May give P a new holder id. Thread-safe; blocks up to the semaphore's
 * wait_timeout_ms. */
int ccap_rt_wait_for_permit(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p, int fd);

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
