/* redis_int.h -- internals shared by the Redis client's files (redis*.c; not an API). */
#ifndef CCAP_REDIS_INT_H
#define CCAP_REDIS_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "clock.h"
#include "redis.h"
#include "resp.h"
#include "tls.h"

#define CCAP_CLUSTER_SLOTS 16384
#define CCAP_HOST_MAX 256

/* One server we talk to: its address and, when connected, the hiredis
 * context on our own high CLOEXEC descriptor. */
struct ccap_node {
    char host[CCAP_HOST_MAX]; /* TCP host name or address; "" with a Unix socket */
    int port;
    const char *socket; /* Unix socket path (points into conf), or NULL */
    redisContext *ctx;  /* NULL when not connected */
    dev_t dev;          /* identity of ctx->fd when we made it */
    ino_t ino;
    unsigned forks;             /* ccap_redis_forks() when it was made: another value is a fork child's */
    unsigned gen;               /* counts connections made: a deferred reply is owed by one */
    unsigned loaded;            /* bit 1 << script: known loaded on this connection */
    int fn;                     /* our function library here: 1 yes, -1 no (EVALSHA), 0 not known yet */
    long long fn_at;            /* fn -1: ask again after this (monotonic ms) */
    struct ccap_resp_scan scan; /* checks the bytes read before hiredis's reader parses them */
    struct ccap_tls_conn *tls;  /* the TLS session on ctx->fd, or NULL (plain) */
    short want;                 /* TLS: what the last read waits for (POLLIN, or POLLOUT mid-renegotiation) */
    int replica_of;             /* Cluster: the node (index + 1) this one replicated in the last slot map, 0
                                 * none or not known (tells a failover from a resharding) */
    int replica_next;           /* the same, from the slot map being read */
    long long took_over_ms;     /* Cluster: when slots last failed over to it (monotonic ms) */
};

/* A command sent without waiting for its reply (or not sent yet): kept
 * until its reply says it ran, then dropped (core/redis_defer.c). */
struct ccap_deferred {
    int which; /* script, for NOSCRIPT recovery */
    int slot;  /* cluster slot of its first key, or -1 */
    int argc;
    char **argv;               /* "EVALSHA" sha nkeys args...: one allocation */
    long long until_ms;        /* monotonic ms: dropped unsent after this */
    struct ccap_node *sent_on; /* the node it was written to, or NULL */
    unsigned gen;              /* sent_on's gen when written */
};

enum ccap_redis_mode { CCAP_MODE_SINGLE = 0, CCAP_MODE_SENTINEL, CCAP_MODE_CLUSTER };

/* Node setup steps after the TCP connect. */
enum { CCAP_SETUP_AUTH = 1, CCAP_SETUP_SELECT = 2, CCAP_SETUP_SENTINEL = 4 /* a sentinel: TLS if tls.sentinels */ };

struct ccap_redis {
    struct ccap_redis_conf conf;       /* our own copy, lists included */
    const struct ccap_resp_caps *caps; /* what a reply may hold (ccap_resp_caps_shim unless set) */
    enum ccap_redis_mode mode;
    struct ccap_node main;  /* single server, or the Sentinel's master */
    struct ccap_node *last; /* the node used last (for ccap_redis_fd) */
    /* Sentinel */
    size_t sentinel_first;               /* the sentinel that answered last is asked first */
    char master_seen[CCAP_HOST_MAX + 8]; /* "host:port" last reported, for the log */
    /* Cluster */
    struct ccap_node **nodes; /* known masters, their replicas (not connected unless used) and seeds */
    size_t n_nodes, cap_nodes;
    uint16_t *slots;  /* slot -> node index + 1; 0 = unknown */
    bool slots_stale; /* refresh with CLUSTER SLOTS before the next use */
    /* Failovers seen (ccap_redis_key_epoch): Sentinel, the master switches;
     * Cluster, per slot, its moves to a replica of its master (NULL until
     * the first; then 2 x CCAP_CLUSTER_SLOTS more: each slot's last
     * failover source and target, node index + 1), and in EPOCH the sum
     * over all slots. A one-shot expectation for the next call: -ESTALE, not
     * run, when the epoch of its key is found to differ. */
    unsigned epoch;
    uint16_t *slot_epoch;
    bool expect;
    unsigned expect_epoch;
    char server_buf[CCAP_HOST_MAX + 8]; /* ccap_redis_key_server's answer */
    /* Deferred commands, oldest first (core/redis_defer.c) */
    struct ccap_deferred *defer;
    size_t n_defer;
    bool flushing;
    struct ccap_tls *tls; /* made at the first TLS connect (loads OpenSSL) */
    char tls_info[320];   /* the last handshake: protocol, cipher, peer subject */
    char err[384];
    bool err_replied; /* ERR is Redis's own error reply (ccap_redis_error_rc), not a failure to reach it */
};

