/* queued.c -- non-blocking connects queued for a permit: placeholder in the descriptor, a thread per wait (or the runner), the swap back. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/kcmp.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "cleanup.h"
#include "clock.h"
#include "fdroom.h"
#include "keep.h"
#include "log.h"
#include "nap.h"
#include "park.h"
#include "qrun.h"
#include "queued.h"
#include "rt_int.h"
#include "waiting.h"

#define Q_ALIASES 8       /* numbers of one queued socket in this process (dup) */
#define Q_REGS 16         /* epoll sets one number is in */
#define Q_RECHECK_MS 1000 /* a connect() waiting on a queued descriptor looks again this often */
#define Q_OWN_THREADS 32  /* queued connects at once that wait in a thread of their own; the rest: the runner */
#define Q_POLL_BLIND_MS                                                                                             \
    50 /* a poll on a queued descriptor no swap can wake (no descriptor free) looks again this often */

enum { Q_QUEUED, Q_FAILED };

struct q_sleeper;
struct q_pollref;

/* A registration of a queued number in an epoll set, as the program made
 * it (before the connect, or through epoll_ctl while queued). */
struct q_reg {
    int fd;
    int epfd;
    struct epoll_event ev;
};

/* One queued connect. Under qlock, but for the thread's own fields. The
 * program's socket is kept aside while queued: on a descriptor of the
 * shim's (REAL), or in the keeper's table (KID: runtime/keep.h), where it
 * takes none of the program's numbers (see keep_aside). The placeholder
 * lives on the program's numbers only. */
struct q_ent {
    int fds[Q_ALIASES], nfds; /* the program's numbers that refer to the placeholder */
    int real;                 /* the program's socket, kept aside (ours, high, CLOEXEC); -1 once given back */
                              /* (kept after a failure too: a retry or a shutdown puts it back, see restore) */
    int kid;                  /* or its id in the keeper (REAL -1 then); -1 none */
    dev_t rdev;
    ino_t rino; /* the program's socket's identity */
    int rfl;    /* its file status flags as last read or set here (only we use its number); -1: unknown */
    int ph;     /* during a swap only (hold_ph): the park's spare, holding the placeholder; else -1 */
    dev_t qdev;
    ino_t qino;                /* the placeholder's identity */
    struct q_pollref *pollers; /* poll calls through the shim with one of its numbers in their sets */
    int state;                 /* Q_QUEUED, Q_FAILED */
    int err;                   /* Q_FAILED: the errno SO_ERROR and connect() report once; 0 after */
    int family;
    unsigned long long wid; /* its wait, for ccap_rt_wait_cancel */
    struct ccap_wait *ws;   /* its wait until the thread takes it */
    struct ccap_permit *permit;
    struct sockaddr_storage sa;
    socklen_t salen;
    struct q_sleeper *sleepers; /* threads in connect() on a blocking number of it */
    struct q_reg *regs;         /* its numbers' epoll registrations (NREGS of CREGS) */
    int nregs, cregs;
    bool regs_unknown; /* one could not be recorded: a swap reads them from the kernel */
    bool linked;       /* on the list from q_head */
    struct q_ent *next, *prev;
    struct ccap_qrun_item run; /* its wait in the runner (runtime/qrun.h), when it has no thread of its own */
};

/* A thread in connect() again on a blocking queued descriptor (a connect a
 * signal interrupted): it waits as a real blocking connect waits for its
 * connection, on a nap of its own (runtime/nap.h: signals and cancellation
 * as connect()'s). On its entry's list under qlock. */
struct q_sleeper {
    struct ccap_nap nap;
    struct q_ent *e; /* the entry it waits on; NULL once that wait ended */
    struct q_sleeper *next;
};

/* A poll() through the shim with queued descriptors in its set: an
 * eventfd of the call's own, added to the set and never reported, written
 * by each swap of those descriptors' connects (wake). One per poll call in
 * progress: one per queued connect, kept until it ended, filled a small
 * table of curl's (it polls another set each time). On q_polls under
 * qlock; its number marked as the queue's while it is. */
struct q_poll {
    int efd; /* -1: none yet (or the program closed its number) */
    bool on; /* on q_polls */
    struct q_poll *next;
};

/* One queued connect in a poll call's set. */
struct q_pollref {
    struct q_poll *p;
    struct q_ent *e;         /* NULL once E went */
    struct q_pollref *enext; /* E's list */
    struct q_pollref *cnext; /* the call's list */
};

atomic_int ccap_q_live;
_Atomic unsigned long ccap_q_bits[CCAP_Q_MAX_FD / (8 * sizeof(unsigned long))];

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qdone = PTHREAD_COND_INITIALIZER; /* a queued connect ended, or lost a number */
static struct q_ent *q_head;
static struct q_poll *q_polls; /* poll calls in progress with a queued descriptor */
/* Queued connects whose waits run in threads of their own now. The first
 * Q_OWN_THREADS at once get one (a lone waiter there blocks on its wake
 * list itself: one thread wake-up per token); the rest, and any whose own
 * thread cannot be had (RLIMIT_NPROC, a container's pids.max), share the
 * runner (runtime/qrun.h), started with the process's first queued
 * connect, while threads can still be had. */
static atomic_int q_threads;
static bool q_told; /* the log said once that a queued connect found no thread of its own (under qlock) */
/* The entry each program number refers to (its placeholder), by number:
 * the hooks' lookups must not walk 10,000 entries. Grown as needed. */
static struct q_ent **by_fd;
static int by_fd_cap;
/* The numbers epoll sets were made on (ccap_q_epoll_created), however
 * many (a selector per thread or per client is common), and the highest of
 * them + 1: what a swap scans. */
_Atomic unsigned long ccap_q_epoll_bits[CCAP_Q_MAX_FD / (8 * sizeof(unsigned long))];
static atomic_int epoll_top;

#define BITW (8 * sizeof(unsigned long))

static void mark(int fd, bool on)
{
    if (fd < 0 || fd >= CCAP_Q_MAX_FD)
        return;
    unsigned long b = 1UL << ((unsigned)fd % BITW);
    if (on)
        atomic_fetch_or_explicit(&ccap_q_bits[(unsigned)fd / BITW], b, memory_order_relaxed);
    else
        atomic_fetch_and_explicit(&ccap_q_bits[(unsigned)fd / BITW], ~b, memory_order_relaxed);
}

