/* keep.c -- the queue's keeper: a thread with a descriptor table of its own holds program sockets kept aside. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "clock.h"
#include "keep.h"
#include "log.h"
#include "park.h"
#include "rt_int.h"

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* The keeper's thread makes raw system calls only: a library that
 * interposes close, recvmsg or fstat (a sanitizer, a tracer) takes a number
 * for one of the process's table, and the keeper's are not. The channel's
 * messages are the only order between the two sides: told to
 * ThreadSanitizer, which cannot see it (K_SYNC). */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
static char k_sync;
#define K_SENDING() __tsan_release(&k_sync)
#define K_RECEIVED() __tsan_acquire(&k_sync)
#else
#define K_SENDING() ((void)0)
#define K_RECEIVED() ((void)0)
#endif

static void k_close(int fd)
{
    syscall(SYS_close, fd);
}

static bool k_same(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return syscall(SYS_fstat, fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

#define KEEP_IDLE_S 10      /* a keeper that keeps nothing ends after this long */
#define KEEP_MIN_NPROC 16   /* no keeper under a smaller RLIMIT_NPROC */
#define KEEP_ANSWER_MS 5000 /* an answer: one system call of a thread of ours; longer is a wedge */
#define KEEP_FULL_MS 20     /* a message waits this long at most for room in the channel */

enum { K_PUT, K_TAKE, K_DROP, K_CALL, K_GIVE, K_ANSWER };

/* One message either way; a put carries the socket, and so does the K_GIVE
 * a take is answered with before its K_ANSWER. */
struct k_msg {
    int op;
    int id;
    unsigned seq; /* an answer's: the request's */
    int rc;       /* an answer's: 0 or -errno */
    int (*fn)(int, void *);
    void *arg;
};

/* The program's side, under klock. */
static pthread_mutex_t klock = PTHREAD_MUTEX_INITIALIZER;
static int chan = -1; /* our end of the channel: a number of the queue's own */
static dev_t chan_dev;
static ino_t chan_ino;
static bool off; /* no keeper can run in this process */
static unsigned seq;
static int *free_ids, n_free, cap_free, next_id;
/* Sockets the keepers hold, kept by the keeper's thread itself. */
static atomic_int held_now;
/* The keeper ended (it kept nothing for KEEP_IDLE_S): the channel is ours
 * to close. Set by the keeper under klock. */
static atomic_bool ended;

/* ---- the channel's messages ---- */

static int send_msg(int s, const struct k_msg *m, int fd, int flags)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } c;
    struct iovec io = { (void *)m, sizeof *m };
    struct msghdr h = { .msg_iov = &io, .msg_iovlen = 1 };

    if (fd >= 0) {
        memset(&c, 0, sizeof c);
        h.msg_control = c.buf;
        h.msg_controllen = sizeof c.buf;
        struct cmsghdr *ch = CMSG_FIRSTHDR(&h);
        ch->cmsg_level = SOL_SOCKET;
        ch->cmsg_type = SCM_RIGHTS;
        ch->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(ch), &fd, sizeof fd);
    }
    K_SENDING();
    return syscall(SYS_sendmsg, s, &h, MSG_NOSIGNAL | flags) == (long)sizeof *m ? 0 : -errno;
}

/* One message from S into *M, its descriptor (FD_CLOEXEC) into *FD, else
 * -1; *LOST when one came but no number was free for it. Returns 1, 0 at
 * the channel's end, or -errno. */
static int recv_msg(int s, struct k_msg *m, int *fd, bool *lost, int flags)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } c;
    struct iovec io = { m, sizeof *m };
    struct msghdr h = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf };

    *fd = -1;
    *lost = false;
    long r = syscall(SYS_recvmsg, s, &h, MSG_CMSG_CLOEXEC | flags);
    if (r <= 0)
        return r == 0 ? 0 : -errno;
    K_RECEIVED();
    for (struct cmsghdr *ch = CMSG_FIRSTHDR(&h); ch; ch = CMSG_NXTHDR(&h, ch))
        if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS && ch->cmsg_len >= CMSG_LEN(sizeof(int)))
            memcpy(fd, CMSG_DATA(ch), sizeof *fd);
    *lost = (h.msg_flags & MSG_CTRUNC) != 0;
    return r == (long)sizeof *m ? 1 : -EPROTO;
}

