/* park.h -- placeholder sockets parked in SYN_SENT: what a queued connect's descriptor refers to meanwhile. Runtime-internal. */
#ifndef CCAP_PARK_H
#define CCAP_PARK_H

#include <stdbool.h>

/* A placeholder is a TCP socket connected, non-blocking, to a private
 * loopback listener of this process whose accept queue is full (listen
 * backlog 0 and one filler connection never accepted): the kernel drops
 * its SYNs, so it stays in SYN_SENT and looks, to poll/epoll/select, read,
 * write, SO_ERROR, getpeername and connect, exactly like a slow connect
 * (measured: shared/design/queued-connect.md). Its SYN retries are raised
 * to the maximum and TCP_USER_TIMEOUT ends it with a real ETIMEDOUT after
 * LIFETIME_MS: if nothing else ends the wait, the program still learns a
 * connect that timed out. */

/* Opens a placeholder of FAMILY (AF_INET, or AF_INET6 through a v4-mapped
 * address) with O_NONBLOCK and FD_CLOEXEC, at or above the shim's high
 * descriptor base. LIFETIME_MS > 0. Returns the descriptor or -errno
 * (-EAFNOSUPPORT for another family; the listener's own error, e.g. -EMFILE,
 * when it could not be made).
 * Thread-safe; the listener is made at the first call and made again when
 * the program closed it. */
int ccap_park_open(int family, int lifetime_ms);

/* Ends placeholder FD's connect as a refused one: connect(AF_UNSPEC) on a
 * SYN_SENT socket resets it, so every descriptor of it (in this process and
 * in others that inherited it) reports POLLOUT|POLLERR|POLLHUP and SO_ERROR
 * ECONNRESET, as a real connect that failed. Returns 0 or -errno. */
int ccap_park_fail(int fd);

/* A new placeholder of FAMILY already failed (ccap_park_fail): what a fork
 * child's copy of a queued descriptor becomes. Async-signal-safe once the
 * listener exists. Returns the descriptor or -errno. */
int ccap_park_failed(int family);

/* The park's own numbers (the listener, its filler and the spare, while
 * they are still the park's) into FDS; returns how many (0 to
 * CCAP_PARK_OWN_MAX). Thread-safe. */
#define CCAP_PARK_OWN_MAX 3
int ccap_park_own(int fds[CCAP_PARK_OWN_MAX]);

/* Puts placeholder PH on the park's spare number (a copy of the listener
 * made with it), so that the placeholder outlives its last number of the
 * program's for the moment of a swap without a free descriptor being
 * needed then (a process at RLIMIT_NOFILE still gets its pollers woken).
 * Returns that number, or -EBADF when there is no spare (no number was
 * free when the listener was made, or the program closed it with none free
 * to move it to) or it cannot take the placeholder (RLIMIT_NOFILE lowered
 * below it: dup3 onto it fails). One hold at a time: the
 * caller serializes them (qlock) and ends each with ccap_park_unhold. */
int ccap_park_hold(int ph);

/* Ends the hold on number FD if it is the spare's (from ccap_park_hold):
 * the spare refers to the listener again, and the placeholder is only the
 * program's. Returns whether FD was the spare. */
bool ccap_park_unhold(int fd);

/* The program is about to close or replace number FD: if it is the
 * listener or the filler, that moves to another number first (the
 * program's call then frees FD, as it asked). Returns the new number, or
 * -1 when FD is not the park's or no number is free (the park's descriptor
 * then goes with the call and is made again at the next need). */
int ccap_park_rehome(int fd);

/* A copy of FD (with FD_CLOEXEC) on another number: above the program's
 * soft RLIMIT_NOFILE where the hard limit leaves room (runtime/fdroom.h),
 * else at or above the shim's high descriptor base if one is free there,
 * else any; -1 (errno set) when none is. */
int ccap_park_move_elsewhere(int fd);

/* Moves FD with FD_CLOEXEC above the program's soft RLIMIT_NOFILE where
 * the hard limit leaves room, else to a number at or above the shim's high
 * descriptor base (the program's numbers stay free); returns the new
 * number, or FD itself when that fails. */
int ccap_park_move_high(int fd);

#endif
