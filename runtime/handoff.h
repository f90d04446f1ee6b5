/* handoff.h -- permits across execve(): encode, decode, adopt, release before and restore after. */
#ifndef CCAP_HANDOFF_H
#define CCAP_HANDOFF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "permit.h"

/* The environment variable that carries the permits of the sockets that
 * survive an exec to the new image:
 *   CONNCAP_PERMITS=1:<pid>:<entry>;<entry>;...
 *   entry = <fd>,<dev>,<ino>,<lease_ms>,<sem>,<holder>
 * (decimal numbers; sem and holder %XX-escape every byte outside
 * [A-Za-z0-9._/:@+[]-]). One entry per surviving descriptor: descriptors of
 * one socket repeat its holder. PID is the process that exec'd: only the
 * image that still has that pid adopts, so a fork or posix_spawn child that
 * inherits the variable in its environment ignores it. */
#define CCAP_HANDOFF_ENV "CONNCAP_PERMITS"

/* The whole "NAME=value" string stays below the kernel's limit for one
 * environment string (MAX_ARG_STRLEN, 128 KiB); entries beyond it are not
 * handed over (their permits expire with their leases). */
#define CCAP_HANDOFF_MAX_LEN (120 * 1024)
#define CCAP_HANDOFF_MAX_ENTRIES 4096

struct ccap_handoff_entry {
    int fd;
    dev_t dev;
    ino_t ino;
    int lease_ms;
    char sem[CCAP_SEM_NAME_MAX];
    char holder[CCAP_HOLDER_MAX];
};

/* ---- the format (pure functions: no I/O, no global state) ---- */

/* Encodes N entries for PID as a malloc'd "CONNCAP_PERMITS=..." string in
 * *OUT (caller frees). Entries that would push it past CCAP_HANDOFF_MAX_LEN
 * are left out; *KEPT (may be NULL) gets how many were encoded. Returns the
 * string's length, -EINVAL (pid <= 0, a negative fd or lease), -ENOMEM.
 * Thread-safe. */
int ccap_handoff_encode(pid_t pid, const struct ccap_handoff_entry *e, size_t n, char **out, size_t *kept);

/* Parses VALUE (the part after "CONNCAP_PERMITS="). On success returns 0,
 * *PID and a malloc'd array *OUT of *N entries (caller frees; NULL when
 * N is 0). Returns -EINVAL for anything malformed (unknown version, bad
 * number, field too long, bad escape, more than CCAP_HANDOFF_MAX_ENTRIES
 * entries): nothing is returned then. -ENOMEM. Thread-safe. */
int ccap_handoff_decode(const char *value, pid_t *pid, struct ccap_handoff_entry **out, size_t *n);

/* The pid VALUE names, or -EINVAL. No allocation: async-signal-safe. */
long ccap_handoff_pid(const char *value);

/* True if ENVP (NULL-terminated; NULL is fine) has a CONNCAP_PERMITS= entry. */
bool ccap_handoff_in_envp(char *const *envp);

/* A malloc'd copy of the pointer array ENVP without its CONNCAP_PERMITS=
 * entries, with EXTRA (if not NULL) appended, NULL-terminated. The strings
 * are not copied. One free() releases it. NULL when out of memory. */
char **ccap_handoff_envp(char *const *envp, const char *extra);

/* ---- the lifecycle (uses the permit table and core) ---- */

/* From the constructor, after ccap_env_capture: remembers the copy of
 * CONNCAP_PERMITS (none in secure-execution mode: a setuid program never
 * adopts, nor releases, holders named by its caller) for adoption on first
 * need. No lock, no allocation, no thread, no parsing. */
void ccap_handoff_record(void);

/* True while a recorded handoff waits to be adopted: one relaxed atomic
 * load, for every hook's fast path. */
extern atomic_bool ccap_handoff_pending __attribute__((visibility("hidden")));
static inline bool ccap_handoff_waiting(void)
{
    return atomic_load_explicit(&ccap_handoff_pending, memory_order_relaxed);
}

/* Adopts the recorded handoff once (later calls wait for the first, then
 * return): if its pid is ours, each entry whose descriptor is still the same
 * socket (st_dev, st_ino) joins the permit table with the same holder id, so
 * the lease goes on being renewed (the heartbeat is started); a permit none
 * of whose descriptors is still its socket is released in Redis. Malformed
 * values are logged and ignored (their permits expire with their leases).
 * Call with the shim's guard held. Thread-safe. */
void ccap_handoff_adopt(void);

/* After fork(), in the child: whatever was recorded is the parent's. */
void ccap_handoff_fork_child(void);

/* What ccap_handoff_exec_pre hands to ccap_handoff_exec_post. */
struct ccap_exec {
    char **envp;                /* malloc'd environment for the exec, or NULL */
    char *value;                /* malloc'd "CONNCAP_PERMITS=..." or NULL */
    struct ccap_ptab_ent *gone; /* descriptors of released (all-CLOEXEC) permits */
    size_t n_gone;
    struct ccap_handoff_entry *regone; /* their sem/holder/lease, to register again */
    size_t n_regone;
    bool config_fd; /* conncap run's descriptor made inheritable for this exec (runtime/boot.h) */
};

/* Before execve(.., ENVP): adopts a waiting handoff, drops stale table
 * entries, releases in Redis the permits none of whose descriptors survive
 * the exec (FD_CLOEXEC), renews the others and encodes them. Returns the
 * environment to exec with: ENVP itself when there is nothing to hand over
 * and ENVP has no CONNCAP_PERMITS entry (no allocation then), else a copy
 * without the old entry and with the new one. *X must be passed to
 * ccap_handoff_exec_post. Call with the guard held, in the process that owns
 * the permits (ccap_rt_owner). Never fails: out of memory, the exec goes
 * on with ENVP and the survivors' permits expire with their leases. */
char *const *ccap_handoff_exec_pre(char *const *envp, struct ccap_exec *x);

/* The environment for a second attempt after the exec failed with E2BIG
 * because of the added entry: ENVP's copy without any CONNCAP_PERMITS entry
 * (the survivors' permits then expire with their leases), or NULL if there
 * was nothing added. */
char *const *ccap_handoff_exec_e2big(struct ccap_exec *x);

/* After the exec returned (it failed): the released permits are attached
 * again to the descriptors that are still their sockets and registered in
 * Redis again; memory is freed. Preserves errno. Guard held. */
void ccap_handoff_exec_post(struct ccap_exec *x);

#endif