/* ---- the keeper's thread: system calls only, on numbers of its own table ---- */

struct k_start {
    int peer; /* the keeper's end, on a number of the program's table until the keeper has it */
    dev_t dev;
    ino_t ino;
    pid_t tid;        /* the starting thread: PIDFD_THREAD's target */
    atomic_int state; /* 0 starting, 1 serving, -1 refused here for good, -2 not this time */
    atomic_int refs;  /* the starter's and the keeper's: the last one frees it */
};

static void start_unref(struct k_start *st)
{
    if (atomic_fetch_sub(&st->refs, 1) == 1)
        free(st);
}

/* The keeper's end from the program's table into its own: through the main
 * thread's pidfd (its table is the program's), else the starter's
 * (PIDFD_THREAD). Returns it, or -1 with *WHY: -1 when the kernel or a
 * seccomp profile refuses the calls, -2 when the end was not there (the
 * program closed it meanwhile). */
static int fetch_peer(const struct k_start *st, int *why)
{
    pid_t who[2] = { getpid(), st->tid };
    unsigned how[2] = { 0, PIDFD_THREAD };

    *why = -1;
    for (int i = 0; i < 2; i++) {
        int pfd = (int)syscall(SYS_pidfd_open, who[i], how[i]);
        int fd = pfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pfd, st->peer, 0) : -1;
        if (pfd >= 0 && fd < 0 && errno == EBADF)
            *why = -2;
        if (pfd >= 0)
            k_close(pfd);
        if (fd >= 0 && k_same(fd, st->dev, st->ino))
            return fd;
        if (fd >= 0) {
            *why = -2;
            k_close(fd);
        }
    }
    return -1;
}

/* Kept socket ID's slot in *HELD (N of them), grown as needed when GROW;
 * NULL when there is none (or it cannot grow). */
static int *slot(int **held, int *n, int id, bool grow)
{
    if (id < 0 || (id >= *n && !grow))
        return NULL;
    if (id >= *n) {
        int c = *n ? *n : 64;
        while (c <= id)
            c *= 2;
        int *g = realloc(*held, (size_t)c * sizeof *g);
        if (!g)
            return NULL;
        for (int i = *n; i < c; i++)
            g[i] = -1;
        *held = g;
        *n = c;
    }
    return &(*held)[id];
}

static void answer(int b, int op, unsigned s, int rc, int fd)
{
    struct k_msg a = { .op = op, .seq = s, .rc = rc };
    send_msg(b, &a, fd, 0);
}

/* One request M (with FD, or -1) on the keeper's HELD (N). */
static void serve_one(int b, const struct k_msg *m, int fd, int **held, int *n)
{
    int *p = slot(held, n, m->id, m->op == K_PUT && fd >= 0), f = p ? *p : -1;

    switch (m->op) {
    case K_PUT:
        if (p && f < 0) {
            *p = fd;
            atomic_fetch_add(&held_now, 1);
            return;
        }
        break; /* no memory for it: its take finds nothing */
    case K_TAKE:
    case K_DROP:
        if (p)
            *p = -1;
        if (f >= 0)
            atomic_fetch_sub(&held_now, 1);
        if (m->op == K_TAKE && f >= 0)
            answer(b, K_GIVE, m->seq, 0, f);
        if (f >= 0)
            k_close(f); /* a take's is in flight to the program's table now */
        /* the answer only now: once the taker has it, the socket is the program's alone (a reference
         * of ours left behind it would keep the program's epoll entries reporting a number it closed) */
        if (m->op == K_TAKE)
            answer(b, K_ANSWER, m->seq, f >= 0 ? 0 : -ENOENT, -1);
        break;
    case K_CALL: answer(b, K_ANSWER, m->seq, f >= 0 ? m->fn(f, m->arg) : -ENOENT, -1); break;
    }
    if (fd >= 0)
        k_close(fd);
}