/* How many fork()s this process descends from since the library loaded
 * (a pthread_atfork child handler counts them): a connection made under
 * another count is the parent's. No syscall, unlike getpid(). */
unsigned ccap_redis_forks(void);

/* Monotonic ms (clock.h's ccap_now_ms, under the name redis_block.c uses). */
static inline long long ccap_redis_now_ms(void)
{
    return ccap_now_ms();
}

/* Splits "host:port" or "[v6addr]:port" into HOST (HOSTLEN bytes) and
 * *PORT. Returns 0 or -EINVAL. */
int ccap_hostport_parse(const char *s, char *host, size_t hostlen, int *port);

/* Makes sure N is connected and usable (fork, fd identity and error checks
 * as for the main connection): connects within DEADLINE (monotonic ms) if
 * not, then runs the SETUP steps (CCAP_SETUP_*). Returns 1 when it made a
 * new connection, 0 when the old one is reused, or -errno as
 * ccap_redis_connect. */
int ccap_node_ensure(struct ccap_redis *r, struct ccap_node *n, long long deadline, int setup);

/* Runs ARGV on N's live connection: 0 and *OUT (any reply type, error
 * replies included), or -errno on a transport error (N is then closed).
 * Writing it and reading every reply N owes, its own last, take at most
 * command_timeout_ms in all (-ETIMEDOUT), however the bytes trickle in. */
int ccap_node_exec(struct ccap_redis *r, struct ccap_node *n, int argc, const char *const *argv, redisReply **out);

/* Writes ARGV to N's connection with MSG_NOSIGNAL (never SIGPIPE), without
 * reading anything, by DEADLINE (monotonic ms). Returns 0, or -errno
 * (-ETIMEDOUT, -EPIPE when the peer is gone, -ENOMEM, -EIO; N is then
 * closed). */
int ccap_node_send(struct ccap_redis *r, struct ccap_node *n, int argc, const char *const *argv, long long deadline);

/* Reads N's next reply (for command CMD, named in errors) by DEADLINE
 * (monotonic ms): the bytes go through N's scanner (R's caps) before
 * hiredis's reader. Returns 0 and *OUT (any type; caller frees);
 * -ETIMEDOUT when DEADLINE passed first (N stays open, the reply may still
 * come); or, with N closed, -EPIPE (EOF or reset), -EIO (a reply beyond
 * the caps or not RESP), -ENOMEM. The text goes to R's error. */
int ccap_node_read(struct ccap_redis *r, struct ccap_node *n, const char *cmd, long long deadline, redisReply **out);

/* A failed read or write of CMD on N as -errno (E: its errno): -ETIMEDOUT
 * after command_timeout_ms, -EPIPE (the peer went away), -ECONNREFUSED,
 * -ENOMEM or -EIO. The text ("redis CMD: timed out after N ms", ...) goes to
 * R's error, and N is closed (if its descriptor is still ours). */
int ccap_node_io_error(struct ccap_redis *r, struct ccap_node *n, const char *cmd, int e);

/* The Redis protocol (RESP) form of the command ARGV[0..ARGC-1] (strings,
 * binary-unsafe: NUL-terminated): ccap_resp_size() bytes are enough;
 * ccap_resp_format() writes it to OUT and returns its length. The same bytes
 * as hiredis's redisFormatCommandArgv (tests/unit/test_redis.c compares
 * them), without its sprintf per argument. Pure functions, thread-safe. */
size_t ccap_resp_size(int argc, const char *const *argv);
size_t ccap_resp_format(char *out, int argc, const char *const *argv);

