/* waiting.h -- a connect's wait for a permit (core/waiting.c), and the core calls it is made of. */
#ifndef CCAP_WAITING_H
#define CCAP_WAITING_H

#include <stdbool.h>
#include <stddef.h>
#include "config.h"
#include "permit.h"
#include "sem.h"

/* Waits for a permit of semaphore S (index SEM of the configuration in
 * force) for P, the connect of socket FD. Each attempt is one acquire.lua
 * call on the shared connection; in between, the thread sleeps until the
 * process's waker hands it a token (core/wait.h), the rate's next slot, the
 * earliest lease end, its ticket's refresh (at 2/3 of its TTL), or the
 * deadline (wait_timeout, kept here, not by Redis). The last attempt, at the
 * deadline, leaves the queue unless it gets the permit. A non-blocking
 * socket makes one attempt and no wait under nonblocking = "fail", and
 * under "wait" whenever this process holds a permit of S (an event loop
 * must not wait for permits only it can give back). Ending without a
 * permit Redis granted (a failure, or a local grant) while Redis may keep a
 * ticket or a permit of P's holder id, it releases that id and gives P a
 * new one (ccap_core_drop_holder_id). Returns 1 granted, or -errno:
 * on_timeout's (nonblocking_errno's for a non-blocking socket), or
 * on_redis_down's. Thread-safe. */
int ccap_wait_for_permit(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p, int fd);

/* ---- core.c's calls for the wait (thread-safe; they take its Redis lock) ---- */

/* The configuration in force (loaded at first use), or NULL. */
const struct ccap_config *ccap_core_config(void);

/* One acquire attempt Q of S on the shared connection (unless the circuit
 * is open: -ECONNREFUSED). Returns 1 granted, 0 denied (*RES tells when to
 * re-check), -errno. */
int ccap_core_try_acquire(const struct ccap_sem_conf *s, const struct ccap_sem_req *q, struct ccap_sem_result *res);

/* Redis is down: applies on_redis_down to P's connect of S (index SEM).
 * Returns 1 granted locally (P flagged CCAP_PERMIT_LOCAL), 0 when "local"
 * is at local_limit, -ECONNREFUSED for "closed". */
int ccap_core_redis_down(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p);

/* Counts a connect refused during an outage (for its end's log line). */
void ccap_core_down_refused(void);

/* Stats: HOLDER gave up on S after WAITED ms (best effort). */
void ccap_core_report_timeout(const struct ccap_sem_conf *s, const char *holder, long long waited);

/* Releases P's holder id in Redis (kept until sent) and gives P a new one. */
void ccap_core_drop_holder_id(struct ccap_permit *p);

/* True if this process holds a permit of semaphore SEM: one atomic load. */
bool ccap_core_holds_permit(size_t sem);

/* Pushes one token to list KEY (a waker's poke list, a wake list name: the
 * worker ACL's LPUSH and PEXPIRE on wake lists cover it; TTL 60 s) on the
 * shared connection. Returns 0 or -errno (-ECONNREFUSED: circuit open). */
int ccap_core_poke(const char *key);

#endif