/* Whether the keeper, serving B and keeping nothing, ends now: no request
 * can be on its way while it holds klock (every sender holds it), and none
 * has come. Its thread's end then closes B; the program's side closes its
 * end at its next call. */
static bool idle_end(int b)
{
    struct pollfd p = { .fd = b, .events = POLLIN };
    struct timespec zero = { 0, 0 };
    bool quiet = false;

    if (pthread_mutex_trylock(&klock) != 0)
        return false; /* busy, or a fork on its way: another time */
    if (syscall(SYS_ppoll, &p, 1, &zero, NULL, 0) == 0) {
        atomic_store(&ended, true);
        quiet = true;
    }
    pthread_mutex_unlock(&klock);
    return quiet;
}

/* Serves the channel B until its other end is gone, or until it kept
 * nothing for KEEP_IDLE_S. */
static void serve(int b)
{
    int *held = NULL, n = 0, fd;
    bool lost;
    struct k_msg m;

    for (;;) {
        struct pollfd p = { .fd = b, .events = POLLIN };
        struct timespec idle = { KEEP_IDLE_S, 0 };
        long pr = syscall(SYS_ppoll, &p, 1, &idle, NULL, 0);
        if (pr == 0 && atomic_load(&held_now) == 0 && idle_end(b))
            break;
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        int r = recv_msg(b, &m, &fd, &lost, MSG_DONTWAIT);
        if (r == 1)
            serve_one(b, &m, fd, &held, &n);
        else if (fd >= 0)
            k_close(fd);
        if (r == 0 || (r < 0 && r != -EINTR && r != -EPROTO && r != -EAGAIN))
            break;
    }
    for (int i = 0; i < n; i++)
        if (held[i] >= 0)
            atomic_fetch_sub(&held_now, 1);
    free(held); /* the thread's end closes its table, and every socket still in it */
}

static void *k_main(void *arg)
{
    struct k_start *st = arg;
    int b = -1, why = -1;

    /* a new, empty table: the program's files never have a second reference here */
    if (syscall(SYS_close_range, 0U, ~0U, CLOSE_RANGE_UNSHARE) == 0)
        b = fetch_peer(st, &why);
    atomic_store(&st->state, b >= 0 ? 1 : why);
    start_unref(st);
    if (b >= 0)
        serve(b);
    return NULL;
}

/* ---- the program's side ---- */

static bool chan_ok(void)
{
    struct stat st;

    if (atomic_load(&ended)) { /* idle, it ended: a new one starts at the next need */
        if (chan >= 0)
            close(chan);
        chan = -1;
        atomic_store(&ended, false);
    }
    if (chan >= 0 && fstat(chan, &st) == 0 && st.st_dev == chan_dev && st.st_ino == chan_ino)
        return true;
    chan = -1; /* none, or the program's number now (closed behind our back): forgotten, never closed */
    return false;
}

/* A keeper on its way: its start, and the channel's two ends (ours, its). */
static struct k_start *starting;
static int ends[2] = { -1, -1 };

/* Spawns a keeper; the channel is made, the keeper fetches its end. Never
 * waits for it: the next call looks (start). Returns -EAGAIN (on its way,
 * or no thread to be had now). Under klock. */
static int spawn_keeper(void)
{
    int sv[2], big = 1 << 22; /* the put of a burst of connects waits for no room: the kernel caps it */
    struct stat s;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    sv[0] = ccap_park_move_high(sv[0]);
    sv[1] = ccap_park_move_high(sv[1]);
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    struct k_start *st = fstat(sv[1], &s) == 0 ? calloc(1, sizeof *st) : NULL;
    if (st) {
        *st = (struct k_start){ .peer = sv[1], .dev = s.st_dev, .ino = s.st_ino, .tid = (pid_t)syscall(SYS_gettid) };
        atomic_store(&st->refs, 2);
    }
    if (!st || !ccap_rt.hooks.spawn(k_main, st)) {
        free(st);
        close(sv[0]);
        close(sv[1]);
        return -EAGAIN;
    }
    starting = st;
    ends[0] = sv[0];
    ends[1] = sv[1];
    return -EAGAIN;
}

