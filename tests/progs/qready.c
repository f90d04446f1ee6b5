/* qready.c -- what a program sees of a queued non-blocking connect (issue 23), one mode per readiness API.
 *
 * Usage:
 *   qready echo PORTFILE
 *       the upstream: an echo server on 127.0.0.1 (run without the shim); its port goes to PORTFILE.
 *   qready MODE PORT [WAIT_MS]
 *       MODE: poll ppoll select pselect epoll epollet thread-in thread-out timeout.
 *       PORT > 0: run under the shim, PORT is the capped echo upstream (limit 1). A holder (tests/progs/hold,
 *       spawned) takes the only permit first; it is released RELEASE_MS after our connect (never, in mode
 *       timeout: the connect must fail after WAIT_MS, the semaphore's wait_timeout_ms).
 *       PORT 0: without the shim, against a really slow connect: a private loopback listener whose accept
 *       queue is full (listen(fd, 0) plus one connection never accepted, as the shim's placeholder), released
 *       by accepting RELEASE_MS after the connect (mode timeout: never; TCP_USER_TIMEOUT=WAIT_MS ends it).
 *   qready stress PORT THREADS PER_THREAD WAIT_MS HOLDERS
 *       HOLDERS holders take every permit; THREADS threads connect PER_THREAD sockets each (all queued), and
 *       close, raw-close, reuse, dup2 over, dup, fork... while queued (see mode_stress).
 *   qready execq PORT WAIT_MS HOLDERS
 *       two queued connects (one SOCK_CLOEXEC), then an exec of this program: the new image must see the
 *       connect fail within WAIT_MS plus a margin, never hang.
 *
 * Output: "key value" lines. "seq TOKENS" is the sequence of what the program saw from connect() to
 * connected, without timings or addresses, so that the run under the shim can be compared with the run
 * against a real slow connect. "FAIL: ..." on stderr and exit 1 when the scenario could not go on. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define RELEASE_MS 1000     /* the holder (or the slow listener) lets go this long after our connect */
#define READY_BOUND_MS 8000 /* after the release, the connect completes within this */
#define EPOLL_MAGIC 0x5eed0f00dULL

static const char *self;
static int up_port;           /* the capped upstream; 0: no shim, our own slow listener */
static struct sockaddr_in up; /* where the connect goes (upstream or slow listener) */
static atomic_int sigpipes;

/* ---------------------------------------------------------------- small helpers */

static const char *ename(int e)
{
    return e == 0 ? "0" : strerrorname_np(e) ? strerrorname_np(e) : "?";
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

/* The sequence: tokens "name:value", in the order seen. */
static char seq[16384];
static size_t seqlen;

static void tok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tok(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (seqlen + 1 < sizeof(seq)) {
        if (seqlen)
            seq[seqlen++] = ' ';
        int n = vsnprintf(seq + seqlen, sizeof(seq) - seqlen, fmt, ap);
        if (n > 0)
            seqlen = seqlen + (size_t)n < sizeof(seq) ? seqlen + (size_t)n : sizeof(seq) - 1;
    }
    va_end(ap);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    int e = errno;
    if (seqlen)
        fact("seq %s", seq);
    fflush(stdout);
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (errno %s)\n", ename(e));
    va_end(ap);
    exit(1);
}

static void on_sigpipe(int sig)
{
    (void)sig;
    atomic_fetch_add(&sigpipes, 1);
}

/* A system call the shim cannot see (no libc function, not even syscall()). */
static long rawsys(long n, long a1, long a2, long a3, long a4, long a5)
{
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = a4;
    register long r8 __asm__("r8") = a5;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    if (ret < 0 && ret > -4096) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
#else
    return syscall(n, a1, a2, a3, a4, a5);
#endif
}

static int so_error(int fd)
{
    int v = -1;
    socklen_t l = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &l) != 0)
        return -errno;
    return v;
}

static const char *so_error_name(int fd)
{
    int e = so_error(fd);
    return e < 0 ? "getsockopt-failed" : ename(e);
}

static struct sockaddr_in addr4(int p)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)p) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static bool same_addr(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
    return a->sin_family == b->sin_family && a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
}

static const char *addr_str(const struct sockaddr_in *a, char *b, size_t n)
{
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
    snprintf(b, n, "%s:%d", ip, ntohs(a->sin_port));
    return b;
}

/* "up" when FD's peer is the upstream, else the address or the errno. RAW: asks the kernel directly. */
static const char *peer_of(int fd, bool raw, char *b, size_t n)
{
    struct sockaddr_in sa = { 0 };
    socklen_t l = sizeof(sa);
    long rc = raw ? rawsys(SYS_getpeername, fd, (long)&sa, (long)&l, 0, 0) : getpeername(fd, (void *)&sa, &l);
    if (rc != 0)
        return ename(errno);
    if (same_addr(&sa, &up))
        return "up";
    return addr_str(&sa, b, n);
}

static int nodelay_of(int fd, bool raw)
{
    int v = -1;
    socklen_t l = sizeof(v);
    long rc = raw ? rawsys(SYS_getsockopt, fd, IPPROTO_TCP, TCP_NODELAY, (long)&v, (long)&l)
                  : getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &l);
    return rc == 0 ? (v != 0) : -1;
}

static int nonblock_of(int fd, bool raw)
{
    long fl = raw ? rawsys(SYS_fcntl, fd, F_GETFL, 0, 0, 0) : fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : (fl & O_NONBLOCK) != 0;
}

/* poll/epoll bits as "OUT|ERR|HUP" ("none" for 0). */
static const char *bits(unsigned r, char *b, size_t n)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = { { POLLIN, "IN" },         { POLLPRI, "PRI" },       { POLLOUT, "OUT" },
                  { POLLERR, "ERR" },       { POLLHUP, "HUP" },       { POLLNVAL, "NVAL" },
                  { POLLRDHUP, "RDHUP" },   { POLLRDNORM, "RDNORM" }, { POLLRDBAND, "RDBAND" },
                  { POLLWRNORM, "WRNORM" }, { POLLWRBAND, "WRBAND" } };
    b[0] = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (r & names[i].bit)
            snprintf(b + strlen(b), n - strlen(b), "%s%s", b[0] ? "|" : "", names[i].name);
    if (r & ~(unsigned)(POLLIN | POLLPRI | POLLOUT | POLLERR | POLLHUP | POLLNVAL | POLLRDHUP | POLLRDNORM |
                        POLLRDBAND | POLLWRNORM | POLLWRBAND))
        snprintf(b + strlen(b), n - strlen(b), "%s0x%x", b[0] ? "|" : "", r);
    if (!b[0])
        snprintf(b, n, "none");
    return b;
}

static bool is_socket(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Waits until FD (a pipe) has a line; reads it into B. */
static bool read_line(int fd, char *b, size_t n, int ms)
{
    size_t got = 0;
    long long end = now_ms() + ms;
    while (got + 1 < n) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&p, 1, left) != 1)
            break;
        ssize_t r = read(fd, b + got, 1);
        if (r <= 0)
            break;
        if (b[got] == '\n') {
            b[got] = 0;
            return true;
        }
        got++;
    }
    b[got] = 0;
    return false;
}

/* ---------------------------------------------------------------- the holder (tests/progs/hold) */

