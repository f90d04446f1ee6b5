/* sem.h -- the distributed counting semaphore: acquire, release, renew in Redis. */
#ifndef CCAP_SEM_H
#define CCAP_SEM_H

#include <stddef.h>
#include "redis.h"

/* Key layout, with a hash tag so a semaphore's keys share a cluster slot:
 *   <prefix>{<name>}:holders  sorted set: member holder id, score lease expiry
 *                             (ms of Redis server TIME)
 *   <prefix>{<name>}:limit    optional runtime override of the limit (string)
 * Algorithm: a leased counting semaphore as a sorted set of holders (as in
 * the "fair semaphore" of Redis in Action, 6.3, with server time and leases
 * instead of client time), one atomic Lua script per operation. */

struct ccap_sem_result {
    int granted;        /* 1 if this holder now holds a permit */
    long long count;    /* holders after the call */
    long long limit;    /* limit in force (override or configured) */
};

/* Writes "<prefix>{<name>}:<suffix>" into OUT. Returns its length, or
 * -ENAMETOOLONG when OUTLEN is too small. */
int ccap_sem_key(char *out, size_t outlen, const char *prefix, const char *name, const char *suffix);

/* Tries once to acquire a permit for HOLDER on semaphore NAME with a lease
 * of LEASE_MS and configured LIMIT (the limit key wins when set). Expired
 * holders are dropped first. If HOLDER already holds one, its lease is
 * renewed and granted is 1. Returns 0 and fills *RES, or -errno as
 * ccap_redis_script. Never waits. */
int ccap_sem_acquire(struct ccap_redis *r, const char *prefix, const char *name, const char *holder,
                     int lease_ms, int limit, struct ccap_sem_result *res);

/* Releases HOLDER's permit on NAME. Idempotent; removes no other holder.
 * Returns 1 if a permit was removed, 0 if HOLDER held none, or -errno. */
int ccap_sem_release(struct ccap_redis *r, const char *prefix, const char *name, const char *holder);

/* Extends the leases of N holders of NAME to now + LEASE_MS in one call.
 * If ADD_MISSING is non-zero, a holder missing from the set (lost by a
 * Redis restart or failover) is added again, even above the limit.
 * Returns the number of holders that were missing (re-added or not), or
 * -errno. */
int ccap_sem_renew(struct ccap_redis *r, const char *prefix, const char *name, const char *const *holders,
                   size_t n, int lease_ms, int add_missing);

#endif