/* Writes script WHICH's ARGV ("EVALSHA" sha nkeys args...) to N without
 * reading the reply: as FCALL unless N said lately it has no library of
 * ours, else with EVALSHA when this connection ran the script before, else
 * as EVAL with its source (one command, no NOSCRIPT). Returns 0 or -errno
 * as ccap_node_send. */
int ccap_node_script_send(struct ccap_redis *r, struct ccap_node *n, int which, int argc, const char *const *argv,
                          long long deadline);

/* The node for SLOT (-1: any), connected; *FRESH says whether the
 * connection was made just now. Returns 0 or -errno. */
int ccap_redis_pick(struct ccap_redis *r, int slot, struct ccap_node **out, int *fresh);

/* Runs ARGV (a script WHICH >= 0 with NOSCRIPT recovery, or -1) where it
 * belongs, following redirects and replacing a stale connection: 0 and
 * *OUT (any reply type), or -errno. */
int ccap_redis_dispatch(struct ccap_redis *r, int slot, int which, int argc, const char *const *argv,
                        redisReply **out);

/* An error reply as -errno (-EAGAIN transient, -EPROTO otherwise); the text
 * goes to R's error. */
int ccap_redis_error_rc(struct ccap_redis *r, const redisReply *rep);

/* Reads the replies N owes for deferred commands (oldest first, all by
 * DEADLINE, monotonic ms) and drops
 * the commands they acknowledge; one answered with an error stays, to be
 * run again by ccap_redis_flush. Returns 0, or -errno on a transport error
 * (N is closed; its commands wait to be sent again). */
int ccap_defer_collect(struct ccap_redis *r, struct ccap_node *n, long long deadline);

/* After a command that worked: runs again, synchronously, the deferred
 * commands that are not (or no longer) sent -- none in the common case.
 * Errors stay on the commands (ccap_redis_flush reports them). */
void ccap_defer_retry(struct ccap_redis *r);

/* Frees every deferred command without I/O (fork child, free). */
void ccap_defer_clear(struct ccap_redis *r);

/* Closes N's connection (the descriptor only if still ours). */
void ccap_node_drop(struct ccap_node *n);

/* After fork: forgets N's connection without I/O. */
void ccap_node_forget(struct ccap_node *n);

/* Sentinel: asks the sentinels for the master's address and connects R->main
 * to it, checking with ROLE that it is a master. Returns 0, or -errno
 * (-ECONNREFUSED when no sentinel answered, -EAGAIN when the master they
 * name is unreachable or a replica). */
int ccap_sentinel_connect(struct ccap_redis *r);

/* Cluster: the node that serves SLOT (-1: any node), connected. Loads or
 * refreshes the slot map first if needed. Returns 0 and *OUT, or -errno. */
int ccap_cluster_node(struct ccap_redis *r, int slot, struct ccap_node **out);

/* Cluster: the node at HOST:PORT (added when unknown; not connected yet).
 * Returns NULL when out of memory. */
struct ccap_node *ccap_cluster_node_at(struct ccap_redis *r, const char *host, int port);

/* Cluster: after a "MOVED slot host:port" or "ASK slot host:port" error
 * text TEXT (from node FROM): the node to retry on, connected, with *ASK set
 * for an ASK redirect. MOVED also updates the slot map. Returns 0 or -errno. */
int ccap_cluster_redirect(struct ccap_redis *r, struct ccap_node *from, const char *text, struct ccap_node **out,
                          bool *ask);

/* Cluster: SLOT moved from node OLD to node NW (indices + 1, as in the slot
 * map; WAS_MASTER[i]: node i owned slots in the map in force). Counts a
 * failover in the slot's epoch and returns true, unless NW was a master
 * that did not replicate OLD: a resharding between masters moves the keys
 * with their data, nothing is lost; or when NW is the slot's last failover
 * target already, or its source a few seconds after it (the redirects back
 * and forth while the cluster converges are one failover). */
bool ccap_cluster_note_move(struct ccap_redis *r, int slot, int old, int nw, const bool *was_master);

/* Cluster: frees the node table and the slot map. */
void ccap_cluster_free(struct ccap_redis *r);

#endif
