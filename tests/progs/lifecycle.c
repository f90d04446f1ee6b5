/* lifecycle.c -- socket lifecycle scenarios run under the shim; steps checked by tests/lib/lifecycle.sh.
 *
 * Usage: lifecycle MODE PORT DEAD_PORT [ARGS...]
 * PORT is the countserver on 127.0.0.1 (and ::1), DEAD_PORT a port nobody
 * listens on; both are matched by the test's rules. At each step the
 * program prints "@NAME N [PID K]" (N live holders expected in Redis, K of
 * them holding PID in their id) and waits for one line on stdin from the
 * driver, which checks the count. Other output lines are "key value" facts
 * for the script. Any failed expectation prints "FAIL: ..." on stderr and
 * exits 1. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static int port, dead_port;
static const char *self;

/* Set by the constructor (runs after the shim's: it is preloaded). */
static int ctor_rc1 = 99, ctor_err1, ctor_rc2 = 99;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    int e = errno;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (errno %s)\n", strerrorname_np(e) ? strerrorname_np(e) : "?");
    va_end(ap);
    exit(1);
}

static const char *ename(int e)
{
    return e == 0 ? "0" : strerrorname_np(e) ? strerrorname_np(e) : "?";
}

/* "@NAME N [PID K]", then one line from the driver. */
static void step_pid(const char *name, int n, int pid, int k)
{
    char line[64];
    if (pid)
        printf("@%s %d %d %d\n", name, n, pid, k);
    else
        printf("@%s %d\n", name, n);
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin) || strncmp(line, "ok", 2) != 0)
        die("step %s: driver said no", name);
}

static void step(const char *name, int n)
{
    step_pid(name, n, 0, 0);
}

static void fact(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fact(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static struct sockaddr_in addr4(int p)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)p) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* A TCP socket (TYPE_FLAGS: SOCK_CLOEXEC, SOCK_NONBLOCK) connected to the
 * countserver; dies on failure. */
