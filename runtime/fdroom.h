/* fdroom.h -- the shim's own descriptors above the program's RLIMIT_NOFILE soft limit, where the hard limit leaves room. Runtime-internal. */
#ifndef CCAP_FDROOM_H
#define CCAP_FDROOM_H

/* The kernel gives a new descriptor the lowest free number below the soft
 * RLIMIT_NOFILE, and checks nothing else: a descriptor at or above the soft
 * limit stays valid (read, write, connect, fcntl, epoll_ctl, poll, close, a
 * dup3 from it onto a lower number) after the limit is lowered under it,
 * and never takes one of the numbers the program may get. So where the
 * hard limit is higher than the soft one (systemd's default is 1024 /
 * 524288), the shim's descriptors that live as long as a queued connect go
 * there: a program with N connects queued keeps all of its own numbers,
 * instead of losing N of them (each queued connect keeps the program's
 * socket on a descriptor of the shim's). To make one, the soft limit is
 * raised for the one call and put back; the raises of concurrent callers
 * never overlap (one lock), a fork never happens in the middle of one (the
 * child would keep the raised limit: ccap_fdroom_fork_*), and a limit the
 * program set meanwhile (from another thread) is the one left in force. */

/* A copy of FD with FD_CLOEXEC at the lowest free number at or above the
 * soft limit. Returns it, or -errno: -ENOSPC when there is no room (soft ==
 * hard, or the limits cannot be read or raised: valgrind, a seccomp
 * profile), or F_DUPFD's error. Thread-safe. */
int ccap_fdroom_dup(int fd);

/* dup3(OLDFD, NEWFD, FLAGS), also when NEWFD is at or above the soft limit
 * (a number of the shim's in the room, or one of the program's after it
 * lowered its limit under it), where dup3 alone fails with EBADF. Returns
 * NEWFD or -errno. Preserves errno. Thread-safe. */
int ccap_fdroom_dup3(int oldfd, int newfd, int flags);

/* socket(DOMAIN, TYPE, PROTOCOL) (TYPE should carry SOCK_CLOEXEC); when the
 * program's numbers are all taken (EMFILE), made in the room instead.
 * Returns the descriptor or -errno. Thread-safe. */
int ccap_fdroom_socket(int domain, int type, int protocol);

/* Fork handlers: no raise is in progress across a fork (the parent's
 * prepare takes the lock, parent and child release it). */
void ccap_fdroom_fork_prepare(void);
void ccap_fdroom_fork_parent(void);
void ccap_fdroom_fork_child(void);

#endif