static bool is_file(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* A child that shares this process's memory but not its descriptor table
 * (vfork, posix_spawn's helper: Python's subprocess closes every number in
 * it) is not the queue's owner: the entries are its parent's, and none of
 * its calls may touch them (runtime.h, ccap_rt_owner). Asked only on the
 * slow paths, when a number is the queue's. */
static bool foreign(void)
{
    return !ccap_rt_owner();
}

/* The queue's own descriptors (kept sockets, placeholders, eventfds, the
 * park's listener) are marked in ccap_q_bits too, so that a program's close
 * or dup2 onto one of those numbers reaches the queue (rehome). */
static void close_own(int *fd)
{
    if (*fd >= 0) {
        mark(*fd, false);
        close(*fd);
    }
    *fd = -1;
}

/* close_own, if *FD is still the file DEV/INO: a number closed behind the
 * shim's back may be the program's now, and is only forgotten. */
static void close_if(int *fd, dev_t dev, ino_t ino)
{
    if (*fd >= 0 && !is_file(*fd, dev, ino)) {
        mark(*fd, false);
        *fd = -1;
    }
    close_own(fd);
}

/* ---- epoll sets ---- */

void ccap_q_epoll_new_number(int epfd)
{
    int top = atomic_load(&epoll_top);

    atomic_fetch_or(&ccap_q_epoll_bits[(unsigned)epfd / BITW], 1UL << ((unsigned)epfd % BITW));
    while (top <= epfd && !atomic_compare_exchange_weak(&epoll_top, &top, epfd + 1)) {
    }
}

/* Whether number FD is an epoll set now (the number may be another file's
 * since: it was remembered when a set was made on it). */
static bool is_epoll(int fd)
{
    static const char want[] = "anon_inode:[eventpoll]";
    char path[48], link[sizeof want];

    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return readlink(path, link, sizeof link) == (ssize_t)sizeof want - 1 && !memcmp(link, want, sizeof want - 1);
}

/* Reads EPFD's registrations of number FD for file ST (the one FD refers
 * to now) from /proc/self/fdinfo (events and data as registered) into R
 * (up to MAX - *N). An entry keeps its number after a close while another
 * descriptor keeps its file open: the entry's file (ino, sdev: the kernel's
 * own encoding of the device) tells it from FD's. */
static void regs_in(int epfd, int fd, const struct stat *st, struct q_reg *r, int *n, int max)
{
    char path[64], buf[4096], line[256];
    size_t ll = 0;
    ssize_t got;

    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", epfd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return;
    while (*n < max && (got = read(f, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < got && *n < max; i++) {
            if (buf[i] != '\n') {
                if (ll < sizeof line - 1)
                    line[ll++] = buf[i];
                continue;
            }
            line[ll] = 0;
            ll = 0;
            int tfd, got_f;
            unsigned ev, sdev;
            unsigned long long data, ino;
            long long pos;
            got_f = sscanf(line, "tfd: %d events: %x data: %llx pos:%lli ino:%llx sdev:%x", &tfd, &ev, &data, &pos,
                           &ino, &sdev);
            if (got_f < 3 || tfd != fd)
                continue;
            if (got_f == 6 &&
                (ino != (unsigned long long)st->st_ino || makedev(sdev >> 20, sdev & 0xfffff) != st->st_dev))
                continue; /* another file's entry under this number */
            r[(*n)++] = (struct q_reg){ fd, epfd, { .events = ev, .data.u64 = data } };
        }
    }
    close(f);
}

/* Whether kcmp(2) looks epoll entries up here: 1 yes, -1 no (missing, too
 * old to know KCMP_EPOLL_TFD, refused by seccomp: fdinfo is read instead),
 * 0 not asked yet. Asked once, on a set of the shim's own. */
static atomic_int kcmp_epoll;

static bool kcmp_works(void)
{
    int k = atomic_load_explicit(&kcmp_epoll, memory_order_relaxed);

    if (k == 0) {
        pid_t me = getpid();
        int ep = (int)syscall(SYS_epoll_create1, EPOLL_CLOEXEC); /* raw: not a set of the program's */
        struct kcmp_epoll_slot slot = { (unsigned)ep, (unsigned)ep, 0 };
        /* an empty set: ENOENT where the lookup works, EINVAL where the kernel does not know it */
        long r = ep >= 0 ? syscall(SYS_kcmp, me, me, KCMP_EPOLL_TFD, ep, (unsigned long)&slot) : 0;
        k = ep >= 0 && r < 0 && errno == ENOENT ? 1 : -1;
        if (ep >= 0)
            close(ep);
        atomic_store(&kcmp_epoll, k);
    }
    return k > 0;
}

/* Whether number FD's file is registered in epoll set EPFD: 1 yes, 0 no
 * (EPFD is no epoll set, or not any more), -1 cannot tell. kcmp's
 * KCMP_EPOLL_TFD looks the entry up in the kernel, without the fdinfo text
 * of the whole set, whose size is the number of sockets registered
 * (reading it for every swap made a connect's cost grow with the sockets
 * queued before it); its EINVAL, where it works, tells a number that is no
 * epoll set, without /proc (a readlink per set at every swap, on the path
 * from a permit to the connect). */
static int in_set(int epfd, int fd)
{
    pid_t me = getpid();

    if (!kcmp_works())
        return -1;
    for (unsigned toff = 0; toff < 64; toff++) {
        struct kcmp_epoll_slot slot = { (unsigned)epfd, (unsigned)fd, toff };
        long r = syscall(SYS_kcmp, me, me, KCMP_EPOLL_TFD, fd, (unsigned long)&slot);
        if (r == 0)
            return 1;
        if (r > 0)
            continue; /* another file's entry under this number: the next one */
        if (errno == ENOENT || errno == EINVAL || errno == EBADF)
            return 0; /* no entry of it; or EPFD is no epoll set, or no descriptor */
        if (errno == ENOSYS || errno == EPERM || errno == EACCES)
            atomic_store(&kcmp_epoll, -1);
        return -1;
    }
    return -1;
}

/* Every epoll registration of number FD, of the file FD refers to now.
 * Under qlock. */
static int regs_of(int fd, struct q_reg *r)
{
    struct stat st;
    int n = 0;

    if (fstat(fd, &st) != 0)
        return 0;
    int top = atomic_load(&epoll_top);
    for (int w = 0; w * (int)BITW < top; w++)
        for (unsigned long b = atomic_load_explicit(&ccap_q_epoll_bits[w], memory_order_relaxed); b; b &= b - 1) {
            int ep = w * (int)BITW + __builtin_ctzl(b);
            int in = ep != fd ? in_set(ep, fd) : 0;
            if (in > 0 || (in < 0 && is_epoll(ep)))
                regs_in(ep, fd, &st, r, &n, Q_REGS);
        }
    return n;
}

/* Deletes number FD's epoll registrations into R (at most Q_REGS), FD
 * about to get another file: E's record of them (checked against the
 * kernel: a set may be gone), or the kernel's when E is NULL or its record
 * is incomplete (a scan of every set: see in_set). Returns how many were
 * deleted, those only. Under qlock. */
static int regs_take(const struct q_ent *e, int fd, struct q_reg *r)
{
    int n = 0, k = 0;

    if (!e || e->regs_unknown)
        n = regs_of(fd, r);
    else
        for (int i = 0; i < e->nregs && n < Q_REGS; i++)
            if (e->regs[i].fd == fd && in_set(e->regs[i].epfd, fd) != 0)
                r[n++] = e->regs[i];
    for (int i = 0; i < n; i++)
        if (epoll_ctl(r[i].epfd, EPOLL_CTL_DEL, fd, NULL) == 0)
            r[k++] = r[i];
    return k;
}

static void regs_put(const struct q_reg *r, int n)
{
    for (int i = 0; i < n; i++) {
        struct epoll_event ev = r[i].ev;
        epoll_ctl(r[i].epfd, EPOLL_CTL_ADD, r[i].fd, &ev);
    }
}

/* Puts the file of descriptor SRC on number FD, FD_CLOEXEC staying FD's,
 * FD's epoll registrations deleted before (regs_take: an entry belongs to
 * a file and a number, left alone it would report the old file, and MOD
 * would find no entry for the new one) into R, *N of them, for the caller
 * to add again (regs_put) after it closed SRC if it is to: an entry added
 * while another descriptor of the shim's holds the file outlives the
 * program's close of FD, and reports events for a closed number. Under
 * qlock. */
static int swap_regs(const struct q_ent *e, int src, int fd, struct q_reg *r, int *n)
{
    int fl = fcntl(fd, F_GETFD);

    *n = regs_take(e, fd, r);
    int rc = ccap_fdroom_dup3(src, fd, fl >= 0 && (fl & FD_CLOEXEC) ? O_CLOEXEC : 0);
    return rc < 0 ? rc : 0;
}

/* Records E's registration R (EPOLL_CTL_ADD), its new events (MOD), or
 * forgets it (DEL). Under qlock. */
static void regs_note(struct q_ent *e, int op, const struct q_reg *r)
{
    for (int i = 0; i < e->nregs; i++)
        if (e->regs[i].fd == r->fd && e->regs[i].epfd == r->epfd) {
            if (op == EPOLL_CTL_DEL)
                e->regs[i] = e->regs[--e->nregs];
            else
                e->regs[i].ev = r->ev;
            return;
        }
    if (op == EPOLL_CTL_DEL)
        return;
    if (e->nregs == e->cregs) {
        int c = e->cregs ? 2 * e->cregs : 2;
        struct q_reg *g = c <= Q_ALIASES * Q_REGS ? realloc(e->regs, (size_t)c * sizeof *g) : NULL;
        if (!g) {
            e->regs_unknown = true;
            return;
        }
        e->regs = g;
        e->cregs = c;
    }
    e->regs[e->nregs++] = *r;
}

/* ---- entries ---- */

static struct q_ent *find(int fd, int *slot)
{
    struct q_ent *e = fd >= 0 && fd < by_fd_cap ? by_fd[fd] : NULL;

    for (int i = 0; e && i < e->nfds; i++)
        if (e->fds[i] == fd) {
            *slot = i;
            return e;
        }
    return NULL;
}

/* Number FD becomes E's (by_fd grown if needed). Returns false when it
 * cannot be indexed (no memory): FD is then not E's. Under qlock. */
static bool add_alias(struct q_ent *e, int fd)
{
    if (fd < 0 || e->nfds >= Q_ALIASES)
        return false;
    if (fd >= by_fd_cap) {
        int c = by_fd_cap ? by_fd_cap : 1024;
        while (c <= fd)
            c *= 2;
        struct q_ent **g = realloc(by_fd, (size_t)c * sizeof *g);
        if (!g)
            return false;
        memset(g + by_fd_cap, 0, (size_t)(c - by_fd_cap) * sizeof *g);
        by_fd = g;
        by_fd_cap = c;
    }
    by_fd[fd] = e;
    e->fds[e->nfds++] = fd;
    mark(fd, true);
    return true;
}

/* E's number in slot I goes, with its epoll registrations' record. */
static void drop_alias(struct q_ent *e, int i)
{
    int fd = e->fds[i];

    mark(fd, false);
    if (fd >= 0 && fd < by_fd_cap && by_fd[fd] == e)
        by_fd[fd] = NULL;
    e->fds[i] = e->fds[--e->nfds];
    for (int k = e->nregs - 1; k >= 0; k--)
        if (e->regs[k].fd == fd)
            e->regs[k] = e->regs[--e->nregs];
}

static void forget_locked(int fd);
static void rehome(int fd);
static void unhold_ph(struct q_ent *e);
static void fail_in_place(struct q_ent *e, int err);

/* The entry FD is a number of, if FD still refers to its placeholder (a
 * number closed behind the shim's back is dropped). Under qlock. */
static struct q_ent *lookup(int fd)
{
    int i;
    struct q_ent *e = find(fd, &i);

    if (e && !is_file(fd, e->qdev, e->qino)) {
        forget_locked(fd);
        return NULL;
    }
    return e;
}

static void link_ent(struct q_ent *e)
{
    e->prev = NULL;
    e->next = q_head;
    if (q_head)
        q_head->prev = e;
    q_head = e;
    e->linked = true;
    atomic_fetch_add(&ccap_q_live, 1);
}

static void unlink_ent(struct q_ent *e)
{
    if (!e->linked)
        return;
    if (e->prev)
        e->prev->next = e->next;
    else
        q_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->linked = false;
    atomic_fetch_sub(&ccap_q_live, 1);
}

/* E's wait ended (granted, failed) or E goes: every thread waiting in
 * connect() on it looks again. Under qlock. */
static void kick_sleepers(struct q_ent *e)
{
    for (struct q_sleeper *s = e->sleepers; s; s = s->next) {
        s->e = NULL;
        ccap_nap_kick(&s->nap);
    }
    e->sleepers = NULL;
}

/* S off its entry's list, if it is still on one. Under qlock. */
static void sleeper_off(struct q_sleeper *s)
{
    for (struct q_sleeper **pp = s->e ? &s->e->sleepers : NULL; pp && *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    s->e = NULL;
}

/* E lets the program's socket go, wherever it keeps it (closed if it is
 * still the file it kept). Under qlock. */
static void let_real_go(struct q_ent *e)
{
    close_if(&e->real, e->rdev, e->rino);
    if (e->kid >= 0)
        ccap_keep_drop(e->kid);
    e->kid = -1;
}

static void free_ent(struct q_ent *e)
{
    kick_sleepers(e);
    while (e->nfds > 0)
        drop_alias(e, 0);
    let_real_go(e);
    unhold_ph(e);
    for (struct q_pollref *r = e->pollers; r; r = r->enext)
        r->e = NULL; /* the calls forget it when they end */
    free(e->regs);
    free(e);
}

/* E has no number left and goes: freed now when its wait has ended, else
 * by the thread that runs that wait (its own or the runner: q_finish), the
 * wait cancelled -- a connect failed in place (lose_real) while its wait
 * still runs is not freed under that thread. Under qlock. */
static void drop_ent(struct q_ent *e)
{
    if (e->ws) {
        ccap_rt_wait_cancel(e->wid); /* the thread frees it */
        return;
    }
    unlink_ent(e);
    free_ent(e);
}

/* Forgets number FD of its entry. Under qlock. */
static void forget_locked(int fd)
{
    int i;
    struct q_ent *e = find(fd, &i);

    if (!e) {
        rehome(fd);
        return;
    }
    drop_alias(e, i);
    pthread_cond_broadcast(&qdone);
    if (e->nfds == 0)
        drop_ent(e);
}

/* A descriptor of E's placeholder: ours while it is being swapped out,
 * or one of the program's numbers; -1 when none is left. Under qlock. */
static int ph_of(struct q_ent *e)
{
    if (e->ph >= 0 && is_file(e->ph, e->qdev, e->qino))
        return e->ph;
    for (int i = 0; i < e->nfds; i++)
        if (is_file(e->fds[i], e->qdev, e->qino))
            return e->fds[i];
    return -1;
}

/* The queue's own numbers that are no entry's: the park's listener,
 * filler and spare, the keeper's channel. Returns how many. */
#define Q_SHARED_OWN_MAX (CCAP_PARK_OWN_MAX + CCAP_KEEP_OWN_MAX)
static int shared_own(int fds[Q_SHARED_OWN_MAX])
{
    int n = ccap_park_own(fds);
    return n + ccap_keep_own(fds + n);
}

/* E's own descriptor (its kept socket) and the queue's shared ones,
 * marked (close_own unmarks). Under qlock. */
static void mark_own(struct q_ent *e)
{
    int own[Q_SHARED_OWN_MAX], n = shared_own(own);

    mark(e->real, true);
    for (int i = 0; i < n; i++)
        mark(own[i], true);
}

/* The slot of own descriptor FD: an entry's kept socket (the entry in
 * *OWNER) or a poll call's eventfd (*OWNER NULL); NULL when FD is neither.
 * Under qlock. */
static int *own_slot(int fd, struct q_ent **owner)
{
    *owner = NULL;
    for (struct q_ent *e = q_head; e; e = e->next)
        if (e->real == fd) {
            *owner = e;
            return &e->real;
        }
    for (struct q_poll *p = q_polls; p; p = p->next)
        if (p->efd == fd)
            return &p->efd;
    return NULL;
}

/* E lost the program's socket (the program closed the number, and no other
 * was free to keep it on): its connect cannot go on, and fails as reset. */
static void lose_real(struct q_ent *e)
{
    if (e->state != Q_QUEUED)
        return;
    fail_in_place(e, ECONNRESET);
    ccap_rt_wait_cancel(e->wid); /* the thread ends; the failed entry stays for its numbers */
}

/* The program is about to close number FD, or put another file on it, and
 * FD is one of the queue's own descriptors (a close loop, a /proc/self/fd
 * walk, a close of a number it did not open): ours moves to another number
 * first, and the program's call then frees FD as it asked. No number free:
 * ours goes with the call, forgotten (never closed by us). Under qlock. */
static void rehome(int fd)
{
    struct q_ent *e;
    int *slot = own_slot(fd, &e);

    if (!slot) {
        int moved = ccap_park_rehome(fd);
        if (moved < 0)
            moved = ccap_keep_rehome(fd);
        if (moved >= 0)
            mark(moved, true);
        return;
    }
    bool real = e != NULL;
    if (real && !is_file(fd, e->rdev, e->rino)) {
        mark(fd, false); /* not ours any more: closed behind our back, the number reused */
        *slot = -1;
    } else {
        int nfd = ccap_park_move_elsewhere(fd);
        mark(fd, false);
        mark(nfd, true);
        *slot = nfd;
    }
    if (real && *slot < 0)
        lose_real(e);
}

/* Wakes every poller of E's numbers: the eventfds of the poll calls
 * through the shim that have one of them in their sets, and a write-space
 * wake on the placeholder (any poller waiting for POLLOUT on it looks its
 * number up again, and finds the real socket). */
static void wake(struct q_ent *e)
{
    uint64_t one = 1;
    int v;
    socklen_t l = sizeof v;

    for (struct q_pollref *r = e->pollers; r; r = r->enext)
        if (r->p->efd >= 0 && write(r->p->efd, &one, sizeof one) < 0) {
            /* cannot fail: the counter is far from its maximum */
        }
    int ph = ph_of(e);
    if (ph >= 0 && getsockopt(ph, SOL_SOCKET, SO_SNDBUF, &v, &l) == 0) {
        v /= 2; /* the kernel doubles what it is given */
        setsockopt(ph, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    }
}

/* Before E's numbers are swapped: the placeholder held on the park's spare
 * number for the duration (E->ph, marked as the park's: a raw close of the
 * number waits for qlock; no free descriptor needed, so a process at its
 * RLIMIT_NOFILE gets the wake too), so that wake reaches the pollers still
 * sleeping on it after its last number went (a poll() the shim does not
 * see, or one whose eventfd could not be made). Under qlock. */
static void hold_ph(struct q_ent *e)
{
    int ph = ph_of(e);

    e->ph = ph >= 0 ? ccap_park_hold(ph) : -1;
    if (e->ph < 0 && ph >= 0) { /* no spare (or the program's RLIMIT_NOFILE fell below it): any free number */
        e->ph = fcntl(ph, F_DUPFD_CLOEXEC, 0);
        mark(e->ph, true);
    }
    if (e->ph < 0)
        e->ph = -1;
}

/* The end of hold_ph's hold. Under qlock. */
static void unhold_ph(struct q_ent *e)
{
    if (e->ph >= 0 && ccap_park_unhold(e->ph))
        e->ph = -1;
    close_own(&e->ph);
}

/* E's wait ended without a permit (ERR): the placeholder is reset, so every
 * copy of it reports a failed connect; SO_ERROR says ERR once. The program's
 * socket stays kept for restore. */
static void fail_in_place(struct q_ent *e, int err)
{
    e->state = Q_FAILED;
    e->err = err;
    int ph = ph_of(e);
    if (ph >= 0)
        ccap_park_fail(ph);
    wake(e);
    kick_sleepers(e);
}

/* The signal owner and signal the program set on a socket. */
struct q_owner {
    struct f_owner_ex o; /* o.pid 0: none */
    int sig;             /* 0 or -1: none */
};

static struct q_owner owner_of(int fd)
{
    struct q_owner w = { .sig = fcntl(fd, F_GETSIG) };

    if (fcntl(fd, F_GETOWN_EX, &w.o) != 0)
        w.o.pid = 0;
    return w;
}

static void owner_set(int fd, const struct q_owner *w)
{
    if (w->o.pid != 0)
        fcntl(fd, F_SETOWN_EX, &w->o);
    if (w->sig > 0)
        fcntl(fd, F_SETSIG, w->sig);
}

/* The signal owner and signal the program set on FROM go to TO. */
static void copy_owner(int from, int to)
{
    struct q_owner w = owner_of(from);
    owner_set(to, &w);
}

/* The file status flags (fcntl, ioctl FIONBIO) the program set on the
 * placeholder FROM go to the shim's socket TO, all but O_ASYNC, which TO
 * loses: it gets it back on the program's number (async_on), because the
 * kernel's SIGIO names the number O_ASYNC was set through, and a signal
 * before the socket is there would send the program to the placeholder.
 * *TO_FL: TO's flags when known, else -1 (set only when they differ: a
 * grant's system calls come before its SYN); updated. Returns FROM's
 * flags, -1 when unknown. */
static int copy_flags(int from, int to, int *to_fl)
{
    int fl = fcntl(from, F_GETFL), cur = *to_fl >= 0 ? *to_fl : fcntl(to, F_GETFL);

    if (fl < 0 || cur < 0) {
        *to_fl = -1;
        return fl;
    }
    int want = fl & ~O_ASYNC;
    *to_fl = want == cur || fcntl(to, F_SETFL, want) == 0 ? want : -1;
    return fl;
}

/* The signal FD's connection would have raised, had FD been signal-driven
 * when it came up: F_SETSIG's signal (SIGIO without one) with FD and
 * POLL_OUT's band, when FD is connected and its owner is this process or
 * one of its threads. Its si_code is SI_QUEUE, not the kernel's POLL_OUT:
 * only the process's main thread may queue that one to itself, and this
 * runs in a thread of the shim's. */
static void sigio_connected(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    struct f_owner_ex o;
    int sig = fcntl(fd, F_GETSIG);
    pid_t me = getpid();

    if (sig < 0 || fcntl(fd, F_GETOWN_EX, &o) != 0 || poll(&p, 1, 0) != 1 ||
        (p.revents & (POLLOUT | POLLERR)) != POLLOUT)
        return;
    siginfo_t si = { .si_signo = sig ? sig : SIGIO, .si_code = SI_QUEUE };
    si.si_fd = fd;
    si.si_band = POLLOUT | POLLWRNORM | POLLWRBAND;
    if (o.type == F_OWNER_PID && o.pid == me)
        syscall(SYS_rt_sigqueueinfo, me, si.si_signo, &si);
    else if (o.type == F_OWNER_TID && o.pid > 0)
        syscall(SYS_rt_tgsigqueueinfo, me, o.pid, si.si_signo, &si); /* ESRCH: a thread of another process */
}

/* The program's socket, now on its number FD, gets FL (the placeholder's
 * flags) when they have O_ASYNC: set through FD, so that the kernel's
 * signals name FD. After a grant's connect (CONNECTED), a connection that
 * came up before (on loopback, inside the shim's connect()) is signalled
 * here; one still on its way is signalled by the kernel. */
static void async_on(int fd, int fl, int *real_fl, bool connected)
{
    if (fl < 0 || !(fl & O_ASYNC) || fcntl(fd, F_SETFL, fl) != 0)
        return;
    *real_fl = fl;
    if (connected)
        sigio_connected(fd);
}

static void claim_number(int fd);

/* The program's socket on a number of ours (E->real), taken back from the
 * keeper if it is there. Returns 0, or -errno when it cannot be had
 * (runtime/keep.h: -EMFILE no number was free for it). Under qlock. */
static int real_here(struct q_ent *e)
{
    if (e->kid < 0)
        return e->real >= 0 ? 0 : -EBADF;
    int fd = ccap_keep_take(e->kid);
    e->kid = -1;
    if (fd < 0)
        return fd;
    claim_number(fd);
    mark(fd, true);
    e->real = fd;
    return 0;
}

/* E's connect ended without a permit (it failed, or the program shut it
 * down) and the program goes on with the descriptor (connect() again,
 * shutdown()): its own socket -- its address, its options, the flags set
 * meanwhile -- goes back on every number still the placeholder's,
 * unconnected, as a slow connect that failed or was shut down leaves it;
 * pollers look again. E keeps no number. Under qlock. */
static void restore(struct q_ent *e)
{
    struct q_reg r[Q_ALIASES * Q_REGS];
    int nr = 0, k;

    real_here(e); /* none: the placeholder stays, failed */
    hold_ph(e);
    while (e->nfds > 0) {
        int fd = e->fds[0];
        if (e->real >= 0 && is_file(e->real, e->rdev, e->rino) && is_file(fd, e->qdev, e->qino)) {
            int pfl = copy_flags(fd, e->real, &e->rfl);
            copy_owner(fd, e->real);
            if (swap_regs(e, e->real, fd, r + nr, &k) == 0)
                async_on(fd, pfl, &e->rfl, false);
            nr += k;
        }
        drop_alias(e, 0);
    }
    close_if(&e->real, e->rdev, e->rino); /* on the program's numbers now: see swap_regs */
    regs_put(r, nr);
    wake(e);
    unhold_ph(e);
}

/* Starts E's real connect without waiting for it. A blocking socket (a
 * connect a signal interrupted, queued since) is non-blocking for the call
 * only: its connection then goes on as a real interrupted one's does.
 * Returns 0 or -errno. Under qlock. */
static int start_connect(struct q_ent *e)
{
    int fl = e->rfl >= 0 ? e->rfl : fcntl(e->real, F_GETFL), rc;
    bool blocking = fl >= 0 && !(fl & O_NONBLOCK);

    if (blocking)
        fcntl(e->real, F_SETFL, fl | O_NONBLOCK);
    rc = connect(e->real, (struct sockaddr *)&e->sa, e->salen) == 0 || errno == EINPROGRESS ? 0 : -errno;
    if (blocking)
        fcntl(e->real, F_SETFL, fl);
    return rc;
}

/* The permit came: the real connect starts, then the real socket goes on
 * every number still the placeholder's, each joining the permit. Returns
 * the permit when nobody took it (for the caller to give back), else NULL.
 * Under qlock. */
static struct ccap_permit *grant(struct q_ent *e)
{
    struct ccap_permit *p = e->permit;
    int rc;

    for (int i = e->nfds - 1; i >= 0; i--)
        if (!is_file(e->fds[i], e->qdev, e->qino))
            drop_alias(e, i);
    if (e->nfds == 0)
        return p;
    if ((rc = real_here(e)) < 0 || !is_file(e->real, e->rdev, e->rino)) { /* lost, or closed behind our back */
        close_if(&e->real, e->rdev, e->rino);
        fail_in_place(e, rc == -EMFILE ? EMFILE : ECONNRESET);
        return p;
    }
    int pfl = copy_flags(e->fds[0], e->real, &e->rfl); /* without O_ASYNC: no SIGIO before the swap */
    if ((rc = start_connect(e)) < 0) {
        fail_in_place(e, -rc); /* EADDRNOTAVAIL, ENETUNREACH...: the socket keeps no error of it */
        return p;
    }
    copy_owner(e->fds[0], e->real); /* SIGURG's too: no data before the program has the socket */
    bool taken = false;
    struct q_reg r[Q_ALIASES * Q_REGS];
    int nr = 0, k;
    hold_ph(e);
    while (e->nfds > 0) {
        int fd = e->fds[0];
        bool on = swap_regs(e, e->real, fd, r + nr, &k) == 0;
        if (on)
            async_on(fd, pfl, &e->rfl, true);
        if (on && (taken ? ccap_ptab_attach(fd, p) : ccap_rt_permit_attach(fd, p)) == 0)
            taken = true;
        nr += k;
        drop_alias(e, 0);
    }
    close_own(&e->real); /* on the program's numbers now: see swap_regs */
    regs_put(r, nr);
    if (taken)
        p = NULL;
    wake(e);
    unhold_ph(e);
    kick_sleepers(e);
    return p;
}

/* E's wait ended with RC (1 granted, -errno): the grant's swap or the
 * failure, in the thread of the shim's that ran it. */
static void q_finish(struct q_ent *e, int rc)
{
    struct ccap_permit *give_back = NULL;

    pthread_mutex_lock(&qlock);
    e->ws = NULL;
    if (rc == 1) {
        give_back = grant(e);
    } else {
        if (e->nfds > 0 && rc != -ECANCELED)
            fail_in_place(e, -rc);
        free(e->permit); /* never granted: its ticket went back with the wait */
    }
    e->permit = NULL;
    if (e->state != Q_FAILED || e->nfds == 0) {
        unlink_ent(e);
        free_ent(e);
    }
    pthread_cond_broadcast(&qdone);
    pthread_mutex_unlock(&qlock);
    ccap_rt_release(give_back);
}

/* A queued connect's own thread: its wait to its end. */
static void *q_thread(void *arg)
{
    struct q_ent *e = arg;

    q_finish(e, ccap_rt_wait_resume(e->ws, 0)); /* a thread of the shim's: no signal, no cancel */
    atomic_fetch_sub(&q_threads, 1);
    return NULL;
}

static void q_ran(struct ccap_qrun_item *it, int rc)
{
    q_finish((struct q_ent *)((char *)it - offsetof(struct q_ent, run)), rc);
}

/* E's wait (of FD's connect) goes to a thread: its own while fewer than
 * Q_OWN_THREADS run, else -- or when its own cannot be had -- the runner's.
 * False when neither can be had. Under qlock. */
static bool hand_over(struct q_ent *e, int fd)
{
    bool runner = ccap_qrun_start(); /* while threads can be had: it is there when none can */

    if (atomic_fetch_add(&q_threads, 1) < Q_OWN_THREADS) {
        if (ccap_rt.hooks.spawn(q_thread, e))
            return true;
        if (runner && !q_told)
            ccap_log(CCAP_LOG_WARN,
                     "no thread for the queued connect of descriptor %d (%s): it waits in the queue's runner "
                     "thread, with every other such connect of this process (said once)",
                     fd, strerror(EAGAIN));
        q_told = true;
    }
    atomic_fetch_sub(&q_threads, 1);
    e->run.ws = e->ws;
    e->run.done = q_ran;
    return runner && ccap_qrun_add(&e->run);
}

/* The wait's liveness check: some number still refers to the placeholder. */
static bool alive(void *arg)
{
    struct q_ent *e = arg;
    bool yes;

    pthread_mutex_lock(&qlock);
    for (int i = e->nfds - 1; i >= 0; i--)
        if (!is_file(e->fds[i], e->qdev, e->qino))
            drop_alias(e, i);
    yes = e->nfds > 0;
    pthread_mutex_unlock(&qlock);
    return yes;
}

static int socket_family(int fd)
{
    int v = 0;
    socklen_t l = sizeof v;
    return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) == 0 ? v : -1;
}

/* A new entry for FD, its placeholder made (*PH, ours), nothing swapped
 * yet. */
static struct q_ent *new_ent(int fd, const struct sockaddr *sa, socklen_t len, int lifetime_ms, int *ph, int *err)
{
    struct q_ent *e = calloc(1, sizeof *e);
    struct stat st;

    *err = -ENOMEM;
    *ph = -1;
    if (!e || len > sizeof e->sa) {
        free(e);
        return NULL;
    }
    e->real = e->kid = e->ph = e->rfl = -1;
    e->family = socket_family(fd);
    *ph = ccap_park_open(e->family, lifetime_ms);
    if (*ph < 0 || fstat(*ph, &st) != 0) {
        *err = *ph < 0 ? *ph : -errno;
        if (*ph >= 0)
            close(*ph);
        *ph = -1;
        free_ent(e);
        return NULL;
    }
    e->qdev = st.st_dev;
    e->qino = st.st_ino;
    memcpy(&e->sa, sa, len);
    e->salen = len;
    return e;
}

/* Whether Q_OWN_THREADS numbers of the program's are a small share (1% at
 * most) of what its soft RLIMIT_NOFILE allows. */
static bool numbers_to_spare(void)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
           (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)100 * Q_OWN_THREADS);
}

/* Keeps the program's socket, on FD now, aside as E's (E->real or E->kid).
 * One of the first Q_OWN_THREADS queued at once (a thread of its own,
 * whose grant connects with no hop first): above the program's soft
 * RLIMIT_NOFILE where the hard one leaves room (runtime/fdroom.h), else on
 * a number of ours while those are few to the program's limit. The others,
 * and those where the program's table is small: in the keeper's table
 * (runtime/keep.h), where it takes none of the program's numbers -- an
 * event loop with thousands queued, or a program near a limit of 64, keeps
 * one descriptor per connect. Where there is no keeper (yet): in the room,
 * else on a number of ours after all. Returns 0 or -errno. Under qlock. */
static int keep_aside(struct q_ent *e, int fd)
{
    bool few = atomic_load(&q_threads) < Q_OWN_THREADS;
    int err;

    e->real = e->kid = -1;
    if (few && (e->real = ccap_fdroom_dup(fd)) >= 0)
        return 0;
    e->real = -1;
    if ((!few || !numbers_to_spare()) && (e->kid = ccap_keep_put(fd)) >= 0)
        return 0;
    e->kid = -1;
    if ((e->real = ccap_park_move_elsewhere(fd)) >= 0) /* the room, else a number of ours */
        return 0;
    err = errno;
    e->real = -1;
    if ((e->kid = ccap_keep_put(fd)) >= 0)
        return 0;
    e->kid = -1;
    return -err;
}

/* Puts the placeholder PH on FD, the program's socket kept aside as E's,
 * FD's epoll registrations moved over and recorded, and the flags and
 * signal owner the program set on its socket on the placeholder. PH is
 * closed (FD holds the placeholder now). Returns 0 or -errno, nothing
 * changed. Under qlock. */
static int park_fd(struct q_ent *e, int fd, int ph)
{
    struct q_reg r[Q_REGS];
    struct stat st;
    int n = 0, rc;

    if (fstat(fd, &st) != 0) { /* first: close_if closes only a descriptor whose identity it knows */
        close(ph);
        return -errno;
    }
    e->rdev = st.st_dev;
    e->rino = st.st_ino;
    e->rfl = fcntl(fd, F_GETFL); /* O_NONBLOCK and the rest, as the program set them (O_ASYNC through FD) */
    struct q_owner own = owner_of(fd);
    if ((rc = keep_aside(e, fd)) < 0) {
        close(ph);
        return rc;
    }
    rc = swap_regs(NULL, ph, fd, r, &n);
    close(ph);
    regs_put(r, n);
    if (rc < 0) {
        let_real_go(e); /* the program's socket stays on FD alone: its close then ends it */
        return rc;
    }
    for (int i = 0; i < n; i++)
        regs_note(e, EPOLL_CTL_ADD, &r[i]);
    if (e->rfl >= 0)
        fcntl(fd, F_SETFL, e->rfl);
    owner_set(fd, &own);
    return 0;
}

/* Enqueue undone (no thread): the program's socket back on FD. */
static void unpark_fd(struct q_ent *e, int fd)
{
    struct q_reg r[Q_REGS];
    int n = 0;

    real_here(e);
    swap_regs(e, e->real, fd, r, &n);
    close_own(&e->real);
    regs_put(r, n);
}

int ccap_q_enqueue(int fd, const struct sockaddr *sa, socklen_t len, struct ccap_permit *p, struct ccap_wait *ws,
                   int lifetime_ms)
{
    int rc, ph;
    struct q_ent *e = new_ent(fd, sa, len, lifetime_ms, &ph, &rc);

    if (!e)
        return rc;
    pthread_mutex_lock(&qlock);
    if ((rc = park_fd(e, fd, ph)) < 0) {
        pthread_mutex_unlock(&qlock);
        free_ent(e);
        return rc;
    }
    mark_own(e);
    if (!add_alias(e, fd)) {
        unpark_fd(e, fd);
        pthread_mutex_unlock(&qlock);
        free_ent(e);
        return -ENOMEM;
    }
    e->ws = ws;
    e->wid = ccap_rt_wait_id(ws);
    e->permit = p;
    ccap_rt_wait_watch(ws, alive, e);
    link_ent(e);
    if (!ccap_rt.hooks.spawn || !hand_over(e, fd)) {
        unpark_fd(e, fd); /* undone: the caller waits in its own thread */
        ccap_rt_wait_watch(ws, NULL, NULL);
        unlink_ent(e);
        e->permit = NULL;
        free_ent(e);
        pthread_mutex_unlock(&qlock);
        return -EAGAIN;
    }
    pthread_mutex_unlock(&qlock);
    return 0;
}

/* The thread of S was cancelled while it waited in connect(): off its
 * entry's list (the queued connect goes on, as a real connect whose thread
 * was cancelled goes on), before it unwinds into the program. */
static void sleeper_cancelled(void *arg)
{
    struct q_sleeper *s = arg;

    ccap_nap_unwinding();
    pthread_mutex_lock(&qlock);
    sleeper_off(s);
    pthread_mutex_unlock(&qlock);
    ccap_nap_destroy(&s->nap);
    ccap_nap_unwound();
}

/* A socket call on the program's socket while it is kept aside: 's'
 * setsockopt(LEVEL, NAME, IN, INLEN), 'g' getsockopt(LEVEL, NAME, OUT,
 * LEN), 'n' getsockname(SA, LEN). */
struct real_op {
    int op;
    int level, name;
    const void *in;
    socklen_t inlen;
    void *out;
    socklen_t *len;
    struct sockaddr *sa;
};

/* O on descriptor FD (a number of ours, or the keeper's: raw system calls,
 * see runtime/keep.h): 0 or -errno. */
static int real_op_run(int fd, void *arg)
{
    struct real_op *o = arg;
    long rc = o->op == 's'   ? syscall(SYS_setsockopt, fd, o->level, o->name, o->in, o->inlen)
              : o->op == 'g' ? syscall(SYS_getsockopt, fd, o->level, o->name, o->out, o->len)
                             : syscall(SYS_getsockname, fd, o->sa, o->len);
    return rc == 0 ? 0 : -errno;
}

/* O on E's kept socket, wherever it is kept: 0 or -errno (-EBADF: none).
 * Under qlock. */
static int on_real(struct q_ent *e, struct real_op *o)
{
    if (e->kid >= 0)
        return ccap_keep_call(e->kid, real_op_run, o);
    return e->real >= 0 ? real_op_run(e->real, o) : -EBADF;
}

static bool has_real(const struct q_ent *e)
{
    return e->real >= 0 || e->kid >= 0;
}

/* The end of a wait on queued FD's entry E bounded by the real socket's
 * SO_SNDTIMEO (monotonic ms), or -1: none. Under qlock. */
static long long sndtimeo_end(struct q_ent *e)
{
    struct timeval tv = { 0, 0 };
    socklen_t l = sizeof tv;
    struct real_op o = { .op = 'g', .level = SOL_SOCKET, .name = SO_SNDTIMEO, .out = &tv, .len = &l };
    if (on_real(e, &o) != 0 || (tv.tv_sec <= 0 && tv.tv_usec <= 0))
        return -1;
    return ccap_now_ms() + tv.tv_sec * 1000LL + tv.tv_usec / 1000;
}

/* connect() again on blocking FD while it is queued: waits until its wait
 * ended, as a real blocking connect waits (signals and cancellation as
 * connect()'s, runtime/nap.h), until FD is gone, or until the socket's
 * SO_SNDTIMEO passes. Returns 0, -EINTR, or -EALREADY (SO_SNDTIMEO). */
static int sleep_on(int fd)
{
    struct q_sleeper s = { .e = NULL };
    volatile int rc = 0;         /* (read after the loop) */
    volatile long long end = -2; /* read from the entry at the first look */

    ccap_nap_init(&s.nap);
    if (ccap_nap_use_fd(&s.nap) < 0)
        ccap_log(CCAP_LOG_DEBUG, "no timerfd for a connect() on queued descriptor %d: no signal ends its wait", fd);
    CCAP_CLEANUP_PUSH(sleeper_cancelled, &s);
    for (;;) {
        pthread_mutex_lock(&qlock);
        struct q_ent *e = lookup(fd);
        if (!e || e->state != Q_QUEUED) {
            pthread_mutex_unlock(&qlock);
            break;
        }
        if (end == -2)
            end = sndtimeo_end(e);
        long long t = ccap_now_ms(), until = t + Q_RECHECK_MS;
        if (end >= 0 && t >= end) {
            pthread_mutex_unlock(&qlock);
            rc = -EALREADY;
            break;
        }
        if (end >= 0 && end < until)
            until = end;
        s.e = e;
        s.next = e->sleepers;
        e->sleepers = &s;
        pthread_mutex_unlock(&qlock);
        int r = ccap_nap_sleep(&s.nap, until);
        pthread_mutex_lock(&qlock);
        sleeper_off(&s);
        pthread_mutex_unlock(&qlock);
        if (r == -EINTR) {
            rc = -EINTR;
            break;
        }
    }
    CCAP_CLEANUP_POP(0);
    ccap_nap_destroy(&s.nap);
    return rc;
}

static bool blocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && !(fl & O_NONBLOCK);
}

