/* sem.h -- the distributed counting semaphore: acquire, release, renew in Redis. */
#ifndef CCAP_SEM_H
#define CCAP_SEM_H

#include <stddef.h>
#include "keys.h"
#include "redis.h"

/* Key layout, with a hash tag so a semaphore's keys share a cluster slot:
 *   <prefix>{<name>}:holders  sorted set: member holder id, score lease expiry
 *                             (ms of Redis server TIME)
 *   <prefix>{<name>}:limit    optional runtime override of the limit (string)
 *   <prefix>{<name>}:stats    ops counters (hash, no TTL): see CCAP_STAT_*
 *   <prefix>{<name>}:since    holder id -> acquire time (ms of server TIME);
 *                             lives as long as the holders key
 *   <prefix>{<name>}:waiters  sorted set: holder id -> when its wait ends (ms)
 *   <prefix>{<name>}:queue, qexp  the waiters' tickets: arrival (us), expiry (ms)
 *   <prefix>{<name>}:grant    hash: ticket -> "<lease> <limit>" of a waiter that
 *                             takes grants (CCAP_SEM_GRANTS, CCAP_SEM_TOKEN_GRANT)
 *   <prefix>{<name>}:audit    stream of acquire/release/timeout/reset events,
 *                             only when audit is on (XADD MAXLEN ~ audit_maxlen)
 *   <prefix>{<name>}:failover after a failover: the re-registration window
 *                             (ccap_sem_failover_open); its marker is the member
 *                             CCAP_FAILOVER_MARK of holders, score 0
 * Algorithm: a leased counting semaphore as a sorted set of holders (as in
 * the "fair semaphore" of Redis in Action, 6.3, with server time and leases
 * instead of client time), one atomic Lua script per operation. */

/* The longest time a reply may name (retry_ms, wake_ms): leases and
 * waits are ints of ms. */
#define CCAP_SEM_MS_MAX 2147483647LL

/* Every field is range-checked when the reply is parsed (see
 * ccap_sem_parse_acquire): users may add to them without overflow. */
struct ccap_sem_result {
    int granted;         /* 1 if this holder now holds a permit */
    long long count;     /* holders after the call, 0..INT_MAX */
    long long limit;     /* limit in force (override or configured): any integer, as the limit key
                         * may say (it is shown, never computed with) */
    long long retry_ms;  /* > 0 the rate or the restart grace says not yet, next slot in that many ms
                         * (0..CCAP_SEM_MS_MAX) */
    long long wake_ms;   /* ms until the earliest lease ends (re-check then), -1 none (-1..CCAP_SEM_MS_MAX) */
    int queue_full;      /* 1: refused at once, the queue holds max_waiters tickets (not queued) */
    long long queue_len; /* tickets in the queue after the call (0..INT_MAX), -1 unknown: the reply of a
                          * script (function library) that does not say it */
};

/* Parses acquire.lua's reply REP: an array {granted 0|1, count, limit,
 * retry_ms, wake_ms, queue_full 0|1[, queue_len]}, each an integer within the
 * range its field states (queue_len left out: -1), or {1, count, limit}: a
 * grant with nothing more to say (retry_ms 0, wake_ms -1, queue_full 0,
 * queue_len 0). Returns 0 and fills *RES, or -EPROTO with R's error (R may be
 * NULL) saying which element was wrong and how. Pure; does not free REP. */
int ccap_sem_parse_acquire(struct ccap_redis *r, const redisReply *rep, struct ccap_sem_result *res);

/* Parses REP, WHAT (named in errors), as an integer in [MIN, MAX] into *V.
 * Returns 0, or -EPROTO with R's error (R may be NULL) saying why. Pure. */
int ccap_sem_parse_int(struct ccap_redis *r, const char *what, const redisReply *rep, long long min, long long max,
                       long long *v);

