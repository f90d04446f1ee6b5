/* keys.h -- the Redis key layout of a semaphore: the one place that names its keys. */
#ifndef CCAP_KEYS_H
#define CCAP_KEYS_H

/* Every key of semaphore NAME is "<key_prefix>{<NAME>}:<suffix>"
 * (ccap_sem_key builds it). The braces are a Redis Cluster hash tag: all of
 * a semaphore's keys live in one slot, so one script may touch them all.
 * the scripts (lua/) receive these keys in KEYS[] and never spell a suffix
 * themselves, except the wake lists, derived from the queue key (its name
 * minus CCAP_KEY_QUEUE plus CCAP_KEY_WAKE and the holder id), and the keys
 * release.lua's short call leaves out, derived the same way when it finds
 * a queue (test_sem's test_short_release fails if these names drift). */
#define CCAP_KEY_HOLDERS "holders"   /* zset: holder id -> lease expiry (ms, server TIME) */
#define CCAP_KEY_LIMIT "limit"       /* string: limit override (conncap set-limit), no TTL */
#define CCAP_KEY_STATS "stats"       /* hash: counters (CCAP_STAT_*), no TTL */
#define CCAP_KEY_SINCE "since"       /* hash: holder id -> acquire time (ms) once renewed, TTL of holders */
#define CCAP_KEY_WAITERS "waiters"   /* zset: waiting holder id -> when its wait ends (ms) */
#define CCAP_KEY_AUDIT "audit"       /* stream: acquire/timeout/ops events (audit_maxlen) */
#define CCAP_KEY_QUEUE "queue"       /* zset: waiting holder id -> arrival (us): the FIFO */
#define CCAP_KEY_QEXP "qexp"         /* zset: waiting holder id -> ticket expiry (ms) */
#define CCAP_KEY_RATE "rate"         /* string: GCRA theoretical arrival time (us) */
#define CCAP_KEY_EPOCH "epoch"       /* string: server ms from which grants resume (restart grace) */
#define CCAP_KEY_WAKE "wake:"        /* list prefix: "<...>:wake:<holder id>", one token at most */
#define CCAP_KEY_FAILOVER "failover" /* string: a failover's re-registration window (lua/failover.lua) */
#define CCAP_KEY_GRANT "grant"       /* hash: waiting holder id -> "<lease ms> <limit>": it takes grants */
/* The member of the holders set that marks a failover window, score 0 (no
 * holder id: those all have a '/'); readers of live holders never see it. */
#define CCAP_FAILOVER_MARK "!failover"

#endif
