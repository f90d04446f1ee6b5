/* qbreak.c -- hostile cases of a queued non-blocking connect (issue 23), one mode each; run under the shim.
 *
 * Usage: qbreak MODE PORT [ARG]
 *   PORT is a capped echo upstream (tests/progs/qready echo) with limit 1 and a wait_timeout_ms of at least
 *   4 s. Every mode first takes the only permit itself (a blocking connect, "the holder"), then makes the
 *   queued connect(s), does what the mode is about, and lets the holder go (close) when it says so.
 *
 *   vfork      a vfork child closes its descriptors (close_range(3, ~0), as Python's subprocess does)
 *              and execs /bin/true while the connect is queued: the child's descriptor table is its
 *              own, so the parent's queued connect must go on and connect once the holder lets go.
 *   epolls N   N epoll sets alive; the socket is added (EPOLLOUT, before connect, as nginx does) to the
 *              last one only: nothing while queued, OUT with its data once connected, never HUP.
 *   stale-epoll [ROUNDS]
 *              an epoll set still holds an entry for number K of another, still open file (a pipe,
 *              kept by a dup, K closed without EPOLL_CTL_DEL: epoll keys its entries by file and
 *              number). A socket then gets number K, is added with its own data and queued: the
 *              set must report it with its own data only, and keep it registered exactly once.
 *              ROUNDS times (default 8: which entry the kernel lists first varies).
 *   lastfd     RLIMIT_NOFILE 64, every descriptor but one in use: the socket takes the last one. A
 *              non-blocking connect never waits in connect(): it must return at once (in progress,
 *              or failed), never after the queue's wait.
 *   hidden, hidden-walk
 *              close_range() of every number above the socket's while queued (hidden-walk: close() of
 *              each, as a /proc/self/fd walk does), then 1100 files opened (they get the numbers the
 *              shim's own descriptors had): the shim must not close or write to any of them, and the
 *              connect must still complete.
 *   many [N]   N queued connects (default 2000), each added to one epoll set after its connect (asyncio,
 *              libuv, Java): the last ones must cost about what the first ones did (a connect runs in
 *              the program's thread: an event loop stalls for the sum).
 *   close-exit [N]
 *              N queued connects (default 300) closed, and the process exits at once: no ticket of
 *              theirs may be left in the semaphore's queue.
 *   lone-ends [MS]
 *              one queued connect at a time (the process's only waiter: the queue's thread blocks on
 *              its own wake list), each left 300 ms in its wait and then ended another way: close(),
 *              syscall(SYS_close) (the shim finds it at its next look, MS later at most, default
 *              2500), shutdown() then close(), dup2() of a pipe over it, "kill-clients" said on stdout
 *              (the test kills the process's Redis connections then) and close() 1.5 s later, the
 *              holder let go (granted: connected, then closed), and one left queued behind the
 *              granted socket when the process exits. The test then finds no entry of any of them
 *              in the semaphore's keys.
 *   retry-timeout, retry-shutdown
 *              the socket is bound to 127.0.0.2 and given options before connect; the queued connect
 *              times out (ARG: the wait_timeout_ms) or is shut down; then connect() again: the retry
 *              must use the program's socket (its address, its options), not a stand-in.
 *   slow-listener PORTFILE
 *              (no shim) a loopback listener whose accept queue is full: every connect to it stays in
 *              SYN_SENT; its port goes to PORTFILE.
 *   blocking-grant SLOWPORT
 *              a queued connect to SLOWPORT (a slow-listener, capped by the same semaphore) whose socket
 *              the program made blocking, and a second one queued behind it: when the permit comes, the
 *              first one's real connect starts (it stays in SYN_SENT); meanwhile a close() of the second
 *              must return at once: the shim must not wait for a connect while its queue is locked.
 *   blocking-connect, blocking-send
 *              O_NONBLOCK cleared while queued, then a blocking connect() again or a blocking send():
 *              as on a slow connect, it waits for the connection and succeeds (connect 0, send 1).
 *   fork       a fork child of the process while the connect is queued: its copy reports a reset connect
 *              (POLLERR, SO_ERROR ECONNRESET), it closes it and exits; the parent's connect goes on and
 *              connects once the holder lets go.
 *   sigio      signal-driven sockets: one with O_ASYNC, F_SETOWN and F_SETSIG (SIGRTMIN) set before its
 *              connect, one given an owner and a signal only while queued, one given all three while
 *              queued. When the permit comes the first and the third one's connections are signalled
 *              (SIGRTMIN, POLL_OUT's band), the number connected when the signal comes, then their data
 *              (POLL_IN), every signal naming the program's number (si_fd), and each one reports the
 *              owner, the signal and the flags the program set.
 *
 *   poll-cancel
 *              threads blocked in poll() and select() on the queued descriptor are cancelled (both are
 *              cancellation points); then the holder lets go: the connect completes, and no descriptor
 *              the shim made for those calls is left open (eventfds before and after).
 *
 * QB_CROWD=PORT2 (another capped echo upstream, limit 1, a long wait_timeout_ms): before the mode, the
 * process takes PORT2's permit and queues 35 non-blocking connects to it, which wait all along: the
 * queue's first 32 at once wait in threads of their own and keep the program's socket on a descriptor of
 * the shim's, the rest -- the mode's among them -- wait in the runner with the program's socket in the
 * keeper's table (runtime/keep.h). "crowd-extra-fds N": the descriptors the last of them took beyond its
 * own socket (0 with the keeper: the 33rd started it, the 34th, 200 ms later, found it serving).
 *
 * Output: "key value" lines, then "result ok"; a broken contract: "FAIL: ..." on stderr and exit 1. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_MS 5000 /* after the holder let go, a queued connect completes within this */
