/* wait.h -- waiting for a permit without polling: waiters' own Redis connections and their blocks. */
#ifndef CCAP_WAIT_H
#define CCAP_WAIT_H

#include <pthread.h>
#include <stdbool.h>
#include "nap.h"
#include "redis.h"

/* A connect that finds no permit free queues a ticket in Redis
 * (lua/acquire.lua: a FIFO of waiters) and then sleeps until a token on its
 * own wake list, <prefix>{<name>}:wake:<holder id>, or a time of its own
 * (runtime/waiting.c). Whoever frees a permit (release.lua; acquire.lua when it
 * sweeps expired leases or dead tickets) pushes a token to the wake lists of
 * the first (limit - count) waiters. A token pushed before its waiter
 * blocks stays in the list: no wake-up is lost.
 *
 * The waker. BLPOP never runs on the shim's shared connection: a blocked
 * thread would hold it (and every other thread's acquire and release) for
 * the whole block. Waiting threads do not block on Redis themselves either:
 * a per-process waker thread, started with the first waiter and ended
 * WAKER_IDLE_MS after the last, blocks with one BLPOP on the wake lists of
 * all of the process's sleeping (armed) waiters at once plus a poke list of
 * its own, and hands each token to its waiter (a condition variable). A
 * woken waiter is out of the next BLPOP until it arms again to sleep; with
 * no armed waiter the waker sleeps without a BLPOP. A waiter joining (or
 * arming) while a BLPOP without its key is pending pushes one token to the
 * poke list (on the shared connection) so that the waker blocks again with
 * its key; joins in the meantime share that poke. Leaving costs nothing
 * (the waker drops the key at its next block). A lone waiter (the lane's
 * only one) in a program's thread, or in the queue's (runtime/nap.h,
 * ccap_nap_shim), blocks on its key itself, on the waker's connection: a
 * token then costs one thread wake-up, not two (the waker's, then the
 * waiter's); its block is a blocking recv, with its nap's signal
 * and cancellation rules, and the waker ends it at the waiter's wake-up time
 * or a nudge (a shutdown of the connection), reads it when the waiter leaves
 * it pending, and takes over when a second waiter joins (its poke ends the
 * lone block). So a process keeps at most
 * two Redis connections however many of its threads wait: the shared one
 * and the waker's. In Redis Cluster one BLPOP takes keys of one slot only,
 * and the semaphore name is the hash tag: there is one waker (thread and
 * connection) per semaphore with waiters, at most CCAP_WAIT_LANES. When
 * the waker's connection fails, each waiter re-checks once, then polls every
 * CCAP_WAIT_POLL_MS until the waker blocks again.
 *
 * The waker's connection comes from a small pool (also usable directly, by
 * the tests and tools): made on demand (same client as the main one:
 * CLOEXEC, high fd number, identity-checked), kept while idle for at most
 * CCAP_WAIT_IDLE_MS, and forgotten without I/O in a forked child (which
 * has no waker thread and no waiter: its wakers start afresh). */

/* Connections kept or lent at once by one process. */
#define CCAP_WAIT_MAX_CONNS 64
/* An idle pooled connection is closed after this long. */
#define CCAP_WAIT_IDLE_MS 10000
/* Wakers at most (one per semaphore with waiters in Redis Cluster, else one). */
#define CCAP_WAIT_LANES 8
/* A waiter that may miss a token (its waker failing) re-checks this often. */
#define CCAP_WAIT_POLL_MS 1000
/* The longest wake list key. */
#define CCAP_WAIT_KEY_MAX 640

/* A waiting thread, registered with its waker (ccap_waiter_join). Owned by
 * the waiting thread (on its stack); the fields are the waker's. */
struct ccap_waiter {
    char key[CCAP_WAIT_KEY_MAX]; /* its wake list: set before ccap_waiter_join */
    int woke;                    /* CCAP_WOKE_* bits not yet seen by the waiter */
    bool armed;                  /* wants KEY in the waker's BLPOP (join, arm; a token ends it) */
    bool in_block;               /* KEY is in the waker's pending (or next) BLPOP, or left out of it as
                                  * a later waiter of a semaphore with many (wait.c, collect) */
    bool solo_ok;                /* its nap is a program's (a timerfd) or a shim thread's (nap->shim):
                                  * alone, it blocks on KEY itself */
    bool soft;                   /* set by the waiting thread before ccap_waiter_wait (join clears it): its
                                  * UNTIL may pass by up to a second (a queued wait's look at its descriptor,
                                  * not a deadline): a lone block ends then by the server's timeout (whole
                                  * seconds), keeping the connection, not by the waker cutting it */
    struct ccap_nap *nap;        /* what it sleeps on, kicked by the waker: the caller's, or OWN */
    struct ccap_nap own;
    struct ccap_wait_lane *lane;
    struct ccap_waiter *next;
};
#define CCAP_WOKE_TOKEN 1  /* a token came: re-check now */
#define CCAP_WOKE_BROKEN 2 /* the waker's connection failed: a token may be lost, re-check */
#define CCAP_WOKE_POLL 4   /* CCAP_WAIT_POLL_MS passed while a token could be missed: re-check */
#define CCAP_WOKE_SIGNAL 8 /* a signal handler without SA_RESTART interrupted the sleep (runtime/nap.h) */
#define CCAP_WOKE_GRANT                                                                                             \
    16 /* with CCAP_WOKE_TOKEN: the token was CCAP_SEM_TOKEN_GRANT, the permit is
                            * the waiter's in Redis (no acquire needed) */