struct holder {
    pid_t pid;
    int rel; /* the write end of its standard input: closing it lets the permit go */
    int out; /* its standard output, kept open until it exits (its last line must not SIGPIPE it) */
};

static void holder_start(struct holder *h)
{
    char path[PATH_MAX], port[16];
    snprintf(path, sizeof(path), "%s", self);
    char *slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, sizeof(path) - (size_t)(slash ? slash + 1 - path : 0), "hold");
    snprintf(port, sizeof(port), "%d", up_port);
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
        die("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    char *argv[] = { path, "127.0.0.1", port, "-1", NULL };
    int rc = posix_spawn(&h->pid, path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        die("spawn %s", path);
    }
    close(in[0]);
    close(out[1]);
    h->rel = in[1];
    h->out = out[0];
    char line[128];
    if (!read_line(h->out, line, sizeof(line), 20000) || strncmp(line, "connected", 9) != 0)
        die("the holder got no permit: \"%s\"", line);
}

static void holder_release(struct holder *h)
{
    if (h->rel >= 0)
        close(h->rel);
    h->rel = -1;
}

/* Waits (up to MS) for the holder to exit; returns its status or -1. */
static int holder_wait(struct holder *h, int ms)
{
    int st = -1;
    long long end = now_ms() + ms;
    for (;;) {
        pid_t r = waitpid(h->pid, &st, WNOHANG);
        if (r == h->pid)
            break;
        if (now_ms() > end) {
            kill(h->pid, SIGKILL);
            waitpid(h->pid, &st, 0);
            st = -1;
            break;
        }
        nap_ms(10);
    }
    close(h->out);
    h->out = -1;
    return st;
}

/* ---------------------------------------------------------------- the upstream: an echo server */

static int mode_echo(const char *portfile)
{
    signal(SIGPIPE, SIG_IGN);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = addr4(0);
    socklen_t al = sizeof(a);
    if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 512) || getsockname(l, (struct sockaddr *)&a, &al))
        die("echo listen");
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.tmp", portfile);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 || fclose(f) || rename(tmp, portfile))
        die("portfile");
    static struct pollfd p[1024];
    int n = 1;
    p[0] = (struct pollfd){ .fd = l, .events = POLLIN };
    for (;;) {
        if (poll(p, (nfds_t)n, -1) < 0)
            continue;
        for (int i = n - 1; i >= 1; i--) {
            if (!p[i].revents)
                continue;
            char b[4096];
            ssize_t r = read(p[i].fd, b, sizeof(b));
            if (r > 0 && write(p[i].fd, b, (size_t)r) == r)
                continue;
            if (r < 0 && errno == EAGAIN)
                continue;
            close(p[i].fd);
            p[i] = p[--n];
        }
        if (p[0].revents & POLLIN) {
            int c;
            while (n < 1024 && (c = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0)
                p[n++] = (struct pollfd){ .fd = c, .events = POLLIN };
        }
    }
}

/* ---------------------------------------------------------------- a really slow connect, without the shim */

static struct {
    int lfd, filler, go[2];
    pthread_t th;
} slow = { -1, -1, { -1, -1 } };

/* After "go": accepts the filler (room in the queue: the client's next SYN gets through), then the client,
 * and echoes. */
static void *slow_main(void *arg)
{
    (void)arg;
    struct pollfd p = { .fd = slow.go[0], .events = POLLIN };
    if (poll(&p, 1, 120000) != 1)
        return NULL;
    int f = accept(slow.lfd, NULL, NULL);
    if (f >= 0)
        close(f);
    close(slow.filler);
    p = (struct pollfd){ .fd = slow.lfd, .events = POLLIN };
    if (poll(&p, 1, 20000) != 1)
        return NULL;
    int c = accept(slow.lfd, NULL, NULL);
    if (c < 0)
        return NULL;
    for (;;) {
        p = (struct pollfd){ .fd = c, .events = POLLIN };
        char b[256];
        if (poll(&p, 1, 20000) != 1)
            break;
        ssize_t r = read(c, b, sizeof(b));
        if (r <= 0 || write(c, b, (size_t)r) != r)
            break;
    }
    close(c);
    return NULL;
}

static void slow_start(void)
{
    slow.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = addr4(0);
    socklen_t al = sizeof(a);
    if (bind(slow.lfd, (struct sockaddr *)&a, sizeof(a)) || listen(slow.lfd, 0) ||
        getsockname(slow.lfd, (struct sockaddr *)&a, &al))
        die("slow listener");
    slow.filler = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(slow.filler, (struct sockaddr *)&a, sizeof(a)) != 0)
        die("filler connect");
    if (pipe2(slow.go, O_CLOEXEC))
        die("pipe");
    up = a;
    pthread_create(&slow.th, NULL, slow_main, NULL);
    pthread_detach(slow.th); /* in mode timeout it never ends: the process's exit ends it */
}

/* ---------------------------------------------------------------- the readiness APIs */

enum mode { M_POLL, M_PPOLL, M_SELECT, M_PSELECT, M_EPOLL, M_EPOLLET, M_THREAD_IN, M_THREAD_OUT, M_TIMEOUT };
static const char *const mode_names[] = { "poll",    "ppoll",     "select",     "pselect", "epoll",
                                          "epollet", "thread-in", "thread-out", "timeout" };

struct api {
    enum mode m;
    int fd, ep;
    int events;   /* poll events asked for */
    bool data_ok; /* every epoll event carried our data */
    int nevents;  /* epoll events of FD seen so far */
};

/* One wait of at most MS through the mode's API. Writes what it reported into OUT ("none": nothing) and
 * returns true when it reported anything. */
static bool api_wait(struct api *a, int ms, char *out, size_t n)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    sigset_t none;
    sigemptyset(&none);
    int rc;
    switch (a->m) {
    case M_POLL:
    case M_PPOLL:
    case M_THREAD_IN:
    case M_THREAD_OUT:
    case M_TIMEOUT: {
        struct pollfd p = { .fd = a->fd, .events = (short)a->events };
        rc = a->m == M_PPOLL ? ppoll(&p, 1, &ts, &none) : poll(&p, 1, ms);
        if (rc < 0) {
            snprintf(out, n, "%s", ename(errno));
            return true;
        }
        bits(rc > 0 ? (unsigned)p.revents : 0, out, n);
        return rc > 0;
    }
    case M_SELECT:
    case M_PSELECT: {
        fd_set r, w, x;
        FD_ZERO(&r);
        FD_ZERO(&w);
        FD_ZERO(&x);
        FD_SET(a->fd, &r);
        FD_SET(a->fd, &w);
        FD_SET(a->fd, &x);
        rc = a->m == M_PSELECT ? pselect(a->fd + 1, &r, &w, &x, &ts, &none) : select(a->fd + 1, &r, &w, &x, &tv);
        if (rc < 0) {
            snprintf(out, n, "%s", ename(errno));
            return true;
        }
        snprintf(out, n, "%s%s%s", FD_ISSET(a->fd, &r) ? "R" : "", FD_ISSET(a->fd, &w) ? "W" : "",
                 FD_ISSET(a->fd, &x) ? "X" : "");
        if (rc == 0 || !out[0])
            snprintf(out, n, "none");
        return rc > 0;
    }
    case M_EPOLL:
    case M_EPOLLET: {
        struct epoll_event ev[8];
        rc = epoll_wait(a->ep, ev, 8, ms);
        if (rc < 0) {
            snprintf(out, n, "%s", ename(errno));
            return true;
        }
        unsigned all = 0;
        for (int i = 0; i < rc; i++) {
            if (ev[i].data.u64 != EPOLL_MAGIC)
                a->data_ok = false;
            all |= ev[i].events;
            a->nevents++;
        }
        bits(all & ~(unsigned)EPOLLET, out, n);
        return rc > 0;
    }
    }
    return false;
}