#define DATA_MINE 0x5eed0000bbbbULL
#define DATA_STALE 0x5eed0000aaaaULL

static struct sockaddr_in up;
static int holder = -1;

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

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void hold(void)
{
    holder = socket(AF_INET, SOCK_STREAM, 0);
    if (holder < 0 || connect(holder, (struct sockaddr *)&up, sizeof up) != 0)
        fail("the holder could not connect: %s", ename(errno));
}

static void let_go(void)
{
    if (holder >= 0)
        close(holder);
    holder = -1;
}

static int tcp_socket(int flags)
{
    int fd = socket(AF_INET, SOCK_STREAM | flags, 0);
    if (fd < 0)
        fail("socket: %s", ename(errno));
    return fd;
}

/* A non-blocking connect to the upstream that must queue: returns 0 or fails. */
static void connect_queued(int fd, const char *what)
{
    long long t = now_ms();
    int rc = connect(fd, (struct sockaddr *)&up, sizeof up), e = errno;
    fact("%s-connect %s", what, rc == 0 ? "0" : ename(e));
    fact("%s-connect-ms %lld", what, now_ms() - t);
    if (rc == 0 || e != EINPROGRESS)
        fail("%s: connect gave %s, want EINPROGRESS (queued behind the holder)", what, rc == 0 ? "0" : ename(e));
}

static int so_error(int fd)
{
    int v = -1;
    socklen_t l = sizeof v;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &l) == 0 ? v : -errno;
}

static bool peer_is_up(int fd)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    return getpeername(fd, (struct sockaddr *)&a, &l) == 0 && a.sin_port == up.sin_port &&
           a.sin_addr.s_addr == up.sin_addr.s_addr;
}

/* Waits up to MS for FD to be writable; returns the revents (0: nothing). */
static short wait_out(int fd, int ms)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    return poll(&p, 1, ms) == 1 ? p.revents : 0;
}

/* FD connected to the upstream and echoing: one byte there and back. */
static bool echoes(int fd)
{
    char c = 'q';
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return send(fd, &c, 1, MSG_NOSIGNAL) == 1 && poll(&p, 1, 3000) == 1 && recv(fd, &c, 1, 0) == 1 && c == 'q';
}

/* The queued connect of FD completes: writable within READY_MS of the release, SO_ERROR 0, the
 * upstream as its peer, one byte echoed. */
