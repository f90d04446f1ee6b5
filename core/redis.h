/* redis.h -- the Redis client (shim and CLI): one server, Sentinel or Cluster, every call bounded by timeouts. */
#ifndef CCAP_REDIS_H
#define CCAP_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <hiredis/hiredis.h>
#include "config.h"
#include "resp.h"

/* The embedded Lua scripts (lua/NAME.lua), in this order: the functions
 * of the library conncap_<version> (ccap_function_library) that a worker
 * may call. Operator actions (set-limit, reset) are plain commands. */
enum ccap_script {
    CCAP_SCRIPT_ACQUIRE = 0,
    CCAP_SCRIPT_RELEASE,
    CCAP_SCRIPT_RENEW,
    CCAP_SCRIPT_TIMEOUT,  /* the timeout event of a wait */
    CCAP_SCRIPT_FALLBACK, /* counts permits granted while Redis was down */
    CCAP_SCRIPT_FAILOVER, /* opens a failover's re-registration window */
    CCAP_SCRIPT_COUNT
};

/* A client for one Redis deployment: a single server (host/port or Unix
 * socket), a master found through Redis Sentinel (conf.sentinels +
 * conf.master), or a Redis Cluster (conf.cluster seeds). Each server it
 * talks to gets its own connection. Not thread-safe: callers serialise use
 * (the shim's runtime holds a mutex around its client); separate objects
 * are independent.
 * Errors live on the object: the last one is in ccap_redis_errstr().
 *
 * Sentinel: every (re)connect asks the sentinels in turn (the one that
 * answered last first) with SENTINEL get-master-addr-by-name, connects to
 * that address and checks with ROLE that it is a master; a READONLY reply
 * makes it ask again at once, a lost connection at the next call.
 * Cluster: a command goes to the node owning its first key's hash slot
 * (CRC16 of the key's {hash tag}, as in the Redis Cluster specification);
 * the slot map comes from CLUSTER SLOTS and is refreshed after a MOVED
 * redirect or a lost node; MOVED and ASK (with ASKING) redirects are
 * followed (at most 5 hops per call) and TRYAGAIN retried for up to
 * command_timeout_ms. */
struct ccap_redis;

/* Creates a client for CONF (copied; no I/O happens here). Returns NULL
 * only when out of memory. */
struct ccap_redis *ccap_redis_new(const struct ccap_redis_conf *conf);

/* What a reply may hold on R's connections made from now on (CAPS is kept,
 * not copied: one of ccap_resp_caps_shim, the default, or
 * ccap_resp_caps_cli). A reply beyond them closes its connection and the
 * call fails with -EIO, as for any lost connection. */
void ccap_redis_set_caps(struct ccap_redis *r, const struct ccap_resp_caps *caps);

/* Closes the connection (if still ours: see ccap_redis_owns_fd) and frees. */
void ccap_redis_free(struct ccap_redis *r);

/* Connects if not connected: socket created SOCK_CLOEXEC, moved with
 * F_DUPFD_CLOEXEC to a number above the range programs normally use,
 * connect bounded by connect_timeout_ms, each command (its write and its whole
 * reply) by command_timeout_ms,
 * then AUTH and SELECT as configured. Before every use the descriptor's
 * identity (st_dev, st_ino) is checked: if the program closed or replaced
 * it, the client never writes to, shuts down or closes that number, and
 * reconnects on a fresh one. With Sentinel, first finds the master (a
 * connect then costs up to about twice the timeouts); with Cluster,
 * connects to a seed and loads the slot map. Returns 0, -ETIMEDOUT,
 * -ECONNREFUSED, -EACCES (auth failed), -EAGAIN (Sentinel: the master named
 * is a replica or unreachable) or -EIO. Must run with the shim's recursion
 * guard held. */
int ccap_redis_connect(struct ccap_redis *r);

/* Runs script WHICH: with FCALL of this build's function library (see
 * ccap_function_library); when the server answers that it has none, with
 * EVALSHA (loading it on first use and again after NOSCRIPT, invisibly to
 * the caller; the first such fallback of the process is logged as a
 * warning, and asked again a minute later), NKEYS keys followed by ARGS: ARGC
 * NUL-terminated strings, keys first. On success returns 0 and *REPLY
 * (caller frees with freeReplyObject). Returns -errno on a transport error
 * (the connection is dropped and reopened on the next call: -ETIMEDOUT,
 * -ECONNREFUSED, -EPIPE, -EIO: a reply beyond the caps or not RESP too),
 * -EAGAIN for an error reply that says the server cannot serve now
 * (LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, READONLY, BUSY, OOM, DENIED,
 * MISCONF, NOREPLICAS, NOMASTERLINK, "ERR max number of clients", or
 * redirects beyond 5 hops), -EACCES for NOAUTH, WRONGPASS or NOPERM, or
 * -EPROTO for another Redis error reply (the text is in ccap_redis_errstr
 * in every case). A reused
 * connection found closed by the server (EOF, reset) is replaced and the
 * command sent once more: scripts must be idempotent (ours are, per holder).
 * Cluster: routed by the first key (ARGS[0] when NKEYS > 0). */
