/* reload.h -- the live configuration: hot reload, names programs resolved, resolve = true. */
#ifndef CCAP_RELOAD_H
#define CCAP_RELOAD_H

#include <netdb.h>
#include <stddef.h>
#include <sys/socket.h>
#include "boot.h"
#include "config.h"

/* How many retired configurations may wait for their grace period at once;
 * a reload beyond that waits (the file is re-read at a later tick). */
#define CCAP_RETIRED_MAX 16
/* A retired configuration is freed this long after it was replaced, plus
 * its longest wait_timeout_ms and twice its Redis timeouts: by then no
 * thread can still be reading it (see ccap_live_init). */
#define CCAP_RETIRED_GRACE_MS 60000
/* Semaphores a process may learn by reloads beyond those it started with. */
#define CCAP_SEM_SLOTS_SPARE 256
/* The first connect of a process whose rules have resolve = true waits at
 * most this long for the first lookup of those names. */
#define CCAP_RESOLVE_FIRST_WAIT_MS 2000
/* The watch thread's period: the config file is stat()ed at most this often. */
#define CCAP_WATCH_PERIOD_MS 1000

/* Sizes every per-semaphore array that must survive reloads (e.g. core's
 * local counters): BOOT's semaphores plus CCAP_SEM_SLOTS_SPARE. A
 * semaphore keeps its index in every later configuration of the process
 * (see ccap_live_init), so such arrays never move or grow. Pure. */
size_t ccap_live_sem_slots(const struct ccap_config *boot);

/* Takes over the configuration at *SLOT (core's current-config pointer,
 * already loaded and published there) for hot reload. From now on only
 * ccap_live_tick() stores into *SLOT, atomically; readers load it once per
 * operation and may use what they loaded for CCAP_RETIRED_GRACE_MS plus the
 * config's longest wait_timeout_ms (the "grace"): a replaced config is kept
 * that long, then freed (an RCU-like grace period measured in time; at most
 * CCAP_RETIRED_MAX are kept at once). Every later config:
 *   - keeps the semaphore indices of the one before (semaphores that left
 *     the file stay at their index, unreferenced by rules; new ones are
 *     appended; rule->sem is remapped), so index-keyed arrays stay valid;
 *   - keeps the boot config's redis.key_prefix (Redis settings need a
 *     restart; a changed redis section is logged as such).
 * Also plans the resolve = true lookups. SEED (runtime/boot.h) says where
 * the file is and which version of it was read (the identity fstat saw
 * when it was read at load, so that a change made since is seen by the
 * first tick; without it the file is stat()ed now). A reload reads the
 * file again but never its secrets (CCAP_LOAD_NO_SECRETS: the Redis
 * settings stay the running ones), so a process that can read the file
 * but no longer its password or TLS files reloads its rules all the same.
 * Call once, from the runtime's first load (not from a constructor).
 * Returns 0 or -ENOMEM. */
int ccap_live_init(struct ccap_config *_Atomic *slot, const struct ccap_boot_seed *seed);

/* The rule for a connect to SA under CFG (loaded from the slot by the
 * caller): by address only when CFG has no host-name pattern (no lock, no
 * map); otherwise the first rule (file order) matching the address or any
 * name this process saw resolve to it (ccap_names_match). With resolve =
 * true rules, the process's first such call waits up to
 * CCAP_RESOLVE_FIRST_WAIT_MS for the first lookup of their names.
 * Thread-safe; a read lock at most. */
const struct ccap_rule *ccap_live_match(const struct ccap_config *cfg, const struct sockaddr *sa, socklen_t len);

/* Writes into NAME (CAP bytes) the host name through which a connect to SA
 * matches its rule under CFG, as ccap_live_match would find it now, or ""
 * when the rule matches SA's address (or no rule matches, or CFG has no
 * host-name rules). Never waits for a lookup. For messages. Thread-safe. */
void ccap_live_match_name(const struct ccap_config *cfg, const struct sockaddr *sa, socklen_t len, char *name,
                          size_t cap);

/* A program's getaddrinfo(NODE, ..., hints with AI_FLAGS) returned RES:
 * records NODE (normalised) for each AF_INET/AF_INET6 address in RES when
 * the configuration has host-name rules. Numeric hosts and names that are
 * not valid host names are ignored. Loads the configuration on first use.
 * Preserves nothing: the caller restores errno and h_errno. Thread-safe. */
void ccap_live_resolved_addrinfo(const char *node, int ai_flags, const struct addrinfo *res);

/* The same for gethostbyname*(NAME) that returned HE. */
void ccap_live_resolved_hostent(const char *name, const struct hostent *he);

/* One round of the watch thread: if CCAP_WATCH_PERIOD_MS passed since the
 * last check, stat()s the config file and, when it changed (inode, size,
 * mtime or ctime), parses it and swaps it in (a broken or unreadable file --
 * a directory, a FIFO, over 1 MiB, an @include of one -- keeps the rules in
 * force and is logged once per version, with file and line); runs the
 * resolve = true lookups that are due; drops expired names and frees
 * retired configs past their grace. Returns the ms until the next round,
 * or -1 when the configuration is unusable (the thread may stop). Call from
 * one thread at a time; it may block in stat() and DNS; the parse is
 * bounded (ccap_config_load never waits on a file's kind). */
int ccap_live_tick(void);

/* The configuration in force (loaded from the slot), or NULL before
 * ccap_live_init. The caller may use it for the grace period (above). */
const struct ccap_config *ccap_live_current(void);

/* fork() support, called by the runtime's one pthread_atfork handler
 * (runtime/lifecycle.c): prepare takes the reload lock, then the name
 * map's; parent releases them; child releases them and makes the
 * first-lookup condition afresh (a parent's thread may have waited on it).
 * Safe before ccap_live_init. */
void ccap_live_fork_prepare(void);
void ccap_live_fork_parent(void);
void ccap_live_fork_child(void);

#endif