static void expect_connected(int fd, const char *what)
{
    long long t = now_ms();
    short r = wait_out(fd, READY_MS);
    int e = so_error(fd);
    fact("%s-ready-ms %lld", what, now_ms() - t);
    fact("%s-revents 0x%x", what, (unsigned)r);
    fact("%s-soerror %s", what, e < 0 ? "getsockopt-failed" : ename(e));
    if (!(r & POLLOUT))
        fail("%s: not writable within %d ms of the release (revents 0x%x, SO_ERROR %s)", what, READY_MS, (unsigned)r,
             e < 0 ? "?" : ename(e));
    if (r & (POLLERR | POLLHUP) || e != 0)
        fail("%s: the connect failed (revents 0x%x, SO_ERROR %s)", what, (unsigned)r, e < 0 ? "?" : ename(e));
    if (!peer_is_up(fd))
        fail("%s: connected, but not to the upstream", what);
    if (!echoes(fd))
        fail("%s: no echo", what);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

#define CROWD 35
static int crowd[CROWD + 1], crowd_n; /* [0]: the crowd's holder; CROWD_N of them open */

/* QB_CROWD's connects, queued behind a holder of their own (see the usage). */
static void crowd_in(const char *port)
{
    struct sockaddr_in c = up;
    c.sin_port = htons((unsigned short)atoi(port));
    crowd[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (crowd[0] < 0 || connect(crowd[0], (struct sockaddr *)&c, sizeof c) != 0)
        fail("the crowd's holder could not connect: %s", ename(errno));
    crowd_n = 1;
    int before = 0;
    for (int i = 1; i <= CROWD; i++) {
        if (i == CROWD - 1) /* the 33rd started the keeper, on its own time: the 34th finds it serving */
            nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
        if (i == CROWD)
            before = open_fds();
        crowd[crowd_n++] = tcp_socket(SOCK_NONBLOCK);
        if (connect(crowd[i], (struct sockaddr *)&c, sizeof c) == 0 || errno != EINPROGRESS)
            fail("crowd connect %d: %s, want EINPROGRESS", i, ename(errno));
    }
    fact("crowd-extra-fds %d", open_fds() - before - 1);
}

static void crowd_out(void)
{
    while (crowd_n > 0)
        close(crowd[--crowd_n]);
}

/* ---------------------------------------------------------------- modes */

static int mode_fork(void)
{
    int fd = tcp_socket(SOCK_NONBLOCK);
    connect_queued(fd, "q");
    pid_t pid = fork();
    if (pid == 0) {
        short r = wait_out(fd, 2000);
        int e = so_error(fd);
        close(fd);
        _exit((r & POLLERR) && e == ECONNRESET ? 0 : 3);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        fail("fork: %s", ename(errno));
    fact("child-status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail("the fork child's copy of the queued descriptor did not report a reset connect (status 0x%x)", st);
    let_go();
    expect_connected(fd, "q");
    return 0;
}

static int mode_vfork(void)
{
    int fd = tcp_socket(SOCK_NONBLOCK);
    connect_queued(fd, "q");
    pid_t pid = vfork();
    if (pid == 0) {
        /* the child: Python's subprocess does this (close_fds), then exec */
        close_range(3, ~0U, 0);
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        fail("vfork: %s", ename(errno));
    fact("child-status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    let_go();
    expect_connected(fd, "q");
    return 0;
}

static int mode_epolls(int n)
{
    int *ep = calloc((size_t)n, sizeof *ep);
    if (!ep)
        fail("calloc");
    for (int i = 0; i < n; i++)
        if ((ep[i] = epoll_create1(EPOLL_CLOEXEC)) < 0)
            fail("epoll_create1 %d: %s", i, ename(errno));
    int fd = tcp_socket(SOCK_NONBLOCK), last = ep[n - 1];
    /* added before connect, edge-triggered, as nginx does (ngx_event_connect_peer) */
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = DATA_MINE }, got[4];
    if (epoll_ctl(last, EPOLL_CTL_ADD, fd, &ev) != 0)
        fail("epoll_ctl ADD: %s", ename(errno));
    connect_queued(fd, "q");
    int k = epoll_wait(last, got, 4, 300);
    fact("queued-events %d", k);
    if (k != 0)
        fail("epoll set %d of %d reported 0x%x (data %s) on the queued socket: want nothing while queued", n, n,
             k > 0 ? got[0].events : 0, k > 0 && got[0].data.u64 == DATA_MINE ? "its own" : "other");
    let_go();
    long long t = now_ms();
    k = epoll_wait(last, got, 4, READY_MS);
    fact("ready-events %d 0x%x", k, k > 0 ? got[0].events : 0);
    fact("ready-ms %lld", now_ms() - t);
    if (k != 1 || got[0].data.u64 != DATA_MINE || !(got[0].events & EPOLLOUT) ||
        (got[0].events & (EPOLLHUP | EPOLLERR)))
        fail("epoll set %d of %d: want one OUT with the socket's data once connected, got %d event(s) 0x%x", n, n, k,
             k > 0 ? got[0].events : 0);
    expect_connected(fd, "q");
    for (int i = 0; i < n; i++)
        close(ep[i]);
    free(ep);
    return 0;
}

/* One round of stale-epoll; returns false (and says why) when the contract broke. */
static bool stale_round(int round)
{
    int p[2], ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0 || pipe(p) != 0)
        fail("epoll/pipe: %s", ename(errno));
    struct epoll_event ev = { .events = EPOLLIN, .data.u64 = DATA_STALE }, got[8];
    if (epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) != 0)
        fail("epoll_ctl ADD pipe: %s", ename(errno));
    int k = p[0], keep = dup(p[0]); /* the pipe stays open: its entry (pipe, K) stays in the set */
    close(k);
    int fd = tcp_socket(SOCK_NONBLOCK);
    if (fd != k)
        fail("the socket got number %d, not the pipe's %d", fd, k);
    ev = (struct epoll_event){ .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = DATA_MINE };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        fail("epoll_ctl ADD socket: %s", ename(errno));
    connect_queued(fd, "q");
    int n = epoll_wait(ep, got, 8, 300), mine = 0, stale = 0;
    unsigned last = 0;
    bool ok = true;
    if (n != 0) {
        fact("round %d: %d event(s) while queued, the first 0x%x with %s data", round, n, got[0].events,
             got[0].data.u64 == DATA_MINE ? "its own" : "another entry's");
        ok = false;
    }
    let_go();
    long long end = now_ms() + READY_MS;
    while (now_ms() < end && mine == 0) {
        n = epoll_wait(ep, got, 8, 200);
        for (int i = 0; i < n; i++) {
            if (got[i].data.u64 == DATA_MINE) {
                mine++;
                last = got[i].events;
            } else {
                stale++;
            }
        }
    }
    /* registered once, with the program's events: ADD again says it exists */
    int add = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : errno;
    if (stale || mine != 1 || !(last & EPOLLOUT) || add != EEXIST) {
        fact("round %d: reported %d time(s) with its own data (0x%x), %d time(s) with the other entry's; ADD "
             "again %s",
             round, mine, last, stale, ename(add));
        ok = false;
    }
    close(fd);
    close(keep);
    close(p[1]);
    close(ep);
    return ok;
}

static int mode_stale_epoll(int rounds)
{
    int bad = 0;
    for (int r = 1; r <= rounds; r++) {
        if (r > 1)
            hold();
        bad += !stale_round(r);
    }
    fact("stale-rounds %d bad %d", rounds, bad);
    if (bad)
        fail("%d of %d rounds: the queued socket was reported with another file's entry, or not with its own "
             "(want: nothing while queued, then one OUT with its own data, registered once)",
             bad, rounds);
    return 0;
}

static int mode_lastfd(void)
{
    struct rlimit rl = { 64, 64 };
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        fail("setrlimit: %s", ename(errno));
    int fill[64], n = 0;
    while (n < 64 && (fill[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        n++;
    if (n == 0)
        fail("no descriptor free at all");
    close(fill[--n]); /* one number free: the socket's */
    int fd = tcp_socket(SOCK_NONBLOCK);
    long long t = now_ms();
    int rc = connect(fd, (struct sockaddr *)&up, sizeof up), e = errno;
    long long ms = now_ms() - t;
    fact("connect %s", rc == 0 ? "0" : ename(e));
    fact("connect-ms %lld", ms);
    if (ms > 1000)
        fail("a non-blocking connect waited %lld ms inside connect() (%s): it must never wait for the queue", ms,
             rc == 0 ? "0" : ename(e));
    close(fd);
    while (n > 0)
        close(fill[--n]);
    return 0;
}

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

/* Closes every open number above FD one by one, as a /proc/self/fd walk does. */
static int close_walk(int fd)
{
    int nums[4096], n = 0, closed = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        fail("opendir: %s", ename(errno));
    int dfd = dirfd(d);
    for (struct dirent *de; (de = readdir(d)) && n < 4096;) {
        int k = atoi(de->d_name);
        if (de->d_name[0] != '.' && k > fd && k != dfd)
            nums[n++] = k;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        closed += close(nums[i]) == 0;
    return closed;
}

static int mode_hidden(bool walk)
{
    int fd = tcp_socket(SOCK_NONBLOCK);
    connect_queued(fd, "q");
    /* every number above the socket's: the shim's own descriptors among them */
    if (walk)
        fact("walk-closed %d", close_walk(fd));
    else if (close_range((unsigned)fd + 1, ~0U, 0) != 0)
        fail("close_range: %s", ename(errno));
    char path[] = "/tmp/qbreak-hidden.XXXXXX";
    int t = mkstemp(path);
    if (t < 0)
        fail("mkstemp: %s", ename(errno));
    unlink(path);
    enum { N = 1100 };
    static int mine[N];
    int n = 0;
    while (n < N && (mine[n] = dup(t)) >= 0)
        n++;
    fact("files %d, numbers %d..%d", n, n ? mine[0] : -1, n ? mine[n - 1] : -1);
    let_go();
    long long end = now_ms() + READY_MS;
    short r = 0;
    while (now_ms() < end && !(r = wait_out(fd, 100))) {
    }
    struct timespec ts = { 1, 500000000 }; /* what the shim does after the swap, and its next heartbeat */
    nanosleep(&ts, NULL);
    int closed = 0, first_closed = -1;
    for (int i = 0; i < n; i++)
        if (!fd_open(mine[i]) && closed++ == 0)
            first_closed = mine[i];
    struct stat st;
    fstat(t, &st);
    fact("closed-behind-our-back %d (first %d)", closed, first_closed);
    fact("bytes-written-to-our-file %lld", (long long)st.st_size);
    if (closed)
        fail("the shim closed %d of the program's descriptors (the first: %d)", closed, first_closed);
    if (st.st_size != 0)
        fail("the shim wrote %lld bytes into a file of the program's", (long long)st.st_size);
    int e = so_error(fd);
    fact("q-revents 0x%x", (unsigned)r);
    fact("q-soerror %s", e < 0 ? "?" : ename(e));
    if (!(r & POLLOUT) || (r & (POLLERR | POLLHUP)) || e != 0)
        fail("the queued connect did not complete after the program closed numbers it had not made (revents 0x%x, "
             "SO_ERROR %s)",
             (unsigned)r, e < 0 ? "?" : ename(e));
    if (!peer_is_up(fd) || !echoes(fd))
        fail("connected, but not to the upstream, or no echo");
    return 0;
}

/* N queued connects, each added to one epoll set after its connect (as asyncio, libuv and Java
 * do): a queued connect costs about the same whatever the number queued before it. */
static int mode_many(int n)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)n * 4 + 64) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)n * 4 + 64 ? rl.rlim_max : (rlim_t)n * 4 + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int ep = epoll_create1(EPOLL_CLOEXEC), *fds = calloc((size_t)n, sizeof *fds);
    if (ep < 0 || !fds)
        fail("epoll_create1/calloc");
    long long first = 0, last = 0, total = 0, worst = 0;
    int tenth = n / 10 > 0 ? n / 10 : 1;
    for (int i = 0; i < n; i++) {
        fds[i] = tcp_socket(SOCK_NONBLOCK);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int rc = connect(fds[i], (struct sockaddr *)&up, sizeof up), e = errno;
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (rc == 0 || e != EINPROGRESS)
            fail("connect %d: %s, want EINPROGRESS", i, rc == 0 ? "0" : ename(e));
        long long us = (b.tv_sec - a.tv_sec) * 1000000LL + (b.tv_nsec - a.tv_nsec) / 1000;
        struct epoll_event ev = { .events = EPOLLOUT, .data.fd = fds[i] };
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0)
            fail("epoll_ctl: %s", ename(errno));
        total += us;
        worst = us > worst ? us : worst;
        if (i < tenth)
            first += us;
        if (i >= n - tenth)
            last += us;
    }
    first /= tenth;
    last /= tenth;
    fact("connects %d, total %lld ms, worst %lld us", n, total / 1000, worst);
    fact("mean-us first-tenth %lld last-tenth %lld", first, last);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    close(ep);
    if (last > 4 * first + 500)
        fail("a queued connect costs %lld us after %d queued, %lld us at the start: it grows with the queue", last,
             n - tenth, first);
    return 0;
}

/* N queued connects, all closed, and the process exits at once: every ticket must leave Redis. */
static int mode_close_exit(int n)
{
    struct rlimit rl = { (rlim_t)n * 4 + 64, (rlim_t)n * 4 + 64 };
    setrlimit(RLIMIT_NOFILE, &rl);
    int *fds = calloc((size_t)n, sizeof *fds);
    if (!fds)
        fail("calloc");
    for (int i = 0; i < n; i++) {
        fds[i] = tcp_socket(SOCK_NONBLOCK);
        if (connect(fds[i], (struct sockaddr *)&up, sizeof up) == 0 || errno != EINPROGRESS)
            fail("connect %d: want EINPROGRESS", i);
    }
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(fds);
    fact("closed %d", n);
    return 0;
}

static void pause_ms(int ms)
{
    nanosleep(&(struct timespec){ ms / 1000, (ms % 1000) * 1000000L }, NULL);
}

/* One queued connect of lone-ends, in its own block for 300 ms: returns its descriptor. */
static int lone_queued(const char *what)
{
    int fd = tcp_socket(SOCK_NONBLOCK);
    connect_queued(fd, what);
    pause_ms(300);
    if (wait_out(fd, 0))
        fail("%s: ready while the holder holds the only permit", what);
    return fd;
}

static int mode_lone_ends(int alive_ms)
{
    int fd, p[2];

    close(lone_queued("close"));
    pause_ms(300); /* its wait ends: the next connect is the only waiter again */
    syscall(SYS_close, lone_queued("raw-close"));
    pause_ms(alive_ms);
    fd = lone_queued("shutdown");
    if (shutdown(fd, SHUT_RDWR) != 0)
        fail("shutdown of a queued socket: %s", ename(errno));
    close(fd);
    pause_ms(300);
    fd = lone_queued("dup2-over");
    if (pipe(p) != 0 || dup2(p[0], fd) != fd)
        fail("dup2 over a queued socket: %s", ename(errno));
    close(fd);
    close(p[0]);
    close(p[1]);
    pause_ms(300);
    fd = lone_queued("redis-killed");
    fact("kill-clients");
    pause_ms(1500);
    close(fd);
    pause_ms(300);
    fd = lone_queued("granted");
    let_go();
    expect_connected(fd, "granted");
    holder = fd; /* the permit's holder now; main lets it go after the exit step */
    fd = lone_queued("exit");
    fact("exit-queued %d", fd);
    fact("result ok");
    exit(0); /* queued still, and its permit's holder too (main would let the holder go first) */
}

static int opt(int fd, int level, int name)
{
    int v = -1;
    socklen_t l = sizeof v;
    return getsockopt(fd, level, name, &v, &l) == 0 ? v : -errno;
}

/* While FD is queued (bound to 127.0.0.2, SO_KEEPALIVE set): its options and address answer as the
 * program's socket's, and take what the program sets (SO_SNDBUF 16384, TCP_KEEPCNT KEEPCNT). Returns the
 * SO_SNDBUF read back. */
static int queued_options(int fd, int keepcnt)
{
    int snd = 16384;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &keepcnt, sizeof keepcnt);
    int got_snd = opt(fd, SOL_SOCKET, SO_SNDBUF), ka = opt(fd, SOL_SOCKET, SO_KEEPALIVE);
    int cnt = opt(fd, IPPROTO_TCP, TCP_KEEPCNT);
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    char ip[INET_ADDRSTRLEN] = "?";
    if (getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    fact("queued-options sndbuf %d keepalive %d keepcnt %d name %s", got_snd, ka, cnt, ip);
    if (got_snd != 2 * snd || ka != 1 || cnt != keepcnt || strcmp(ip, "127.0.0.2") != 0)
        fail("while queued, the socket did not answer with the program's options and address");
    return got_snd;
}

static int mode_retry(bool by_timeout, int wait_ms)
{
    int fd = tcp_socket(SOCK_NONBLOCK), one = 1, rcv = 8192;
    struct sockaddr_in me = { .sin_family = AF_INET };
    inet_pton(AF_INET, "127.0.0.2", &me.sin_addr);
    if (bind(fd, (struct sockaddr *)&me, sizeof me) != 0)
        fail("bind 127.0.0.2: %s", ename(errno));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    int want_rcv = opt(fd, SOL_SOCKET, SO_RCVBUF), want_syncnt = opt(fd, IPPROTO_TCP, TCP_SYNCNT);
    connect_queued(fd, "q");
    int keepcnt = 3, want_snd = queued_options(fd, keepcnt);
    if (by_timeout) {
        short r = wait_out(fd, wait_ms + 3000);
        int e = so_error(fd);
        fact("q-end 0x%x %s", (unsigned)r, e < 0 ? "?" : ename(e));
        if (!(r & POLLERR) || e != ETIMEDOUT)
            fail("the queued connect did not time out (revents 0x%x, SO_ERROR %s)", (unsigned)r,
                 e < 0 ? "?" : ename(e));
    } else {
        if (shutdown(fd, SHUT_RDWR) != 0)
            fail("shutdown of a connecting socket: %s (a slow connect gives 0)", ename(errno));
        fact("q-shutdown 0");
    }
    let_go();
    int rc = connect(fd, (struct sockaddr *)&up, sizeof up), e = errno;
    fact("retry-connect %s", rc == 0 ? "0" : ename(e));
    if (rc != 0 && e != EINPROGRESS)
        fail("the retry failed: %s", ename(e));
    expect_connected(fd, "retry");
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    char ip[INET_ADDRSTRLEN] = "?";
    getsockname(fd, (struct sockaddr *)&a, &l);
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    int nodelay = opt(fd, IPPROTO_TCP, TCP_NODELAY), ka = opt(fd, SOL_SOCKET, SO_KEEPALIVE);
    int rcvbuf = opt(fd, SOL_SOCKET, SO_RCVBUF), syncnt = opt(fd, IPPROTO_TCP, TCP_SYNCNT);
    int uto = opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT);
    if (opt(fd, SOL_SOCKET, SO_SNDBUF) != want_snd || opt(fd, IPPROTO_TCP, TCP_KEEPCNT) != keepcnt)
        fail("the retry's socket lost the options set while queued (sndbuf %d/%d keepcnt %d/%d)",
             opt(fd, SOL_SOCKET, SO_SNDBUF), want_snd, opt(fd, IPPROTO_TCP, TCP_KEEPCNT), keepcnt);
    fact("retry-source %s", ip);
    fact("retry-options nodelay %d keepalive %d rcvbuf %d (set %d) syncnt %d (was %d) user_timeout %d", nodelay, ka,
         rcvbuf, want_rcv, syncnt, want_syncnt, uto);
    if (strcmp(ip, "127.0.0.2") != 0)
        fail("the retry connected from %s: the program bound its socket to 127.0.0.2", ip);
    if (nodelay != 1 || ka != 1 || rcvbuf != want_rcv || syncnt != want_syncnt || uto != 0)
        fail("the retry's socket lost the program's options or has the shim's (nodelay %d keepalive %d rcvbuf %d/%d "
             "syncnt %d/%d user_timeout %d)",
             nodelay, ka, rcvbuf, want_rcv, syncnt, want_syncnt, uto);
    return 0;
}

static void *let_go_later(void *arg)
{
    (void)arg;
    nanosleep(&(struct timespec){ 1, 0 }, NULL);
    let_go();
    return NULL;
}

static int mode_blocking(bool by_connect)
{
    int fd = tcp_socket(SOCK_NONBLOCK);
    connect_queued(fd, "q");
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        fail("fcntl: %s", ename(errno));
    /* the holder lets go 1 s from now, from another thread: this one is about to block */
    pthread_t th;
    if (pthread_create(&th, NULL, let_go_later, NULL) != 0)
        fail("pthread_create");
    long long t = now_ms();
    int rc, e;
    if (by_connect) {
        rc = connect(fd, (struct sockaddr *)&up, sizeof up);
        e = errno;
        fact("blocking-connect %s", rc == 0 ? "0" : ename(e));
    } else {
        struct timeval tv = { 12, 0 };
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* bounded, whatever happens */
        char c = 'q';
        rc = (int)send(fd, &c, 1, MSG_NOSIGNAL);
        e = errno;
        fact("blocking-send %s", rc == 1 ? "1" : ename(e));
    }
    long long ms = now_ms() - t;
    fact("blocking-ms %lld", ms);
    pthread_join(th, NULL);
    if (by_connect && rc != 0)
        fail("a blocking connect() on the connecting socket gave %s after %lld ms: a slow connect waits and gives 0",
             ename(e), ms);
    if (!by_connect && rc != 1)
        fail("a blocking send() on the connecting socket gave %s after %lld ms: a slow connect waits and sends",
             ename(e), ms);
    if (ms < 900 || ms > READY_MS + 1000)
        fail("it took %lld ms: the holder let go after 1 s", ms);
    if (!peer_is_up(fd))
        fail("not connected to the upstream");
    return 0;
}

static int mode_slow_listener(const char *portfile)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t l = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ls = socket(AF_INET, SOCK_STREAM, 0), f = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0 || f < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 0) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &l) != 0 || connect(f, (struct sockaddr *)&a, sizeof a) != 0)
        fail("slow listener: %s", ename(errno));
    FILE *pf = fopen(portfile, "w");
    if (!pf || fprintf(pf, "%d\n", ntohs(a.sin_port)) < 0 || fclose(pf) != 0)
        fail("%s: %s", portfile, ename(errno));
    for (;;)
        pause();
}