static int tcp(int type_flags)
{
    int fd = socket(AF_INET, SOCK_STREAM | type_flags, 0);
    if (fd < 0)
        die("socket");
    struct sockaddr_in a = addr4(port);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        die("connect to %d", port);
    return fd;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static ino_t ino_of(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* ---- dup, dup2, dup3, F_DUPFD, F_DUPFD_CLOEXEC; dup2 over a permit ---- */
static int mode_dup(void)
{
    int a = tcp(0), b = dup(a);
    step("dup", 1);
    close(a);
    step("dup-one-closed", 1);
    close(b);
    step("dup-last-closed", 0);

    a = tcp(0);
    if (dup2(a, 50) != 50)
        die("dup2");
    close(a);
    step("dup2-one-closed", 1);
    close(50);
    step("dup2-last-closed", 0);

    a = tcp(0);
    if (dup3(a, 51, O_CLOEXEC) != 51)
        die("dup3");
    close(51);
    step("dup3-copy-closed", 1);
    close(a);
    step("dup3-last-closed", 0);

    a = tcp(0);
    int c = fcntl(a, F_DUPFD, 60), d = fcntl(a, F_DUPFD_CLOEXEC, 70);
    if (c < 60 || d < 70)
        die("F_DUPFD");
    close(a);
    close(c);
    step("dupfd-two-closed", 1);
    close(d);
    step("dupfd-last-closed", 0);

    /* dup2/dup3 onto a descriptor holding a permit releases it at once */
    a = tcp(0);
    b = tcp(0);
    step("two", 2);
    if (dup2(b, a) != a)
        die("dup2 over");
    step("dup2-over-permit", 1);
    close(b);
    step("dup2-over-one-closed", 1);
    close(a);
    step("dup2-over-all-closed", 0);

    a = tcp(0);
    b = tcp(0);
    if (dup3(b, a, O_CLOEXEC) != a)
        die("dup3 over");
    step("dup3-over-permit", 1);
    close(a);
    close(b);
    step("dup3-over-all-closed", 0);

    /* the JDK's close: dup2 a dead socket over the fd, close it later */
    a = tcp(0);
    int dead = socket(AF_INET, SOCK_STREAM, 0);
    step("jdk-open", 1);
    if (dup2(dead, a) != a)
        die("dup2 dead");
    step("jdk-dup2-dead", 0);
    close(dead);
    close(a);
    step("jdk-closed", 0);
    return 0;
}

/* ---- close_range, CLOSE_RANGE_CLOEXEC, closefrom ---- */
static int mode_closerange(void)
{
    int a = tcp(0), b = tcp(0), c = tcp(0);
    if (dup2(a, 100) != 100 || dup2(b, 101) != 101 || dup2(c, 102) != 102)
        die("dup2 high");
    close(a);
    close(b);
    close(c);
    step("three", 3);
    if (close_range(100, 101, 0) != 0)
        die("close_range");
    step("close_range", 1);
    if (close_range(102, 102, CLOSE_RANGE_CLOEXEC) != 0)
        die("close_range cloexec");
    if (!(fcntl(102, F_GETFD) & FD_CLOEXEC))
        die("CLOSE_RANGE_CLOEXEC did not mark");
    step("close_range-cloexec", 1);
    close(102);
    step("closed", 0);

    a = tcp(0);
    b = tcp(0);
    if (dup2(a, 200) != 200 || dup2(b, 210) != 210)
        die("dup2 high");
    close(a);
    close(b);
    step("two-high", 2);
    closefrom(200);
    if (fcntl(200, F_GETFD) != -1 || fcntl(210, F_GETFD) != -1)
        die("closefrom left descriptors");
    step("closefrom", 0);
    return 0;
}

/* ---- fdopen + fclose ---- */
static int mode_fdopen(void)
{
    int a = tcp(0);
    FILE *f = fdopen(a, "r+");
    if (!f)
        die("fdopen");
    fprintf(f, "GET / HTTP/1.0\r\n\r\n");
    fflush(f);
    step("fdopen", 1);
    if (fclose(f) != 0)
        die("fclose");
    step("fclose", 0);

    a = tcp(0);
    f = fdopen(dup(a), "r");
    if (!f)
        die("fdopen dup");
    fclose(f);
    step("fclose-copy", 1);
    close(a);
    step("fclose-last", 0);
    return 0;
}

/* ---- a tracked number reused behind the shim's back ---- */
static int mode_reuse(void)
{
    int a = tcp(0);
    step("held", 1);
    nap_ms(500);                         /* the heartbeat's first beat is over: the next is lease/3 away */
    syscall(SYS_close, a);               /* unseen by the shim */
    int f = open("/dev/null", O_RDONLY); /* takes the same number */
    if (f != a)
        die("expected number %d again, got %d", a, f);
    int g = dup(f); /* must not share the old permit */
    step("dup-of-reused", 0);
    close(g);
    close(f);
    step("closed", 0);

    a = tcp(0);
    syscall(SYS_close, a);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s != a)
        die("expected number %d again, got %d", a, s);
    struct sockaddr_in sa = addr4(port);
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("connect on reused number");
    step("connect-on-reused", 1);
    close(s);
    step("closed-again", 0);
    return 0;
}

/* ---- fork: threads looping connect/close, children that connect and exit ---- */
static atomic_bool loop_stop;
static atomic_long loops;

static void *looper(void *arg)
{
    (void)arg;
    while (!atomic_load(&loop_stop)) {
        close(tcp(0));
        atomic_fetch_add(&loops, 1);
    }
    return NULL;
}

static int mode_fork(int nthreads, int nchildren)
{
    alarm(240); /* a hang is a failure, not a stuck test */
    int p = tcp(0);
    step_pid("parent", 1, getpid(), 1);
    pthread_t th[64];
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, looper, NULL);
    while (atomic_load(&loops) < 2 * nthreads)
        nap_ms(1);
    int ready[2], go[2];
    if (pipe(ready) || pipe(go))
        die("pipe");
    fflush(stdout);
    pid_t kids[256];
    for (int i = 0; i < nchildren; i++) {
        pid_t k = fork();
        if (k < 0)
            die("fork");
        if (k == 0) {
            close(ready[0]);
            close(go[1]);
            close(p);       /* our copy: the parent keeps its permit */
            int c = tcp(0); /* our own permit */
            char b = c >= 0 ? 'C' : 'F';
            if (write(ready[1], &b, 1) != 1)
                _exit(3);
            while (read(go[0], &b, 1) > 0) {
            }        /* until the parent says go */
            exit(0); /* exit releases it */
        }
        kids[i] = k;
        nap_ms(i % 3);
    }
    close(ready[1]);
    close(go[0]);
    for (int i = 0; i < nchildren; i++) {
        char b;
        if (read(ready[0], &b, 1) != 1 || b != 'C')
            die("child %d did not connect", i);
    }
    atomic_store(&loop_stop, true);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    fact("loops %ld", atomic_load(&loops));
    step_pid("children-connected", 1 + nchildren, getpid(), 1);
    close(go[1]);
    for (int i = 0; i < nchildren; i++) {
        int st;
        if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            die("child %d ended badly (status %d)", i, st);
    }
    step_pid("children-gone", 1, getpid(), 1);
    close(p);
    step("closed", 0);
    return 0;
}

/* ---- exec: CLOEXEC released, survivors handed over, failed exec restores ---- */
static int mode_exec(const char *lease_ms)
{
    int a = tcp(0);                                    /* survives */
    int b = tcp(SOCK_CLOEXEC);                         /* released before the exec */
    int c = tcp(0), c2 = fcntl(c, F_DUPFD_CLOEXEC, 0); /* survives through c only */
    int d = tcp(0);
    close_range((unsigned)d, (unsigned)d, CLOSE_RANGE_CLOEXEC); /* released before the exec */
    (void)b;
    (void)c2;
    step("before", 4);
    errno = 0;
    if (execl("/nonexistent/lifecycle", "x", (char *)NULL) != -1 || errno != ENOENT)
        die("exec of nothing");
    step("failed-exec", 4);
    if (execl("/", "x", (char *)NULL) != -1 || errno != EACCES)
        die("exec of a directory");
    step("failed-exec-2", 4);
    char fa[16], fc[16], pp[16], dp[16];
    snprintf(fa, sizeof(fa), "%d", a);
    snprintf(fc, sizeof(fc), "%d", c);
    snprintf(pp, sizeof(pp), "%d", port);
    snprintf(dp, sizeof(dp), "%d", dead_port);
    execl(self, self, "exec2", pp, dp, fa, fc, lease_ms, (char *)NULL);
    die("exec of myself");
}