int ccap_redis_script(struct ccap_redis *r, enum ccap_script which, int nkeys, int argc, const char *const *args,
                      redisReply **reply);

/* Failovers. How many times R saw the master serving KEY replaced by
 * another server: Sentinel, the sentinels named another master than the
 * one R used (the first one found is not counted); Cluster, KEY's slot
 * went to a node that was a replica of its master, or that the previous
 * slot map did not know as a master (a resharding between masters is not
 * counted: it moves the keys with their data). 0 with one server. The
 * count of a new master is known once R connected to it, i.e. during the
 * call that found it. No I/O. */
unsigned ccap_redis_key_epoch(const struct ccap_redis *r, const char *key);

/* How many failovers R saw in all (the sum of the epochs of every key): a
 * cheap test whether any master changed since the caller last looked. */
unsigned ccap_redis_epochs(const struct ccap_redis *r);

/* Makes the next ccap_redis_script or ccap_redis_command call (that one
 * only) run its command only if the epoch of its first key
 * (ccap_redis_key_epoch) is still EPOCH when the command is about to be
 * written -- after any reconnect, sentinel question or redirect on the way.
 * Otherwise the call returns -ESTALE without running it, connected to the
 * new master: the caller may act on the failover (re-register, open a
 * window) before its first command there, then call again. */
void ccap_redis_expect_epoch(struct ccap_redis *r, unsigned epoch);

/* "host:port" (or the Unix socket path) of the server that serves KEY as R
 * knows it now: the master last found (Sentinel), the slot's owner in the
 * map (Cluster), the one server; "" when not known yet. Owned by R, valid
 * until the next call. No I/O. */
const char *ccap_redis_key_server(struct ccap_redis *r, const char *key);

/* Runs one plain command (argv form, like redisCommandArgv). Same return
 * values and ownership as ccap_redis_script. Cluster: routed by the
 * command's first key (ARGV[1] for most commands; EVAL/EVALSHA/FCALL by
 * their first key, OBJECT/MEMORY by ARGV[2], XREAD by the first stream);
 * commands without keys (PING, TIME, SCRIPT, INFO, ...) go to any node, so
 * KEYS/SCAN see one node only. */
int ccap_redis_command(struct ccap_redis *r, int argc, const char *const *argv, redisReply **reply);

/* Runs script WHICH like ccap_redis_script, but does not wait for its
 * reply: with SEND, writes it (a reused connection found closed is
 * replaced once) and returns; without, only queues it. The command is kept
 * until a reply says it ran: the replies are read before the next command
 * on that connection (ccap_redis_script, ccap_redis_command) or by
 * ccap_redis_flush. One that could not be sent, was lost with its
 * connection, or was answered with an error (NOSCRIPT after a restart, a
 * cluster redirect) is run again the normal way after the next command that
 * works, or by ccap_redis_flush -- so it must be idempotent (release is).
 * At most 256 are kept (the oldest unsent goes first); one not run by
 * UNTIL_MS (monotonic ms) is dropped. NKEYS >= 1 (cluster: routed by
 * ARGS[0]). Returns 0 (queued, and written when SEND), -EINVAL, -ENOMEM,
 * or the -errno of ccap_redis_script for a failed connect or write (the
 * command stays queued). Same thread-safety as the rest of R. */
int ccap_redis_script_defer(struct ccap_redis *r, enum ccap_script which, int nkeys, int argc,
                            const char *const *args, long long until_ms, bool send);

/* Reads every reply owed to deferred commands and runs those not sent (or
 * to run again) synchronously, oldest first; drops those past their
 * UNTIL_MS. Returns how many are still kept (0: all ran), or the -errno of
 * the first failure: one Redis refuses for good is dropped and gives
 * -EPROTO (the text is in ccap_redis_errstr), the others stay kept. An
 * error reply is never a success: the caller's breaker counts it. */
int ccap_redis_flush(struct ccap_redis *r);

/* How many deferred commands R keeps (sent or not). */
size_t ccap_redis_deferred(const struct ccap_redis *r);

