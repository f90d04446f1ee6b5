/* config.h -- the conncap configuration (libconfig), parsed and validated. */
#ifndef CCAP_CONFIG_H
#define CCAP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include "match.h"

#define CCAP_DEFAULT_CONFIG "/etc/conncap.conf"
/* Semaphores in one configuration. */
#define CCAP_CONF_MAX_SEMS 1024
/* Match patterns in all rules together (each costs about 600 bytes). */
#define CCAP_CONF_MAX_PATTERNS 16384

enum ccap_down_policy { CCAP_DOWN_OPEN = 0, CCAP_DOWN_CLOSED, CCAP_DOWN_LOCAL };
/* A non-blocking connect with no permit free: queued (EINPROGRESS, the
 * descriptor parked until its permit comes: runtime/queued.c), the thread
 * waits as for a blocking one, or it fails at once (a circuit breaker). */
enum ccap_nonblock_policy { CCAP_NONBLOCK_WAIT = 0, CCAP_NONBLOCK_FAIL, CCAP_NONBLOCK_QUEUE };

/* TLS to Redis (redis.tls, rediss://). Paths are absolute. */
struct ccap_tls_conf {
    bool enabled;      /* rediss://, a redis.tls group, or a CONNCAP_REDIS_TLS_* variable */
    char *ca_file;     /* PEM CAs to trust; with ca_dir NULL too: the system's */
    char *ca_dir;      /* hashed CA directory (c_rehash), or NULL */
    char *cert_file;   /* client certificate chain (PEM), or NULL */
    char *key_file;    /* its private key (PEM); required with cert_file */
    char *server_name; /* SNI and the name checked, instead of each node's host */
    bool verify;       /* default true: certificate chain and host name checked */
    bool sentinels;    /* default true: the sentinels are spoken to over TLS too */
    /* The content of ca_file, cert_file and key_file as read with the
     * configuration (NUL-terminated; NULL when unset, or not read:
     * CCAP_LOAD_NO_SECRETS); OpenSSL takes them from memory, so a process
     * that can no longer read the files still can use them. ca_dir is
     * looked up by OpenSSL when it verifies, never read ahead. */
    char *ca_pem, *cert_pem, *key_pem;
    size_t ca_len, cert_len, key_len;
};

struct ccap_redis_conf {
    char *host;             /* default "127.0.0.1" */
    int port;               /* default 6379 */
    char *socket;           /* Unix socket path, or NULL; wins over host/port */
    int db;                 /* default 0 */
    int connect_timeout_ms; /* default 200 */
    int command_timeout_ms; /* default 200 */
    char *key_prefix;       /* default "conncap:" */
    char *username;         /* Redis 6 ACL user, or NULL */
    char *password;         /* read from password_file or password_env; never logged */
    char **sentinels;       /* "host:port" strings, or NULL */
    size_t n_sentinels;
    char *master;   /* sentinel master name */
    char **cluster; /* "host:port" seed nodes, or NULL */
    size_t n_cluster;
    struct ccap_tls_conf tls;
};

/* Where a setting came from, for `conncap check`: "default", "file", or
 * the name of the environment variable (a literal). */
struct ccap_config_sources {
    const char *address; /* host/port/socket/db/user/password/url */
    const char *log_level;
    const char *ca_file, *cert_file, *key_file;
};

struct ccap_sem_conf {
    char *name;           /* [A-Za-z0-9._-]{1,64} */
    int limit;            /* >= 0; permits in the whole fleet */
    int lease_ms;         /* default 30000, >= 300 */
    int wait_timeout_ms;  /* default 5000, >= 0; 0 = fail at once */
    double rate;          /* new connections per second; 0 = no rate limit */
    int burst;            /* token-bucket burst; default max(1, ceil(rate)) */
    int local_limit;      /* per-process cap when on_redis_down = "local"; default limit */
    int restart_grace_ms; /* 0..lease_ms, default 0: after Redis lost the semaphore, new grants wait this long */
    int max_waiters;      /* >= 0, default 0 (no bound): a connect that would queue behind this many
                               * waiters fails at once with on_timeout's errno (counted as queue_full) */
    int line;             /* line in the file it is in, for messages */
};

struct ccap_rule {
    size_t sem; /* index into ccap_config.sems */
    struct ccap_pattern *pats;
    size_t n_pats;
    bool resolve;           /* the shim resolves this rule's host names itself */
    int resolve_interval_s; /* default 30 */
    const char *file;       /* the file it is in (an @include'd one, maybe); owned by the config */
    int line;               /* line in that file */
};