/* The new image: no interposed call at all until the permits must have
 * been renewed for three leases. */
static int mode_exec2(int a, int c, int lease)
{
    struct stat st;
    if (fstat(a, &st) != 0 || !S_ISSOCK(st.st_mode) || fstat(c, &st) != 0)
        die("sockets did not survive");
    step("adopted", 2);
    nap_ms(3L * lease);
    step("renewed", 2);
    close(a);
    step("closed-a", 1);
    return 0; /* return from main releases c */
}

/* ---- 100 re-execs: no descriptor left behind ---- */
static void count_fds(int *low, int *high)
{
    *low = *high = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        die("opendir");
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd == dirfd(d))
            continue;
        if (fd < 512)
            (*low)++;
        else
            (*high)++;
    }
    closedir(d);
}

/* Counts until LOW is WANT (the heartbeat may be opening the shim's Redis
 * socket, briefly at a low number before it moves it high): up to 2 s. */
static void settle_fds(int want, int *low, int *high)
{
    for (int i = 0; i < 100; i++) {
        count_fds(low, high);
        if (*low == want && *high <= 2)
            return;
        nap_ms(20);
    }
}

static int mode_reexec(int left, int base, int a)
{
    int low, high;
    count_fds(&low, &high);
    if (base < 0) { /* the first image */
        base = low;
        a = tcp(0);
        fact("fds-at-start %d", base);
        step("first", 1);
    } else {
        settle_fds(base + 1, &low, &high);
        if (low != base + 1 || high > 2)
            die("image %d: %d low descriptors (want %d), %d high (want <= 2)", left, low, base + 1, high);
    }
    if (left == 0) {
        step("last", 1);
        close(a);
        settle_fds(base, &low, &high);
        fact("fds-at-end %d", low);
        fact("shim-fds-at-end %d", high);
        if (low != base)
            die("%d descriptors at the end, %d at the start", low, base);
        step("closed", 0);
        return 0;
    }
    int b = tcp(SOCK_CLOEXEC); /* one more permit, released by each exec */
    (void)b;
    char l[16], bs[16], as[16], pp[16], dp[16];
    snprintf(l, sizeof(l), "%d", left - 1);
    snprintf(bs, sizeof(bs), "%d", base);
    snprintf(as, sizeof(as), "%d", a);
    snprintf(pp, sizeof(pp), "%d", port);
    snprintf(dp, sizeof(dp), "%d", dead_port);
    char *argv[] = { (char *)self, "reexec", pp, dp, l, bs, as, NULL };
    execv(self, argv);
    die("re-exec");
}

/* ---- exit paths ---- */
static int mode_exit(const char *how)
{
    int a = tcp(0);
    (void)a;
    step("held", 1);
    fflush(stdout);
    if (!strcmp(how, "return"))
        return 0;
    if (!strcmp(how, "exit"))
        exit(0);
    if (!strcmp(how, "_exit"))
        _exit(0);
    if (!strcmp(how, "abort"))
        abort();
    if (!strcmp(how, "kill"))
        raise(SIGKILL);
    die("unknown exit %s", how);
}

/* ---- a plain holder: connects and keeps the socket for MS ms ---- */
static int mode_hold(int ms)
{
    int a = tcp(0);
    fact("held");
    nap_ms(ms);
    close(a);
    return 0;
}

/* ---- non-blocking connect ---- */
static int sockopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t l = sizeof(v);
    if (getsockopt(fd, level, name, &v, &l) != 0)
        die("getsockopt");
    return v;
}

static void wait_writable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    if (poll(&p, 1, 10000) != 1)
        die("poll");
}

static int mode_nonblock(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, buf = 65536;
    setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int sndbuf = sockopt(s, SOL_SOCKET, SO_SNDBUF);
    struct sockaddr_in a = addr4(port);
    int rc = connect(s, (struct sockaddr *)&a, sizeof(a));
    fact("first-connect %s", rc == 0 ? "0" : ename(errno));
    if (rc != 0 && errno != EINPROGRESS)
        die("non-blocking connect");
    if (!(fcntl(s, F_GETFL) & O_NONBLOCK))
        die("O_NONBLOCK lost");
    if (!(fcntl(s, F_GETFD) & FD_CLOEXEC))
        die("FD_CLOEXEC lost");
    if (sockopt(s, SOL_SOCKET, SO_KEEPALIVE) != 1 || sockopt(s, SOL_SOCKET, SO_SNDBUF) != sndbuf ||
        sockopt(s, IPPROTO_TCP, TCP_NODELAY) != 1)
        die("socket options changed");
    step("in-progress", 1);
    /* the polling pattern: connect again until EISCONN */
    int again = 0;
    for (;;) {
        rc = connect(s, (struct sockaddr *)&a, sizeof(a));
        again++;
        if (rc == 0 || errno == EISCONN)
            break;
        if (errno != EALREADY && errno != EINPROGRESS)
            die("connect again");
        wait_writable(s);
    }
    rc = connect(s, (struct sockaddr *)&a, sizeof(a));
    if (rc != -1 || errno != EISCONN)
        die("want EISCONN");
    fact("connect-again %d", again);
    step("connected", 1);
    close(s);
    step("closed", 0);

    /* a refused connect reported later through SO_ERROR */
    s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    a = addr4(dead_port);
    rc = connect(s, (struct sockaddr *)&a, sizeof(a));
    fact("refused-connect %s", rc == 0 ? "0" : ename(errno));
    if (rc == -1 && errno == EINPROGRESS) {
        step("refused-pending", 1);
        wait_writable(s);
        int err = sockopt(s, SOL_SOCKET, SO_ERROR);
        if (err != ECONNREFUSED)
            die("SO_ERROR %d", err);
        step("refused-reported", 1); /* held until the program closes */
        /* a retry on the same socket never takes a second permit */
        rc = connect(s, (struct sockaddr *)&a, sizeof(a));
        fact("retry %s", rc == 0 ? "0" : ename(errno));
        if (rc == -1 && errno == EINPROGRESS)
            wait_writable(s);
        step("retry", 1);
    } else if (rc == -1 && errno == ECONNREFUSED) {
        step("refused-at-once", 0);
    } else {
        die("connect to a dead port");
    }
    close(s);
    step("refused-closed", 0);
    return 0;
}