int ccap_q_connect(int fd)
{
    int rc = 0, v;
    socklen_t l = sizeof v;

    if (foreign())
        return 0;
    pthread_mutex_lock(&qlock);
    struct q_ent *e = lookup(fd);
    if (e && e->state == Q_QUEUED && blocking(fd)) {
        pthread_mutex_unlock(&qlock);
        if ((rc = sleep_on(fd)) < 0)
            return rc;
        pthread_mutex_lock(&qlock);
        e = lookup(fd);
    }
    if (e && e->state == Q_QUEUED) {
        rc = -EALREADY;
    } else if (e && e->err) {
        rc = -e->err; /* reported once, as the kernel reports a connect's error */
        e->err = 0;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &l); /* the reset's own error is consumed with it */
    } else if (e) {
        restore(e); /* a failed socket connected again: the program's own socket does */
        drop_ent(e);
    }
    pthread_mutex_unlock(&qlock);
    return rc;
}

int ccap_q_shutdown(int fd)
{
    int done = 0;

    if (foreign())
        return 0;
    pthread_mutex_lock(&qlock);
    struct q_ent *e = lookup(fd);
    if (e) {
        done = e->state == Q_QUEUED; /* a connecting socket shut down: disconnected, 0 */
        restore(e);
        drop_ent(e); /* (a queued one's wait runs: its thread frees it) */
    }
    pthread_mutex_unlock(&qlock);
    return done;
}

