/* fast.h -- the hooks' fast-path test: nothing owed and a descriptor the shim neither counts nor queues. */
#ifndef CCAP_SHIM_FAST_H
#define CCAP_SHIM_FAST_H

#include <stdatomic.h>
#include <stdbool.h>
#include "handoff.h"
#include "permit.h"
#include "queued.h"
#include "runtime.h"
#include "shim.h"

/* True when a hook on descriptor FD has nothing to do but the real call:
 * nothing owed (no handoff to adopt, no thread due), FD neither queued nor
 * counted, and below the shim's own descriptors. A few loads, no call, no
 * clock: the fast path of close, dup and fcntl on the program's files. */
static inline bool nothing_owed(void)
{
    /* bitwise, not &&: three loads and one branch (a live count below 0,
     * which never happens, would only take the slow path) */
    return !(atomic_load_explicit(&ccap_later_at, memory_order_relaxed) | ccap_handoff_waiting() |
             atomic_load_explicit(&ccap_q_live, memory_order_relaxed));
}

/* FD neither counted nor (if MINE) possibly the shim's own descriptor: a
 * call that only reads FD (dup's source, fcntl) cannot hurt the latter. */
static inline bool untracked_fd(int fd, bool mine)
{
    return !ccap_ptab_maybe(fd) && !(mine && ccap_rt_own_fd_maybe((unsigned)fd));
}

static inline bool plain_fd(int fd, bool mine)
{
    return nothing_owed() && untracked_fd(fd, mine);
}

#endif