/* sendmmsg(MSG_FASTOPEN) of two small messages to A on the unconnected TCP
 * socket S: the first one's msg_name opens the connection. Returns what
 * sendmmsg returns (messages sent, or -1). */
static int sendmmsg_fastopen(int s, struct sockaddr_in *a)
{
    static char m1[] = "x", m2[] = "y";
    struct iovec iov[2] = { { m1, 1 }, { m2, 1 } };
    struct mmsghdr mm[2] = {
        { .msg_hdr = { .msg_name = a, .msg_namelen = sizeof(*a), .msg_iov = &iov[0], .msg_iovlen = 1 } },
        { .msg_hdr = { .msg_iov = &iov[1], .msg_iovlen = 1 } }
    };
    return sendmmsg(s, mm, 2, MSG_FASTOPEN);
}

/* One non-blocking connect (or MSG_FASTOPEN send with VIA "tfo", sendmmsg with "tfommsg") while the
 * cap is full: prints "result ERRNO MS". With VIA "queued", a connect that
 * returned EINPROGRESS is then awaited as an event loop does: the descriptor
 * registered with epoll for EPOLLOUT after the call, up to 20 s; prints
 * "outcome SO_ERROR MS" (MS since the connect; "outcome none MS" when it never
 * turned writable) and checks that a connected socket has its peer and is
 * still O_NONBLOCK. */
static int mode_full(const char *via)
{
    int s = socket(AF_INET, SOCK_STREAM | (strncmp(via, "tfo", 3) ? SOCK_NONBLOCK : 0), 0);
    struct sockaddr_in a = addr4(port);
    long long t0 = now_ms();
    long rc = !strcmp(via, "tfo")       ? sendto(s, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof(a))
              : !strcmp(via, "tfommsg") ? sendmmsg_fastopen(s, &a)
                                        : connect(s, (struct sockaddr *)&a, sizeof(a));
    int e = errno;
    fact("result %s %lld", rc >= 0 ? "0" : ename(e), now_ms() - t0);
    if (!strcmp(via, "queued") && rc == -1 && e == EINPROGRESS) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = { .events = EPOLLOUT, .data.fd = s }, got;
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) != 0)
            die("epoll");
        int n = epoll_wait(ep, &got, 1, 20000);
        if (n == 1) {
            int err = sockopt(s, SOL_SOCKET, SO_ERROR);
            fact("outcome %s %lld", err == 0 ? "0" : ename(err), now_ms() - t0);
            struct sockaddr_in peer;
            socklen_t pl = sizeof(peer);
            if (err == 0 && (getpeername(s, (struct sockaddr *)&peer, &pl) != 0 || peer.sin_port != a.sin_port))
                die("writable with SO_ERROR 0, but not connected to the port");
            if (!(fcntl(s, F_GETFL) & O_NONBLOCK))
                die("O_NONBLOCK lost");
        } else {
            fact("outcome none %lld", now_ms() - t0);
        }
        close(ep);
    }
    close(s);
    return 0;
}

/* ---- TCP Fast Open ---- */
static int mode_tfo(void)
{
    static const char req[] = "GET / HTTP/1.0\r\n\r\n";
    struct sockaddr_in a = addr4(port);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    ssize_t n = sendto(s, req, sizeof(req) - 1, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof(a));
    fact("tfo-sendto %s", n >= 0 ? "sent" : ename(errno));
    step("tfo-sendto", n >= 0 ? 1 : 0);
    close(s);
    step("tfo-closed", 0);

    s = socket(AF_INET, SOCK_STREAM, 0);
    struct iovec iov = { (void *)req, sizeof(req) - 1 };
    struct msghdr m = { .msg_name = &a, .msg_namelen = sizeof(a), .msg_iov = &iov, .msg_iovlen = 1 };
    n = sendmsg(s, &m, MSG_FASTOPEN);
    fact("tfo-sendmsg %s", n >= 0 ? "sent" : ename(errno));
    step("tfo-sendmsg", n >= 0 ? 1 : 0);
    /* a connected socket: a second MSG_FASTOPEN send takes no second permit */
    if (n >= 0) {
        n = sendto(s, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof(a));
        fact("tfo-again %s", n >= 0 ? "sent" : ename(errno));
        step("tfo-again", 1);
    }
    close(s);
    step("tfo-msg-closed", 0);

    s = socket(AF_INET, SOCK_STREAM, 0);
    int k = sendmmsg_fastopen(s, &a);
    fact("tfo-sendmmsg %s", k >= 1 ? "sent" : ename(errno));
    step("tfo-sendmmsg", k >= 1 ? 1 : 0);
    close(s);
    step("tfo-mmsg-closed", 0);
    return 0;
}

