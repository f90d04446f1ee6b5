/* wait.h -- waiting for a permit without polling: waiters' own Redis connections and their blocks. */
#ifndef CCAP_WAIT_H
#define CCAP_WAIT_H

#include <stdbool.h>
#include "redis.h"

/* Design (issue 6). A connect that finds no permit free queues a ticket in
 * Redis (lua/acquire.lua: a FIFO of waiters) and blocks with BLPOP on its
 * own wake list, <prefix>{<name>}:wake:<holder id>. Whoever frees a permit
 * (release.lua; acquire.lua when it sweeps expired leases or dead tickets)
 * pushes a token to the wake lists of the first (limit - count) waiters.
 * The ticket is queued before the waiter blocks, so a token pushed in
 * between stays in the list and the BLPOP returns at once: no wake-up is
 * lost. A waiter re-checks after every wake and after every block timeout.
 *
 * BLPOP never runs on the shim's shared connection: a blocked thread would
 * hold it (and every other thread's acquire and release) for the whole
 * block. Each waiting thread borrows a connection of its own from a small
 * pool; they are made on demand (same client as the main one: CLOEXEC, high
 * fd number, identity-checked), kept while idle for at most
 * CCAP_WAIT_IDLE_MS, and forgotten without I/O in a forked child. Beyond
 * CCAP_WAIT_MAX_CONNS waiting threads in one process, the others sleep
 * until their re-check instead of blocking (documented limit). */

/* Connections kept or lent at once by one process. */
#define CCAP_WAIT_MAX_CONNS 64
/* An idle pooled connection is closed after this long. */
#define CCAP_WAIT_IDLE_MS 10000

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

#endif
