/* ops.h -- what the ops subcommands share: options, reading a semaphore's state, wait percentiles, JSON. */
#ifndef CCAP_CLI_OPS_H
#define CCAP_CLI_OPS_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include "cli.h"
#include "keys.h"
#include "sem.h"

/* One command-specific option: "--NAME VALUE", "--NAME=VALUE" or "--NAME". */
enum ccap_opt_kind { CCAP_OPT_FLAG, CCAP_OPT_STR, CCAP_OPT_INT, CCAP_OPT_NUM };
struct ccap_opt {
    const char *name; /* without the leading "--" */
    enum ccap_opt_kind kind;
    void *dst;       /* bool *, const char **, long long *, double * */
    double min, max; /* allowed range for INT and NUM */
};

/* Parses ARGV (ARGV[0] is the subcommand) for -c FILE/--config, --json and
 * OPTS (a list ended by a { NULL } entry; may be NULL), in any order; the
 * other words are operands, stored in OPERANDS (at most MAX; "--" ends the
 * options). Fills *O (first is unused). Returns the number of operands, or
 * -1 after printing the problem and USAGE to stderr. */
int ccap_ops_parse(int argc, char **argv, const char *usage, struct ccap_cli_opts *o, const struct ccap_opt *opts,
                   char **operands, int max);

/* The configured semaphore called NAME, or NULL after printing an error
 * (with the known names) to stderr. CMD names the subcommand. */
const struct ccap_sem_conf *ccap_ops_sem(const struct ccap_config *cfg, const char *cmd, const char *name);

/* Loads the config and connects, printing any error. On success returns 0
 * with *CFG and *R (free with ccap_ops_close). A COMMAND_TIMEOUT_MS > 0
 * raises the Redis command timeout to at least that (for blocking reads). */
int ccap_ops_open(const struct ccap_cli_opts *o, int command_timeout_ms, struct ccap_config **cfg,
                  struct ccap_redis **r);
void ccap_ops_close(struct ccap_config *cfg, struct ccap_redis *r);

/* Whether every server of R (every master of a Cluster) has this build's
 * function library (FCALL_RO conncap_version_<v>, one call per server): 1
 * yes, 0 no (not loaded, another version, Redis before 7, or a user that
 * may not call it). */
int ccap_ops_functions_loaded(struct ccap_redis *r);

/* The warning `check` and `status` print to stderr when the library is
 * not loaded: the shim says it only at debug (every process would). */
void ccap_ops_warn_functions(const char *cmd);

/* Redis server time (TIME) in ms, or -1 (error text in ccap_redis_errstr). */
long long ccap_ops_server_ms(struct ccap_redis *r);

/* The counters of the stats hash, in the order of ccap_ops_counters. */
enum { CCAP_OPS_N_COUNTERS = 9 };
struct ccap_ops_counter {
    const char *field;  /* in <prefix>{name}:stats */
    const char *metric; /* Prometheus name (a counter: ends in _total) */
    const char *help;   /* one line */
};
extern const struct ccap_ops_counter ccap_ops_counters[CCAP_OPS_N_COUNTERS];
extern const int ccap_ops_bounds_ms[CCAP_WAIT_N_BOUNDS];

/* One semaphore as Redis sees it now. */
struct ccap_ops_sem {
    const struct ccap_sem_conf *conf;
    long long now_ms;        /* server time of the reading */
    long long holders;       /* live holders (lease not ended) */
    long long limit;         /* limit in force */
    bool override;           /* the limit key is set */
    long long waiters;       /* acquirers refused and still waiting */
    long long full_since_ms; /* server ms since no permit is free, or -1 */
    long long full_limit;    /* the limit full_since_ms was set under, -1 unknown (older stats format) */
    long long counter[CCAP_OPS_N_COUNTERS];
    long long bucket[CCAP_WAIT_N_BOUNDS + 1]; /* per bucket (not cumulative); last: > 10 s */
    long long wait_count, wait_sum_ms;
    long long grace_left_ms; /* restart_grace_ms: ms before new permits are granted; 0 none, -1: the
                                 * epoch key is gone, the next acquire starts a grace */
};

/* Reads S's keys (limit, holders, waiters, stats) at server time NOW_MS.
 * Returns 0, or -errno with the error in ccap_redis_errstr. */
int ccap_ops_read(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s,
                  long long now_ms, struct ccap_ops_sem *out);

/* ms for which no permit has been free (0 when one is), from a reading:
 * 0 too when full_since was set under another limit than the one in force
 * (the semaphore became full again by a lowered limit, not by a grant). */
long long ccap_ops_full_for_ms(const struct ccap_ops_sem *s);

/* The Q-quantile (0 < Q < 1) of the waits counted in BUCKET (per-bucket
 * counts as in ccap_ops_sem, N = their total), in ms, estimated by linear
 * interpolation inside the bucket that holds it (as Prometheus'
 * histogram_quantile). A quantile in the last, open bucket is reported as
 * its lower bound (10000 ms). Returns -1 when N is 0. */
double ccap_ops_quantile(const long long *bucket, long long n, double q);