void ccap_q_forget(int fd)
{
    if (foreign())
        return;
    pthread_mutex_lock(&qlock);
    forget_locked(fd);
    pthread_mutex_unlock(&qlock);
}

static int cmp_uint(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

/* The queue's own numbers in [LO, HI], sorted, into *OUT (malloc'd; NULL
 * when none). Returns how many. Under qlock. */
static size_t own_in(unsigned lo, unsigned hi, unsigned **out)
{
    size_t n = 0, cap = Q_SHARED_OWN_MAX;
    int park[Q_SHARED_OWN_MAX], np = shared_own(park);

    for (struct q_ent *e = q_head; e; e = e->next)
        cap++;
    for (struct q_poll *p = q_polls; p; p = p->next)
        cap++;
    unsigned *v = malloc(cap * sizeof *v);
    *out = v;
    if (!v)
        return 0;
    for (struct q_ent *e = q_head; e; e = e->next)
        if (e->real >= 0 && (unsigned)e->real >= lo && (unsigned)e->real <= hi)
            v[n++] = (unsigned)e->real;
    for (struct q_poll *p = q_polls; p; p = p->next)
        if (p->efd >= 0 && (unsigned)p->efd >= lo && (unsigned)p->efd <= hi)
            v[n++] = (unsigned)p->efd;
    for (int i = 0; i < np; i++)
        if ((unsigned)park[i] >= lo && (unsigned)park[i] <= hi)
            v[n++] = (unsigned)park[i];
    qsort(v, n, sizeof *v, cmp_uint);
    return n;
}

int ccap_q_close_range(unsigned lo, unsigned hi, int flags, ccap_close_range_fn *closer)
{
    unsigned *own = NULL;
    size_t n = 0;
    int rc = 0;

    if (foreign())
        return closer(lo, hi, flags);
    pthread_mutex_lock(&qlock);
    for (struct q_ent *e = q_head, *next; e; e = next) {
        next = e->next;
        for (int i = e->nfds - 1; i >= 0; i--)
            if ((unsigned)e->fds[i] >= lo && (unsigned)e->fds[i] <= hi)
                forget_locked(e->fds[i]);
    }
    if (lo <= hi)
        n = own_in(lo, hi, &own);
    if (n == 0) {
        rc = closer(lo, hi, flags);
    } else {
        unsigned from = lo;
        for (size_t i = 0; i < n && rc == 0; i++) {
            if (own[i] > from)
                rc = closer(from, own[i] - 1, flags);
            from = own[i] + 1;
        }
        if (rc == 0 && own[n - 1] < hi)
            rc = closer(from, hi, flags);
    }
    pthread_mutex_unlock(&qlock);
    free(own);
    return rc;
}

void ccap_q_dup(int oldfd, int newfd)
{
    if (foreign())
        return;
    pthread_mutex_lock(&qlock);
    forget_locked(newfd);
    struct q_ent *e = lookup(oldfd);
    if (e && is_file(newfd, e->qdev, e->qino))
        add_alias(e, newfd);
    pthread_mutex_unlock(&qlock);
}

int ccap_q_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    int rc;

    if (foreign())
        return setsockopt(fd, level, name, val, len) == 0 ? 0 : -errno;
    pthread_mutex_lock(&qlock);
    struct q_ent *e = lookup(fd);
    if (e && has_real(e)) {
        struct real_op o = { .op = 's', .level = level, .name = name, .in = val, .inlen = len };
        rc = on_real(e, &o);
        setsockopt(fd, level, name, val, len); /* the placeholder answers the same meanwhile */
    } else {
        rc = setsockopt(fd, level, name, val, len) == 0 ? 0 : -errno;
    }
    pthread_mutex_unlock(&qlock);
    return rc;
}