/* ---------------------------------------------------------------- the single-socket modes */

/* What a queued (or really slow) connect must look like: tokens "q.*". */
static void queued_checks(int fd, bool set_nodelay)
{
    char b = 'q';
    ssize_t n = write(fd, &b, 1);
    tok("q.write:%s", n >= 0 ? "sent" : ename(errno));
    n = read(fd, &b, 1);
    tok("q.read:%s", n > 0 ? "data" : n == 0 ? "eof" : ename(errno));
    tok("q.soerr:%s", so_error_name(fd));
    char ab[64];
    tok("q.peer:%s", peer_of(fd, false, ab, sizeof(ab)));
    int rc = connect(fd, (struct sockaddr *)&up, sizeof(up));
    tok("q.again:%s", rc == 0 ? "0" : ename(errno));
    if (set_nodelay) {
        int one = 1;
        rc = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        tok("q.setnodelay:%s", rc == 0 ? "0" : ename(errno));
    }
    tok("q.nodelay:%d", nodelay_of(fd, false));
    tok("q.nonblock:%d", nonblock_of(fd, false));
    tok("q.sigpipe:%d", atomic_load(&sigpipes));
}

struct waiter {
    int fd;
    short events;
    atomic_bool returned;
    int revents, rc;
    long long at;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    struct pollfd p = { .fd = w->fd, .events = w->events };
    w->rc = poll(&p, 1, 30000);
    w->revents = w->rc > 0 ? p.revents : 0;
    w->at = now_ms();
    atomic_store(&w->returned, true);
    return NULL;
}

/* Joins W's thread within MS; false when it is still blocked. */
static bool waiter_join(pthread_t th, struct waiter *w, int ms)
{
    long long end = now_ms() + ms;
    while (!atomic_load(&w->returned) && now_ms() < end)
        nap_ms(5);
    if (!atomic_load(&w->returned))
        return false;
    pthread_join(th, NULL);
    return true;
}