struct closer {
    int fd;
    atomic_llong ms; /* how long close() took; -1 until it returned */
};

static void *close_timed(void *arg)
{
    struct closer *c = arg;
    long long t = now_ms();
    close(c->fd);
    atomic_store(&c->ms, now_ms() - t);
    return NULL;
}

static int mode_blocking_grant(int slow_port)
{
    struct sockaddr_in slow = up;
    slow.sin_port = htons((unsigned short)slow_port);
    int a = tcp_socket(SOCK_NONBLOCK), b = tcp_socket(SOCK_NONBLOCK);
    long long t = now_ms();
    int rc = connect(a, (struct sockaddr *)&slow, sizeof slow), e = errno;
    fact("a-connect %s", rc == 0 ? "0" : ename(e));
    if (rc == 0 || e != EINPROGRESS || now_ms() - t > 1000)
        fail("the connect to the slow listener was not queued: %s", rc == 0 ? "0" : ename(e));
    if (fcntl(a, F_SETFL, fcntl(a, F_GETFL) & ~O_NONBLOCK) != 0)
        fail("fcntl: %s", ename(errno));
    connect_queued(b, "b");
    let_go(); /* A's permit: its real connect starts, and stays in SYN_SENT */
    nanosleep(&(struct timespec){ 0, 300000000 }, NULL);
    struct closer c = { .fd = b, .ms = -1 };
    pthread_t th;
    if (pthread_create(&th, NULL, close_timed, &c) != 0)
        fail("pthread_create");
    long long end = now_ms() + 3000;
    while (atomic_load(&c.ms) < 0 && now_ms() < end)
        nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
    long long ms = atomic_load(&c.ms);
    fact("b-close-ms %lld", ms);
    if (ms < 0 || ms > 500)
        fail("close() of a queued descriptor took %s ms while the shim connected another, blocking socket: "
             "the queue's lock is held during that connect",
             ms < 0 ? "more than 3000" : "hundreds of");
    pthread_join(th, NULL);
    close(a);
    return 0;
}

