/* queued.h -- non-blocking connects queued for a permit: the placeholder in the descriptor, the swap, what the program may ask meanwhile. */
#ifndef CCAP_QUEUED_H
#define CCAP_QUEUED_H

#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include "permit.h"

/* A non-blocking connect to a capped destination that found no permit free
 * (nonblocking = "queue") returns -1/EINPROGRESS at once. Its ticket stays
 * in the semaphore's FIFO queue; a thread of the shim's waits for the
 * permit: its own for the first 32 queued at once, else (or where none can
 * be had -- RLIMIT_NPROC, pids.max) the queue's runner, one thread for any
 * number of waits (runtime/qrun.h); meanwhile the descriptor number refers
 * to a placeholder parked in SYN_SENT (runtime/park.h) and the real socket
 * is kept aside. When the permit comes, the real connect starts and the
 * real socket is put back on every number of this process that referred to the placeholder (dup3),
 * each number deleted from every epoll set it is in before the swap and
 * added again after, pollers woken. A wait that ends without a permit
 * resets the placeholder: the connect failed, SO_ERROR tells with the
 * configured errno. The hooks ask this module only about descriptors it
 * marks (ccap_q_maybe: one load when nothing is queued). Every call below
 * is thread-safe and runs with the shim's guard held; -errno on error. In a
 * child that shares this process's memory but not its descriptors (vfork,
 * posix_spawn's helper) each passes the call through and touches no entry:
 * the queue is its parent's. */

/* Entries live now (queued or failed, not yet closed). */
extern atomic_int ccap_q_live __attribute__((visibility("hidden")));
/* Descriptor numbers that refer to a placeholder, or are the queue's own
 * descriptors (their close by the program reaches ccap_q_forget): a bit each. */
#define CCAP_Q_MAX_FD (1 << 20)
extern _Atomic unsigned long ccap_q_bits[CCAP_Q_MAX_FD / (8 * sizeof(unsigned long))]
    __attribute__((visibility("hidden")));

/* True when some descriptor is queued or failed in queue. */
static inline bool ccap_q_any(void)
{
    return atomic_load_explicit(&ccap_q_live, memory_order_relaxed) > 0;
}

/* True if FD may refer to a placeholder (false is definite). */
static inline bool ccap_q_maybe(int fd)
{
    const unsigned w = 8 * sizeof(unsigned long);
    return ccap_q_any() && fd >= 0 && fd < CCAP_Q_MAX_FD &&
           (atomic_load_explicit(&ccap_q_bits[(unsigned)fd / w], memory_order_relaxed) >> ((unsigned)fd % w) & 1);
}

struct ccap_wait;

/* Queues the connect of FD to SA (LEN bytes) whose wait WS was started
 * (runtime/waiting.h) for permit P: the placeholder (living at most
 * LIFETIME_MS) takes FD's place and a thread of the shim's goes on with WS.
 * Returns 0 (the connect is "in progress"; WS and P are the queue's now),
 * or -errno with nothing changed (WS and P still the caller's). */
int ccap_q_enqueue(int fd, const struct sockaddr *sa, socklen_t len, struct ccap_permit *p, struct ccap_wait *ws,
                   int lifetime_ms);

/* connect() again on FD: -EALREADY while queued; the failure's errno once
 * after it failed; 0 when FD is not (any more) the queue's: go on (after a
 * failure reported, the program's own socket is back on FD first). A
 * blocking FD (O_NONBLOCK cleared while queued, or a connect a signal
 * interrupted, queued since) first waits while it is queued, as connect()
 * again on a real connecting blocking socket waits for the connection:
 * -EINTR when a signal handler installed without SA_RESTART interrupts that
 * wait, -EALREADY when the socket's SO_SNDTIMEO passes; a cancel ends the
 * thread there, the queued connect going on (runtime/nap.h). */
int ccap_q_connect(int fd);

/* shutdown() of FD: a queued connect ends (its ticket goes back) and the
 * program's own socket is put back on its numbers, unconnected -- what a
 * shutdown does to a connecting socket -- and 1 is returned: the shutdown is
 * done (0). A connect that failed in the queue puts the socket back as well
 * and returns 0; so does a descriptor that is not the queue's: the caller
 * then makes the real call on FD. */
