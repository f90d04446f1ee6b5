/* bench.c -- the timed loops behind bench/run.sh: one program, one mode per figure. */
/*
 * bench listen PORTFILE              accept and close connections forever (backlog 4096)
 * bench conn PORT N [SETTLE_MS]      N x (socket, connect, close) to PORT; prints ns/op. With
 *                                    SETTLE_MS, the warm-up connect is followed by a sleep and
 *                                    another: the threads the first one owes have started
 * bench close N ROUNDS               ROUNDS x (dup /dev/null N times, then close them, timed)
 * bench floor SOCK PORT N K          N x (K x EVALSHA of "return 1" on Redis at SOCK, then
 *                                    socket, connect, close to PORT): the floor
 * bench spin N                       a pure user-space loop: calibrates instructions per ns
 * bench lateness                     until SIGTERM, sleeps 1 ms at a time and measures how late
 *                                    each wake-up is (what a sleeping redis-server's wake-up
 *                                    waits for the CPU); prints "WAKES OVER_1MS MAX_US"
 * bench mem PORT N                   holds N connections to PORT; prints VmRSS before and after
 * bench handoff PORT N HOLD_US       2 processes (this program again) take turns on a permit
 *                                    of limit 1: prints "CONNECTED_NS CLOSED_NS" per turn
 * bench qhandoff PORT N [MODES]      one process holds a permit of limit 1 (a rule on 127.0.0.1:PORT,
 *                                    where it listens itself), queues one waiter, releases: per
 *                                    round "MODE ACCEPT_NS READY_NS", the waiter's connection
 *                                    accepted / seen connected (connect() returned, or the
 *                                    socket writable and SO_ERROR 0) minus the holder's close()
 *                                    call; MODE b (a blocking connect), q (a non-blocking one,
 *                                    queued, in epoll, edge-triggered, added before the connect
 *                                    as nginx does) or p (the same in poll); N rounds of each of
 *                                    MODES (default bq), interleaved: b q, q b, ...; with
 *                                    QH_BIND and QH_PEER (IPv4 addresses) it listens on
 *                                    QH_BIND:PORT and connects to QH_PEER:PORT (a delay line's);
 *                                    with QH_SYN=1 (root: a packet socket), a third time per round,
 *                                    SYN_NS: the kernel's timestamp of the waiter's SYN as it left
 *                                    (AF_PACKET, SO_TIMESTAMPNS), -1 when none was seen; without
 *                                    a packet socket (no CAP_NET_RAW) it says so on stderr and
 *                                    prints the two times alone
 * bench delayline TUN ONEWAY_US      creates tun device TUN and sends every IPv4 packet it is given
 *                                    back ONEWAY_US later with its source and destination
 *                                    swapped: a connect from local A to B on TUN's subnet reaches
 *                                    a listener on A as from B, each way delayed (a round trip of
 *                                    2 x ONEWAY_US; the checksums do not change). Writes "ready"
 *                                    to stdout once TUN exists; runs until killed
 * bench hook CALL N                  N x one call the shim interposes (setsockopt getsockopt
 *                                    getsockname epoll_ctl poll ppoll __poll_chk __ppoll_chk
 *                                    select pselect shutdown syscall fcntl dup2 dup3 sendto
 *                                    sendmsg sendmmsg), or a pair of them (dup+close
 *                                    dup+close_range dup+syscall_close dup+fclose
 *                                    epoll_create1+close), on a socket that is not queued nor
 *                                    counted; prints ns/op
 * Timed parts sit between CALLGRIND_TOGGLE_COLLECT marks: run under
 * valgrind --tool=callgrind --collect-atstart=no, only they are counted.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <linux/if.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <valgrind/callgrind.h>
#include <hiredis/hiredis.h>

extern char **environ;
/* glibc's checked poll/ppoll (what _FORTIFY_SOURCE calls poll/ppoll with). */
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask, size_t fdslen);

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int die(const char *what)
{
    fprintf(stderr, "bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

_Noreturn static void do_listen(const char *portfile)
{
    struct sockaddr_in a = loopback(0);
    socklen_t l = sizeof(a);
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 4096) || getsockname(s, (struct sockaddr *)&a, &l))
        die("listen");
    FILE *f = fopen(portfile, "w");
    fprintf(f, "%d\n", ntohs(a.sin_port));
    fclose(f);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c >= 0)
            close(c);
    }
}