int ccap_q_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    int rc;

    if (foreign())
        return getsockopt(fd, level, name, val, len) == 0 ? 0 : -errno;
    pthread_mutex_lock(&qlock);
    struct q_ent *e = lookup(fd);
    bool so_error = level == SOL_SOCKET && name == SO_ERROR;
    if (e && e->state == Q_FAILED && so_error && e->err && val && len && *len >= sizeof(int)) {
        int v;
        socklen_t l = sizeof v;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &l); /* consumed: POLLERR ends, as for a real one */
        memcpy(val, &e->err, sizeof(int));
        *len = sizeof(int);
        e->err = 0;
        pthread_mutex_unlock(&qlock);
        return 0;
    }
    if (e && has_real(e) && !so_error && !(level == IPPROTO_TCP && name == TCP_INFO)) {
        struct real_op o = { .op = 'g', .level = level, .name = name, .out = val, .len = len };
        rc = on_real(e, &o); /* the options the program set, before and while queued */
    } else {
        rc = getsockopt(fd, level, name, val, len) == 0 ? 0 : -errno;
    }
    pthread_mutex_unlock(&qlock);
    return rc;
}

int ccap_q_getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
    int rc;

    if (foreign())
        return getsockname(fd, sa, len) == 0 ? 0 : -errno;
    pthread_mutex_lock(&qlock);
    struct q_ent *e = lookup(fd);
    if (e && has_real(e)) {
        struct real_op o = { .op = 'n', .sa = sa, .len = len };
        rc = on_real(e, &o);
    } else {
        rc = getsockname(fd, sa, len) == 0 ? 0 : -errno;
    }
    pthread_mutex_unlock(&qlock);
    return rc;
}