static int mode_single(enum mode m, int wait_ms)
{
    struct holder h = { -1, -1, -1 };
    bool shim = up_port > 0;
    if (shim) {
        up = addr4(up_port);
        holder_start(&h);
    } else {
        slow_start();
    }
    fact("mode %s", mode_names[m]);
    fact("shim %d", shim);
    struct api a = { .m = m, .fd = -1, .ep = -1, .events = POLLIN | POLLOUT, .data_ok = true };
    if (m == M_TIMEOUT || m == M_THREAD_OUT)
        a.events = POLLOUT;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        die("socket");
    a.fd = fd;
    if (m == M_TIMEOUT && !shim) { /* the real kernel's own timeout, as long as wait_timeout_ms */
        unsigned ut = (unsigned)wait_ms;
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
    }
    if (m == M_EPOLL || m == M_EPOLLET) {
        a.ep = epoll_create1(EPOLL_CLOEXEC);
        if (a.ep < 0)
            die("epoll_create1");
    }
    if (m == M_EPOLLET) { /* nginx: the socket joins the set before connect() */
        struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = EPOLL_MAGIC };
        int rc = epoll_ctl(a.ep, EPOLL_CTL_ADD, fd, &ev);
        tok("add:%s", rc == 0 ? "0" : ename(errno));
    }
    long long t0 = now_ms();
    int rc = connect(fd, (struct sockaddr *)&up, sizeof(up));
    int ce = errno;
    long long t_conn = now_ms() - t0;
    tok("connect:%s", rc == 0 ? "0" : ename(ce));
    fact("connect %s", rc == 0 ? "0" : ename(ce));
    fact("connect-ms %lld", t_conn);
    if (rc == 0 || ce != EINPROGRESS)
        die("connect gave %s, want EINPROGRESS (a queued connect)", rc == 0 ? "0" : ename(ce));
    {
        struct sockaddr_in sn = { 0 };
        socklen_t sl = sizeof(sn);
        char ab[64];
        fact("queued-sockname %s",
             getsockname(fd, (struct sockaddr *)&sn, &sl) == 0 ? addr_str(&sn, ab, sizeof(ab)) : ename(errno));
    }
    if (m == M_EPOLL) { /* level-triggered, joined after connect(); its events changed while queued */
        struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EPOLL_MAGIC };
        rc = epoll_ctl(a.ep, EPOLL_CTL_ADD, fd, &ev);
        tok("add:%s", rc == 0 ? "0" : ename(errno));
        ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
        rc = epoll_ctl(a.ep, EPOLL_CTL_MOD, fd, &ev);
        tok("mod:%s", rc == 0 ? "0" : ename(errno));
    }
    pthread_t th;
    struct waiter w = { .fd = fd, .events = m == M_THREAD_IN ? POLLIN : POLLOUT };
    if (m == M_THREAD_IN || m == M_THREAD_OUT) {
        pthread_create(&th, NULL, waiter_main, &w);
        nap_ms(100); /* it is in poll() now */
    }
    queued_checks(fd, true);

    /* queued: nothing may be reported until the release */
    char ev[64] = "none";
    bool early = false;
    int calls = 0;
    bool mid_done = false;
    long long t_rel = t0 + (m == M_TIMEOUT ? 0 : RELEASE_MS);
    while (m != M_TIMEOUT && now_ms() < t_rel) {
        if (!mid_done && now_ms() >= t0 + RELEASE_MS / 2) {
            queued_checks(fd, false);
            mid_done = true;
        }
        int left = (int)(t_rel - now_ms());
        int slice = left < 100 ? left : 100;
        if (slice <= 0)
            break;
        if (m == M_THREAD_IN || m == M_THREAD_OUT) {
            nap_ms(slice);
            if (atomic_load(&w.returned)) {
                bits((unsigned)w.revents, ev, sizeof(ev));
                early = true;
                break;
            }
        } else if (api_wait(&a, slice, ev, sizeof(ev))) {
            early = true;
            break;
        }
        calls++;
    }
    if (m != M_TIMEOUT) {
        tok("queued:%s", early ? ev : "none");
        fact("queued-calls %d", calls);
        if (early)
            fact("early-event-ms %lld", now_ms() - t0);
    }

    /* the release: the holder lets go (or the slow listener accepts) */
    long long t_release = now_ms();
    if (m != M_TIMEOUT) {
        if (shim)
            holder_release(&h);
        else if (write(slow.go[1], "g", 1) != 1)
            die("go");
    }

    /* connected (or failed, in mode timeout) */
    bool got = early;
    int bound = m == M_TIMEOUT ? wait_ms + 5000 : READY_BOUND_MS;
    if (m == M_THREAD_OUT) {
        if (!early) {
            got = waiter_join(th, &w, bound);
            if (got)
                bits((unsigned)w.revents, ev, sizeof(ev));
        } else {
            pthread_join(th, NULL);
        }
    } else {
        long long end = now_ms() + bound;
        while (!got && now_ms() < end)
            got = api_wait(&a, 200, ev, sizeof(ev));
    }
    long long t_ready = now_ms();
    tok("ready:%s", got ? ev : "none");
    fact("ready-ms %lld", t_ready - t_release);
    fact("connect-to-ready-ms %lld", t_ready - t0);
    if (!got)
        die("%s: nothing reported within %d ms of the release", mode_names[m], bound);

    if (m == M_TIMEOUT) {
        tok("soerr:%s", so_error_name(fd));
        tok("soerr2:%s", so_error_name(fd));
        fact("seq %s", seq);
        close(fd);
        if (shim) {
            holder_release(&h);
            fact("holder-status %d", holder_wait(&h, 10000));
        }
        fact("sigpipe %d", atomic_load(&sigpipes));
        return 0;
    }

    /* readiness holds, and comes once */
    if (m == M_EPOLLET) {
        int before = a.nevents;
        long long end = now_ms() + 300;
        char more[64];
        while (now_ms() < end)
            api_wait(&a, (int)(end - now_ms()) > 0 ? (int)(end - now_ms()) : 0, more, sizeof(more));
        tok("more:%d", a.nevents - before);
    } else if (m != M_THREAD_OUT && m != M_THREAD_IN) {
        char still[64];
        api_wait(&a, 0, still, sizeof(still));
        tok("still:%s", still);
    }
    if (m == M_EPOLL || m == M_EPOLLET)
        tok("data:%s", a.data_ok ? "ok" : "bad");
    if (m == M_THREAD_IN)
        tok("thread:%s", atomic_load(&w.returned) ? "returned" : "blocked");

    /* the real socket is on the number, with what was set while queued */
    char ab[64];
    tok("c.soerr:%s", so_error_name(fd));
    tok("c.peer:%s", peer_of(fd, false, ab, sizeof(ab)));
    tok("c.rawpeer:%s", peer_of(fd, true, ab, sizeof(ab)));
    {
        struct sockaddr_in s1 = { 0 }, s2 = { 0 };
        socklen_t l1 = sizeof(s1), l2 = sizeof(s2);
        int r1 = getsockname(fd, (struct sockaddr *)&s1, &l1);
        long r2 = rawsys(SYS_getsockname, fd, (long)&s2, (long)&l2, 0, 0);
        tok("c.sockname:%s", r1 == 0 && r2 == 0 && same_addr(&s1, &s2) ? "real" : "differs");
        fact("sockname %s", addr_str(&s1, ab, sizeof(ab)));
    }
    tok("c.nodelay:%d", nodelay_of(fd, false));
    tok("c.rawnodelay:%d", nodelay_of(fd, true));
    tok("c.nonblock:%d", nonblock_of(fd, false));
    tok("c.rawnonblock:%d", nonblock_of(fd, true));
    rc = connect(fd, (struct sockaddr *)&up, sizeof(up)); /* the first after the completion says 0 */
    tok("c.again:%s", rc == 0 ? "0" : ename(errno));
    rc = connect(fd, (struct sockaddr *)&up, sizeof(up));
    tok("c.again2:%s", rc == 0 ? "0" : ename(errno));

    /* one byte to the upstream and back */
    long long t_w = now_ms();
    ssize_t n = write(fd, "x", 1);
    tok("c.write:%s", n == 1 ? "1" : n >= 0 ? "short" : ename(errno));
    if (m == M_THREAD_IN) {
        bool back = waiter_join(th, &w, 5000);
        tok("thread:%s", back ? bits((unsigned)w.revents, ev, sizeof(ev)) : "blocked");
        if (back)
            tok("thread-after-write:%d", w.at >= t_w);
        else
            die("the thread in poll(POLLIN) never saw the echo");
    }
    /* until the echo is there (level-triggered APIs say OUT meanwhile) */
    bool echo_ready = false;
    long long end = now_ms() + 5000;
    while (!echo_ready && now_ms() < end) {
        bool any;
        if (m == M_THREAD_IN || m == M_THREAD_OUT) {
            struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };
            any = poll(&p, 1, 200) == 1;
            bits(any ? (unsigned)p.revents : 0, ev, sizeof(ev));
        } else {
            any = api_wait(&a, 200, ev, sizeof(ev));
        }
        if (any && (strstr(ev, "IN") || strchr(ev, 'R')))
            echo_ready = true;
        else if (any)
            nap_ms(5);
    }
    tok("c.echo-ready:%s", echo_ready ? ev : "none");
    char b = 0;
    n = read(fd, &b, 1);
    tok("c.echo:%s", n == 1 && b == 'x' ? "ok" : n < 0 ? ename(errno) : "bad");
    tok("c.sigpipe:%d", atomic_load(&sigpipes));
    fact("seq %s", seq);
    close(fd);
    if (a.ep >= 0)
        close(a.ep);
    if (shim)
        fact("holder-status %d", holder_wait(&h, 10000));
    return 0;
}

/* ---------------------------------------------------------------- stress: many queued connects */

enum fate {
    K_NORMAL,   /* waits, connects, echoes, closes */
    K_CLOSE,    /* close() while queued */
    K_RAWPIPE,  /* syscall(SYS_close) while queued, then a pipe (likely on the same number) */
    K_ASMFILE,  /* a close the shim cannot see at all (the syscall instruction), then a file */
    K_DUP2OVER, /* dup2() of a pipe over the queued descriptor */
    K_DUP,      /* dup() while queued: both numbers must end on the real socket */
    K_RAWSOCK,  /* syscall(SYS_close) while queued, then a new socket connected on the number */
    K_FORK,     /* fork() while queued: the child's copy fails in time, the parent's goes on */
    K_DUPFD,    /* fcntl(F_DUPFD_CLOEXEC) while queued */
    K_NFATES
};
static const char *const fate_names[] = { "normal", "close",   "rawpipe", "asmfile", "dup2over",
                                          "dup",    "rawsock", "fork",    "dupfd" };

struct sk {
    int fd, dupfd;
    dev_t dev;
    ino_t ino;
    enum fate fate;
    long long t_conn, t_act;
    int state; /* 0 waiting for writable, 1 waiting for the echo, 2 done */
    bool acted;
    char tag[24];
    pid_t child;
    int child_rd;
    long long t_fork;
};

/* A descriptor of the program's own that must never be replaced: its identity and content. */
struct bystander {
    int fd, wfd; /* for a pipe: the read end (fd) and the write end */
    dev_t dev;
    ino_t ino;
    bool pipe, same_number;
    char content[32];
    const char *fate;
};

static pthread_mutex_t by_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bystander bys[512];
static int nbys;
static struct holder holders[8];
static int nholders;
static atomic_int st_connects, st_inprogress, st_ok, st_want_ok, st_bad_event, st_wrong_socket, st_dup_not_real,
    st_echo_bad, st_closed_queued, st_closed_ready, st_unfinished, st_raw_same, st_raw_total, st_connect_other,
    st_peer_bad, st_soerr_bad, st_started;
