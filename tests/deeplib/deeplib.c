/* deeplib.c -- the libraries tests/progs/deepbind.c loads with RTLD_DEEPBIND, one source built by
 * tests/integration/deepbind_libs.sh as:
 *   -DTOP  libdeepnow.so / libdeeplazy.so / libdeepplain.so: connects, closes, polls with libc's
 *          calls, loads more with its own dlopen; needs libdeepdep.so (RUNPATH $ORIGIN/sub)
 *   -DDEP  libdeepdep.so: a dependency that connects
 *   -DSUB  libdeepsub.so: what TOP loads by a bare name from its own RUNPATH
 *   -DOWN  libdeepown.so: defines connect() itself (a raw system call, counted): a DEEPBIND
 *          library's own definition must stay its own
 * Every function returns a descriptor or 0, or -errno. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

static struct sockaddr_in addr4(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* A blocking TCP connect to 127.0.0.1:PORT with this library's connect. */
static int connect_to(int port, int type)
{
    int fd = socket(AF_INET, SOCK_STREAM | type, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = addr4(port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

#if defined(TOP)
int dd_connect(int port);

API int dt_connect(int port)
{
    return connect_to(port, 0);
}

API int dt_dep_connect(int port)
{
    return dd_connect(port);
}

API int dt_close(int fd)
{
    return close(fd) == 0 ? 0 : -errno;
}

/* A non-blocking connect: the descriptor (in progress, or connected). */
API int dt_start(int port)
{
    return connect_to(port, SOCK_NONBLOCK);
}

/* Waits up to MS for FD to turn writable (this library's poll), then its
 * SO_ERROR (this library's getsockopt): 0 connected, -errno, -ETIME none. */
API int dt_wait(int fd, int ms)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    int n = poll(&p, 1, ms);
    if (n <= 0)
        return n < 0 ? -errno : -ETIME;
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return -errno;
    return -err;
}

/* dlopen with this library's own dlopen reference (its RUNPATH, its $ORIGIN). */
API void *dt_open(const char *name, int flags)
{
    return dlopen(name, flags);
}
#elif defined(DEP)
API int dd_connect(int port)
{
    return connect_to(port, 0);
}
#elif defined(SUB)
API int ds_connect(int port)
{
    return connect_to(port, 0);
}
#elif defined(OWN)
API int own_calls;

/* This library's own connect: DEEPBIND binds its references here. */
API int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    own_calls++;
    long r = syscall(SYS_connect, fd, sa, len);
    return r < 0 ? -1 : 0;
}

API int do_own_connect(int port)
{
    return connect_to(port, 0);
}
#endif
