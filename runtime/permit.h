/* permit.h -- the permit table: which of this process's sockets hold a permit. */
#ifndef CCAP_PERMIT_H
#define CCAP_PERMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "holder.h"

/* A permit belongs to one socket (identified by st_dev/st_ino, not by the fd
 * number) of the process that connected it; REFS counts this process's
 * descriptors for that socket. It is released exactly once, when REFS falls
 * to zero. */
struct ccap_permit {
    dev_t dev;
    ino_t ino;
    int refs; /* this process's descriptors for the socket */
    int lease_ms;
    int flags;                       /* CCAP_PERMIT_* */
    char sem[CCAP_SEM_NAME_MAX];     /* semaphore name (kept across config reloads) */
    char holder[CCAP_HOLDER_MAX];    /* holder id in Redis (core/holder.h) */
    atomic_int *held;                /* counts this permit while it is in the table (its semaphore's
                                  permits held by the process), or NULL; set before attaching */
    struct ccap_permit *prev, *next; /* all permits, for the heartbeat */
};

enum {
    CCAP_PERMIT_LOCAL = 1,   /* granted while Redis was down; not yet registered there */
    CCAP_PERMIT_RENEWED = 2, /* sent to Redis in a renewal (or adopted across exec): its holder may
                              * have an acquire time there (lua/renew.lua) for the release to delete */
};

/* Largest descriptor number the table tracks (exclusive). Sockets above it
 * are never given a permit (the connect passes through, logged once). */
#define CCAP_PTAB_MAX_FD (1 << 20)

/* The table: chunks of 1 << CCAP_PTAB_CHUNK_BITS slots, made on first use
 * (runtime/permit.c owns it; exported for the inline hint below). */
#define CCAP_PTAB_CHUNK_BITS 10
typedef _Atomic(struct ccap_permit *) ccap_ptab_slot;
extern _Atomic(ccap_ptab_slot *) ccap_ptab_chunks[CCAP_PTAB_MAX_FD >> CCAP_PTAB_CHUNK_BITS]
    __attribute__((visibility("hidden")));

/* Lock-free hint: true if FD may hold a permit. False is definite, so
 * close() of an untracked descriptor costs two loads and no lock.
 * Async-signal-safe. */
static inline bool ccap_ptab_maybe(int fd)
{
    if ((unsigned)fd >= CCAP_PTAB_MAX_FD)
        return false;
    ccap_ptab_slot *c =
        atomic_load_explicit(&ccap_ptab_chunks[(unsigned)fd >> CCAP_PTAB_CHUNK_BITS], memory_order_acquire);
    return c && atomic_load_explicit(&c[(unsigned)fd & ((1u << CCAP_PTAB_CHUNK_BITS) - 1)], memory_order_relaxed);
}

/* Allocates a zeroed permit (refs 0). NULL when out of memory. */
struct ccap_permit *ccap_permit_new(void);

/* Records that FD refers to permit P (refs++, P joins the list on its first
 * reference). FD must not be tracked already. Returns 0, -EBADF when FD is
 * out of range, -ENOMEM. Thread-safe. */
int ccap_ptab_attach(int fd, struct ccap_permit *p);

/* Returns the permit FD refers to, if the descriptor still is that socket
 * (fstat identity check); a stale entry (the number now names another file
 * or nothing) is dropped, and if that was its last reference the permit is
 * returned in *ORPHAN for the caller to release (else *ORPHAN = NULL). The
 * returned permit stays owned by the table. Thread-safe. */
struct ccap_permit *ccap_ptab_get(int fd, struct ccap_permit **orphan);

/* Forgets FD (close, or dup2/dup3 over it). Returns the permit if that was
 * its last reference (unlinked: the caller releases it, then frees it with
 * free()), else NULL. Thread-safe. */
struct ccap_permit *ccap_ptab_detach(int fd);

/* After a successful dup (dup, dup2, dup3, F_DUPFD[_CLOEXEC]): NEWFD now
 * refers to what OLDFD refers to. NEWFD's own entry, if any, is detached
 * first (dup2/dup3 closed it). If OLDFD's entry is still its socket (the
 * identity is checked on NEWFD), NEWFD joins that permit; a stale OLDFD
 * entry (the number names another file now) is dropped instead. Returns the
 * permits left without references (linked by next; the caller releases
 * them), or NULL. Thread-safe. */
struct ccap_permit *ccap_ptab_dup(int oldfd, int newfd);

/* Drops every entry whose descriptor no longer is its socket (closed behind
 * the shim's back, e.g. by glibc internally). Permits left without any
 * reference are moved to a list returned through *ORPHANS (linked by next;
 * the caller releases and frees them). Returns how many entries were
 * dropped. Thread-safe; one fstat per tracked descriptor. */
int ccap_ptab_sweep(struct ccap_permit **orphans);

/* Forgets every descriptor in [LO, HI] (close_range, closefrom). Returns
 * the permits left without references, linked by next (caller releases). */
struct ccap_permit *ccap_ptab_detach_range(unsigned lo, unsigned hi);

/* Calls FN(P, ARG) for every live permit, under the table lock: FN must not
 * call back into the table or block on I/O. */
void ccap_ptab_each(void (*fn)(struct ccap_permit *p, void *arg), void *arg);

/* Unlinks every permit and clears the table; returns them linked by next
 * (caller releases/frees). For exit. */
struct ccap_permit *ccap_ptab_take_all(void);

/* Number of live permits. */
size_t ccap_ptab_count(void);

/* True when no permit is held: one atomic load, no lock. */
bool ccap_ptab_empty(void);

/* One descriptor of a permit, for exec (see ccap_ptab_exec_split). */
struct ccap_ptab_ent {
    int fd;
    struct ccap_permit *p;
};

struct ccap_handoff_entry;

/* Before an exec, under the table lock: drops stale entries (permits left
 * without references go to *ORPHANS, linked by next, for the caller to
 * release); then, for each permit, looks at whether any of its descriptors
 * survives the exec (FD_CLOEXEC clear):
 * - yes: it stays in the table; each surviving descriptor is copied to
 *   *SURV (malloc'd array of *NSURV handoff entries; descriptors with
 *   FD_CLOEXEC are not listed);
 * - no: all its descriptors are detached and it is unlinked; its (fd,
 *   permit) pairs go to *GONE (malloc'd array of *NGONE) and the permit,
 *   once, to *RELEASED (linked by next). The caller gives them back in Redis
 *   but keeps the memory until the exec has succeeded, or hands them to
 *   ccap_ptab_exec_restore if it failed.
 * Returns 0, or -ENOMEM (then nothing is split: all outputs empty, stale
 * entries still dropped). Thread-safe. */
int ccap_ptab_exec_split(struct ccap_handoff_entry **surv, size_t *nsurv, struct ccap_ptab_ent **gone, size_t *ngone,
                         struct ccap_permit **released, struct ccap_permit **orphans);

/* After a failed exec: attaches each pair of GONE (N of them) again whose
 * descriptor is still that socket and not tracked meanwhile. Returns the
 * permits that got no descriptor back (linked by next; caller frees them:
 * they were already given back in Redis). GONE's permits must not be used
 * by the caller afterwards except through the returned list. */
struct ccap_permit *ccap_ptab_exec_restore(const struct ccap_ptab_ent *gone, size_t n);

/* fork() support: prepare locks the table, parent unlocks, child unlocks
 * and forgets everything without releasing (permits are not inherited). */
void ccap_ptab_fork_prepare(void);
void ccap_ptab_fork_parent(void);
void ccap_ptab_fork_child(void);

#endif
