/* redis.h -- the shim's Redis client: one hiredis connection, bounded by timeouts. */
#ifndef CCAP_REDIS_H
#define CCAP_REDIS_H

#include <stddef.h>
#include <hiredis/hiredis.h>
#include "config.h"

/* The embedded Lua scripts (lua/NAME.lua), in this order. */
enum ccap_script { CCAP_SCRIPT_ACQUIRE = 0, CCAP_SCRIPT_RELEASE, CCAP_SCRIPT_RENEW,
                   CCAP_SCRIPT_TIMEOUT, CCAP_SCRIPT_RESET, /* ops: timeout event, conncap reset */
                   CCAP_SCRIPT_COUNT };

/* One connection. Not thread-safe: callers serialise use (core/ holds a
 * mutex around it). Errors live on the object: the last one is in
 * ccap_redis_errstr(). */
struct ccap_redis;

/* Creates a client for CONF (copied; no I/O happens here). Returns NULL
 * only when out of memory. */
struct ccap_redis *ccap_redis_new(const struct ccap_redis_conf *conf);

/* Closes the connection (if still ours: see ccap_redis_owns_fd) and frees. */
void ccap_redis_free(struct ccap_redis *r);

/* Connects if not connected: socket created SOCK_CLOEXEC, moved with
 * F_DUPFD_CLOEXEC to a number above the range programs normally use,
 * connect bounded by connect_timeout_ms, commands by command_timeout_ms,
 * then AUTH and SELECT as configured. Before every use the descriptor's
 * identity (st_dev, st_ino) is checked: if the program closed or replaced
 * it, the client never writes to, shuts down or closes that number, and
 * reconnects on a fresh one. Returns 0, -ETIMEDOUT, -ECONNREFUSED, -EACCES
 * (auth failed) or -EIO. Must run with the shim's recursion guard held. */
int ccap_redis_connect(struct ccap_redis *r);

/* Runs script WHICH with EVALSHA (loading it on first use and again after
 * NOSCRIPT, invisibly to the caller), NKEYS keys followed by ARGS: ARGC
 * NUL-terminated strings, keys first. On success returns 0 and *REPLY
 * (caller frees with freeReplyObject). Returns -errno on a transport error
 * (the connection is dropped and reopened on the next call: -ETIMEDOUT,
 * -ECONNREFUSED, -EPIPE, -EIO), or -EPROTO for a Redis error reply (the
 * text is in ccap_redis_errstr). */
int ccap_redis_script(struct ccap_redis *r, enum ccap_script which, int nkeys, int argc,
                      const char *const *args, redisReply **reply);

/* Runs one plain command (argv form, like redisCommandArgv). Same return
 * values and ownership as ccap_redis_script. */
int ccap_redis_command(struct ccap_redis *r, int argc, const char *const *argv, redisReply **reply);

/* After fork(), in the child: forgets the inherited connection without any
 * I/O on it (closes only the child's copy of the descriptor) so that the
 * child never interleaves replies with its parent. */
void ccap_redis_forget(struct ccap_redis *r);

/* The descriptor currently in use, or -1. For the shim's close/dup2 hooks:
 * a program closing this number is noticed at the next use. */
int ccap_redis_fd(const struct ccap_redis *r);

/* The number the connection's descriptor is moved to (or above):
 * min(soft RLIMIT_NOFILE, 1024) - 32. */
int ccap_redis_fd_base(void);

/* The last error text ("" if none). Owned by R, valid until the next call. */
const char *ccap_redis_errstr(const struct ccap_redis *r);

/* The SHA1 of script WHICH (40 hex chars) and its source text. */
const char *ccap_script_sha(enum ccap_script which);
const char *ccap_script_source(enum ccap_script which);

#endif