/* Fields of the stats hash (monotonic counters unless noted). */
#define CCAP_STAT_ACQUIRED "acquired"           /* permits granted by Redis */
#define CCAP_STAT_RELEASED "released"           /* permits given back */
#define CCAP_STAT_TIMED_OUT "timed_out"         /* waits that gave up */
#define CCAP_STAT_DENIED "denied"               /* acquire attempts refused (every retry) */
#define CCAP_STAT_RECLAIMED "reclaimed"         /* holders dropped at lease expiry */
#define CCAP_STAT_REREGISTERED "reregistered"   /* holders re-added by renew */
#define CCAP_STAT_FALLBACK "fallback_granted"   /* granted while Redis was down, counted on recovery */
#define CCAP_STAT_RESET_DROPPED "reset_dropped" /* holders dropped by conncap reset */
#define CCAP_STAT_QUEUE_FULL "queue_full"       /* connects refused at once: max_waiters tickets queued */
/* Gauge: server ms since no permit is free, with the limit in force then;
 * set by the grant that fills the semaphore (or a refusal that finds it
 * unset, or set under another limit), never cleared by a release: valid
 * only while the live holders reach the limit (ccap_ops_full_for_ms). */
#define CCAP_STAT_FULL_SINCE "full_since"
#define CCAP_STAT_FULL_LIMIT "full_limit"
/* Waits that ended: grants after a wait, and timeouts (timed_out). A grant
 * that never waited counts in acquired only; readers add acquired -
 * (wait_count - timed_out) of them as waits of 0 ms (cli/ops.c). */
#define CCAP_STAT_WAIT_COUNT "wait_count"
#define CCAP_STAT_WAIT_SUM "wait_sum_ms" /* their total ms */
/* Wait-time histogram: field "wait_le_<B>" counts waits of ms in
 * (previous bound, B] (not cumulative), "wait_le_inf" the longer ones. The
 * bounds are also in lua/acquire.lua and lua/timeout.lua. */
#define CCAP_WAIT_BOUNDS_MS                                                                                         \
    {                                                                                                               \
        1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000                                                    \
    }
#define CCAP_WAIT_N_BOUNDS 12

/* Writes "<prefix>{<name>}:<suffix>" into OUT (SUFFIX: a CCAP_KEY_* of
 * keys.h). Returns its length, or -ENAMETOOLONG when OUTLEN is too small. */
int ccap_sem_key(char *out, size_t outlen, const char *prefix, const char *name, const char *suffix);

/* More keys, same hash tag (keys.h):
 *   <prefix>{<name>}:queue       sorted set: waiting holder id -> arrival (us of TIME)
 *   <prefix>{<name>}:qexp        sorted set: waiting holder id -> ticket expiry (ms)
 *   <prefix>{<name>}:wake:<id>   list of at most one token: BLPOPed by that waiter
 *   <prefix>{<name>}:rate        GCRA theoretical arrival time (us of TIME)
 * Fairness: waiters are admitted in arrival order (Redis in Action 6.3.2's
 * fair semaphore, as a queue): with the queue not empty, only its first
 * (limit - count) live tickets may take a permit, a newcomer lines up last.
 * Rate: GCRA (one permit per 1/rate s, BURST at once), on server time.
 * Bounded work: every script drops at most CCAP_SEM_SWEEP_MAX expired holders
 * (and as many dead tickets) per call, counts only live holders (ZCOUNT of
 * the unexpired ones) so a dead holder's permit is free again at the end of
 * its lease whether or not it was swept yet, and wakes at most as many
 * waiters as permits the call freed. */
#define CCAP_SEM_SWEEP_MAX 50 /* SWEEP in lua/acquire.lua and lua/renew.lua: the same number */
/* ccap_sem_renew sends at most this many holders per script call. */
#define CCAP_SEM_RENEW_BATCH 50