/* N blocking TCP sockets, one after the other, each opened by
 * sendmmsg(MSG_FASTOPEN) and kept open: prints "tfomany SENT REFUSED FIRST"
 * (FIRST: the first refusal's errno), then "@tfomany-held SENT" and closes
 * them all. */
static int mode_tfomany(int n)
{
    int fds[64], sent = 0, refused = 0, first = 0;
    struct sockaddr_in a = addr4(port);
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (sendmmsg_fastopen(fds[i], &a) >= 1) {
            sent++;
        } else {
            if (!refused++)
                first = errno;
        }
    }
    fact("tfomany %d %d %s", sent, refused, ename(first));
    step("tfomany-held", sent);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    step("tfomany-closed", 0);
    return 0;
}

/* ---- only TCP counts ---- */
static int mode_udpunix(const char *unix_path)
{
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = addr4(port);
    if (connect(u, (struct sockaddr *)&a, sizeof(a)) != 0)
        die("udp connect");
    step("udp4", 0);
    close(u);
    int u6 = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6,
                               .sin6_port = htons((unsigned short)port),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT };
    if (connect(u6, (struct sockaddr *)&a6, sizeof(a6)) != 0)
        die("udp6 connect");
    step("udp6", 0);
    close(u6);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        die("socketpair");
    close(sv[0]);
    close(sv[1]);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    snprintf(un.sun_path, sizeof(un.sun_path), "%s", unix_path);
    if (bind(l, (struct sockaddr *)&un, sizeof(un)) != 0 || listen(l, 4) != 0)
        die("unix listen");
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&un, sizeof(un)) != 0)
        die("unix connect");
    step("unix", 0);
    close(c);
    close(l);
    return 0;
}

/* ---- the program closes or replaces the shim's own descriptors ---- */
static int shim_fd(void)
{
    int found = -1;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (fd >= 512 && fd != dirfd(d) && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
            found = fd;
    }
    if (d)
        closedir(d);
    return found;
}

static void close_all_from_3(const char *how)
{
    if (!strcmp(how, "closefrom")) {
        closefrom(3);
    } else if (!strcmp(how, "close_range")) {
        if (close_range(3, ~0U, 0) != 0)
            die("close_range");
    } else if (!strcmp(how, "loop")) {
        long max = sysconf(_SC_OPEN_MAX);
        for (int fd = 3; fd < max; fd++) {
            errno = 0;
            int rc = close(fd);
            if (rc != 0 && errno != EBADF)
                die("close(%d)", fd);
        }
    } else if (!strcmp(how, "proc")) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int fds[4096], n = 0;
        while (d && (e = readdir(d)) && n < 4096)
            if (e->d_name[0] != '.' && atoi(e->d_name) >= 3 && atoi(e->d_name) != dirfd(d))
                fds[n++] = atoi(e->d_name);
        closedir(d);
        for (int i = 0; i < n; i++)
            if (close(fds[i]) != 0)
                die("close(%d) from the /proc walk", fds[i]);
    } else {
        die("unknown way %s", how);
    }
}

static int mode_shimfds(const char *how)
{
    close(tcp(0));
    int s = shim_fd();
    if (s < 0)
        die("no shim descriptor found");
    fact("shim-fd %d", s);
    step("before", 0);
    int pw[2];
    if (!strcmp(how, "dup2")) {
        if (pipe(pw) != 0)
            die("pipe");
    } else {
        errno = EDOM;
        close_all_from_3(how);
        if (errno != EDOM && strcmp(how, "loop"))
            die("errno changed by a successful close");
        if (fcntl(s, F_GETFD) != -1)
            die("the shim's descriptor survived");
        if (pipe(pw) != 0)
            die("pipe");
    }
    /* put the program's own file on the shim's number */
    if (dup2(pw[1], s) != s)
        die("dup2 onto the shim's number");
    ino_t want = ino_of(pw[1]);
    fcntl(pw[0], F_SETFL, O_NONBLOCK);
    int a = tcp(0); /* the shim reconnects on a fresh descriptor */
    step("reconnected", 1);
    close(a);
    step("closed", 0);
    char buf[64];
    ssize_t got = read(pw[0], buf, sizeof(buf));
    if (got != -1 || errno != EAGAIN)
        die("the shim wrote %zd bytes to the program's pipe", got);
    if (fcntl(s, F_GETFD) == -1 || ino_of(s) != want)
        die("the program's file on %d was closed or replaced", s);
    int s2 = shim_fd();
    fact("new-shim-fd %d", s2);
    if (s2 < 0)
        die("no new shim descriptor");
    return 0;
}