int ccap_q_shutdown(int fd);

/* FD stops referring to the placeholder (the program closes it, puts another
 * file on its number, shuts it down): forgotten; the last such number of a
 * queued connect ends its wait and gives its ticket back. Before the call. */
void ccap_q_forget(int fd);

/* close_range(LO, HI, FLAGS) (closefrom: HI ~0U) by the program: the queued
 * connects forget their numbers in the range (as ccap_q_forget each) and
 * CLOSER closes every number in it but the queue's own descriptors (kept
 * sockets, placeholders, eventfds, the park's listener: the program did not
 * open them), in one call per gap between those. Returns CLOSER's result:
 * 0, or -errno of the first call that failed. */
typedef int ccap_close_range_fn(unsigned lo, unsigned hi, int flags);
int ccap_q_close_range(unsigned lo, unsigned hi, int flags, ccap_close_range_fn *closer);

/* After a successful dup of OLDFD to NEWFD: NEWFD is another number of
 * OLDFD's queued connect (the real socket goes to both). */
void ccap_q_dup(int oldfd, int newfd);

/* setsockopt on a queued FD: set on the real socket (its result) and on the
 * placeholder. getsockopt: SO_ERROR and TCP_INFO as a connecting socket
 * (the failure's errno once after it failed), the rest from the real
 * socket. getsockname: the real socket's. Each returns 0 or -errno, and
 * passes the call through for a descriptor that is not the queue's. */
int ccap_q_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
int ccap_q_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
int ccap_q_getsockname(int fd, struct sockaddr *sa, socklen_t *len);

/* epoll_ctl on a queued FD, serialised with its swaps. */
int ccap_q_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);

/* The numbers an epoll set was made on (a bit each, never cleared): a swap
 * looks in each of them that is an epoll set still (the program may have
 * added a socket to one before connecting it). */
extern _Atomic unsigned long ccap_q_epoll_bits[CCAP_Q_MAX_FD / (8 * sizeof(unsigned long))]
    __attribute__((visibility("hidden")));
/* ccap_q_epoll_created's slow part: the first epoll set on number EPFD. */
void ccap_q_epoll_new_number(int epfd);

/* A new epoll descriptor EPFD (epoll_create, epoll_create1): remembered by
 * its number, lock-free, no system call; a number seen before costs one
 * load. Any thread, guarded or not; preserves errno. */
static inline void ccap_q_epoll_created(int epfd)
{
    const unsigned w = 8 * sizeof(unsigned long);
    if (epfd >= 0 && epfd < CCAP_Q_MAX_FD &&
        !(atomic_load_explicit(&ccap_q_epoll_bits[(unsigned)epfd / w], memory_order_relaxed) >>
              ((unsigned)epfd % w) &
          1))
        ccap_q_epoll_new_number(epfd);
}

/* poll/ppoll with some queued descriptor in FDS: as ppoll(FDS, N, TMO,
 * MASK), woken when one of them is swapped (an eventfd of the queue's added
 * to the set, never reported). Returns the count or -errno. */
typedef int ccap_ppoll_fn(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
int ccap_q_poll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask, ccap_ppoll_fn *real);
/* select/pselect the same way (through ppoll); TMO, if not NULL, is left
 * with the time not slept, as Linux's select does. */
int ccap_q_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timespec *tmo, const sigset_t *mask,
                  ccap_ppoll_fn *real);

/* Before an exec: a queued connect whose number survives the exec fails
 * (the new image sees a connect reset); the others go on if it fails. */
void ccap_q_exec_pre(void);

/* fork(): prepare locks the queue (before the waits' lock), parent unlocks;
 * child: each number of a queued connect is replaced by a failed
 * placeholder (the parent's connect goes on; the child's copy reports a
 * reset connect) and the queue starts empty. */
void ccap_q_fork_prepare(void);
void ccap_q_fork_parent(void);
void ccap_q_fork_child(void);

#endif
