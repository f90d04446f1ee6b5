/* keep.h -- the queue's keeper: program sockets kept aside in a descriptor table of the shim's own. Runtime-internal. */
#ifndef CCAP_KEEP_H
#define CCAP_KEEP_H

/* While a queued connect's placeholder stands on the program's number, the
 * program's own socket must be kept somewhere (runtime/queued.h). On a
 * descriptor of the process it takes a number RLIMIT_NOFILE allows the
 * program: N connects queued cost 2 N descriptors, and a program near its
 * limit with no room above it (soft == hard: runtime/fdroom.h) loses its
 * own socket() and accept() to the numbers the shim holds. The keeper is
 * one thread of the shim's with a descriptor table of its own
 * (close_range(2) with CLOSE_RANGE_UNSHARE: a new, empty table, nothing of
 * the program's copied into it) that holds those sockets there. They go in
 * and come back as SCM_RIGHTS messages (unix(7)) over a SOCK_SEQPACKET
 * pair, one end in each table; a kept socket is the same open file, its
 * options, flags and bound address untouched. The keeper's end gets there
 * once, through pidfd_getfd(2) (Linux 5.6; where the main thread has gone,
 * PIDFD_THREAD: 6.9). Where that, close_range or a thread cannot be had
 * (an old kernel, a seccomp profile, RLIMIT_NPROC under 16: the waiters'
 * waker needs a thread more), ccap_keep_put fails and the caller keeps the
 * socket in the program's table as before.
 *
 * The keeper's thread makes system calls only: its descriptor numbers are
 * not the process's, so nothing may log or open a file there. All calls
 * are thread-safe (one lock, taken after the queue's); -errno on error. */

/* FD's socket is the keeper's too from now on (sent, not waited for); the
 * caller then closes FD or puts another file on it. Never waits for a
 * keeper to start: the first call starts one (it ends after 10 s keeping
 * nothing). Returns the socket's id
 * (>= 0), or -errno: -ENOSYS no keeper can run here, -EAGAIN none serves
 * yet (or its channel stayed full for 20 ms), -ENOMEM. */
int ccap_keep_put(int fd);

/* Kept socket ID back in this process's table, on its lowest free number,
 * with FD_CLOEXEC; the keeper lets it go and ID is free, whatever the
 * result. Returns the descriptor, or -errno: -EMFILE no number was free
 * (the socket is lost), -ENOENT the keeper lost it (no memory or
 * descriptor of its own, the keeper gone), -ETIMEDOUT no answer. */
int ccap_keep_take(int id);

/* FN(descriptor, ARG) run on kept socket ID in the keeper's thread (a
 * socket option, its name: the same socket), the caller waiting for it.
 * FN makes system calls only (see above). Returns FN's result (-errno by
 * convention), or -ENOENT / -ETIMEDOUT as ccap_keep_take. */
int ccap_keep_call(int id, int (*fn)(int fd, void *arg), void *arg);

/* Kept socket ID closed (its queued connect went without it); not waited
 * for. ID is free. */
void ccap_keep_drop(int id);

/* The keeper's own numbers in this table (its channel; while it starts,
 * both ends of it) into FDS; returns how many. They are the queue's own
 * descriptors (runtime/queued.c marks them, a program's close_range skips
 * them). */
#define CCAP_KEEP_OWN_MAX 3
int ccap_keep_own(int fds[CCAP_KEEP_OWN_MAX]);

/* The program is about to close number FD or put another file on it: if
 * it is one of the keeper's own, that moves to another number first. Returns
 * the new number, or -1 (FD is not the channel; or no number was free, and
 * the channel goes with the program's call: the keeper ends, and what it
 * keeps is lost). */
int ccap_keep_rehome(int fd);

/* Sockets kept now (sent and not taken back or dropped). */
int ccap_keep_count(void);

/* fork(): the child has no keeper (the kept sockets stay the parent's):
 * prepare takes the keeper's lock, parent and child let it go; the child
 * forgets the keeper and closes its copy of the channel, and may start a
 * keeper of its own later. */
void ccap_keep_fork_prepare(void);
void ccap_keep_fork_parent(void);
void ccap_keep_fork_child(void);

#endif