/* FD's signal owner, signal and O_ASYNC are what the program set (PID, SIG, ASYNC). */
static void expect_owner(int fd, const char *what, bool async)
{
    int own = fcntl(fd, F_GETOWN), sig = fcntl(fd, F_GETSIG), fl = fcntl(fd, F_GETFL);
    fact("%s-owner %s sig %s async %d", what, own == getpid() ? "self" : "other",
         sig == SIGRTMIN ? "rtmin" : "other", fl >= 0 && (fl & O_ASYNC) ? 1 : 0);
    if (own != getpid() || sig != SIGRTMIN || fl < 0 || !!(fl & O_ASYNC) != async || !(fl & O_NONBLOCK))
        fail("%s: connected with owner %d, signal %d, flags 0x%x: the program set %d, SIGRTMIN, %s", what, own, sig,
             (unsigned)fl, (int)getpid(), async ? "O_ASYNC|O_NONBLOCK" : "O_NONBLOCK");
}

static sigset_t sigio_set; /* SIGRTMIN, blocked: taken with sigtimedwait */

/* Waits up to MS for FD's SIGRTMIN with si_code CODE (POLL_OUT: connected; POLL_IN: data); any other SIGRTMIN
 * taken meanwhile must name FD too (si_fd: the program's number, never one of the shim's). */