/* The start under way ended in STATE (1 serving, -1 refused, -2 not this
 * time): the channel is ours, or its ends go. Under klock. */
static void start_done(int state)
{
    struct stat s;

    close(ends[1]); /* the keeper has its own copy now, or never will */
    if (state == 1 && fstat(ends[0], &s) == 0) {
        chan = ends[0];
        chan_dev = s.st_dev;
        chan_ino = s.st_ino;
        n_free = 0; /* ids of an earlier keeper are never given again while their holders may still ask */
    } else {
        close(ends[0]);
    }
    if (state == -1) {
        off = true;
        ccap_log(CCAP_LOG_WARN,
                 "no keeper thread (close_range CLOSE_RANGE_UNSHARE or pidfd_getfd refused here): each queued "
                 "connect keeps the program's socket on a descriptor of the process (doc/nonblocking.md)");
    }
    start_unref(starting);
    starting = NULL;
    ends[0] = ends[1] = -1;
}

/* Whether RLIMIT_NPROC leaves threads for a keeper: where it is small (a
 * few threads for the whole user), the queue's runner and the waiters'
 * waker need them more -- a wait without a waker only polls -- and the
 * sockets stay on numbers of ours. */
static bool threads_to_spare(void)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_NPROC, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= KEEP_MIN_NPROC;
}

/* A keeper that serves: 0 (CHAN is its channel), -EAGAIN on its way (one
 * is started when none is), -ENOSYS none can run here. Never waits, so a
 * connect of an event loop never does: the calls until it serves keep
 * their sockets on numbers of ours. Under klock. */
static int start(void)
{
    if (!starting)
        return off || !ccap_rt.hooks.spawn || !threads_to_spare() ? -ENOSYS : spawn_keeper();
    int state = atomic_load(&starting->state);
    if (state == 0)
        return -EAGAIN;
    start_done(state);
    return state == 1 ? 0 : state == -1 ? -ENOSYS : -EAGAIN;
}

static int id_new(void)
{
    return n_free > 0 ? free_ids[--n_free] : next_id++;
}

static void id_free(int id)
{
    if (n_free == cap_free) {
        int c = cap_free ? 2 * cap_free : 64;
        int *g = realloc(free_ids, (size_t)c * sizeof *g);
        if (!g)
            return; /* the id is not used again */
        free_ids = g;
        cap_free = c;
    }
    free_ids[n_free++] = id;
}

/* Sends M (with FD, or -1) to the keeper, waiting KEEP_FULL_MS at most
 * for room in the channel. Returns 0 or -errno. Under klock. */
static int tell(struct k_msg *m, int fd)
{
    if (!chan_ok())
        return -ENOENT;
    m->seq = ++seq;
    int rc = send_msg(chan, m, fd, MSG_DONTWAIT);
    if (rc == -EAGAIN) {
        struct pollfd p = { .fd = chan, .events = POLLOUT };
        if (poll(&p, 1, KEEP_FULL_MS) == 1)
            rc = send_msg(chan, m, fd, MSG_DONTWAIT);
    }
    return rc;
}

/* Sends M and waits for its answer: its rc, the descriptor given before
 * it into *GOT (if GOT). Under klock. */