/* After fork(), in the child: forgets the inherited connection without any
 * I/O on it (closes only the child's copy of the descriptor) so that the
 * child never interleaves replies with its parent, and drops the parent's
 * deferred commands. */
void ccap_redis_forget(struct ccap_redis *r);

/* After fork(), in the child: every connection made before the fork is
 * the parent's, and is forgotten (as by ccap_redis_forget) at its next use.
 * Core registers no fork handler itself: a process that forks while
 * holding connections calls this from its pthread_atfork child handler
 * (the shim's runtime does, runtime/lifecycle.c). Async-signal-safe. */
void ccap_redis_fork_child(void);

/* Keeps a socket ready, process-wide, for a connect that finds no
 * descriptor free (EMFILE, ENFILE, or RLIMIT_NOFILE lowered below every
 * free number): one unconnected socket of the family of R's connection
 * (none when R is not connected), made now if there is none, on a high
 * number, CLOEXEC. Any client's next connect of that family takes it when
 * socket() fails so; the next call makes another. No network I/O: for
 * the start of a wait, whose waker connects later, perhaps after the
 * program used up its descriptors. Thread-safe. */
void ccap_redis_reserve(const struct ccap_redis *r);

/* The descriptor currently in use (with several servers: the one used
 * last), or -1. A program closing this number is noticed at the next use. */
int ccap_redis_fd(const struct ccap_redis *r);

/* Room for any long long in decimal ("-9223372036854775808") and its NUL. */
#define CCAP_FMT_LL_LEN 21

/* V in decimal into OUT (room for CCAP_FMT_LL_LEN bytes), NUL-terminated; returns OUT.
 * For command arguments on the connect path, where snprintf's format
 * parsing would cost more than the conversion. Thread-safe. */
char *ccap_fmt_ll(char *out, long long v);

/* The Redis Cluster hash slot (0..16383) of KEY (LEN bytes): CRC16-XMODEM
 * of the key, or of its hash tag (the text between the first '{' and the
 * next '}', when not empty), modulo 16384 -- the Redis Cluster
 * specification's algorithm. Pure; thread-safe. */
int ccap_redis_key_slot(const char *key, size_t len);

/* The number the connection's descriptor is moved to (or above):
 * min(soft RLIMIT_NOFILE, 1024) - 32. */
int ccap_redis_fd_base(void);

/* Sets R's error text (printf-like; nothing when R is NULL), e.g. a caller
 * that found a reply of the wrong shape says which; preserves errno. */
void ccap_redis_set_err(struct ccap_redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* With TLS: the last handshake's protocol, cipher and peer subject
 * ("TLSv1.3 TLS_AES_256_GCM_SHA384, peer /CN=redis"), or "" (plain, or
 * none yet). Owned by R. */
const char *ccap_redis_tls_info(const struct ccap_redis *r);

/* The last error text ("" if none). Owned by R, valid until the next call. */
const char *ccap_redis_errstr(const struct ccap_redis *r);

/* Whether the last error was an error reply of Redis's (it ran or refused
 * the command), not a failure to reach it (connect, I/O, timeout). */
bool ccap_redis_err_replied(const struct ccap_redis *r);

/* The SHA1 of script WHICH (40 hex chars), its source text, and its
 * function's name in the library ("conncap_<name>_<version>"); NULL for a
 * WHICH out of range. Static strings; thread-safe. */
const char *ccap_script_function(enum ccap_script which);
const char *ccap_script_sha(enum ccap_script which);
const char *ccap_script_source(enum ccap_script which);

/* The Redis 7 function library built from the lua/ scripts (FUNCTION LOAD text:
 * "#!lua name=conncap_<version>", one function per script plus
 * conncap_version_<version>, read-only, returning <version>), and
 * <version>: 12 hex digits of the SHA1 of the scripts. Static strings. */
const char *ccap_function_library(void);
const char *ccap_function_version(void);

/* Runs ARGV on every server that holds data: the one server, the master
 * Sentinel names, or every master of a Cluster (after loading the slot
 * map). For each, calls EACH(CTX, node "host:port" or socket path, reply
 * or NULL, rc: 0 or -errno as ccap_redis_command, R's error telling why);
 * the reply is freed after EACH returns. Returns the number of servers
 * that answered without an error reply, or -errno when none could be
 * reached at all. */
int ccap_redis_command_each(struct ccap_redis *r, int argc, const char *const *argv,
                            void (*each)(void *ctx, const char *node, const redisReply *rep, int rc), void *ctx);

#endif