static void expect_sigio(int fd, const char *what, int code, int ms)
{
    siginfo_t si;
    long long t = now_ms(), end = t + ms;

    for (;;) {
        long long left = end - now_ms();
        struct timespec w = { left > 0 ? left / 1000 : 0, left > 0 ? (left % 1000) * 1000000 : 0 };
        if (sigtimedwait(&sigio_set, &si, &w) != SIGRTMIN)
            fail("%s: no SIGRTMIN (code %d) for its number %d within %d ms", what, code, fd, ms);
        if (si.si_fd != fd)
            fail("%s: a SIGRTMIN named number %d (code %d), the socket is %d", what, si.si_fd, si.si_code, fd);
        if (si.si_code == code || (code == POLL_OUT && si.si_code == SI_QUEUE && (si.si_band & POLLOUT)))
            break; /* SI_QUEUE: the shim's, for a connection that came up before O_ASYNC was on it */
    }
    fact("%s-sigio-%s-ms %lld", what, code == POLL_OUT ? "out" : "in", now_ms() - t);
}

/* FD, connected and signal-driven: one byte echoed raises its POLL_IN signal, naming FD. */
static void expect_sigio_data(int fd, const char *what)
{
    char c = 'q';
    if (send(fd, &c, 1, MSG_NOSIGNAL) != 1)
        fail("%s: send: %s", what, ename(errno));
    expect_sigio(fd, what, POLL_IN, 3000);
    if (recv(fd, &c, 1, 0) != 1)
        fail("%s: no echo", what);
}