static int ask(struct k_msg *m, int *got)
{
    long long end = ccap_now_ms() + KEEP_ANSWER_MS;
    int rc = tell(m, -1), fd, given = -1;
    bool lost, lost_given = false;
    struct k_msg a;

    while (rc == 0) {
        struct pollfd p = { .fd = chan, .events = POLLIN };
        long long left = end - ccap_now_ms();
        if (left <= 0) {
            rc = -ETIMEDOUT;
            break;
        }
        if (poll(&p, 1, (int)left) <= 0)
            continue; /* EINTR, or the time is up: looked at above */
        int r = recv_msg(chan, &a, &fd, &lost, MSG_DONTWAIT);
        if (r == -EAGAIN || r == -EINTR)
            continue;
        if (r <= 0) {
            rc = r == 0 ? -ENOENT : r; /* the keeper is gone */
            break;
        }
        if (r == 1 && a.op == K_GIVE && a.seq == m->seq && given < 0) {
            given = fd;
            lost_given = lost;
            continue;
        }
        if (fd >= 0)
            close(fd); /* a late answer to a request that gave up waiting */
        if (r == 1 && a.op == K_ANSWER && a.seq == m->seq) {
            rc = lost_given ? -EMFILE : a.rc;
            break;
        }
    }
    if (got && rc == 0)
        *got = given;
    else if (given >= 0)
        close(given);
    return rc;
}

int ccap_keep_put(int fd)
{
    pthread_mutex_lock(&klock);
    int rc = chan_ok() ? 0 : start();
    if (rc == 0) {
        struct k_msg m = { .op = K_PUT, .id = id_new() };
        rc = tell(&m, fd);
        if (rc == 0)
            rc = m.id;
        else
            id_free(m.id);
    }
    pthread_mutex_unlock(&klock);
    return rc;
}

int ccap_keep_take(int id)
{
    struct k_msg m = { .op = K_TAKE, .id = id };
    int fd = -1;

    pthread_mutex_lock(&klock);
    int rc = ask(&m, &fd);
    id_free(id); /* (a take that gave up: the keeper lets ID go before any later put of it) */
    pthread_mutex_unlock(&klock);
    return rc < 0 ? rc : fd >= 0 ? fd : -ENOENT;
}

int ccap_keep_call(int id, int (*fn)(int fd, void *arg), void *arg)
{
    struct k_msg m = { .op = K_CALL, .id = id, .fn = fn, .arg = arg };

    pthread_mutex_lock(&klock);
    int rc = ask(&m, NULL);
    pthread_mutex_unlock(&klock);
    return rc;
}

void ccap_keep_drop(int id)
{
    struct k_msg m = { .op = K_DROP, .id = id };

    pthread_mutex_lock(&klock);
    tell(&m, -1);
    id_free(id);
    pthread_mutex_unlock(&klock);
}

int ccap_keep_own(int fds[CCAP_KEEP_OWN_MAX])
{
    int n = 0;

    pthread_mutex_lock(&klock);
    int own[CCAP_KEEP_OWN_MAX] = { chan, ends[0], ends[1] };
    for (int i = 0; i < CCAP_KEEP_OWN_MAX; i++)
        if (own[i] >= 0)
            fds[n++] = own[i];
    pthread_mutex_unlock(&klock);
    return n;
}

int ccap_keep_rehome(int fd)
{
    int nfd = -1, *own[] = { &chan, &ends[0], &ends[1] };

    pthread_mutex_lock(&klock);
    for (size_t i = 0; fd >= 0 && i < sizeof own / sizeof own[0]; i++)
        if (*own[i] == fd) {
            nfd = ccap_park_move_elsewhere(fd);
            *own[i] = nfd; /* -1: it goes with the program's call (the keeper with the channel) */
            break;
        }
    pthread_mutex_unlock(&klock);
    return nfd;
}

int ccap_keep_count(void)
{
    return atomic_load(&held_now);
}

void ccap_keep_fork_prepare(void)
{
    pthread_mutex_lock(&klock);
}

void ccap_keep_fork_parent(void)
{
    pthread_mutex_unlock(&klock);
}

void ccap_keep_fork_child(void)
{
    pthread_mutex_init(&klock, NULL);
    for (int i = 0; i < 2; i++)
        if (ends[i] >= 0)
            close(ends[i]);
    free(starting); /* the child's copy: its keeper thread is the parent's */
    starting = NULL;
    ends[0] = ends[1] = -1;
    if (chan >= 0)
        close(chan); /* the parent's keeper goes on with the parent's end */
    chan = -1;
    n_free = 0;
    atomic_store(&held_now, 0);
    atomic_store(&ended, false);
}
