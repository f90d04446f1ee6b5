/* semcall.h -- short forms of the ccap_sem_* calls for the unit tests (one request struct each). */
#ifndef CCAP_TEST_SEMCALL_H
#define CCAP_TEST_SEMCALL_H

#include "sem.h"

/* The audit stream's MAXLEN the helpers below pass (0: off). */
static int t_audit;

/* One attempt that never queues: HOLDER on NAME with LEASE_MS and LIMIT,
 * having waited WAITED ms and giving up in LEFT ms. As ccap_sem_acquire. */
static inline int t_acquire_wait(struct ccap_redis *r, const char *pfx, const char *name, const char *holder,
                                 int lease_ms, int limit, long long waited, long long left,
                                 struct ccap_sem_result *res)
{
    struct ccap_sem_req q = { .holder = holder,
                              .lease_ms = lease_ms,
                              .limit = limit,
                              .waited_ms = waited,
                              .wait_left_ms = left,
                              .audit_maxlen = t_audit };
    return ccap_sem_acquire(r, pfx, name, &q, res);
}

static inline int t_acquire(struct ccap_redis *r, const char *pfx, const char *name, const char *holder,
                            int lease_ms, int limit, struct ccap_sem_result *res)
{
    return t_acquire_wait(r, pfx, name, holder, lease_ms, limit, 0, 0, res);
}

/* Releases HOLDER of NAME, whose configured limit is LIMIT (-1 unknown). */
static inline int t_release_wake(struct ccap_redis *r, const char *pfx, const char *name, const char *holder,
                                 int limit)
{
    struct ccap_sem_rel rel = { holder, limit, t_audit };
    return ccap_sem_release(r, pfx, name, &rel);
}

static inline int t_release(struct ccap_redis *r, const char *pfx, const char *name, const char *holder)
{
    return t_release_wake(r, pfx, name, holder, -1);
}

static inline int t_release_defer(struct ccap_redis *r, const char *pfx, const char *name, const char *holder,
                                  int limit, long long until_ms, bool send)
{
    struct ccap_sem_rel rel = { holder, limit, t_audit };
    return ccap_sem_release_defer(r, pfx, name, &rel, until_ms, send);
}

#endif