static void drain_sigio(void)
{
    siginfo_t si;
    struct timespec zero = { 0, 0 };
    while (sigtimedwait(&sigio_set, &si, &zero) == SIGRTMIN)
        ;
}

/* A socket whose connect is queued, its owner and signal (and with ASYNC, O_ASYNC) set before the connect
 * (BEFORE) or while queued; then the holder lets go. */
static void sigio_case(const char *what, bool before, bool async)
{
    int fd = tcp_socket(before ? 0 : SOCK_NONBLOCK);
    bool ok = true;
    if (before)
        ok = fcntl(fd, F_SETOWN, getpid()) == 0 && fcntl(fd, F_SETSIG, SIGRTMIN) == 0 &&
             fcntl(fd, F_SETFL, O_NONBLOCK | (async ? O_ASYNC : 0)) == 0;
    connect_queued(fd, what);
    if (!before)
        ok = fcntl(fd, F_SETOWN, getpid()) == 0 && fcntl(fd, F_SETSIG, SIGRTMIN) == 0 &&
             (!async || fcntl(fd, F_SETFL, O_NONBLOCK | O_ASYNC) == 0);
    if (!ok)
        fail("fcntl: %s", ename(errno));
    drain_sigio(); /* what the placeholder signalled while queued: not its connection */
    let_go();
    if (async) {
        expect_sigio(fd, what, POLL_OUT, READY_MS);
        /* what a signal-driven program does next: the number must hold the connected socket already */
        if (!(wait_out(fd, 0) & POLLOUT) || so_error(fd) != 0 || !peer_is_up(fd))
            fail("%s: signalled connected, but its number is not (yet) the connected socket", what);
    }
    expect_connected(fd, what);
    expect_owner(fd, what, async);
    if (async) {
        drain_sigio(); /* expect_connected's echo */
        expect_sigio_data(fd, what);
    }
    close(fd);
    hold();
}