static atomic_int first_connect_errno;
static int stress_wait_ms, stress_threads, stress_per;
static long long stress_t0;
static const char *tmpdir;

static void problem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void problem(const char *fmt, ...)
{
    va_list ap;
    char b[512];
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL: %s\n", b);
}

static void identity(int fd, dev_t *dev, ino_t *ino)
{
    struct stat st;
    if (fstat(fd, &st) == 0) {
        *dev = st.st_dev;
        *ino = st.st_ino;
    } else {
        *dev = 0;
        *ino = 0;
    }
}

static bool same_identity(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

static void add_bystander(struct bystander *b)
{
    pthread_mutex_lock(&by_lock);
    if (nbys < (int)(sizeof(bys) / sizeof(bys[0])))
        bys[nbys++] = *b;
    pthread_mutex_unlock(&by_lock);
}

/* socket() + connect(); fills S. */
static void sk_connect(struct sk *s)
{
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (s->fd < 0) {
        problem("socket: %s", ename(errno));
        s->state = 2;
        return;
    }
    identity(s->fd, &s->dev, &s->ino);
    s->t_conn = now_ms();
    int rc = connect(s->fd, (struct sockaddr *)&up, sizeof(up));
    atomic_fetch_add(&st_connects, 1);
    if (rc == -1 && errno == EINPROGRESS) {
        atomic_fetch_add(&st_inprogress, 1);
    } else {
        int e = rc == 0 ? 0 : errno, zero = 0;
        atomic_compare_exchange_strong(&first_connect_errno, &zero, e ? e : -1);
        atomic_fetch_add(&st_connect_other, 1);
        close(s->fd);
        s->fd = -1;
        s->state = 2;
    }
}

/* A pipe with known content where the socket was (on OLD itself with DUP2OVER); true when it is on OLD. */
static bool bystander_pipe(struct sk *s, int old, bool dup2over)
{
    struct bystander b = { .pipe = true, .fate = fate_names[s->fate] };
    int p[2];
    if (pipe2(p, O_NONBLOCK) != 0) {
        problem("pipe: %s", ename(errno));
        return false;
    }
    snprintf(b.content, sizeof(b.content), "%s:%d", fate_names[s->fate], old);
    if (write(p[1], b.content, strlen(b.content)) != (ssize_t)strlen(b.content))
        problem("pipe write");
    if (dup2over) {
        if (dup2(p[0], old) != old) {
            problem("dup2 over a queued descriptor: %s", ename(errno));
            close(p[0]);
            close(p[1]);
            return false;
        }
        close(p[0]);
        p[0] = old;
    }
    b.fd = p[0];
    b.wfd = p[1];
    b.same_number = p[0] == old || p[1] == old;
    identity(b.fd, &b.dev, &b.ino);
    add_bystander(&b);
    return b.same_number;
}

/* A file with known content where the socket was; true when it is on OLD. */
static bool bystander_file(struct sk *s, int old)
{
    struct bystander b = { .pipe = false, .wfd = -1, .fate = fate_names[s->fate] };
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/qready.XXXXXX", tmpdir);
    int f = mkstemp(path);
    if (f < 0) {
        problem("mkstemp %s: %s", path, ename(errno));
        return false;
    }
    unlink(path);
    snprintf(b.content, sizeof(b.content), "%s:%d", fate_names[s->fate], old);
    if (pwrite(f, b.content, strlen(b.content), 0) != (ssize_t)strlen(b.content))
        problem("file write");
    b.fd = f;
    b.same_number = f == old;
    identity(f, &b.dev, &b.ino);
    add_bystander(&b);
    return b.same_number;
}

static void fork_child(struct sk *s, int res)
{
    /* only this thread runs here; the holders' release pipes are not ours to keep */
    for (int i = 0; i < nholders; i++)
        if (holders[i].rel != s->fd && holders[i].rel != res)
            close(holders[i].rel);
    int bound = stress_wait_ms + 3000;
    alarm((unsigned)(bound / 1000 + 5));
    long long t = now_ms();
    struct pollfd p = { .fd = s->fd, .events = POLLIN | POLLOUT };
    int rc = poll(&p, 1, bound);
    char ev[64], line[160];
    int e1 = so_error(s->fd), e2 = so_error(s->fd);
    snprintf(line, sizeof(line), "%d %s %s %s %lld\n", rc, bits(rc > 0 ? (unsigned)p.revents : 0, ev, sizeof(ev)),
             e1 < 0 ? "getsockopt-failed" : ename(e1), e2 < 0 ? "getsockopt-failed" : ename(e2), now_ms() - t);
    if (write(res, line, strlen(line)) < 0)
        _exit(3);
    _exit(0);
}

static void sk_fork(struct sk *s)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        problem("pipe: %s", ename(errno));
        return;
    }
    fflush(stdout);
    pid_t k = fork();
    if (k < 0) {
        problem("fork: %s", ename(errno));
        close(p[0]);
        close(p[1]);
        return;
    }
    if (k == 0) {
        close(p[0]);
        fork_child(s, p[1]);
    }
    close(p[1]);
    s->child = k;
    s->child_rd = p[0];
    s->t_fork = now_ms();
}

/* The delayed action of S's fate (while it is queued). */
static void sk_act(struct sk *s)
{
    s->acted = true;
    int old = s->fd;
    struct pollfd p = { .fd = old, .events = POLLOUT };
    bool ready = poll(&p, 1, 0) == 1;
    switch (s->fate) {
    case K_CLOSE:
        atomic_fetch_add(ready ? &st_closed_ready : &st_closed_queued, 1);
        close(old);
        s->fd = -1;
        s->state = 2;
        break;
    case K_RAWPIPE:
    case K_ASMFILE:
    case K_RAWSOCK:
        atomic_fetch_add(ready ? &st_closed_ready : &st_closed_queued, 1);
        if (s->fate == K_ASMFILE)
            rawsys(SYS_close, old, 0, 0, 0, 0);
        else
            syscall(SYS_close, old);
        s->fd = -1;
        s->state = 2;
        atomic_fetch_add(&st_raw_total, 1);
        if (s->fate == K_RAWPIPE || s->fate == K_ASMFILE) {
            bool same = s->fate == K_RAWPIPE ? bystander_pipe(s, old, false) : bystander_file(s, old);
            if (same)
                atomic_fetch_add(&st_raw_same, 1);
        } else { /* a new socket, connected as a normal one */
            s->fate = K_NORMAL;
            s->state = 0;
            atomic_fetch_add(&st_want_ok, 1);
            sk_connect(s);
            if (s->fd == old)
                atomic_fetch_add(&st_raw_same, 1);
        }
        break;
    case K_DUP2OVER:
        atomic_fetch_add(ready ? &st_closed_ready : &st_closed_queued, 1);
        bystander_pipe(s, old, true);
        s->fd = -1;
        s->state = 2;
        break;
    default: break;
    }
}

