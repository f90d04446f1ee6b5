/* rt_int.h -- the runtime's internals: its per-process state and the calls its files share. Not for the shim. */
#ifndef CCAP_RT_INT_H
#define CCAP_RT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include "config.h"
#include "log.h"
#include "permit.h"
#include "redis.h"
#include "runtime.h"

/* The runtime's per-process state (state.c). One instance; its fields are
 * reset in a fork child by ccap_rt_state_fork_child. */
struct ccap_rt_state {
    struct ccap_rt_hooks hooks;         /* the shim's callbacks */
    struct ccap_config *_Atomic cfg;    /* NULL: not usable, pass everything through; swapped by reload.c */
    pthread_mutex_t rlock;              /* serialises use of the Redis connection and the breaker */
    struct ccap_redis *redis;           /* the shared connection (created at the first load) */
    atomic_int *local_used;             /* per semaphore index, permits granted locally (on_redis_down) */
    atomic_int *held;                   /* per semaphore index, permits in this process's table (permit.h) */
    unsigned *sem_epoch;                /* per semaphore index, the failover epoch of its master acted on
                                      * (failover.c; under rlock) */
    long long *sem_used_ms;             /* per semaphore index, its last grant or release (coarse ms) */
    struct ccap_log_every *refusal_log; /* per semaphore index, its refusals' log lines (waiting.c) */
    unsigned epochs_seen;               /* ccap_redis_epochs when failover.c last looked at them all */
    atomic_bool shutting_down;          /* exit began: the heartbeat stops */
};
extern struct ccap_rt_state ccap_rt;

/* state.c: the configuration in force, putting the one read at load in
 * force on first use (NULL: not usable: a bad configuration, for good, or
 * one that could not be loaded yet for want of descriptors or memory,
 * tried again at the next call). Thread-safe; one atomic load once done. */
const struct ccap_config *ccap_rt_config(void);
/* state.c: the audit stream's MAXLEN the scripts are given with each
 * call under the configuration in force: 0 when audit is off. */
int ccap_rt_audit_maxlen(void);
/* state.c: the index of semaphore NAME in the configuration in force, or -1. */
int ccap_rt_sem_index(const char *name);
/* state.c: applies what a newly loaded configuration CFG sets process-wide
 * (log level and target). Called for the first
 * configuration and by every reload (reload.c): the one place that sets them. */
void ccap_rt_config_applied(const struct ccap_config *cfg);
/* state.c: after fork, in the child (its rlock already made afresh): the
 * Redis connection is forgotten, the counters start at zero. */
void ccap_rt_state_fork_child(void);

/* owner.c: this process's pid without a syscall once the state exists. */
int ccap_rt_self_pid(void);
/* owner.c: true once ccap_rt_claim ran (state may exist). */
bool ccap_rt_stateful(void);
/* owner.c: after fork, in the child: the child owns the state. */
void ccap_rt_owner_fork_child(void);

/* lifecycle.c: registers the one set of fork handlers (once). */
void ccap_rt_lifecycle_init(void);

/* ident.c: reads the host name the ids carry. Once, at the first load. */
void ccap_rt_ident_init(void);
/* ident.c: names permit P, taken for descriptor FD connecting to SA, with a
 * fresh holder id (core/holder.h). Thread-safe. */
void ccap_rt_make_holder(struct ccap_permit *p, int fd, const struct sockaddr *sa);
/* ident.c: gives P an id no attempt has used (a new sequence number). */
void ccap_rt_next_holder(struct ccap_permit *p);
/* ident.c: a pseudo-random number, per thread, seeded again in a fork child. */
unsigned ccap_rt_rand32(void);
/* ident.c: after fork, in the child: a new nonce at its first connect. */
void ccap_rt_ident_fork_child(void);

/* release.c: releases HOLDER of semaphore SEM (index I, -1 unknown): sent
 * at once unless the breaker is open, kept either way until Redis ran it or
 * UNTIL (monotonic ms) passed (core/redis_defer.c). RENEWED: HOLDER may
 * have been renewed (so may have an acquire time in Redis to delete).
 * Under rlock. */
void ccap_rt_release_kept(const char *sem, int i, const char *holder, bool renewed, long long until);

struct ccap_handoff_entry;

/* renew.c: what ccap_rt_each_sem_batch calls for each semaphore: HOLDERS
 * (N, borrowed for the call) of SEM, to renew for LEASE_MS. Returns 0 to go
 * on, or -errno to stop. */
typedef int ccap_rt_batch_fn(const char *sem, const char **holders, size_t n, int lease_ms, void *arg);

/* renew.c: groups the N entries of E by semaphore (first appearance
 * order) and calls FN once per semaphore with all its holders and the
 * group's lease: the LONGEST lease_ms among them (at least 1), so that a
 * renewal never shortens a permit's lease below the one it was granted
 * (permits of one semaphore granted before and after a reload that changed
 * lease_ms live side by side). Returns 0, FN's first -errno (no further
 * call), or -ENOMEM. */
int ccap_rt_each_sem_batch(const struct ccap_handoff_entry *e, size_t n, ccap_rt_batch_fn *fn, void *arg);

/* failover.c: after a call to semaphore SEM returned -ESTALE (its master
 * changed: core/redis.h ccap_redis_expect_epoch), before any other call
 * there: if this process holds permits of SEM or gave one back within a
 * lease, opens the re-registration window on the new master (or joins the
 * one open) and renews its permits there (adding those missing); then takes
 * note of the new epoch. Under rlock. Returns 0, or -errno of the call that
 * failed (the epoch stays unnoted: tried again at the next call). */
int ccap_rt_failover(const char *sem);

/* failover.c: does the same for every semaphore whose master changed while
 * no call of it found out (a release found the new master). The
 * heartbeat's. Under rlock. */
void ccap_rt_failover_scan(void);

/* failover.c: semaphore index I was used (a grant or a release), now. */
void ccap_rt_note_use(int i);

/* failover.c: the failover epoch of semaphore index I acted on, into
 * *EPOCH; false when there is none to check (I < 0). */
bool ccap_rt_epoch_of(int i, unsigned *epoch);

/* shutdown.c: reads the replies of the releases sent and sends those not
 * sent yet. Under rlock. Returns how many are still kept. */
size_t ccap_rt_flush_releases(void);

#endif
