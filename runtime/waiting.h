/* waiting.h -- waiting for a permit (runtime/waiting.c). Runtime-internal. */
#ifndef CCAP_WAITING_H
#define CCAP_WAITING_H

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

#endif