/* A race: the program puts a pipe on the shim's Redis descriptor again and
 * again while another thread keeps the shim talking to Redis. Nothing the
 * shim writes may ever land in the pipe. */
static atomic_bool race_stop;

static void *redis_traffic(void *arg)
{
    (void)arg;
    while (!atomic_load(&race_stop))
        close(tcp(0));
    return NULL;
}

static int mode_shimrace(int ms)
{
    close(tcp(0));
    pthread_t t;
    pthread_create(&t, NULL, redis_traffic, NULL);
    int pw[2];
    if (pipe(pw) != 0)
        die("pipe");
    fcntl(pw[0], F_SETFL, O_NONBLOCK);
    int hits = 0;
    for (long long end = now_ms() + ms; now_ms() < end;) {
        int s = shim_fd();
        if (s < 0)
            continue;
        if (dup2(pw[1], s) != s)
            die("dup2 onto the shim's number");
        close(s); /* give the number back: the shim's next socket may take it again */
        hits++;
    }
    atomic_store(&race_stop, true);
    pthread_join(t, NULL);
    char buf[256];
    ssize_t got = read(pw[0], buf, sizeof(buf));
    if (got > 0)
        die("the shim wrote %zd bytes into the program's pipe: %.40s", got, buf);
    fact("replaced %d", hits);
    step("end", 0);
    return 0;
}

/* ---- 32 threads x 200 connect/close against the cap ---- */
static atomic_int thread_failures;
static int thread_iters;

static void *hammer(void *arg)
{
    (void)arg;
    static const char req[] = "GET / HTTP/1.0\r\n\r\n";
    for (int i = 0; i < thread_iters; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = addr4(port);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            atomic_fetch_add(&thread_failures, 1);
            close(fd);
            continue;
        }
        if (write(fd, req, sizeof(req) - 1) < 0)
            atomic_fetch_add(&thread_failures, 1);
        char buf[256];
        while (read(fd, buf, sizeof(buf)) > 0) {
        } /* the server closes first */
        close(fd);
    }
    return NULL;
}

static int mode_threads(int n, int iters)
{
    thread_iters = iters;
    pthread_t th[256];
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, hammer, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    fact("failures %d", atomic_load(&thread_failures));
    step("end", 0);
    return atomic_load(&thread_failures) ? 1 : 0;
}

/* ---- errno: exactly what the real call says ---- */
static void want(long rc, long want_rc, int want_errno, const char *what)
{
    int e = errno;
    if (rc != want_rc || (want_rc == -1 && e != want_errno))
        die("%s: got %ld/%s, want %ld/%s", what, rc, ename(e), want_rc, ename(want_errno));
}

static int mode_errno(void)
{
    struct sockaddr_in a = addr4(port), dead = addr4(dead_port);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    want(connect(s, (struct sockaddr *)&dead, sizeof(dead)), -1, ECONNREFUSED, "connect to a closed port");
    close(s);
    step("refused", 0);
    s = socket(AF_INET, SOCK_STREAM, 0);
    errno = EDOM;
    want(connect(s, (struct sockaddr *)&a, sizeof(a)), 0, 0, "connect");
    if (errno != EDOM)
        die("connect changed errno on success");
    want(connect(s, (struct sockaddr *)&a, sizeof(a)), -1, EISCONN, "connect again");
    step("connected", 1);
    errno = EDOM;
    int d = dup(s);
    if (d < 0 || errno != EDOM)
        die("dup changed errno");
    want(dup2(s, d), d, 0, "dup2 onto itself");
    want(close(d), 0, 0, "close of a copy");
    if (errno != EDOM)
        die("close changed errno on success");
    want(close(s), 0, 0, "close");
    if (errno != EDOM)
        die("close changed errno on success");
    step("closed", 0);
    want(close(-1), -1, EBADF, "close(-1)");
    want(close(s), -1, EBADF, "close of a closed fd");
    want(close(1 << 22), -1, EBADF, "close of a huge fd");
    want(dup(-1), -1, EBADF, "dup(-1)");
    want(dup2(-1, 40), -1, EBADF, "dup2(-1)");
    want(dup3(0, 0, 0), -1, EINVAL, "dup3 onto itself");
    want(fcntl(-1, F_DUPFD, 0), -1, EBADF, "F_DUPFD of -1");
    want(close_range(10, 5, 0), -1, EINVAL, "close_range backwards");
    want(sendto(-1, "x", 1, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof(a)), -1, EBADF, "sendto -1");
    want(connect(-1, (struct sockaddr *)&a, sizeof(a)), -1, EBADF, "connect -1");
    int f = open("/dev/null", O_RDONLY);
    want(connect(f, (struct sockaddr *)&a, sizeof(a)), -1, ENOTSOCK, "connect of a file");
    close(f);
    s = socket(AF_INET, SOCK_STREAM, 0);
    want(connect(s, (struct sockaddr *)&a, 3), -1, EINVAL, "connect with a short address");
    close(s);
    step("bad-calls", 0);
    errno = 0;
    want(execl("/nonexistent", "x", (char *)NULL), -1, ENOENT, "exec of nothing");
    return 0;
}

