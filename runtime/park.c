/* park.c -- placeholder sockets parked in SYN_SENT against a private loopback listener with a full accept queue. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fdroom.h"
#include "park.h"
#include "redis.h"

#define PARK_SYNCNT 127 /* the kernel's maximum: SYN retries for hours */

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static int listen_fd = -1, filler_fd = -1; /* the listener and its one connection, never accepted */
static dev_t listen_dev, filler_dev;
static ino_t listen_ino, filler_ino;
/* A copy of the listener, or during a hold (ccap_park_hold) a placeholder:
 * the file it refers to now is SPARE_DEV/SPARE_INO. */
static int spare_fd = -1;
static dev_t spare_dev;
static ino_t spare_ino;
static int hold_fd = -1;      /* during a hold: the number ccap_park_hold returned; else -1 */
static in_port_t listen_port; /* network order */

int ccap_park_move_high(int fd)
{
    int base = ccap_redis_fd_base(), nfd;

    if (fd < 0)
        return fd;
    if ((nfd = ccap_fdroom_dup(fd)) >= 0) { /* above the program's numbers, where the hard limit leaves room */
        close(fd);
        return nfd;
    }
    if (base <= 2 || fd >= base)
        return fd;
    nfd = fcntl(fd, F_DUPFD_CLOEXEC, base);
    if (nfd < 0)
        return fd;
    close(fd);
    return nfd;
}

static bool same_file(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

static struct sockaddr_in loopback(in_port_t port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* Makes the listener and fills its accept queue. Under park_lock. */
static int make_listener(void)
{
    struct sockaddr_in a = loopback(0);
    socklen_t al = sizeof a;
    struct stat st;
    int l = ccap_fdroom_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), f = -1, e;

    if (l < 0)
        return l;
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 0) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0)
        goto fail;
    f = ccap_fdroom_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (f < 0) {
        errno = -f;
        goto fail;
    }
    if (connect(f, (struct sockaddr *)&a, sizeof a) != 0) /* loopback: completes at once */
        goto fail;
    l = ccap_park_move_high(l);
    f = ccap_park_move_high(f);
    if (fstat(l, &st) != 0)
        goto fail;
    listen_fd = l;
    listen_dev = st.st_dev;
    listen_ino = st.st_ino;
    if (fstat(f, &st) != 0)
        goto fail;
    filler_fd = f;
    filler_dev = st.st_dev;
    filler_ino = st.st_ino;
    listen_port = a.sin_port;
    if (hold_fd < 0) { /* (during a hold the spare holds a placeholder: unhold points it here) */
        spare_fd = ccap_park_move_elsewhere(l); /* none when no number is free: a hold then needs one */
        spare_dev = listen_dev;
        spare_ino = listen_ino;
    }
    return 0;
fail:
    e = errno;
    close(l);
    if (f >= 0)
        close(f);
    return -e;
}

/* The listener's port (network order) into *PORT, made (again) if needed.
 * Returns 0, or -errno when it cannot be made (-EMFILE: no descriptor). */
static int listener_port(in_port_t *port)
{
    int rc = 0;

    pthread_mutex_lock(&park_lock);
    if (!same_file(listen_fd, listen_dev, listen_ino)) {
        if (hold_fd < 0) {
            if (same_file(spare_fd, spare_dev, spare_ino))
                close(spare_fd); /* still ours: the old listener's copy */
            spare_fd = -1;
        }
        listen_fd = filler_fd = -1; /* the program closed them: never close its numbers */
        rc = make_listener();
    }
    *port = listen_port;
    pthread_mutex_unlock(&park_lock);
    return rc;
}

/* Starts the parked connect of new socket FD (FAMILY) to PORT. */
static int park_connect(int fd, int family, in_port_t port)
{
    struct sockaddr_in a4 = loopback(port);
    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = port };
    int off = 0;

    if (family == AF_INET6) {
        a6.sin6_addr.s6_addr[10] = a6.sin6_addr.s6_addr[11] = 0xff; /* ::ffff:127.0.0.1 */
        memcpy(&a6.sin6_addr.s6_addr[12], &a4.sin_addr, 4);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    }
    if (connect(fd, family == AF_INET6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4,
                family == AF_INET6 ? sizeof a6 : sizeof a4) == 0)
        return -EISCONN; /* the accept queue was not full */
    return errno == EINPROGRESS ? 0 : -errno;
}