/* Writes S as the object `stats --json` and `metrics --json` print for a
 * semaphore ({name, holders, limit, waiters, full_for_ms, counters, wait}),
 * preceded by a comma unless FIRST. */
void ccap_ops_json_sem(FILE *f, const struct ccap_ops_sem *s, bool first);

/* Writes S as a JSON string to F: quoted, control characters as \\uXXXX,
 * a byte that is not UTF-8 as the text \\xHH (the output is valid JSON and
 * valid UTF-8 whatever S holds). */
void ccap_ops_json_str(FILE *f, const char *s);

/* S (text from Redis: ids, fields, names, errors) made safe to print on a
 * terminal by the one escaper (ccap_text_escape): control characters, bytes
 * that are not UTF-8 and backslashes become \xHH, so no stored text can
 * forge a line or send an escape sequence. Returns one of 8 rotating
 * thread-local buffers (a ninth call reuses the first); a text beyond 1020
 * bytes is cut and ends in "...". NULL gives "". */
const char *ccap_ops_esc(const char *s);

/* Parses a holder id "host/pid/fd/destination/program/nonce.seq" (or one of
 * before the program part, "host/pid/fd/destination/nonce.seq": PROG "")
 * into its parts (copied into the caller's buffers; DEST may contain
 * '/'-free IPv6 in brackets). PID (1..INT_MAX) and FD (0..INT_MAX) must be
 * canonical decimals, as the shim writes them. Returns 0, or -1 (H zeroed)
 * when ID has another shape. */
struct ccap_ops_holder {
    char host[128], dest[128], nonce[64], prog[32];
    long pid, fd;
};
int ccap_ops_parse_holder(const char *id, struct ccap_ops_holder *h);

/* Holders per Redis call when a listing is read in pages (cli/list.c):
 * each call costs O(log N + CCAP_OPS_PAGE) of Redis time, whatever N. */
#define CCAP_OPS_PAGE 256

/* One live holder of a listing. */
struct ccap_ops_entry {
    const char *id;      /* points into the listing's replies */
    long long expiry_ms; /* lease end, server ms */
    long long since_ms;  /* acquire time, server ms; -1 unknown or not read */
};

/* A listing: V[0..N) ordered by lease end, then id (as ZRANGEBYSCORE). */
struct ccap_ops_list {
    long long end_ms; /* server ms once read: a lease renewed meanwhile
                             * ends at most one lease after it */
    struct ccap_ops_entry *v;
    size_t n, cap;
    redisReply **pages; /* owned: the replies V points into */
    size_t n_pages, cap_pages;
};

/* Reads the live holders of semaphore NAME (lease end after NOW_MS, server
 * ms) into *OUT, with their acquire times when SINCE, in pages of
 * CCAP_OPS_PAGE (ZRANGEBYSCORE ... LIMIT resumed after the last score
 * read, HMGET): no call grows with the number of holders, except by the
 * holders that share one lease-end millisecond at a page's edge. Not one
 * snapshot: a holder that comes or goes while the pages are read may show
 * or not; one renewed meanwhile shows once, with its later lease end.
 * OUT->end_ms is the server time (TIME) once the pages are read, to count
 * leases left from. Returns 0 (free *OUT with ccap_ops_list_free), or -errno with the error
 * in ccap_redis_errstr (*OUT is then empty). */
int ccap_ops_list_holders(struct ccap_redis *r, const struct ccap_config *cfg, const char *name, long long now_ms,
                          bool since, struct ccap_ops_list *out);
void ccap_ops_list_free(struct ccap_ops_list *l);

/* Writes NAME's live holders as `conncap holders` shows them (oldest first,
 * at most MAX_ROWS rows) to F. Returns 0, or -1 after printing the error. */
int ccap_ops_holders_table(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg, const char *name,
                           size_t max_rows);

/* Writes "1.5 s", "320 ms", "2 min 5 s"... for MS into BUF. */
const char *ccap_ops_duration(long long ms, char *buf, size_t n);

/* "user@host" of the operator ($SUDO_USER first) into BUF; returns BUF. */
const char *ccap_ops_who(char *buf, size_t n);

/* Appends an event with the fields KV (NKV strings: name, value, ...) to
 * S's audit stream when audit is on in CFG. Returns 0 (also when off) or
 * -errno. */
int ccap_ops_audit(struct ccap_redis *r, const struct ccap_config *cfg, const char *name, const char *const *kv,
                   int nkv);

/* Pushes a wake token to the first N tickets of S's queue (at most
 * CCAP_OPS_WAKE_MAX; N < 0: the limit in force), as a release does: after
 * an operator frees permits (reset, a raised limit), the waiters sleep
 * until a token comes, so they must be told. A woken waiter that finds no
 * permit free sleeps again. Returns the number woken, or -errno (error
 * text in ccap_redis_errstr). */
enum { CCAP_OPS_WAKE_MAX = 10000 };
long long ccap_ops_wake_queue(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s,
                              long long n);

/* Set by SIGINT/SIGTERM once ccap_ops_catch_signals ran (no SA_RESTART, so
 * a blocked poll/read returns EINTR). */
extern volatile sig_atomic_t ccap_ops_stop;
void ccap_ops_catch_signals(void);

#endif