/* ---- self-healing: closed behind the shim's back ---- */
static int mode_selfheal(void)
{
    int a = tcp(0);
    step("held", 1);
    syscall(SYS_close, a);
    step("healed", 0);
    a = tcp(0);
    syscall(SYS_close, a);
    int f = open("/dev/null", O_RDONLY); /* the number now names a file */
    step("healed-reused", 0);
    close(f);
    return 0;
}

/* ---- start-up: the constructor made no thread; close() before anything ---- */
__attribute__((constructor)) static void early(void)
{
    if (!getenv("LC_CTOR_CLOSE"))
        return; /* exec2 must make no interposed call */
    ctor_rc1 = close(-1);
    ctor_err1 = errno;
    ctor_rc2 = close(open("/dev/null", O_RDONLY));
}

static int threads_now(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    if (d)
        closedir(d);
    return n;
}

static int mode_startup(void)
{
    int n = threads_now();
    if (n != 1)
        die("%d threads before main's first connect, want 1", n);
    if (ctor_rc1 != -1 || ctor_err1 != EBADF || ctor_rc2 != 0)
        die("close() in a constructor misbehaved");
    close(tcp(0));
    step("startup", 0);
    return 0;
}

/* ---- prefork: the parent never connects before it forks ---- */
static int mode_prefork(int lease_ms)
{
    alarm(240);
    fflush(stdout);
    pid_t k = fork();
    if (k < 0)
        die("fork");
    if (k == 0) {
        int c = tcp(0);
        step_pid("child-held", 1, getpid(), 1); /* its own pid in the holder id */
        nap_ms(3L * lease_ms);                  /* only renewal keeps it alive */
        step_pid("child-renewed", 1, getpid(), 1);
        close(c);
        step("child-closed", 0); /* released at close, not expired */
        exit(0);
    }
    int st;
    if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("child ended badly (%d)", st);
    int p = tcp(0); /* the parent's own, later */
    step_pid("parent-held", 1, getpid(), 1);
    close(p);
    step("parent-closed", 0);
    return 0;
}

/* ---- forkwait: a busy multi-threaded parent forks; the child never waits on its locks ---- */
static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* A descriptor number in the range where the shim keeps its own. */
static int high_fd(void)
{
    struct rlimit rl;
    long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1024 ? (long)rl.rlim_cur : 1024;
    return (int)lim - 2;
}

/* In the child: [0] fork to running, [1] close of a high descriptor,
 * [2] close_range from it, [3] a capped connect refused (us). */
static void forkwait_child(int out, long long t0)
{
    long long r[4];
    r[0] = now_us() - t0;
    int h = high_fd();
    if (dup2(out, h) != h)
        _exit(3);
    long long t = now_us();
    close(h);
    r[1] = now_us() - t;
    if (dup2(out, h) != h)
        _exit(3);
    t = now_us();
    close_range((unsigned)h, ~0U, 0);
    r[2] = now_us() - t;
    /* a capped connect and its release, without the countserver's accept
     * queue in the figure: the dead port refuses at once */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = addr4(dead_port);
    t = now_us();
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno != ECONNREFUSED)
        _exit(4);
    r[3] = now_us() - t;
    close(fd);
    if (write(out, r, sizeof(r)) != sizeof(r))
        _exit(3);
    exit(0);
}

static int mode_forkwait(int nthreads, int nchildren)
{
    alarm(240);
    int p = tcp(0); /* the parent has state */
    pthread_t th[64];
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, looper, NULL);
    while (atomic_load(&loops) < 2 * nthreads)
        nap_ms(1);
    long long worst[4] = { 0 };
    fflush(stdout);
    for (int i = 0; i < nchildren; i++) {
        int pp[2];
        if (pipe(pp) != 0)
            die("pipe");
        long long t0 = now_us();
        pid_t k = fork(); /* other threads are inside the shim */
        if (k < 0)
            die("fork");
        if (k == 0)
            forkwait_child(pp[1], t0);
        close(pp[1]);
        long long r[4];
        if (read(pp[0], r, sizeof(r)) != sizeof(r))
            die("child %d said nothing", i);
        close(pp[0]);
        int st;
        if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            die("child %d ended badly", i);
        for (int j = 0; j < 4; j++)
            worst[j] = r[j] > worst[j] ? r[j] : worst[j];
    }
    atomic_store(&loop_stop, true);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    fact("loops %ld", atomic_load(&loops));
    fact("fork-ms %lld", worst[0] / 1000);
    fact("close-ms %lld", worst[1] / 1000);
    fact("close-range-ms %lld", worst[2] / 1000);
    fact("connect-ms %lld", worst[3] / 1000);
    step_pid("children-gone", 1, getpid(), 1);
    close(p);
    step("closed", 0);
    return 0;
}

/* ---- envclear: the program empties and overwrites its environment before connecting ---- */
static int mode_envclear(void)
{
    char **old = environ, *strs[512];
    int n = 0;
    for (; old && old[n] && n < 512; n++)
        strs[n] = old[n];
    clearenv(); /* what nginx does for its workers */
    for (int i = 0; i < n; i++)
        memset(strs[i], 'x', strlen(strs[i])); /* setproctitle */
    if (getenv("CONNCAP_CONFIG"))
        die("the environment is still there");
    int c = tcp(0);
    step("held", 1);
    close(c);
    step("closed", 0);
    return 0;
}

