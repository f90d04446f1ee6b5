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

int ccap_fdroom_dup(int fd)
{
    struct rlimit old;
    int saved = errno, nfd, rc;

    pthread_mutex_lock(&room_lock);
    rc = room_open(&old);
    if (rc == 0) {
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, (int)old.rlim_cur);
        rc = nfd >= 0 ? nfd : -errno;
        room_close(&old);
    }
    pthread_mutex_unlock(&room_lock);
    errno = saved;
    return rc;
}

int ccap_fdroom_dup3(int oldfd, int newfd, int flags)
{
    struct rlimit old;
    int saved = errno, rc;

    if (dup3(oldfd, newfd, flags) == newfd)
        return newfd;
    rc = -errno;
    if (rc == -EBADF && newfd >= 0 && fcntl(oldfd, F_GETFD) >= 0) { /* NEWFD above the limit, not a bad OLDFD */
        pthread_mutex_lock(&room_lock);
        if (room_open(&old) == 0) {
            rc = dup3(oldfd, newfd, flags) == newfd ? newfd : -errno;
            room_close(&old);
        }
        pthread_mutex_unlock(&room_lock);
    }
    errno = saved;
    return rc;
}

int ccap_fdroom_socket(int domain, int type, int protocol)
{
    struct rlimit old;
    int fd = socket(domain, type, protocol), rc;

    if (fd >= 0)
        return fd;
    if (errno != EMFILE)
        return -errno;
    pthread_mutex_lock(&room_lock);
    rc = room_open(&old);
    if (rc == 0) {
        fd = socket(domain, type, protocol); /* every lower number is taken: it lands in the room */
        rc = fd >= 0 ? fd : -errno;
        room_close(&old);
    } else {
        rc = -EMFILE;
    }
    pthread_mutex_unlock(&room_lock);
    return rc;
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