/* S became writable (or failed). */
static void sk_ready(struct sk *s, short revents)
{
    char ev[64];
    if (s->state == 0) {
        if ((revents & (POLLERR | POLLHUP)) || !(revents & POLLOUT) || (revents & POLLIN)) {
            atomic_fetch_add(&st_bad_event, 1);
            problem("%s socket %s: %s while connecting, SO_ERROR %s, %lld ms after connect", fate_names[s->fate],
                    s->tag, bits((unsigned)revents, ev, sizeof(ev)), so_error_name(s->fd), now_ms() - s->t_conn);
            goto done;
        }
        int e = so_error(s->fd);
        if (e != 0) {
            atomic_fetch_add(&st_soerr_bad, 1);
            problem("%s socket %s: writable with SO_ERROR %s", fate_names[s->fate], s->tag, ename(e < 0 ? -e : e));
            goto done;
        }
        if (!same_identity(s->fd, s->dev, s->ino)) {
            atomic_fetch_add(&st_wrong_socket, 1);
            problem("%s socket %s: fd %d is not the socket the program made once connected", fate_names[s->fate],
                    s->tag, s->fd);
            goto done;
        }
        if (s->dupfd >= 0 && !same_identity(s->dupfd, s->dev, s->ino)) {
            atomic_fetch_add(&st_dup_not_real, 1);
            problem("%s socket %s: its copy %d does not refer to the real socket", fate_names[s->fate], s->tag,
                    s->dupfd);
            goto done;
        }
        /* each number keeps its own descriptor flags: F_DUPFD_CLOEXEC's copy is close-on-exec, the rest not */
        int fl = fcntl(s->fd, F_GETFD), dfl = s->dupfd >= 0 ? fcntl(s->dupfd, F_GETFD) : 0;
        if (fl != 0 || dfl != (s->fate == K_DUPFD ? FD_CLOEXEC : 0)) {
            atomic_fetch_add(&st_dup_not_real, 1);
            problem("%s socket %s: descriptor flags %d and %d (copy) once connected", fate_names[s->fate], s->tag,
                    fl, dfl);
            goto done;
        }
        char ab[64];
        const char *pe = peer_of(s->fd, true, ab, sizeof(ab));
        if (strcmp(pe, "up") != 0) {
            atomic_fetch_add(&st_peer_bad, 1);
            problem("%s socket %s: peer %s", fate_names[s->fate], s->tag, pe);
            goto done;
        }
        int wfd = s->dupfd >= 0 ? s->dupfd : s->fd;
        if (write(wfd, s->tag, strlen(s->tag)) != (ssize_t)strlen(s->tag)) {
            atomic_fetch_add(&st_echo_bad, 1);
            problem("%s socket %s: write %s", fate_names[s->fate], s->tag, ename(errno));
            goto done;
        }
        s->state = 1;
        return;
    }
    if (revents & (POLLERR | POLLHUP)) {
        atomic_fetch_add(&st_bad_event, 1);
        problem("%s socket %s: %s waiting for the echo", fate_names[s->fate], s->tag,
                bits((unsigned)revents, ev, sizeof(ev)));
        goto done;
    }
    if (!(revents & POLLIN))
        return;
    char b[32] = { 0 };
    ssize_t n = read(s->fd, b, sizeof(b) - 1);
    if (n == (ssize_t)strlen(s->tag) && memcmp(b, s->tag, (size_t)n) == 0) {
        atomic_fetch_add(&st_ok, 1);
    } else {
        atomic_fetch_add(&st_echo_bad, 1);
        problem("%s socket %s: echo \"%.*s\"", fate_names[s->fate], s->tag, n > 0 ? (int)n : 0, b);
    }
done:
    close(s->fd);
    if (s->dupfd >= 0)
        close(s->dupfd);
    s->fd = s->dupfd = -1;
    s->state = 2;
}

struct worker {
    int idx;
    pthread_t th;
    struct sk *sks;
};

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    unsigned seed = 0x9e3779b9u * (unsigned)(wk->idx + 1);
    int per = stress_per;
    struct sk *sks = wk->sks;
    for (int j = 0; j < per; j++) {
        struct sk *s = &sks[j];
        *s = (struct sk){ .fd = -1, .dupfd = -1, .child = -1, .child_rd = -1 };
        s->fate = (enum fate)((j + wk->idx) % K_NFATES);
        if (s->fate == K_FORK && wk->idx >= 2)
            s->fate = K_NORMAL; /* two forks in all */
        snprintf(s->tag, sizeof(s->tag), "t%dk%02d", wk->idx, j);
        if (s->fate == K_NORMAL || s->fate == K_DUP || s->fate == K_DUPFD || s->fate == K_FORK)
            atomic_fetch_add(&st_want_ok, 1);
        sk_connect(s);
        if (s->state == 2)
            continue;
        s->t_act = s->t_conn + (long long)(rand_r(&seed) % 800);
        if (s->fate == K_DUP)
            s->dupfd = dup(s->fd);
        else if (s->fate == K_DUPFD)
            s->dupfd = fcntl(s->fd, F_DUPFD_CLOEXEC, 300);
        else if (s->fate == K_FORK)
            sk_fork(s);
        if ((s->fate == K_DUP || s->fate == K_DUPFD) && s->dupfd < 0)
            problem("dup of a queued socket: %s", ename(errno));
    }
    atomic_fetch_add(&st_started, 1);
    long long deadline = now_ms() + stress_wait_ms + 15000;
    struct pollfd *p = calloc((size_t)per, sizeof(*p));
    int *which = calloc((size_t)per, sizeof(*which));
    for (;;) {
        int n = 0;
        long long next = now_ms() + 50;
        for (int j = 0; j < per; j++) {
            struct sk *s = &sks[j];
            if (s->state == 2)
                continue;
            bool delayed = s->fate == K_CLOSE || s->fate == K_RAWPIPE || s->fate == K_ASMFILE ||
                           s->fate == K_DUP2OVER || s->fate == K_RAWSOCK;
            if (delayed && !s->acted) {
                if (now_ms() >= s->t_act) {
                    sk_act(s);
                    if (s->state == 2)
                        continue;
                } else {
                    if (s->t_act < next)
                        next = s->t_act;
                    continue; /* not watched until its action: a program that is busy elsewhere */
                }
            }
            p[n] = (struct pollfd){ .fd = s->fd, .events = (short)(s->state == 0 ? POLLIN | POLLOUT : POLLIN) };
            which[n++] = j;
        }
        bool pending = false;
        for (int j = 0; j < per; j++)
            pending |= sks[j].state != 2;
        if (!pending)
            break;
        if (now_ms() > deadline) {
            for (int j = 0; j < per; j++)
                if (sks[j].state != 2) {
                    atomic_fetch_add(&st_unfinished, 1);
                    problem("%s socket %s: nothing within %d ms", fate_names[sks[j].fate], sks[j].tag,
                            stress_wait_ms + 15000);
                    close(sks[j].fd);
                    if (sks[j].dupfd >= 0)
                        close(sks[j].dupfd);
                    sks[j].state = 2;
                }
            break;
        }
        int tmo = (int)(next - now_ms());
        if (tmo < 0)
            tmo = 0;
        int rc = poll(p, (nfds_t)n, tmo);
        for (int i = 0; rc > 0 && i < n; i++)
            if (p[i].revents)
                sk_ready(&sks[which[i]], p[i].revents);
    }
    free(p);
    free(which);
    return NULL;
}