/* Registers W (W->key set) with the waker of semaphore NAME (key prefix
 * PREFIX), starting it if needed; CONF (copied) makes its connection. W
 * sleeps on NAP (the caller's, made with ccap_nap_init, outliving the
 * registration), or with NAP NULL on a nap of its own (no timerfd).
 * Returns 1 when the caller must push one token to the poke list written to
 * POKE (POKELEN bytes) -- with LPUSH on a connection of its own, not
 * waiting for the waker -- or call ccap_waiter_poke_failed if it cannot;
 * 0 when not; -ENOMEM or -EAGAIN (no waker: no memory, no thread, all
 * CCAP_WAIT_LANES taken) when W is not registered (the caller re-checks on
 * its own). Thread-safe; no I/O. */
int ccap_waiter_join(struct ccap_waiter *w, struct ccap_nap *nap, const struct ccap_redis_conf *conf,
                     const char *prefix, const char *name, char *poke, size_t pokelen);

/* Before W (joined) sleeps again after a token: a token disarms its waiter
 * (the waker's next BLPOP leaves its key out: a woken waiter usually takes
 * its permit and leaves, and a key kept in the block would need a poke, a
 * second BLPOP and a wake-up of the waker for every wait). Arms W again:
 * returns 1 when the caller must push one token to the poke list written to
 * POKE (as for ccap_waiter_join: the waker blocks without W's key), else 0
 * (W armed already, or the waker will block with W's key by itself). A token
 * pushed while W was disarmed stays in its list: no wake-up is lost.
 * Thread-safe; no I/O. */
int ccap_waiter_arm(struct ccap_waiter *w, char *poke, size_t pokelen);

/* The poke ccap_waiter_join asked for was not sent: W polls until its key is
 * in a block, and the next join pokes. Thread-safe. */
void ccap_waiter_poke_failed(struct ccap_waiter *w);

/* Sleeps until W gets a token, its waker fails, UNTIL_MS (monotonic ms)
 * comes, or CCAP_WAIT_POLL_MS pass while W may miss a token (its waker
 * failing, or blocking without W's key, or W not armed). Returns the
 * CCAP_WOKE_* bits (cleared for the next call), 0 at UNTIL_MS (with
 * W->soft, up to a second after it: a lone block's server timeout);
 * CCAP_WOKE_SIGNAL when its nap was interrupted (runtime/nap.h). Only W's
 * thread calls it. It sleeps without the pool's lock: with a program's nap,
 * a cancel acts there and leaves no lock held (the caller's cleanup handler
 * calls ccap_waiter_leave). */
int ccap_waiter_wait(struct ccap_waiter *w, long long until_ms);

/* ccap_waiter_wait for a W whose nap nobody sleeps on (a thread that runs
 * many waits, runtime/qrun.h): returns W's CCAP_WOKE_* bits now (cleared),
 * without sleeping; *POLL is whether W may miss a token now (its waker
 * failing, or blocking without W's key, or W not armed): it must then look
 * again within CCAP_WAIT_POLL_MS, as ccap_waiter_wait's CCAP_WOKE_POLL.
 * Thread-safe; no I/O. */
int ccap_waiter_take(struct ccap_waiter *w, bool *poll);
/* Unregisters W (joined). Its key stays in a pending BLPOP until the waker's
 * next block: a token popped for it then is dropped. Thread-safe. */
void ccap_waiter_leave(struct ccap_waiter *w);

/* Wakes W as a token would, if W is registered now (a W that left, or
 * never joined, is left alone). W must stay valid for the call. Thread-safe. */
void ccap_waiter_nudge(struct ccap_waiter *w);

/* Waker threads running now, for tests. */
int ccap_wait_waker_count(void);

/* Lends a connection for blocking, made from CONF (copied) if none is idle.
 * Returns NULL when CCAP_WAIT_MAX_CONNS are out or memory is short (the
 * caller then sleeps instead). No I/O: the connection opens at first use.
 * Thread-safe. */