struct ccap_config {
    char *path;
    char **files; /* path and the files it @includes, in the order read */
    size_t n_files;
    char *password_note; /* a warning about redis.password_file's mode, or NULL */
    char *secret_note;   /* CCAP_CONF_SECRETS_UNCHECKED: the password that was not there to check, or NULL */
    struct ccap_redis_conf redis;
    struct ccap_sem_conf *sems;
    size_t n_sems;
    struct ccap_rule *rules;
    size_t n_rules;
    int on_timeout_errno;                  /* default ETIMEDOUT */
    enum ccap_down_policy on_redis_down;   /* default open */
    enum ccap_nonblock_policy nonblocking; /* default queue */
    int nonblocking_errno;                 /* default ECONNREFUSED; never an in-progress errno */
    int log_level;                         /* enum ccap_log_level, default warn */
    int log_target;                        /* enum ccap_log_target, default stderr */
    bool audit;                            /* default false */
    int audit_maxlen;                      /* default 10000 */
    bool secrets_skipped;                  /* loaded with CCAP_LOAD_NO_SECRETS: no password, no PEMs */
    bool has_names;                        /* some rule has a host or wildcard pattern */
    bool has_resolve;                      /* some rule has resolve = true and an exact host name */
    struct ccap_config_sources from;
};

/* Loads and validates PATH. On success returns 0 and *OUT (owned by the
 * caller, free with ccap_config_free). On failure returns -errno (-ENOENT,
 * -EACCES for an unreadable file, -EINVAL for bad content) and writes into
 * ERR a one-line message naming the file, the line and the setting, e.g.
 * "/etc/conncap.conf:7: semaphores[0].limit: must be an integer >= 0".
 * PATH and every file it @includes are read with ccap_file_read: regular
 * files only (-EISDIR for a directory, -EINVAL for a FIFO, a device or a
 * socket, "FILE: is a FIFO, not a regular file"), never blocking, at most
 * CCAP_CONF_MAX_BYTES in all (-EFBIG); a read error is its -errno (-EIO
 * for /proc/self/mem). Also another open(2) errno, -ENOMEM. A missing file
 * gives "FILE: cannot open: No such file or directory"; libconfig syntax
 * errors "FILE:LINE: syntax error", with FILE and LINE those of the
 * included file when the error is in one. @include rules: see
 * ccap_conf_text_build. Unknown settings are errors (with a "did you mean"
 * hint when one is close). Time and memory linear in the size of the
 * text. Never exits, never blocks on the file's kind. Thread-safe (no
 * global state). */
int ccap_config_load(const char *path, struct ccap_config **out, char *err, size_t errlen);

struct ccap_fileset;

/* ccap_config_load_from's flags. NO_SECRETS: redis.password_file and the
 * TLS files are not read (no password, no PEMs; CFG->secrets_skipped set):
 * for a hot reload, which keeps the Redis settings it started with, so a
 * process that can no longer read them still reloads its rules. */
enum { CCAP_LOAD_NO_SECRETS = 1 };

/* As ccap_config_load, but every file -- PATH, what it @includes, its
 * password_file, the TLS files -- is read with ccap_fileset_read from FS
 * (NULL: the disk), so a set recorded once, or handed over, is read again
 * without touching the disk. The TLS files (CCAP_TLS_FILE_MAX bytes each)
 * are read into CFG->redis.tls's PEMs; one that cannot be read is an
 * error like the password file's ("redis.tls.key_file: cannot read FILE:
 * Permission denied"). Same returns, ownership, thread-safety. */
int ccap_config_load_from(const char *path, struct ccap_fileset *fs, int flags, struct ccap_config **out, char *err,
                          size_t errlen);

/* The largest ca_file, cert_file or key_file read (a system CA bundle is
 * about 200 KiB). */
#define CCAP_TLS_FILE_MAX (1024 * 1024)

/* ccap_config_load's FLAGS. SECRETS_UNCHECKED: the secrets this machine
 * does not have are not errors -- a redis.password_env whose variable is
 * not set (or empty), a redis.password_file that does not exist or may not
 * be read (ENOENT, EACCES) -- for checking a file where it is not used (an
 * image build, CI: `conncap check --offline`). The configuration then has
 * no password, and CFG->secret_note says which was not checked (also a
 * note of ccap_config_notes); every other setting is validated as always,
 * a password_file of the wrong kind too. The TLS files likewise. */
#define CCAP_CONF_SECRETS_UNCHECKED 2u /* beside CCAP_LOAD_NO_SECRETS */

/* ccap_config_load with FLAGS (CCAP_CONF_*, 0 is ccap_config_load). */
int ccap_config_load_flags(const char *path, unsigned flags, struct ccap_config **out, char *err, size_t errlen);