static void conn_once(const struct sockaddr_in *a)
{
    int w = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(w, (const struct sockaddr *)a, sizeof(*a)) != 0)
        die("connect");
    close(w);
}

static int do_conn(int port, int n, int settle_ms)
{
    struct sockaddr_in a = loopback(port);
    conn_once(&a); /* warm-up: the shim loads its configuration */
    if (settle_ms > 0) {
        struct timespec ts = { settle_ms / 1000, (settle_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        conn_once(&a); /* what came due starts here, outside the timed part */
    }
    long long t0 = now_ns();
    CALLGRIND_TOGGLE_COLLECT;
    for (int i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
            die("connect");
        close(s);
    }
    CALLGRIND_TOGGLE_COLLECT;
    printf("%.1f\n", (double)(now_ns() - t0) / n);
    return 0;
}

static int do_close(int n, int rounds)
{
    raise_nofile();
    int base = open("/dev/null", O_RDONLY), *fds = calloc((size_t)n, sizeof(int));
    long long total = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < n; i++)
            if ((fds[i] = fcntl(base, F_DUPFD, 3)) < 0)
                die("dup");
        long long t0 = now_ns();
        CALLGRIND_TOGGLE_COLLECT;
        for (int i = 0; i < n; i++)
            close(fds[i]);
        CALLGRIND_TOGGLE_COLLECT;
        total += now_ns() - t0;
    }
    printf("%.1f\n", (double)total / ((double)n * rounds));
    return 0;
}

static int do_floor(const char *sock, int port, int n, int k)
{
    struct sockaddr_in a = loopback(port);
    redisContext *c = redisConnectUnix(sock);
    if (!c || c->err)
        die("redis");
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", "return 1");
    char sha[64];
    snprintf(sha, sizeof(sha), "%s", r->str);
    freeReplyObject(r);
    long long t0 = now_ns();
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < k; j++) {
            r = redisCommand(c, "EVALSHA %s 0", sha);
            if (!r)
                die("evalsha");
            freeReplyObject(r);
        }
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
            die("connect");
        close(s);
    }
    printf("%.1f\n", (double)(now_ns() - t0) / n);
    redisFree(c);
    return 0;
}

static int do_spin(long n)
{
    volatile uint64_t x = 1;
    long long t0 = now_ns();
    CALLGRIND_TOGGLE_COLLECT;
    for (long i = 0; i < n; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    CALLGRIND_TOGGLE_COLLECT;
    printf("%.3f\n", (double)(now_ns() - t0) / n);
    return 0;
}

static volatile sig_atomic_t lateness_stop;

static void lateness_term(int sig)
{
    (void)sig;
    lateness_stop = 1;
}

static int do_lateness(void)
{
    struct sigaction sa = { .sa_handler = lateness_term }; /* no SA_RESTART: the sleep ends at once */
    long long wakes = 0, over = 0, worst = 0;
    sigaction(SIGTERM, &sa, NULL);
    while (!lateness_stop) {
        long long t0 = now_ns();
        struct timespec d = { 0, 1000000 };
        if (nanosleep(&d, NULL) < 0)
            break;
        long long late = now_ns() - t0 - 1000000;
        wakes++;
        over += late > 1000000;
        worst = late > worst ? late : worst;
    }
    printf("%lld %lld %lld\n", wakes, over, worst / 1000);
    return 0;
}

static long rss_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static int do_mem(int port, int n)
{
    raise_nofile();
    struct sockaddr_in a = loopback(port);
    int *fds = calloc((size_t)n, sizeof(int));
    long before = rss_kib();
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0)
            die("connect");
    }
    struct timespec ts = { 0, 300 * 1000000L }; /* let the heartbeat thread settle */
    nanosleep(&ts, NULL);
    printf("%ld %ld\n", before, rss_kib());
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return 0;
}

static int handoff_child(int port, int n, int hold_us)
{
    struct sockaddr_in a = loopback(port);
    struct timespec hold = { 0, hold_us * 1000L };
    char line[64];
    for (int i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
            die("connect");
        long long t1 = now_ns();
        nanosleep(&hold, NULL);
        long long t2 = now_ns();
        close(s);
        int k = snprintf(line, sizeof(line), "%lld %lld\n", t1, t2);
        if (write(1, line, (size_t)k) != k)
            return 1;
    }
    return 0;
}