/* One acquire attempt of a (possibly waiting) connect. */
struct ccap_sem_req {
    const char *holder;     /* holder id, also the waiter's ticket */
    int lease_ms;           /* > 0 */
    int limit;              /* configured limit (the limit key wins) */
    long long waited_ms;    /* stats: waited so far */
    long long wait_left_ms; /* stats: ms until it gives up (0: will not wait) */
    int ticket_ttl_ms;      /* > 0: queue HOLDER if not admitted, ticket lives this long unless
                             * refreshed by the next attempt; 0: try once, never queue */
    int flags;              /* CCAP_SEM_UNBLOCK, CCAP_SEM_LEAVE, CCAP_SEM_GRANTS */
    double rate;            /* permits per second, 0: no rate limit */
    int burst;              /* >= 1 */
    int grace_ms;           /* > 0: when the semaphore's epoch key is missing (first use, or Redis
                             * lost its data), new grants wait this long: holders re-register first */
    int max_waiters;        /* > 0: a caller that would queue behind this many tickets is refused at
                             * once (res->queue_full) and counted; 0: no bound */
    int audit_maxlen;       /* > 0: a grant appends an event to the audit stream (XADD MAXLEN ~) */
    bool check_epoch;       /* run only on a master of failover epoch EPOCH (ccap_sem_epoch): else
                             * -ESTALE, not run (ccap_redis_expect_epoch) */
    unsigned epoch;
};
#define CCAP_SEM_UNBLOCK 1 /* push a token to HOLDER's own wake list (ends its pending BLPOP) */
#define CCAP_SEM_LEAVE 2   /* leave the queue if not admitted now (the last attempt) */
#define CCAP_SEM_GRANTS                                                                                             \
    4 /* HOLDER, if it queues, takes grants: a release may admit it and push
                            * CCAP_SEM_TOKEN_GRANT to its wake list (ignored under a rate) */

/* The tokens of a wake list (one at most): this header owns their format
 * (lua/acquire.lua and lua/release.lua push them, runtime/wait.c reads
 * them). A waiter that finds CCAP_SEM_TOKEN_GRANT holds its permit in Redis
 * already (release.lua admitted it, with the lease it queued with); any
 * other token (CCAP_SEM_TOKEN_WAKE, a poke's, an unblock's) only says
 * re-check: its next acquire decides. */
#define CCAP_SEM_TOKEN_WAKE "w"
#define CCAP_SEM_TOKEN_GRANT "g"

/* One attempt: admits REQ->holder if the limit, the queue order and the rate
 * allow (a holder asking again keeps its permit, its lease renewed);
 * otherwise queues or refreshes its ticket (ticket_ttl_ms > 0) unless the
 * queue is full (res->queue_full: not queued, counted as queue_full), and
 * tells when to re-check (res->retry_ms, res->wake_ms). A grant feeds the
 * wait histogram with waited_ms; a refusal counts denied and lists HOLDER in
 * the waiters set for wait_left_ms + 1 s. Wakes the waiters that may go
 * when expired leases or tickets were swept. Returns 0 and *RES, or -errno
 * as ccap_redis_script (-EINVAL for a bad REQ). Never waits. Not
 * thread-safe on R. */
int ccap_sem_acquire(struct ccap_redis *r, const char *prefix, const char *name, const struct ccap_sem_req *req,
                     struct ccap_sem_result *res);

/* HOLDER gave up waiting for NAME after WAITED_MS: counts timed_out, feeds
 * the wait histogram, takes HOLDER off the waiters set, and appends a timeout
 * event to the audit stream when AUDIT_MAXLEN > 0. Returns 0 or -errno as
 * ccap_redis_script. */
int ccap_sem_timeout(struct ccap_redis *r, const char *prefix, const char *name, const char *holder,
                     long long waited_ms, int audit_maxlen);

/* Adds N to NAME's fallback_granted counter (permits granted while Redis
 * was down, now registered), with lua/fallback.lua (a worker's user needs
 * no plain write command). Returns 0 or -errno as ccap_redis_script. */
int ccap_sem_count_fallback(struct ccap_redis *r, const char *prefix, const char *name, int n);

/* Drops every holder of NAME (and their acquire times); counters stay.
 * Appends a reset event naming WHO when AUDIT_MAXLEN > 0. Plain commands
 * (an operator's, not in the workers' function library), one after the
 * other: a holder that acquires meanwhile may lose its acquire time (not
 * its permit). Returns the number of holders dropped, or -errno as
 * ccap_redis_command. */