int ccap_park_open(int family, int lifetime_ms)
{
    int syncnt = PARK_SYNCNT, fd, rc;
    unsigned tmo = (unsigned)lifetime_ms;
    in_port_t port;

    if (family != AF_INET && family != AF_INET6)
        return -EAFNOSUPPORT;
    if ((rc = listener_port(&port)) < 0)
        return rc;
    fd = ccap_fdroom_socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fd;
    setsockopt(fd, IPPROTO_TCP, TCP_SYNCNT, &syncnt, sizeof syncnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &tmo, sizeof tmo);
    if ((rc = park_connect(fd, family, port)) < 0) {
        close(fd);
        return rc;
    }
    return ccap_park_move_high(fd);
}

int ccap_park_own(int fds[CCAP_PARK_OWN_MAX])
{
    int n = 0;

    pthread_mutex_lock(&park_lock);
    if (same_file(listen_fd, listen_dev, listen_ino))
        fds[n++] = listen_fd;
    if (same_file(filler_fd, filler_dev, filler_ino))
        fds[n++] = filler_fd;
    if (same_file(spare_fd, spare_dev, spare_ino))
        fds[n++] = spare_fd;
    pthread_mutex_unlock(&park_lock);
    return n;
}

int ccap_park_hold(int ph)
{
    struct stat st;
    int rc = -EBADF;

    pthread_mutex_lock(&park_lock);
    if (hold_fd < 0 && same_file(spare_fd, spare_dev, spare_ino) && fstat(ph, &st) == 0 &&
        ccap_fdroom_dup3(ph, spare_fd, O_CLOEXEC) == spare_fd) {
        spare_dev = st.st_dev;
        spare_ino = st.st_ino;
        rc = hold_fd = spare_fd;
    }
    pthread_mutex_unlock(&park_lock);
    return rc;
}

bool ccap_park_unhold(int fd)
{
    bool spare;

    pthread_mutex_lock(&park_lock);
    spare = fd >= 0 && fd == hold_fd; /* (the spare may have moved since: rehome) */
    if (spare)
        hold_fd = -1;
    if (spare && !same_file(spare_fd, spare_dev, spare_ino)) {
        spare_fd = -1; /* the program closed or replaced it: its number now, never closed */
    } else if (spare) {
        if (same_file(listen_fd, listen_dev, listen_ino) &&
            ccap_fdroom_dup3(listen_fd, spare_fd, O_CLOEXEC) == spare_fd) {
            spare_dev = listen_dev;
            spare_ino = listen_ino;
        } else {
            close(spare_fd); /* no listener to copy: the spare goes, the placeholder with it */
            spare_fd = -1;
        }
    }
    pthread_mutex_unlock(&park_lock);
    return spare;
}

/* Moves *FD (DEV, INO: still ours) off its number; -1 when no number is free. */
static void move_off(int *fd, dev_t dev, ino_t ino)
{
    if (!same_file(*fd, dev, ino))
        return;
    int nfd = ccap_park_move_elsewhere(*fd);
    *fd = nfd; /* the old number is the program's call's to close */
}

int ccap_park_move_elsewhere(int fd)
{
    int base = ccap_redis_fd_base(), nfd = ccap_fdroom_dup(fd);

    if (nfd < 0)
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, base > 2 ? base : 3);

    if (nfd < 0)
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    return nfd;
}

int ccap_park_rehome(int fd)
{
    int moved = -1;

    pthread_mutex_lock(&park_lock);
    if (fd >= 0 && fd == listen_fd) {
        move_off(&listen_fd, listen_dev, listen_ino);
        moved = listen_fd;
    } else if (fd >= 0 && fd == filler_fd) {
        move_off(&filler_fd, filler_dev, filler_ino);
        moved = filler_fd;
    } else if (fd >= 0 && fd == spare_fd) {
        move_off(&spare_fd, spare_dev, spare_ino);
        moved = spare_fd;
    }
    pthread_mutex_unlock(&park_lock);
    return moved;
}

int ccap_park_fail(int fd)
{
    struct sockaddr sa = { .sa_family = AF_UNSPEC };
    return connect(fd, &sa, sizeof sa) == 0 ? 0 : -errno;
}

int ccap_park_failed(int family)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), rc = -EADDRNOTAVAIL;

    if (fd < 0)
        return -errno;
    if (listen_fd < 0 || (rc = park_connect(fd, family, listen_port)) < 0 || (rc = ccap_park_fail(fd)) < 0) {
        close(fd);
        return rc;
    }
    return fd;
}