static int do_handoff(char **argv)
{
    for (int p = 0; p < 2; p++) {
        char *av[] = { argv[0], "handoff-child", argv[2], argv[3], argv[4], NULL };
        pid_t pid;
        if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, av, environ) != 0)
            die("spawn");
    }
    int st, bad = 0;
    while (wait(&st) > 0)
        bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    return bad;
}

/* ---- qhandoff: the queued connect's hand-off next to a blocking waiter's ---- */

#define QH_SETTLE_MS 20 /* the waiter is queued and asleep this long before the release */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long long *accepted; /* accept times, in the order of the connections */
    int n_acc, cap;
} qh = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0 };

/* Accepts forever on the socket ARG, noting each connection's accept time. */
static void *qh_listener(void *arg)
{
    int s = (int)(intptr_t)arg;
    for (;;) {
        int c = accept(s, NULL, NULL);
        long long t = now_ns();
        if (c < 0)
            continue;
        close(c);
        pthread_mutex_lock(&qh.mu);
        if (qh.n_acc < qh.cap)
            qh.accepted[qh.n_acc] = t;
        qh.n_acc++;
        pthread_cond_broadcast(&qh.cv);
        pthread_mutex_unlock(&qh.mu);
    }
    return NULL;
}

#define QH_GIVE_UP_MS 10000 /* a connection not accepted, or not writable, this long: the bench fails */

/* The accept time of the connection number K (waits for it). */
static long long qh_accept_time(int k)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += QH_GIVE_UP_MS / 1000;
    pthread_mutex_lock(&qh.mu);
    while (qh.n_acc <= k)
        if (pthread_cond_timedwait(&qh.cv, &qh.mu, &until) != 0 && qh.n_acc <= k)
            die("no connection accepted");
    long long t = k < qh.cap ? qh.accepted[k] : 0;
    pthread_mutex_unlock(&qh.mu);
    return t;
}

struct qh_waiter {
    const struct sockaddr_in *a;
    char mode;
    int fd;
    long long ready;
    int queued[2]; /* a pipe: written once the waiter's connect() is under way */
};

/* Waits until non-blocking socket FD is writable: epoll (edge-triggered,
 * FD added before its connect, as nginx does) or poll. */
static void qh_writable(int fd, int ep, char mode)
{
    struct epoll_event got;
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    long long end = now_ns() + QH_GIVE_UP_MS * 1000000LL;

    for (;;) {
        if (mode == 'q' ? epoll_wait(ep, &got, 1, QH_GIVE_UP_MS) == 1 && (got.events & EPOLLOUT)
                        : poll(&p, 1, QH_GIVE_UP_MS) == 1 && (p.revents & POLLOUT))
            return;
        if (now_ns() > end)
            die("queued connect: not writable");
    }
}

/* The waiting connect: blocking (b), or non-blocking under epoll (q) or
 * poll (p). Connected: connect() returned, or the socket writable and its
 * SO_ERROR 0 (what an event loop asks before it goes on). */
static void *qh_wait(void *arg)
{
    struct qh_waiter *w = arg;
    char one = 1;

    if (w->mode == 'b') {
        w->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (write(w->queued[1], &one, 1) != 1 || connect(w->fd, (const struct sockaddr *)w->a, sizeof *w->a) != 0)
            die("blocking connect");
        w->ready = now_ns();
        return NULL;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC), err = -1;
    socklen_t l = sizeof err;
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET };
    w->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (ep < 0 || (w->mode == 'q' && epoll_ctl(ep, EPOLL_CTL_ADD, w->fd, &ev) != 0))
        die("epoll");
    if (connect(w->fd, (const struct sockaddr *)w->a, sizeof *w->a) == 0 || errno != EINPROGRESS)
        die("queued connect: not EINPROGRESS");
    if (write(w->queued[1], &one, 1) != 1)
        die("pipe");
    qh_writable(w->fd, ep, w->mode);
    if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err != 0)
        die("queued connect failed");
    w->ready = now_ns();
    close(ep);
    return NULL;
}

static int qh_cap = -1; /* QH_SYN: a packet socket seeing every TCP packet sent (its own copy of each) */