int ccap_sem_reset(struct ccap_redis *r, const char *prefix, const char *name, const char *who, int audit_maxlen);

/* One release: the holder, the configured LIMIT of its semaphore (the limit
 * key wins; -1 unknown: one waiter woken per permit freed) and the audit
 * stream's MAXLEN (0: no audit). */
struct ccap_sem_rel {
    const char *holder;
    int limit;        /* configured limit, -1 unknown */
    int audit_maxlen; /* > 0: append a release event to the audit stream */
    bool renewed;     /* the holder may have been renewed: delete its acquire time too */
};

/* Releases REL->holder's permit on NAME and takes it out of the queue;
 * idempotent, removes no other holder; then wakes at most as many of the
 * first waiters as permits are free. Returns 1 if a permit was removed, 0
 * if the holder held none, or -errno as ccap_redis_script. */
int ccap_sem_release(struct ccap_redis *r, const char *prefix, const char *name, const struct ccap_sem_rel *rel);

/* ccap_sem_release without waiting for Redis's reply (the shim's close()
 * path): sent at once when SEND, else only kept; either way kept until
 * Redis answered that it ran, and run again after a lost connection or an
 * error reply (see ccap_redis_script_defer), until UNTIL_MS (monotonic ms:
 * the end of the lease, when Redis drops the holder anyway). Returns 0 or
 * -errno as ccap_redis_script_defer. */
int ccap_sem_release_defer(struct ccap_redis *r, const char *prefix, const char *name,
                           const struct ccap_sem_rel *rel, long long until_ms, bool send);

/* Extends the leases of N holders of NAME to now + LEASE_MS, in script
 * calls of at most CCAP_SEM_RENEW_BATCH holders each (one Redis call never
 * grows with N). If ADD_MISSING is non-zero, a holder missing from the set
 * (lost by a Redis restart or failover) is added again, even above the
 * limit. Returns the number of holders that were missing (re-added or not),
 * or -errno of the first call that failed (the batches before it ran). */
int ccap_sem_renew(struct ccap_redis *r, const char *prefix, const char *name, const char *const *holders, size_t n,
                   int lease_ms, int add_missing);

/* ccap_sem_renew, each script call of it run only on a master of failover
 * epoch *EPOCH (when EPOCH is not NULL): -ESTALE, that batch not run, when
 * the call finds another (the batches before it ran). */
int ccap_sem_renew_at(struct ccap_redis *r, const char *prefix, const char *name, const char *const *holders,
                      size_t n, int lease_ms, int add_missing, const unsigned *epoch);

/* Failovers (lua/failover.lua). The failover epoch of NAME's master as R
 * knows it (ccap_redis_key_epoch of its keys), and the server that serves
 * it now ("host:port", "" unknown; R's buffer). No I/O. */
unsigned ccap_sem_epoch(const struct ccap_redis *r, const char *prefix, const char *name);
const char *ccap_sem_server(struct ccap_redis *r, const char *prefix, const char *name);

/* Opens a failover's re-registration window of WINDOW_MS on NAME, on the
 * master SERVER that took over (a caller whose client saw the change, before
 * its other calls there): until it ends acquire grants no new permit (as
 * during a restart grace) while the live processes renew theirs and their
 * waiters try again; then the first acquires drop every holder whose lease
 * ends before now + LEASE_MS and every ticket whose TTL ends before now +
 * TICKET_TTL_MS (nobody renewed or refreshed them meanwhile), SWEEP of each
 * per call. Returns 1 opened, 0 when SERVER had one for this failover
 * already, or -errno as ccap_redis_script (-EINVAL for a bad window, lease
 * or TTL). */
int ccap_sem_failover_open(struct ccap_redis *r, const char *prefix, const char *name, int window_ms, int lease_ms,
                           int ticket_ttl_ms, const char *server);

/* Writes the wake list key of waiter HOLDER on NAME into OUT. Returns its
 * length or -ENAMETOOLONG. */
int ccap_sem_wake_key(char *out, size_t outlen, const char *prefix, const char *name, const char *holder);

#endif