int ccap_q_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    int rc;

    if (foreign())
        return epoll_ctl(epfd, op, fd, ev) == 0 ? 0 : -errno;
    pthread_mutex_lock(&qlock);
    rc = epoll_ctl(epfd, op, fd, ev) == 0 ? 0 : -errno;
    struct q_ent *e = rc == 0 ? lookup(fd) : NULL;
    if (e) {
        struct q_reg r = { fd, epfd, { 0 } };
        if (ev)
            r.ev = *ev;
        regs_note(e, op, &r); /* the swap's record: no scan of every set then */
    }
    pthread_mutex_unlock(&qlock);
    return rc;
}

/* Number FD was free (the system just gave it to the queue): whatever the
 * queue remembered under it was closed behind its back, and goes. Under
 * qlock. */
static void claim_number(int fd)
{
    const unsigned w = 8 * sizeof(unsigned long);
    struct q_ent *x;
    int i, *slot;

    if (fd < 0 || fd >= CCAP_Q_MAX_FD || !(atomic_load(&ccap_q_bits[(unsigned)fd / w]) >> ((unsigned)fd % w) & 1))
        return;
    if (find(fd, &i)) {
        forget_locked(fd);
    } else if ((slot = own_slot(fd, &x))) {
        *slot = -1;
        if (x)
            lose_real(x);
    }
    mark(fd, false);
}