/* Opens qh_cap where QH_SYN=1 asks (fails the bench when it cannot be had). */
static void qh_cap_open(void)
{
    int on = 1, buf = 4 << 20;
    const char *v = getenv("QH_SYN");

    if (!v || strcmp(v, "1"))
        return;
    qh_cap = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(0x0800));
    if (qh_cap >= 0 && setsockopt(qh_cap, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) != 0) {
        close(qh_cap);
        qh_cap = -1;
    }
    if (qh_cap < 0) { /* no CAP_NET_RAW: the rounds print no SYN time */
        fprintf(stderr, "bench: QH_SYN: no packet socket: %s\n", strerror(errno));
        return;
    }
    setsockopt(qh_cap, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

/* The CLOCK_REALTIME ns at which the first SYN from local port SPORT to
 * port DPORT left (the packets qh_cap holds, all read); -1 when none. */
static long long qh_syn_time(unsigned short sport, unsigned short dport)
{
    unsigned char b[128];
    char ctl[256];
    long long first = -1;
    struct sockaddr_ll from;

    for (;;) {
        struct iovec iov = { b, sizeof b };
        struct msghdr m = { .msg_name = &from,
                            .msg_namelen = sizeof from,
                            .msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl,
                            .msg_controllen = sizeof ctl };
        ssize_t n = recvmsg(qh_cap, &m, MSG_TRUNC);
        if (n < 0)
            return first;
        size_t ihl = (size_t)(b[0] & 15) * 4;
        if (n < 40 || (b[0] >> 4) != 4 || b[9] != IPPROTO_TCP || ihl + 14 > sizeof b || first >= 0)
            continue;
        const unsigned char *t = b + ihl;
        if (((t[0] << 8) | t[1]) != sport || ((t[2] << 8) | t[3]) != dport || (t[13] & 0x12) != 0x02)
            continue;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof ts);
                first = ts.tv_sec * 1000000000LL + ts.tv_nsec;
            }
    }
}

/* One round of MODE: prints "MODE ACCEPT_NS READY_NS [SYN_NS]" unless WARM.
 * K: the connections accepted before it. */
static void qh_round(const struct sockaddr_in *a, char mode, int *k, int warm)
{
    struct qh_waiter w = { .a = a, .mode = mode };
    struct timespec settle = { 0, QH_SETTLE_MS * 1000000L };
    pthread_t t;
    char c;

    int h = socket(AF_INET, SOCK_STREAM, 0);
    if (h < 0 || connect(h, (const struct sockaddr *)a, sizeof *a) != 0 || pipe(w.queued) != 0)
        die("holder connect");
    qh_accept_time((*k)++);
    if (pthread_create(&t, NULL, qh_wait, &w) != 0 || read(w.queued[0], &c, 1) != 1)
        die("waiter");
    nanosleep(&settle, NULL);
    if (qh_cap >= 0)
        qh_syn_time(0, 0); /* what came before: the holder's packets */
    struct timespec r0;
    clock_gettime(CLOCK_REALTIME, &r0);
    long long t0 = now_ns();
    close(h);
    pthread_join(t, NULL);
    long long acc = qh_accept_time((*k)++);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    long long syn = -1;
    if (qh_cap >= 0 && getsockname(w.fd, (struct sockaddr *)&me, &ml) == 0) {
        syn = qh_syn_time(ntohs(me.sin_port), ntohs(a->sin_port));
        syn = syn < 0 ? -1 : syn - (r0.tv_sec * 1000000000LL + r0.tv_nsec);
    }
    if (!warm && qh_cap >= 0)
        printf("%c %lld %lld %lld\n", mode, acc - t0, w.ready - t0, syn);
    else if (!warm)
        printf("%c %lld %lld\n", mode, acc - t0, w.ready - t0);
    close(w.fd);
    close(w.queued[0]);
    close(w.queued[1]);
}

/* The address of environment variable NAME (IPv4) at PORT; loopback when unset. */
static struct sockaddr_in env_addr(const char *name, int port)
{
    struct sockaddr_in a = loopback(port);
    const char *v = getenv(name);

    if (v && inet_pton(AF_INET, v, &a.sin_addr) != 1) {
        errno = EINVAL;
        die(name);
    }
    return a;
}