/* ---- forkname: a name-matched connect in the child of a process that has name rules ---- */
static int tcp_name(const char *name)
{
    struct addrinfo h = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *r;
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    if (getaddrinfo(name, p, &h, &r) != 0)
        die("getaddrinfo %s", name);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, r->ai_addr, r->ai_addrlen) != 0)
        die("connect to %s", name);
    freeaddrinfo(r);
    return fd;
}

static int mode_forkname(const char *name)
{
    alarm(60);
    int p = tcp_name(name); /* the names map exists, and is used */
    step_pid("parent", 1, getpid(), 1);
    fflush(stdout);
    pid_t k = fork();
    if (k < 0)
        die("fork");
    if (k == 0) {
        alarm(20); /* a hang is a failure */
        int c = tcp_name(name);
        step_pid("child", 2, getpid(), 1);
        close(c);
        exit(0);
    }
    int st;
    if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("child ended badly (%d)", st);
    step_pid("child-gone", 1, getpid(), 1);
    close(p);
    step("closed", 0);
    return 0;
}

/* ---- reloadfork: a reload adds a semaphore, then the process forks ---- */
static int mode_reloadfork(const char *newconf)
{
    alarm(60);
    int p = tcp(0);
    step("before", 1);
    const char *conf = getenv("CONNCAP_CONFIG");
    if (!conf || rename(newconf, conf) != 0)
        die("rename %s", newconf);
    nap_ms(3000); /* the watch thread reloads within about 1 s */
    fflush(stdout);
    pid_t k = fork();
    if (k < 0)
        die("fork");
    if (k == 0) {
        close(tcp(0));
        exit(0);
    }
    int st;
    if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("child ended badly (%d)", st);
    close(p);
    step("closed", 0);
    return 0;
}

/* ---- logburst: more refusals in a second than the log rate limit lets through ---- */
static int mode_logburst(int n)
{
    int p = tcp(0); /* the only permit */
    step("held", 1);
    int refused = 0;
    struct sockaddr_in a = addr4(port);
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == ETIMEDOUT)
            refused++;
        close(fd);
    }
    fact("refused %d", refused);
    close(p);
    return 0; /* the count of held-back lines at exit */
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4) {
        fprintf(stderr, "usage: lifecycle MODE PORT DEAD_PORT [ARGS...]\n");
        return 2;
    }
    self = argv[0];
    const char *m = argv[1];
    port = atoi(argv[2]);
    dead_port = atoi(argv[3]);
    const char *x = argc > 4 ? argv[4] : "";
    if (!strcmp(m, "dup"))
        return mode_dup();
    if (!strcmp(m, "closerange"))
        return mode_closerange();
    if (!strcmp(m, "fdopen"))
        return mode_fdopen();
    if (!strcmp(m, "reuse"))
        return mode_reuse();
    if (!strcmp(m, "fork"))
        return mode_fork(4, argc > 4 ? atoi(x) : 20);
    if (!strcmp(m, "exec"))
        return mode_exec(argc > 4 ? x : "30000");
    if (!strcmp(m, "exec2") && argc > 6)
        return mode_exec2(atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
    if (!strcmp(m, "reexec") && argc > 4)
        return mode_reexec(atoi(x), argc > 5 ? atoi(argv[5]) : -1, argc > 6 ? atoi(argv[6]) : -1);
    if (!strcmp(m, "exit") && argc > 4)
        return mode_exit(x);
    if (!strcmp(m, "hold"))
        return mode_hold(argc > 4 ? atoi(x) : 60000);
    if (!strcmp(m, "nonblock"))
        return mode_nonblock();
    if (!strcmp(m, "full"))
        return mode_full(x);
    if (!strcmp(m, "tfo"))
        return mode_tfo();
    if (!strcmp(m, "tfomany"))
        return mode_tfomany(argc > 4 ? atoi(x) : 8);
    if (!strcmp(m, "udpunix") && argc > 4)
        return mode_udpunix(x);
    if (!strcmp(m, "shimfds") && argc > 4)
        return mode_shimfds(x);
    if (!strcmp(m, "shimrace"))
        return mode_shimrace(argc > 4 ? atoi(x) : 3000);
    if (!strcmp(m, "threads"))
        return mode_threads(argc > 4 ? atoi(x) : 32, argc > 5 ? atoi(argv[5]) : 200);
    if (!strcmp(m, "errno"))
        return mode_errno();
    if (!strcmp(m, "selfheal"))
        return mode_selfheal();
    if (!strcmp(m, "startup"))
        return mode_startup();
    if (!strcmp(m, "prefork"))
        return mode_prefork(argc > 4 ? atoi(x) : 1500);
    if (!strcmp(m, "forkwait"))
        return mode_forkwait(4, argc > 4 ? atoi(x) : 10);
    if (!strcmp(m, "envclear"))
        return mode_envclear();
    if (!strcmp(m, "forkname") && argc > 4)
        return mode_forkname(x);
    if (!strcmp(m, "reloadfork") && argc > 4)
        return mode_reloadfork(x);
    if (!strcmp(m, "logburst"))
        return mode_logburst(argc > 4 ? atoi(x) : 60);
    fprintf(stderr, "lifecycle: unknown mode %s\n", m);
    return 2;
}