/* P's eventfd, made (P on q_polls, its number marked as the queue's).
 * Returns 0 or -1. Under qlock. */
static int poll_efd(struct q_poll *p)
{
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

    if (fd < 0)
        return -1;
    claim_number(fd);
    p->efd = fd;
    mark(fd, true);
    p->next = q_polls;
    q_polls = p;
    p->on = true;
    return 0;
}

/* Poll call P joins the queued connects among FDS (N): their swaps write
 * its eventfd, made at the first (*BLIND when it cannot be, or no memory:
 * the call then looks again every Q_POLL_BLIND_MS), its number into *EFD
 * (-1: none). Returns the call's list, NULL when none. None of FDS marked
 * (the marks' false is definite): nothing, without qlock -- a poll that a
 * swap woke polls the real socket again at once, not after the queue's
 * thread has finished with it. */
static struct q_pollref *poll_join(struct q_poll *p, const struct pollfd *fds, nfds_t n, int *efd, bool *blind)
{
    struct q_pollref *refs = NULL, *r;
    bool asked = false;
    nfds_t i = 0;

    while (i < n && !ccap_q_maybe(fds[i].fd))
        i++;
    if (i == n)
        return NULL;
    pthread_mutex_lock(&qlock);
    for (; i < n; i++) {
        if (!ccap_q_maybe(fds[i].fd))
            continue;
        if (!asked && (asked = true, foreign()))
            break;
        struct q_ent *e = lookup(fds[i].fd);
        if (!e || e->state != Q_QUEUED)
            continue;
        if ((p->efd < 0 && poll_efd(p) < 0) || !(r = malloc(sizeof *r))) {
            *blind = true;
            continue;
        }
        *r = (struct q_pollref){ .p = p, .e = e, .enext = e->pollers, .cnext = refs };
        e->pollers = refs = r;
    }
    *efd = p->efd; /* (a program's close of it moves it: rehome) */
    pthread_mutex_unlock(&qlock);
    return refs;
}

/* P's call leaves the connects it joined (REFS) and its eventfd goes
 * (closed by a system call of its own: the program's close, which the
 * shim interposes, would look for it in the queue). */