/* The same for TEXT (LEN bytes, need not be NUL-terminated; not kept), the
 * content of a file named PATH: PATH names it in messages and anchors
 * relative @include names. Same returns, ownership and thread-safety. */
int ccap_config_load_text(const char *path, const char *text, size_t len, struct ccap_config **out, char *err,
                          size_t errlen);

/* Applied by ccap_config_load after the file: CONNCAP_REDIS_URL replaces
 * the file's Redis address wholly (host, port, socket, db, user, password,
 * sentinels, cluster; its scheme turns TLS on or off), CONNCAP_REDIS_TLS_
 * CA_FILE / CERT_FILE / KEY_FILE replace those TLS settings (and turn TLS
 * on), CONNCAP_LOG_LEVEL replaces log_level. Read with ccap_env_get: in
 * the shim, the values the process started with. CFG->from says where
 * each came from. Returns 0, -ENOMEM, or -EINVAL with "CONNCAP_NAME: why"
 * in ERR. CFG must not be in use by another thread yet. */
int ccap_config_apply_env(struct ccap_config *cfg, char *err, size_t errlen);

/* Parses a Redis URL into OUT (zeroed first; the caller frees its
 * strings, even on failure): "redis://[user[:password]@]host[:port][/db]"
 * (user and password %XX-decoded; IPv6 hosts as [addr]), "rediss://..."
 * (the same, OUT->tls.enabled set), or "unix:///path[?db=N]". Unset parts
 * keep port 6379, db 0. Returns 0, -EINVAL with the reason in WHY (never
 * the password), or -ENOMEM. Pure; thread-safe. */
int ccap_redis_url_parse(const char *url, struct ccap_redis_conf *out, char *why, size_t whylen);

/* URL with its password, if any, replaced by "***", into OUT (OUTLEN
 * bytes, truncated). For every message that names a URL. Thread-safe. */
void ccap_redis_url_redact(const char *url, char *out, size_t outlen);

/* Frees CFG and everything it owns; NULL is fine. No other thread may
 * still use CFG or a pointer into it (rules, names, files). */
void ccap_config_free(struct ccap_config *cfg);

/* The path conncap reads: $CONNCAP_CONFIG if set and non-empty, else
 * CCAP_DEFAULT_CONFIG. In the shim the value is the one the process
 * started with (copied before main: core/env.h), whatever the program did
 * to its environment since; elsewhere (the CLI) the environment now.
 * Returns a pointer to that copy, into the environment, or a literal.
 * $CONNCAP_CONFIG is ignored in secure-execution mode (setuid/setgid
 * programs; secure_getenv), so a user cannot point such a program at a
 * config whose password_file names a file only it may read. */
const char *ccap_config_path(void);

/* First rule that matches: checks the address SA against address patterns,
 * and each of NAMES (N_NAMES host names that resolved to that address; may be
 * 0) against host patterns, with the port of SA. Returns the rule, or NULL.
 * Rules are tried in file order; within a rule any pattern may match.
 * NAMES may hold NULL entries. No allocation, no locks; thread-safe. */
const struct ccap_rule *ccap_config_match(const struct ccap_config *cfg, const struct sockaddr *sa, socklen_t len,
                                          const char *const *names, size_t n_names);

/* Index of the semaphore called NAME (exact, case-sensitive) in
 * CFG->sems, or -1 (also for a NULL CFG or NAME). Linear in the number of
 * semaphores; pure, thread-safe. */
int ccap_config_sem_index(const struct ccap_config *cfg, const char *name);

/* Settings that load but cannot do what they say, or are unsafe: calls NOTE
 * once per finding with WARN (true: the setting has no effect at all, or a
 * redis.password_file that group or others may read; false: a limitation
 * to know, or the secret_note of CCAP_CONF_SECRETS_UNCHECKED) and a message
 * "FILE:LINE: rules[I]: ...". Returns how
 * many findings had WARN set. Pure; thread-safe. */
size_t ccap_config_notes(const struct ccap_config *cfg, void (*note)(bool warn, const char *msg, void *arg),
                         void *arg);

/* Parses an errno name ("ETIMEDOUT", "ECONNREFUSED", "EAGAIN", ...; any
 * case) into its value; returns -EINVAL for an unknown name. Pure,
 * thread-safe. */
int ccap_errno_parse(const char *name);

/* The name of errno value E ("ETIMEDOUT"), or "E?" when unknown. A static
 * string; thread-safe. */
const char *ccap_errno_name(int e);

/* The I-th name in the table ccap_errno_parse knows (0, 1, ...), or NULL
 * past the end (a static string). For listing names and "did you mean"
 * hints. Thread-safe. */
const char *ccap_errno_name_at(size_t i);

#endif