/* Sockets among the descriptors below 512 (the program's range; the shim keeps its own above). */
static int low_sockets(int *high)
{
    int low = 0;
    *high = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd == dirfd(d) || !is_socket(fd))
            continue;
        if (fd < 512)
            low++;
        else
            (*high)++;
    }
    if (d)
        closedir(d);
    return low;
}

static int check_bystanders(void)
{
    int replaced = 0, junk = 0, same = 0;
    for (int i = 0; i < nbys; i++) {
        struct bystander *b = &bys[i];
        same += b->same_number;
        if (!same_identity(b->fd, b->dev, b->ino)) {
            replaced++;
            problem("%s: descriptor %d (%s) was replaced%s", b->fate, b->fd, b->pipe ? "a pipe" : "a file",
                    is_socket(b->fd) ? " by a socket" : "");
            continue;
        }
        char got[128] = { 0 };
        ssize_t n;
        if (b->pipe) {
            struct pollfd p = { .fd = b->fd, .events = POLLIN | POLLOUT };
            poll(&p, 1, 0);
            n = read(b->fd, got, sizeof(got) - 1);
            char more;
            ssize_t n2 = read(b->fd, &more, 1);
            if (p.revents != POLLIN || n2 != -1 || errno != EAGAIN) {
                junk++;
                problem("%s: pipe %d reported %#x, a second read %zd", b->fate, b->fd, (unsigned)p.revents, n2);
            }
        } else {
            struct stat st;
            n = pread(b->fd, got, sizeof(got) - 1, 0);
            if (fstat(b->fd, &st) != 0 || st.st_size != (off_t)strlen(b->content)) {
                junk++;
                problem("%s: file %d has %lld bytes", b->fate, b->fd, (long long)st.st_size);
            }
        }
        if (n != (ssize_t)strlen(b->content) || memcmp(got, b->content, (size_t)n) != 0) {
            junk++;
            problem("%s: descriptor %d holds \"%s\", want \"%s\"", b->fate, b->fd, got, b->content);
        }
        close(b->fd);
        if (b->wfd >= 0)
            close(b->wfd);
    }
    fact("bystanders %d", nbys);
    fact("bystanders-on-the-same-number %d", same);
    fact("replaced %d", replaced);
    fact("bystander-junk %d", junk);
    return replaced + junk;
}