struct ccap_redis *ccap_wait_conn_get(const struct ccap_redis_conf *conf);

/* Gives back a connection from ccap_wait_conn_get. KEEP false (or a reply
 * still pending: the caller knows) closes it; true pools it for reuse.
 * Thread-safe. */
void ccap_wait_conn_put(struct ccap_redis *r, bool keep);

/* Closes pooled connections idle for IDLE_MS or longer (0: all idle ones).
 * For the heartbeat. Thread-safe. */
void ccap_wait_reap(int idle_ms);

/* Connections currently made (idle + lent), for tests and the bench. */
int ccap_wait_conn_count(void);

/* ---- the client side of a block (core/redis_block.c) ----
 * For a waiter's own connection, never the shared one: the caller sends a
 * blocking command and waits for its reply with a deadline of its own,
 * because a server's timeout of a blocking command may fire up to 1/hz s
 * late (100 ms with the default hz 10). */

/* Connects if needed (to the node serving ARGV[1], the key) and sends ARGV
 * without reading the reply. Returns 0, or -errno as ccap_redis_command (the
 * connection is then dropped). At most one reply may be pending: read it
 * with ccap_redis_recv. Writes never raise SIGPIPE. */
int ccap_redis_send(struct ccap_redis *r, int argc, const char *const *argv);

/* Waits up to TIMEOUT_MS (>= 0) for the pending reply. Returns 0 and *REPLY
 * (any type, error replies too; caller frees), -EAGAIN when none came in time
 * (still pending: call again, or ccap_redis_close), or -errno on a transport
 * error (connection dropped). EINTR is retried within the timeout. */
int ccap_redis_recv(struct ccap_redis *r, int timeout_ms, redisReply **reply);

/* Closes the connection used last (if its descriptor is still ours),
 * abandoning a pending reply; the next call reconnects. */
void ccap_redis_close(struct ccap_redis *r);

/* Blocks, without a deadline, until the pending reply on R can be read
 * (bytes came, or the connection ended), in a blocking recv() of R's
 * socket: a signal handler with SA_RESTART has the kernel restart it, one
 * without makes it return -EINTR, as connect() does, and it is a
 * cancellation point (the socket's flags are put back either way). Returns
 * 1 (read the reply with ccap_redis_recv), -EINTR, or -errno (the pending
 * reply's connection is gone). For a waiting thread that blocks on its own
 * wake list (a lone waiter, below). */
int ccap_redis_await(struct ccap_redis *r);

/* Ends a ccap_redis_await on R in another thread: shuts R's socket down
 * (if its descriptor is still ours); the pending reply is lost and the next
 * ccap_redis_recv fails and closes R. No allocation, no Redis I/O. */
void ccap_redis_interrupt(struct ccap_redis *r);

/* Sends BLPOP KEY on R (a lent connection) and waits up to BLOCK_MS for its
 * reply. The server-side timeout is BLOCK_MS rounded up to whole seconds
 * plus one, a safety net only: the deadline here is exact. Returns 1 when
 * the BLPOP answered (a token, or the server's timeout), 0 when BLOCK_MS
 * passed first (the BLPOP is still pending: end it by pushing a token to KEY
 * -- acquire.lua's "u" flag -- then call ccap_wait_finish), or -errno when
 * the connection failed (it is closed). */
int ccap_wait_block(struct ccap_redis *r, const char *key, int block_ms);

/* Reads the reply of a pending BLPOP after its wake list got a token, within
 * TIMEOUT_MS. Returns 0, or -errno after closing R when it did not come. */
int ccap_wait_finish(struct ccap_redis *r, int timeout_ms);

/* Starts FN(ARG) as a detached thread; returns true if it started. */
typedef bool ccap_wait_spawn_fn(void *(*fn)(void *), void *arg);

/* Makes waker threads start through FN: in the shim, threads whose calls
 * are the shim's own (its guard set, so the waker's connects and closes
 * pass the hooks straight through) and that take no signal of the
 * program. NULL (the default): plain threads with every signal blocked.
 * Call before the first wait; not thread-safe against a running wait. */
void ccap_wait_set_spawn(ccap_wait_spawn_fn *fn);

/* fork(): the child neither shares the parent's sockets nor uses a lock
 * another thread held at fork time. Called by the runtime's one set of
 * fork handlers (runtime/lifecycle.c) around every fork: PREPARE takes the
 * pool's lock, PARENT releases it, CHILD forgets every connection without
 * I/O (it closes only its own copies of the descriptors), forgets the
 * wakers (their threads are not in the child) and releases the lock. */
void ccap_wait_fork_prepare(void);
void ccap_wait_fork_parent(void);
void ccap_wait_fork_child(void);

#endif
