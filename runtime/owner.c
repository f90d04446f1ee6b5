/* owner.c -- which process owns the runtime's state, and the guard around the shim's own Redis descriptor. */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "rt_int.h"

/* The owner is the process that created the state (ccap_rt_claim), and
 * after a fork() the child (ccap_rt_owner_fork_child): never merely the
 * process that loaded the library, whose prefork children create state of
 * their own. */
static atomic_int owner_pid;               /* the process the state belongs to; 0 before any */
static atomic_bool stateful;               /* fork handlers registered: state may exist */
atomic_int ccap_rt_own_fd_low = INT32_MAX; /* ccap_redis_fd_base() once claimed */
static pthread_once_t claim_once = PTHREAD_ONCE_INIT;

static void claim(void)
{
    atomic_store(&ccap_rt_own_fd_low, ccap_redis_fd_base());
    atomic_store(&owner_pid, (int)getpid());
    ccap_rt_lifecycle_init();
    atomic_store(&stateful, true);
}

void ccap_rt_claim(void)
{
    pthread_once(&claim_once, claim);
}

bool ccap_rt_stateful(void)
{
    return atomic_load(&stateful);
}

void ccap_rt_owner_fork_child(void)
{
    atomic_store(&owner_pid, (int)getpid());
}

bool ccap_rt_owner(void)
{
    int me = (int)getpid();
    if (atomic_load_explicit(&owner_pid, memory_order_relaxed) == me)
        return true;
    if (atomic_load(&stateful))
        return false;             /* shares its parent's memory */
    atomic_store(&owner_pid, me); /* a fork child before any state */
    return true;
}

int ccap_rt_self_pid(void)
{
    int pid = atomic_load_explicit(&owner_pid, memory_order_relaxed);
    return atomic_load_explicit(&stateful, memory_order_relaxed) && pid > 0 ? pid : (int)getpid();
}

bool ccap_rt_own_fd_begin(unsigned lo, unsigned hi)
{
    (void)lo;
    if (!ccap_rt_own_fd_maybe(hi))
        return false;
    /* A vfork child has a descriptor table of its own: nothing to guard, and
     * it must never take (and maybe die holding) its parent's lock. */
    if (!ccap_rt_owner())
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 2; /* bounded: never hang a close, even from a signal handler */
    return pthread_mutex_timedlock(&ccap_rt.rlock, &ts) == 0;
}

void ccap_rt_own_fd_end(bool locked)
{
    if (locked)
        pthread_mutex_unlock(&ccap_rt.rlock);
}
