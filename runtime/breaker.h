/* breaker.h -- the circuit breaker in front of Redis: while open, Redis is not tried at all. Runtime-internal. */
#ifndef CCAP_BREAKER_H
#define CCAP_BREAKER_H

#include <stdbool.h>

#define CCAP_BREAKER_MIN_MS 250  /* first backoff, and the heartbeat's shortest probe delay */
#define CCAP_BREAKER_MAX_MS 5000 /* longest backoff (see ccap_breaker_note) */

/* Every call below is made under the runtime's rlock (rt_int.h), but for
 * the outage counters, which are atomics. */

/* True while the circuit is open: the caller does not try Redis. */
bool ccap_breaker_open(void);

/* True while Redis is considered down (open, or half-open: the retry time
 * has come but no call has succeeded yet). */
bool ccap_breaker_down(void);

/* The ms until the breaker lets a probe through (<= 0: now), or -1 when
 * Redis is not down. */
long long ccap_breaker_probe_in_ms(void);

/* Learns the outcome RC (>= 0, or -errno) of a Redis call: success closes
 * the circuit (its end logged once); a failure of Redis (unreachable,
 * timed out, an oversized or malformed reply, an error reply) opens it or
 * backs off (doubling from CCAP_BREAKER_MIN_MS to at most CCAP_BREAKER_MAX_MS
 * or a quarter of the shortest lease, jittered); our own errors (-EINVAL,
 * -ENOMEM, -ENAMETOOLONG) change nothing, nor does a process out of
 * descriptors (-EMFILE, -ENFILE: the connection to Redis could not even be
 * made; said once): on_redis_down decides that call, the next tries
 * Redis; -ESTALE (a new master answered, the command was held back:
 * core/redis.h ccap_redis_expect_epoch) is a success. */
void ccap_breaker_note(int rc);

/* The breaker's one gate around a Redis call: -ECONNREFUSED without calling
 * when open; otherwise CALL(ARG)'s result, noted. */
int ccap_breaker_call(int (*call)(void *), void *arg);

/* Counts a connect on_redis_down granted (GRANTED) or failed during this
 * outage, for the log line that ends it. Atomic: no lock needed. */
void ccap_breaker_count(bool granted);

/* After fork, in the child: closed, as in a new process. */
void ccap_breaker_fork_child(void);

#endif
