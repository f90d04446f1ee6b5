/* fdroom.c -- the shim's own descriptors above the program's RLIMIT_NOFILE soft limit, where the hard limit leaves room. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fdroom.h"

static pthread_mutex_t room_lock = PTHREAD_MUTEX_INITIALIZER;

/* Raises the soft limit to the hard one, the old limits into *OLD.
 * Returns 0, or -ENOSPC (no room, nothing changed). Under room_lock. */
static int room_open(struct rlimit *old)
{
    struct rlimit up;

    if (prlimit(0, RLIMIT_NOFILE, NULL, old) != 0 || old->rlim_cur == RLIM_INFINITY ||
        old->rlim_cur >= old->rlim_max)
        return -ENOSPC;
    up = (struct rlimit){ old->rlim_max, old->rlim_max };
    return prlimit(0, RLIMIT_NOFILE, &up, NULL) == 0 ? 0 : -ENOSPC;
}

/* Puts OLD's soft limit back, unless the program set limits of its own in
 * the meantime (they are then left as it set them). Under room_lock. */
static void room_close(const struct rlimit *old)
{
    struct rlimit now;

    if (prlimit(0, RLIMIT_NOFILE, NULL, &now) == 0 && now.rlim_cur == old->rlim_max && now.rlim_max == old->rlim_max)
        prlimit(0, RLIMIT_NOFILE, old, NULL);
}

/* The three calls made in the room: A, B, C their arguments, SOFT the
 * soft limit before the raise; each returns a descriptor or -errno. */
static int op_dup(int fd, int unused, int unused2, int soft)
{
    (void)unused, (void)unused2;
    return (fd = fcntl(fd, F_DUPFD_CLOEXEC, soft)) >= 0 ? fd : -errno;
}

static int op_dup3(int oldfd, int newfd, int flags, int soft)
{
    (void)soft;
    return dup3(oldfd, newfd, flags) == newfd ? newfd : -errno;
}

static int op_socket(int domain, int type, int protocol, int soft)
{
    int fd = socket(domain, type, protocol); /* every lower number is taken: it lands in the room */
    (void)soft;
    return fd >= 0 ? fd : -errno;
}

/* OP(A, B, C) with the soft limit raised, then put back; NOROOM when there
 * is no room. Preserves errno. */
static int in_room(int (*op)(int, int, int, int), int a, int b, int c, int noroom)
{
    struct rlimit old;
    int saved = errno, rc = noroom;

    pthread_mutex_lock(&room_lock);
    if (room_open(&old) == 0) {
        rc = op(a, b, c, (int)old.rlim_cur);
        room_close(&old);
    }
    pthread_mutex_unlock(&room_lock);
    errno = saved;
    return rc;
}

int ccap_fdroom_dup(int fd)
{
    return in_room(op_dup, fd, 0, 0, -ENOSPC);
}

int ccap_fdroom_dup3(int oldfd, int newfd, int flags)
{
    int saved = errno, rc = op_dup3(oldfd, newfd, flags, 0);

    if (rc == -EBADF && newfd >= 0 && fcntl(oldfd, F_GETFD) >= 0) /* NEWFD above the limit, not a bad OLDFD */
        rc = in_room(op_dup3, oldfd, newfd, flags, -EBADF);
    errno = saved;
    return rc;
}

int ccap_fdroom_socket(int domain, int type, int protocol)
{
    int rc = op_socket(domain, type, protocol, 0);

    return rc == -EMFILE ? in_room(op_socket, domain, type, protocol, -EMFILE) : rc;
}

void ccap_fdroom_fork_prepare(void)
{
    pthread_mutex_lock(&room_lock);
}

void ccap_fdroom_fork_parent(void)
{
    pthread_mutex_unlock(&room_lock);
}

void ccap_fdroom_fork_child(void)
{
    pthread_mutex_unlock(&room_lock);
}