static int do_qhandoff(int port, int n, const char *modes)
{
    struct sockaddr_in a = env_addr("QH_PEER", port), b = env_addr("QH_BIND", port);
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1, k = 0;
    pthread_t t;

    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&b, sizeof b) || listen(s, 4096))
        die("listen");
    qh.cap = 2 * (n + 1) * (int)strlen(modes) + 8; /* two connections a round (holder, waiter), warm-up included */
    qh.accepted = calloc((size_t)qh.cap, sizeof *qh.accepted);
    if (!qh.accepted || pthread_create(&t, NULL, qh_listener, (void *)(intptr_t)s) != 0)
        die("listener");
    pthread_setname_np(t, "qh-listener"); /* tests/integration/queue_lone_hop.sh tells it from the shim's */
    qh_cap_open();
    setvbuf(stdout, NULL, _IOLBF, 0);    /* a line per round as it ends (outside the timed spans) */
    for (const char *m = modes; *m; m++) /* warm-up: configuration, waker, park listener */
        qh_round(&a, *m, &k, 1);
    for (int i = 0; i < n; i++) /* b q p, p q b, ...: no mode always goes first */
        for (size_t j = 0, len = strlen(modes); j < len; j++)
            qh_round(&a, modes[i % 2 ? len - 1 - j : j], &k, 0);
    fflush(stdout);
    return 0;
}

/* ---- delayline: a round trip that loopback has not ---- */

#define DL_SLOTS 1024 /* packets in flight; more are dropped (TCP sends them again) */
#define DL_MTU 2048

static struct {
    long long due;
    ssize_t len;
    unsigned char b[DL_MTU];
} dl[DL_SLOTS];

/* Opens tun device NAME (no packet information): its descriptor. */
static int dl_open(const char *name)
{
    struct ifreq ifr = { .ifr_flags = IFF_TUN | IFF_NO_PI };
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);

    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0)
        die("tun");
    return fd;
}

_Noreturn static void do_delayline(const char *name, long oneway_us)
{
    int fd = dl_open(name);
    unsigned head = 0, tail = 0; /* packets dl[tail..head) wait, in arrival (so due) order */
    struct pollfd p = { .fd = fd, .events = POLLIN };

    prctl(PR_SET_TIMERSLACK, 1UL); /* the wake-up at each due time, to the microsecond */
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        long long now = now_ns(), wait = -1;
        while (tail != head && dl[tail % DL_SLOTS].due <= now) {
            unsigned char *h = dl[tail % DL_SLOTS].b, t[4];
            memcpy(t, h + 12, 4); /* source and destination swapped: the IPv4 checksum is a sum */
            memmove(h + 12, h + 16, 4);
            memcpy(h + 16, t, 4);
            if (write(fd, h, (size_t)dl[tail % DL_SLOTS].len) < 0) {
                /* a packet the stack refused is a packet lost, as on a network */
            }
            tail++;
        }
        if (tail != head)
            wait = dl[tail % DL_SLOTS].due - now;
        struct timespec ts = { wait / 1000000000LL, wait % 1000000000LL };
        if (ppoll(&p, 1, wait < 0 ? NULL : &ts, NULL) <= 0)
            continue;
        unsigned char *b = dl[head % DL_SLOTS].b;
        ssize_t len = read(fd, b, DL_MTU);
        if (len >= 20 && (b[0] >> 4) == 4 && head - tail < DL_SLOTS) {
            dl[head % DL_SLOTS].len = len;
            dl[head % DL_SLOTS].due = now_ns() + oneway_us * 1000;
            head++;
        }
    }
}