static int eventfds(void)
{
    int n = 0;
    char p[300], t[64];
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *de; d && (de = readdir(d));) {
        snprintf(p, sizeof p, "/proc/self/fd/%s", de->d_name);
        ssize_t k = readlink(p, t, sizeof t - 1);
        n += k > 0 && (t[k] = '\0', strcmp(t, "anon_inode:[eventfd]") == 0);
    }
    if (d)
        closedir(d);
    return n;
}

static int cancel_fd = -1;

static void *poll_forever(void *arg)
{
    struct pollfd p = { .fd = cancel_fd, .events = POLLOUT };
    if (arg) {
        fd_set w;
        FD_ZERO(&w);
        FD_SET(cancel_fd, &w);
        select(cancel_fd + 1, NULL, &w, NULL, NULL);
    } else {
        poll(&p, 1, -1);
    }
    return (void *)1; /* not cancelled */
}

static int mode_poll_cancel(void)
{
    int before = eventfds();
    cancel_fd = tcp_socket(SOCK_NONBLOCK);
    connect_queued(cancel_fd, "q");
    for (int i = 0; i < 4; i++) {
        pthread_t th;
        void *res = NULL;
        if (pthread_create(&th, NULL, poll_forever, i % 2 ? (void *)1 : NULL) != 0)
            fail("pthread_create");
        nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
        pthread_cancel(th);
        pthread_join(th, &res);
        if (res != PTHREAD_CANCELED)
            fail("%s %d: the thread was not cancelled in its call", i % 2 ? "select" : "poll", i);
    }
    fact("cancelled-eventfds %d", eventfds() - before);
    let_go();
    expect_connected(cancel_fd, "q");
    int left = eventfds() - before;
    fact("eventfds-left %d", left);
    if (left != 0)
        fail("%d eventfd(s) of the cancelled poll and select calls left open", left);
    close(cancel_fd);
    return 0;
}

static int mode_sigio(void)
{
    sigemptyset(&sigio_set);
    sigaddset(&sigio_set, SIGRTMIN);
    pthread_sigmask(SIG_BLOCK, &sigio_set, NULL);
    sigio_case("a", true, true);   /* O_ASYNC before the connect */
    sigio_case("b", false, false); /* an owner and a signal while queued, no O_ASYNC */
    sigio_case("c", false, true);  /* all of them while queued */
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: qbreak MODE PORT [ARG]\n");
        return 2;
    }
    const char *m = argv[1];
    up = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int arg = argc > 3 ? atoi(argv[3]) : 0;
    if (!strcmp(m, "slow-listener"))
        return mode_slow_listener(argv[2]);
    if (getenv("QB_CROWD"))
        crowd_in(getenv("QB_CROWD"));
    hold();
    int rc;
    if (!strcmp(m, "vfork"))
        rc = mode_vfork();
    else if (!strcmp(m, "epolls"))
        rc = mode_epolls(arg > 0 ? arg : 1);
    else if (!strcmp(m, "many"))
        rc = mode_many(arg > 0 ? arg : 2000);
    else if (!strcmp(m, "close-exit"))
        rc = mode_close_exit(arg > 0 ? arg : 300);
    else if (!strcmp(m, "stale-epoll"))
        rc = mode_stale_epoll(arg > 0 ? arg : 8);
    else if (!strcmp(m, "lastfd"))
        rc = mode_lastfd();
    else if (!strcmp(m, "hidden"))
        rc = mode_hidden(false);
    else if (!strcmp(m, "hidden-walk"))
        rc = mode_hidden(true);
    else if (!strcmp(m, "lone-ends"))
        rc = mode_lone_ends(arg > 0 ? arg : 2500);
    else if (!strcmp(m, "retry-timeout"))
        rc = mode_retry(true, arg > 0 ? arg : 5000);
    else if (!strcmp(m, "retry-shutdown"))
        rc = mode_retry(false, 0);
    else if (!strcmp(m, "blocking-grant"))
        rc = mode_blocking_grant(arg);
    else if (!strcmp(m, "blocking-connect"))
        rc = mode_blocking(true);
    else if (!strcmp(m, "blocking-send"))
        rc = mode_blocking(false);
    else if (!strcmp(m, "sigio"))
        rc = mode_sigio();
    else if (!strcmp(m, "fork"))
        rc = mode_fork();
    else if (!strcmp(m, "poll-cancel"))
        rc = mode_poll_cancel();
    else
        fail("unknown mode %s", m);
    let_go();
    crowd_out();
    fact("result ok");
    return rc;
}