static int mode_stress(int nthreads, int per, int wait_ms, int nh)
{
    signal(SIGPIPE, on_sigpipe);
    alarm((unsigned)(wait_ms / 1000 + 25));
    up = addr4(up_port);
    stress_wait_ms = wait_ms;
    stress_threads = nthreads;
    stress_per = per;
    tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    nholders = nh;
    for (int i = 0; i < nh; i++)
        holder_start(&holders[i]);
    fact("holders %d", nh);
    struct worker *wk = calloc((size_t)nthreads, sizeof(*wk));
    for (int i = 0; i < nthreads; i++) {
        wk[i].idx = i;
        wk[i].sks = calloc((size_t)per, sizeof(struct sk));
        pthread_create(&wk[i].th, NULL, worker_main, &wk[i]);
    }
    long long t = now_ms();
    while (atomic_load(&st_started) < nthreads && now_ms() < t + 30000)
        nap_ms(5);
    stress_t0 = now_ms();
    fact("all-connected-ms %lld", stress_t0 - t);
    nap_ms(RELEASE_MS);
    for (int i = 0; i < nh; i++)
        holder_release(&holders[i]);
    for (int i = 0; i < nthreads; i++)
        pthread_join(wk[i].th, NULL);
    fact("drained-ms %lld", now_ms() - stress_t0);
    int bad = 0;
    for (int i = 0; i < nh; i++) {
        int st = holder_wait(&holders[i], 10000);
        if (st != 0) {
            problem("holder %d ended with status %d", i, st);
            bad++;
        }
    }
    /* the fork children: each saw its copy fail in time */
    int kids = 0, kids_bad = 0;
    for (int i = 0; i < nthreads; i++)
        for (int j = 0; j < per; j++) {
            struct sk *s = &wk[i].sks[j];
            if (s->child <= 0)
                continue;
            kids++;
            char line[160];
            int left = (int)(s->t_fork + wait_ms + 5000 - now_ms());
            bool said = read_line(s->child_rd, line, sizeof(line), left > 0 ? left : 0);
            int st = -1;
            long long end = now_ms() + 5000;
            while (waitpid(s->child, &st, WNOHANG) != s->child) {
                if (now_ms() > end) {
                    kill(s->child, SIGKILL);
                    waitpid(s->child, &st, 0);
                    break;
                }
                nap_ms(10);
            }
            close(s->child_rd);
            fact("fork-child %s %s", s->tag, said ? line : "(nothing)");
            int rc = -1;
            char ev[64] = "", e1[64] = "", e2[64] = "";
            long long ms = -1;
            if (said)
                sscanf(line, "%d %63s %63s %63s %lld", &rc, ev, e1, e2, &ms);
            bool failed = rc == 1 && (strstr(ev, "ERR") || strstr(ev, "HUP")) && strcmp(e1, "0") != 0;
            if (!said || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !failed || ms > wait_ms + 2000) {
                kids_bad++;
                problem("fork child of socket %s: status %d, saw \"%s\" (want ERR/HUP with an SO_ERROR, within %d "
                        "ms)",
                        s->tag, st, said ? line : "nothing", wait_ms + 2000);
            }
        }
    nap_ms(500); /* the tickets of the raw-closed sockets come up meanwhile */
    bad += check_bystanders();
    int high, low = low_sockets(&high);
    if (low) {
        problem("%d sockets left below descriptor 512 after every socket was closed", low);
        bad++;
    }
    /* the shim's own, above 511: its Redis connections and the placeholders' listener; not one kept-aside
     * socket per queued connect */
    if (high > 8) {
        problem("%d sockets above descriptor 511 after every socket was closed", high);
        bad++;
    }
    int fe = atomic_load(&first_connect_errno);
    fact("connects %d", atomic_load(&st_connects));
    fact("connect-inprogress %d", atomic_load(&st_inprogress));
    fact("connect-other %d", atomic_load(&st_connect_other));
    fact("first-other-connect %s", fe == 0 ? "none" : fe == -1 ? "0" : ename(fe));
    fact("ok %d", atomic_load(&st_ok));
    fact("want-ok %d", atomic_load(&st_want_ok));
    fact("bad-events %d", atomic_load(&st_bad_event));
    fact("soerr-bad %d", atomic_load(&st_soerr_bad));
    fact("wrong-socket %d", atomic_load(&st_wrong_socket));
    fact("dup-not-real %d", atomic_load(&st_dup_not_real));
    fact("peer-bad %d", atomic_load(&st_peer_bad));
    fact("echo-bad %d", atomic_load(&st_echo_bad));
    fact("unfinished %d", atomic_load(&st_unfinished));
    fact("closed-queued %d", atomic_load(&st_closed_queued));
    fact("closed-after-ready %d", atomic_load(&st_closed_ready));
    fact("raw-closed %d", atomic_load(&st_raw_total));
    fact("raw-closed-number-reused %d", atomic_load(&st_raw_same));
    fact("fork-children %d", kids);
    fact("fork-children-bad %d", kids_bad);
    fact("low-sockets %d", low);
    fact("high-sockets %d", high);
    fact("sigpipe %d", atomic_load(&sigpipes));
    for (int i = 0; i < nthreads; i++)
        free(wk[i].sks);
    free(wk);
    bad += atomic_load(&st_ok) != atomic_load(&st_want_ok) || atomic_load(&st_connect_other) ||
           atomic_load(&st_bad_event) || atomic_load(&st_wrong_socket) || atomic_load(&st_dup_not_real) ||
           atomic_load(&st_echo_bad) || atomic_load(&st_unfinished) || atomic_load(&st_peer_bad) ||
           atomic_load(&st_soerr_bad) || kids_bad || atomic_load(&sigpipes);
    fact("result %s", bad ? "bad" : "ok");
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------- exec while queued */

static int mode_execq(int wait_ms, int nh)
{
    alarm((unsigned)(wait_ms / 1000 + 15));
    up = addr4(up_port);
    nholders = nh;
    for (int i = 0; i < nh; i++)
        holder_start(&holders[i]);
    for (int i = 0; i < nh; i++) { /* the new image lets them go (and keeps their output open till they exit) */
        fcntl(holders[i].rel, F_SETFD, 0);
        fcntl(holders[i].out, F_SETFD, 0);
    }
    int a = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int pw[2];
    if (a < 0 || b < 0 || pipe(pw) != 0)
        die("socket");
    const char content[] = "exec-bystander";
    if (write(pw[1], content, sizeof(content) - 1) != (ssize_t)sizeof(content) - 1)
        die("pipe write");
    long long t0 = now_ms();
    int ra = connect(a, (struct sockaddr *)&up, sizeof(up));
    int ea = errno;
    int rb = connect(b, (struct sockaddr *)&up, sizeof(up));
    int eb = errno;
    fact("exec-connect %s", ra == 0 ? "0" : ename(ea));
    fact("exec-connect-cloexec %s", rb == 0 ? "0" : ename(eb));
    if (ra == 0 || ea != EINPROGRESS || rb == 0 || eb != EINPROGRESS)
        die("connect gave %s and %s, want EINPROGRESS (queued)", ra == 0 ? "0" : ename(ea),
            rb == 0 ? "0" : ename(eb));
    nap_ms(200);
    char args[10][32];
    struct stat st;
    fstat(pw[0], &st);
    snprintf(args[0], 32, "%d", up_port);
    snprintf(args[1], 32, "%d", wait_ms);
    snprintf(args[2], 32, "%d", a);
    snprintf(args[3], 32, "%d", b);
    snprintf(args[4], 32, "%d", pw[0]);
    snprintf(args[5], 32, "%lld", t0);
    snprintf(args[6], 32, "%lu", (unsigned long)st.st_ino);
    char *argv[32] = { (char *)self, "execq2", args[0], args[1], args[2], args[3], args[4], args[5], args[6] };
    int k = 9;
    char hs[8][2][32];
    for (int i = 0; i < nh; i++) {
        snprintf(hs[i][0], 32, "%d", holders[i].rel);
        snprintf(hs[i][1], 32, "%d", (int)holders[i].pid);
        argv[k++] = hs[i][0];
        argv[k++] = hs[i][1];
    }
    argv[k] = NULL;
    fflush(stdout);
    execv("/proc/self/exe", argv);
    die("exec");
}

static int mode_execq2(int argc, char **argv)
{
    int wait_ms = atoi(argv[3]), a = atoi(argv[4]), b = atoi(argv[5]), pr = atoi(argv[6]);
    long long t0 = atoll(argv[7]);
    ino_t pino = (ino_t)strtoul(argv[8], NULL, 10);
    alarm((unsigned)(wait_ms / 1000 + 15));
    up = addr4(up_port);
    int bad = 0;
    errno = 0;
    int fl = fcntl(b, F_GETFD);
    fact("exec-cloexec-socket %s", fl == -1 ? ename(errno) : "open");
    bad += !(fl == -1 && errno == EBADF);
    struct pollfd p = { .fd = a, .events = POLLIN | POLLOUT };
    int bound = (int)(t0 + wait_ms + 3000 - now_ms());
    int rc = poll(&p, 1, bound > 0 ? bound : 0);
    char ev[64];
    long long ms = now_ms() - t0;
    bits(rc > 0 ? (unsigned)p.revents : 0, ev, sizeof(ev));
    int e1 = so_error(a), e2 = so_error(a);
    fact("exec-ready %s", ev);
    fact("exec-fail-ms %lld", ms);
    fact("exec-soerr %s", e1 < 0 ? "getsockopt-failed" : ename(e1));
    fact("exec-soerr2 %s", e2 < 0 ? "getsockopt-failed" : ename(e2));
    bool failed = rc == 1 && (p.revents & (POLLERR | POLLHUP)) && e1 > 0 && e2 == 0;
    if (!failed) {
        problem("after the exec: the queued connect did not fail within %d ms of the connect: %s, SO_ERROR %s",
                wait_ms + 3000, ev, e1 < 0 ? "getsockopt-failed" : ename(e1));
        bad++;
    }
    /* the program's pipe went through untouched */
    struct stat st;
    char got[64] = { 0 };
    fcntl(pr, F_SETFL, O_NONBLOCK);
    ssize_t n = read(pr, got, sizeof(got) - 1);
    bool intact = fstat(pr, &st) == 0 && st.st_ino == pino && n == 14 && memcmp(got, "exec-bystander", 14) == 0;
    fact("exec-bystander %s", intact ? "intact" : "changed");
    bad += !intact;
    close(a);
    for (int i = 9; i + 1 < argc; i += 2) {
        struct holder h = { .rel = atoi(argv[i]), .pid = atoi(argv[i + 1]), .out = -1 };
        holder_release(&h);
        int hst = holder_wait(&h, 10000);
        if (hst != 0) {
            problem("holder %d ended with status %d", (int)h.pid, hst);
            bad++;
        }
    }
    fact("result %s", bad ? "bad" : "ok");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    self = argv[0];
    if (argc < 3) {
        fprintf(stderr, "usage: qready echo PORTFILE | MODE PORT [WAIT_MS] | stress PORT THREADS PER WAIT_MS "
                        "HOLDERS | execq PORT WAIT_MS HOLDERS\n");
        return 2;
    }
    const char *m = argv[1];
    if (!strcmp(m, "echo"))
        return mode_echo(argv[2]);
    up_port = atoi(argv[2]);
    if (!strcmp(m, "stress") && argc > 6)
        return mode_stress(atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
    if (!strcmp(m, "execq") && argc > 4)
        return mode_execq(atoi(argv[3]), atoi(argv[4]));
    if (!strcmp(m, "execq2") && argc > 8)
        return mode_execq2(argc, argv);
    signal(SIGPIPE, on_sigpipe);
    for (int i = 0; i < (int)(sizeof(mode_names) / sizeof(mode_names[0])); i++)
        if (!strcmp(m, mode_names[i])) {
            alarm(40);
            return mode_single((enum mode)i, argc > 3 ? atoi(argv[3]) : 1500);
        }
    fprintf(stderr, "qready: unknown mode %s\n", m);
    return 2;
}