static void poll_leave(struct q_poll *p, struct q_pollref *refs)
{
    if (!p->on && !refs)
        return;
    pthread_mutex_lock(&qlock);
    while (refs) {
        struct q_pollref *r = refs, **pp;
        refs = r->cnext;
        for (pp = r->e ? &r->e->pollers : NULL; pp && *pp != r; pp = &(*pp)->enext) {
        }
        if (pp)
            *pp = r->enext;
        free(r);
    }
    for (struct q_poll **pp = &q_polls; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    if (p->efd >= 0) {
        mark(p->efd, false);
        syscall(SYS_close, p->efd);
    }
    p->efd = -1;
    pthread_mutex_unlock(&qlock);
}

/* A poll call through the shim: its set with its eventfd after the
 * program's (ALL), and what it joined. The cleanup of a thread cancelled
 * in the poll (a cancellation point) ends it: P is on q_polls and in the
 * entries' lists. */
struct q_call {
    struct q_poll p;
    struct q_pollref *refs;
    struct pollfd all[];
};

static void poll_cancelled(void *arg)
{
    struct q_call *c = arg;

    poll_leave(&c->p, c->refs);
    free(c);
}

/* The program's poll of C's set (N, with its eventfd), as cancellable as
 * the program's own. Returns what REAL returns. */
static int poll_real(struct q_call *c, nfds_t n, const struct timespec *tmo, const sigset_t *mask,
                     ccap_ppoll_fn *real)
{
    int r;

    CCAP_CLEANUP_PUSH(poll_cancelled, c);
    r = real(c->all, n, tmo, mask);
    CCAP_CLEANUP_POP(0);
    return r;
}

int ccap_q_poll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask, ccap_ppoll_fn *real)
{
    long long deadline = tmo ? ccap_now_ms() + tmo->tv_sec * 1000LL + (tmo->tv_nsec + 999999) / 1000000 : -1;
    struct q_call *c = malloc(sizeof *c + (n + 1) * sizeof *c->all);
    struct pollfd *all = c ? c->all : NULL;
    int r0;

    if (!c)
        return (r0 = real(fds, n, tmo, mask)) < 0 ? -errno : r0; /* no wake-up at a swap then */
    for (;;) {
        bool blind = false;
        int efd = -1;
        c->p = (struct q_poll){ .efd = -1 };
        c->refs = poll_join(&c->p, fds, n, &efd, &blind);
        int k = efd >= 0, r;
        memcpy(all, fds, n * sizeof *fds);
        all[n] = (struct pollfd){ .fd = efd, .events = POLLIN };
        struct timespec left, *lp = NULL;
        long long ms = deadline >= 0 ? deadline - ccap_now_ms() : -1;
        if (ms < 0 && deadline >= 0)
            ms = 0;
        if (blind && (ms < 0 || ms > Q_POLL_BLIND_MS))
            ms = Q_POLL_BLIND_MS; /* a swap may find no way to wake this poll: look again soon */
        if (ms >= 0) {
            left = (struct timespec){ ms / 1000, (ms % 1000) * 1000000L };
            lp = &left;
        }
        r = poll_real(c, n + (nfds_t)k, lp, mask, real);
        int e = errno, mine = r - (r > 0 && k && all[n].revents != 0);
        poll_leave(&c->p, c->refs);
        if (r < 0) {
            free(c);
            return -e;
        }
        if (r == 0 && blind && (deadline < 0 || ccap_now_ms() < deadline))
            continue;
        if (mine > 0 || r == 0 || k == 0) {
            for (nfds_t i = 0; i < n; i++)
                fds[i].revents = all[i].revents;
            free(c);
            return mine;
        }
        /* only a swap woke it: poll again, on the real sockets now */
    }
}

/* select's sets as poll's events: the kernel's own mapping (POLLIN_SET,
 * POLLOUT_SET, POLLEX_SET in fs/select.c). */
#define SEL_IN (POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR)
#define SEL_OUT (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR)
#define SEL_EX POLLPRI

/* ccap_q_poll of select's set P (N, malloc'd), which a cancellation there
 * frees (select is a cancellation point). */
static int select_poll(struct pollfd *p, nfds_t n, const struct timespec *tmo, const sigset_t *mask,
                       ccap_ppoll_fn *real)
{
    int r;

    CCAP_CLEANUP_PUSH(free, p);
    r = ccap_q_poll(p, n, tmo, mask, real);
    CCAP_CLEANUP_POP(0);
    return r;
}

int ccap_q_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timespec *tmo, const sigset_t *mask,
                  ccap_ppoll_fn *real)
{
    nfds = nfds < FD_SETSIZE ? nfds : FD_SETSIZE; /* an fd_set holds no more */
    struct pollfd *p = malloc((size_t)(nfds > 0 ? nfds : 1) * sizeof *p);
    nfds_t n = 0;
    int r, count = 0;
    long long t0 = ccap_now_ms();

    if (!p)
        return -ENOMEM;
    for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++) {
        short ev = (rd && FD_ISSET(fd, rd) ? POLLIN : 0) | (wr && FD_ISSET(fd, wr) ? POLLOUT : 0) |
                   (ex && FD_ISSET(fd, ex) ? POLLPRI : 0);
        if (ev)
            p[n++] = (struct pollfd){ .fd = fd, .events = ev };
    }
    r = select_poll(p, n, tmo, mask, real);
    if (r >= 0) {
        for (nfds_t i = 0; i < n; i++) {
            int fd = p[i].fd;
            short re = p[i].revents;
            if (re & POLLNVAL) {
                r = -EBADF;
                break;
            }
            bool a = rd && FD_ISSET(fd, rd) && (re & SEL_IN), b = wr && FD_ISSET(fd, wr) && (re & SEL_OUT),
                 c = ex && FD_ISSET(fd, ex) && (re & SEL_EX);
            count += a + b + c;
            if (rd && !a)
                FD_CLR(fd, rd);
            if (wr && !b)
                FD_CLR(fd, wr);
            if (ex && !c)
                FD_CLR(fd, ex);
        }
    }
    free(p);
    if (r < 0)
        return r;
    if (tmo) {
        long long left = tmo->tv_sec * 1000LL + tmo->tv_nsec / 1000000 - (ccap_now_ms() - t0);
        left = left < 0 ? 0 : left;
        *tmo = (struct timespec){ left / 1000, (left % 1000) * 1000000L };
    }
    return count;
}

void ccap_q_exec_pre(void)
{
    if (foreign())
        return;
    pthread_mutex_lock(&qlock);
    for (struct q_ent *e = q_head; e; e = e->next) {
        bool survives = false;
        for (int i = 0; i < e->nfds; i++) {
            int fl = fcntl(e->fds[i], F_GETFD);
            survives |= fl >= 0 && !(fl & FD_CLOEXEC) && is_file(e->fds[i], e->qdev, e->qino);
        }
        if (survives && e->state == Q_QUEUED) {
            int ph = ph_of(e);
            if (ph >= 0)
                ccap_park_fail(ph); /* the new image sees the connect reset; no ticket outlives this one */
            ccap_rt_wait_cancel(e->wid);
        }
    }
    pthread_mutex_unlock(&qlock);
}

void ccap_q_fork_prepare(void)
{
    pthread_mutex_lock(&qlock);
    ccap_keep_fork_prepare();   /* (taken inside qlock, as park_fd takes it) */
    ccap_fdroom_fork_prepare(); /* (inside both: the keeper's start moves its channel high) */
}

void ccap_q_fork_parent(void)
{
    ccap_fdroom_fork_parent();
    ccap_keep_fork_parent();
    pthread_mutex_unlock(&qlock);
}

void ccap_q_fork_child(void)
{
    ccap_fdroom_fork_child();
    ccap_keep_fork_child(); /* first: the entries' drops below must not reach the parent's keeper */
    pthread_mutex_init(&qlock, NULL);
    pthread_cond_init(&qdone, NULL);
    for (struct q_ent *e = q_head, *next; e; e = next) {
        next = e->next;
        for (int i = 0; i < e->nfds; i++) {
            int f = e->state == Q_QUEUED && is_file(e->fds[i], e->qdev, e->qino) ? ccap_park_failed(e->family) : -1;
            if (f >= 0) {
                dup3(f, e->fds[i], fcntl(e->fds[i], F_GETFD) & FD_CLOEXEC ? O_CLOEXEC : 0);
                close(f);
            }
        }
        e->permit = NULL;   /* the parent's */
        e->sleepers = NULL; /* threads of the parent's */
        free_ent(e);
    }
    q_head = NULL;
    for (struct q_poll *p = q_polls; p; p = p->next)
        if (p->efd >= 0)
            close(p->efd); /* the child's copy of a parent's thread's poll call's */
    q_polls = NULL;
    atomic_store(&q_threads, 0); /* their threads stayed in the parent, the runner too */
    ccap_qrun_fork_child();
    atomic_store(&ccap_q_live, 0);
}