/* One interposed call of kind C on socket S (epoll set EP). */
static void hook_call(char c, int s, int ep)
{
    int v = 1;
    socklen_t l = sizeof v;
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    struct pollfd p = { .fd = s, .events = POLLIN };
    struct timespec z = { 0, 0 };
    struct timeval tz = { 0, 0 };
    struct epoll_event ev = { .events = EPOLLIN };
    struct iovec iov = { .iov_base = &v, .iov_len = 1 };
    struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };
    fd_set r;

    switch (c) {
    case 's': setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof v); break;
    case 'g': getsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, &l); break;
    case 'n': getsockname(s, (struct sockaddr *)&a, &al); break;
    case 'e': epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev); break;
    case 'p': poll(&p, 1, 0); break;
    case 'P': ppoll(&p, 1, &z, NULL); break;
    case 'x':
        FD_ZERO(&r);
        FD_SET(s, &r);
        select(s + 1, &r, NULL, NULL, &tz);
        break;
    case 'X':
        FD_ZERO(&r);
        FD_SET(s, &r);
        pselect(s + 1, &r, NULL, NULL, &z, NULL);
        break;
    case 'd': shutdown(s, SHUT_RD); break;
    case 'y': syscall(SYS_getppid); break;
    case 'f': fcntl(s, F_GETFL); break;
    case 'D': close(dup(s)); break;
    case '2': dup2(s, s + 1); break;
    case '3': dup3(s, s + 1, 0); break;
    case 't': sendto(s, &v, 1, MSG_NOSIGNAL | MSG_DONTWAIT, NULL, 0); break; /* EPIPE: not connected */
    case 'm': sendmsg(s, &mm.msg_hdr, MSG_NOSIGNAL | MSG_DONTWAIT); break;
    case 'M': sendmmsg(s, &mm, 1, MSG_NOSIGNAL | MSG_DONTWAIT); break;
    case 'k': __poll_chk(&p, 1, 0, sizeof p); break;
    case 'K': __ppoll_chk(&p, 1, &z, NULL, sizeof p); break;
    case 'R':
        v = dup(s);
        close_range((unsigned)v, (unsigned)v, 0);
        break;
    case 'C': syscall(SYS_close, dup(s)); break;
    case 'F': fclose(fdopen(dup(s), "r")); break;
    case 'E': close(epoll_create1(0)); break;
    }
}

static int do_hook(const char *call, int n)
{
    static const char *const names[] = { "setsockopt",
                                         "getsockopt",
                                         "getsockname",
                                         "epoll_ctl",
                                         "poll",
                                         "ppoll",
                                         "select",
                                         "pselect",
                                         "shutdown",
                                         "syscall",
                                         "fcntl",
                                         "dup+close",
                                         "dup2",
                                         "dup3",
                                         "sendto",
                                         "sendmsg",
                                         "sendmmsg",
                                         "__poll_chk",
                                         "__ppoll_chk",
                                         "dup+close_range",
                                         "dup+syscall_close",
                                         "dup+fclose",
                                         "epoll_create1+close" };
    static const char codes[] = "sgnepPxXdyfD23tmMkKRCFE";
    int s = socket(AF_INET, SOCK_STREAM, 0), ep = epoll_create1(0), k = -1;
    struct epoll_event ev = { .events = EPOLLIN };

    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(call, names[i]))
            k = i;
    if (s < 0 || ep < 0 || k < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev))
        die("hook");
    hook_call(codes[k], s, ep); /* the first call resolves the symbols */
    long long t0 = now_ns();
    CALLGRIND_TOGGLE_COLLECT;
    for (int i = 0; i < n; i++)
        hook_call(codes[k], s, ep);
    CALLGRIND_TOGGLE_COLLECT;
    printf("%.1f\n", (double)(now_ns() - t0) / n);
    return 0;
}

int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "";
    if (!strcmp(m, "listen") && argc == 3)
        do_listen(argv[2]);
    if (!strcmp(m, "conn") && (argc == 4 || argc == 5))
        return do_conn(atoi(argv[2]), atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 0);
    if (!strcmp(m, "close") && argc == 4)
        return do_close(atoi(argv[2]), atoi(argv[3]));
    if (!strcmp(m, "floor") && argc == 6)
        return do_floor(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(m, "lateness") && argc == 2)
        return do_lateness();
    if (!strcmp(m, "spin") && argc == 3)
        return do_spin(atol(argv[2]));
    if (!strcmp(m, "mem") && argc == 4)
        return do_mem(atoi(argv[2]), atoi(argv[3]));
    if (!strcmp(m, "hook") && argc == 4)
        return do_hook(argv[2], atoi(argv[3]));
    if (!strcmp(m, "handoff") && argc == 5)
        return do_handoff(argv);
    if (!strcmp(m, "qhandoff") && (argc == 4 || argc == 5))
        return do_qhandoff(atoi(argv[2]), atoi(argv[3]), argc == 5 ? argv[4] : "bq");
    if (!strcmp(m, "delayline") && argc == 4)
        do_delayline(argv[2], atol(argv[3]));
    if (!strcmp(m, "handoff-child") && argc == 5)
        return handoff_child(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    fprintf(stderr, "usage: see the comment at the top of bench/bench.c\n");
    return 2;
}
