/* permit.c -- the permit table: fd -> permit, two-level, lock-free to read. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "handoff.h"
#include "permit.h"

#define CHUNK_BITS CCAP_PTAB_CHUNK_BITS
#define CHUNK_SIZE (1 << CHUNK_BITS)
#define N_CHUNKS (CCAP_PTAB_MAX_FD / CHUNK_SIZE)
#define chunks ccap_ptab_chunks

#define slot_t ccap_ptab_slot

_Atomic(slot_t *) ccap_ptab_chunks[N_CHUNKS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ccap_permit *all; /* live permits, under lock */
static atomic_size_t n_all;     /* written under lock; read lock-free by ccap_ptab_empty */

#define PERMIT_MARK 0x100 /* scratch flag of exec_split/exec_restore, under lock */

static slot_t *slot_of(int fd, bool create)
{
    if (fd < 0 || fd >= CCAP_PTAB_MAX_FD)
        return NULL;
    slot_t *c = atomic_load_explicit(&chunks[fd >> CHUNK_BITS], memory_order_acquire);
    if (!c && create) {
        c = calloc(CHUNK_SIZE, sizeof(*c));
        if (!c)
            return NULL;
        atomic_store_explicit(&chunks[fd >> CHUNK_BITS], c, memory_order_release);
    }
    return c ? &c[fd & (CHUNK_SIZE - 1)] : NULL;
}

struct ccap_permit *ccap_permit_new(void)
{
    return calloc(1, sizeof(struct ccap_permit));
}

static void link_permit(struct ccap_permit *p)
{
    p->prev = NULL;
    p->next = all;
    if (all)
        all->prev = p;
    all = p;
    n_all++;
    if (p->held)
        atomic_fetch_add_explicit(p->held, 1, memory_order_relaxed);
}

static void unlink_permit(struct ccap_permit *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        all = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->prev = p->next = NULL;
    n_all--;
    if (p->held)
        atomic_fetch_sub_explicit(p->held, 1, memory_order_relaxed);
}

/* Clears FD's slot; returns its permit if that was the last reference. */
static struct ccap_permit *drop_locked(slot_t *s)
{
    struct ccap_permit *p = atomic_load_explicit(s, memory_order_relaxed);
    if (!p)
        return NULL;
    atomic_store_explicit(s, NULL, memory_order_release);
    if (--p->refs > 0)
        return NULL;
    unlink_permit(p);
    return p;
}

static int attach_locked(slot_t *s, struct ccap_permit *p)
{
    if (p->refs++ == 0)
        link_permit(p);
    atomic_store_explicit(s, p, memory_order_release);
    return 0;
}

int ccap_ptab_attach(int fd, struct ccap_permit *p)
{
    pthread_mutex_lock(&lock);
    slot_t *s = slot_of(fd, true);
    int rc = s ? attach_locked(s, p) : (fd < 0 || fd >= CCAP_PTAB_MAX_FD ? -EBADF : -ENOMEM);
    pthread_mutex_unlock(&lock);
    return rc;
}

static bool same_file(int fd, const struct ccap_permit *p)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == p->dev && st.st_ino == p->ino;
}

struct ccap_permit *ccap_ptab_get(int fd, struct ccap_permit **orphan)
{
    *orphan = NULL;
    if (!ccap_ptab_maybe(fd))
        return NULL;
    pthread_mutex_lock(&lock);
    slot_t *s = slot_of(fd, false);
    struct ccap_permit *p = s ? atomic_load_explicit(s, memory_order_relaxed) : NULL;
    if (p && !same_file(fd, p)) {
        *orphan = drop_locked(s);
        p = NULL;
    }
    pthread_mutex_unlock(&lock);
    return p;
}

struct ccap_permit *ccap_ptab_detach(int fd)
{
    if (!ccap_ptab_maybe(fd))
        return NULL;
    pthread_mutex_lock(&lock);
    slot_t *s = slot_of(fd, false);
    struct ccap_permit *p = s ? drop_locked(s) : NULL;
    pthread_mutex_unlock(&lock);
    return p;
}

static void push(struct ccap_permit **list, struct ccap_permit *p)
{
    if (!p)
        return;
    p->next = *list;
    *list = p;
}

struct ccap_permit *ccap_ptab_dup(int oldfd, int newfd)
{
    struct ccap_permit *gone = NULL;
    if (oldfd == newfd)
        return NULL;
    pthread_mutex_lock(&lock);
    slot_t *ns = slot_of(newfd, false);
    if (ns)
        push(&gone, drop_locked(ns));
    slot_t *os = slot_of(oldfd, false);
    struct ccap_permit *p = os ? atomic_load_explicit(os, memory_order_relaxed) : NULL;
    if (p && !same_file(newfd, p)) {
        /* OLDFD's number was reused behind the shim's back: not the socket */
        push(&gone, drop_locked(os));
    } else if (p && (ns = slot_of(newfd, true)) != NULL) {
        attach_locked(ns, p);
    }
    pthread_mutex_unlock(&lock);
    return gone;
}

/* Calls FN(FD, SLOT, P, ARG) for every tracked descriptor. Under lock. */
static void each_slot_locked(void (*fn)(int fd, slot_t *s, struct ccap_permit *p, void *arg), void *arg)
{
    for (int c = 0; c < N_CHUNKS && n_all > 0; c++) {
        slot_t *ch = atomic_load_explicit(&chunks[c], memory_order_relaxed);
        if (!ch)
            continue;
        for (int i = 0; i < CHUNK_SIZE; i++) {
            struct ccap_permit *p = atomic_load_explicit(&ch[i], memory_order_relaxed);
            if (p)
                fn(c * CHUNK_SIZE + i, &ch[i], p, arg);
        }
    }
}

struct sweep {
    int dropped;
    struct ccap_permit *orphans;
};

/* ccap_ptab_sweep's worker: drops FD's entry if FD is no longer P's socket. */
static void sweep_one(int fd, slot_t *s, struct ccap_permit *p, void *arg)
{
    struct sweep *sw = arg;
    if (same_file(fd, p))
        return;
    sw->dropped++;
    push(&sw->orphans, drop_locked(s));
}

int ccap_ptab_sweep(struct ccap_permit **orphans)
{
    struct sweep sw = { 0, NULL };
    pthread_mutex_lock(&lock);
    each_slot_locked(sweep_one, &sw);
    pthread_mutex_unlock(&lock);
    *orphans = sw.orphans;
    return sw.dropped;
}

void ccap_ptab_each(void (*fn)(struct ccap_permit *p, void *arg), void *arg)
{
    pthread_mutex_lock(&lock);
    for (struct ccap_permit *p = all; p; p = p->next)
        fn(p, arg);
    pthread_mutex_unlock(&lock);
}

static void clear_slots_locked(void)
{
    for (int c = 0; c < N_CHUNKS; c++) {
        slot_t *ch = atomic_load_explicit(&chunks[c], memory_order_relaxed);
        if (!ch)
            continue;
        for (int i = 0; i < CHUNK_SIZE; i++)
            atomic_store_explicit(&ch[i], NULL, memory_order_relaxed);
    }
}

struct ccap_permit *ccap_ptab_take_all(void)
{
    pthread_mutex_lock(&lock);
    clear_slots_locked();
    struct ccap_permit *list = all;
    for (struct ccap_permit *p = all; p; p = p->next) {
        p->refs = 0;
        if (p->held)
            atomic_fetch_sub_explicit(p->held, 1, memory_order_relaxed);
    }
    all = NULL;
    n_all = 0;
    pthread_mutex_unlock(&lock);
    return list;
}

size_t ccap_ptab_count(void)
{
    pthread_mutex_lock(&lock);
    size_t n = n_all;
    pthread_mutex_unlock(&lock);
    return n;
}

bool ccap_ptab_empty(void)
{
    return atomic_load_explicit(&n_all, memory_order_relaxed) == 0;
}

void ccap_ptab_fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}
void ccap_ptab_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

void ccap_ptab_fork_child(void)
{
    /* The child shares the sockets but not the permits: the parent keeps
     * renewing and releasing them. Forget them without any release. */
    clear_slots_locked();
    struct ccap_permit *p = all;
    while (p) {
        struct ccap_permit *n = p->next;
        free(p);
        p = n;
    }
    all = NULL;
    n_all = 0;
    pthread_mutex_unlock(&lock);
}

struct ccap_permit *ccap_ptab_detach_range(unsigned lo, unsigned hi)
{
    struct ccap_permit *list = NULL;
    if (hi >= CCAP_PTAB_MAX_FD)
        hi = CCAP_PTAB_MAX_FD - 1;
    if (lo > hi)
        return NULL;
    pthread_mutex_lock(&lock);
    for (unsigned c = lo >> CHUNK_BITS; c <= (hi >> CHUNK_BITS) && n_all > 0; c++) {
        slot_t *ch = atomic_load_explicit(&chunks[c], memory_order_relaxed);
        if (!ch)
            continue;
        for (unsigned i = 0; i < CHUNK_SIZE; i++) {
            unsigned fd = c * CHUNK_SIZE + i;
            if (fd < lo || fd > hi)
                continue;
            struct ccap_permit *o = drop_locked(&ch[i]);
            if (o) {
                o->next = list;
                list = o;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return list;
}

static bool survives_exec(int fd)
{
    int fl = fcntl(fd, F_GETFD);
    return fl >= 0 && !(fl & FD_CLOEXEC);
}

struct split {
    struct ccap_handoff_entry *surv;
    size_t nsurv;
    struct ccap_ptab_ent *gone;
    size_t ngone;
    struct ccap_permit *released, *orphans;
};

/* Pass 1: drop stale entries; mark permits with a surviving descriptor. */
static void split_mark(int fd, slot_t *s, struct ccap_permit *p, void *arg)
{
    struct split *sp = arg;
    if (!same_file(fd, p))
        push(&sp->orphans, drop_locked(s));
    else if (survives_exec(fd))
        p->flags |= PERMIT_MARK;
}

/* Pass 2: list survivors' surviving descriptors; detach the others. */
static void split_sort(int fd, slot_t *s, struct ccap_permit *p, void *arg)
{
    struct split *sp = arg;
    if (p->flags & PERMIT_MARK) {
        if (!survives_exec(fd))
            return;
        struct ccap_handoff_entry *e = &sp->surv[sp->nsurv++];
        e->fd = fd;
        e->dev = p->dev;
        e->ino = p->ino;
        e->lease_ms = p->lease_ms;
        memcpy(e->sem, p->sem, sizeof(e->sem));
        memcpy(e->holder, p->holder, sizeof(e->holder));
        return;
    }
    sp->gone[sp->ngone++] = (struct ccap_ptab_ent){ fd, p };
    if (drop_locked(s))
        push(&sp->released, p);
}

static void clear_mark(struct ccap_permit *p, void *arg)
{
    (void)arg;
    p->flags &= ~PERMIT_MARK;
}

int ccap_ptab_exec_split(struct ccap_handoff_entry **surv, size_t *nsurv, struct ccap_ptab_ent **gone, size_t *ngone,
                         struct ccap_permit **released, struct ccap_permit **orphans)
{
    struct split sp = { 0 };
    int rc = 0;
    pthread_mutex_lock(&lock);
    each_slot_locked(split_mark, &sp);
    size_t nslots = 0;
    for (struct ccap_permit *p = all; p; p = p->next)
        nslots += (size_t)p->refs;
    if (nslots) {
        sp.surv = malloc(nslots * sizeof(*sp.surv));
        sp.gone = malloc(nslots * sizeof(*sp.gone));
        if (sp.surv && sp.gone)
            each_slot_locked(split_sort, &sp);
        else
            rc = -ENOMEM;
    }
    for (struct ccap_permit *p = all; p; p = p->next)
        clear_mark(p, NULL);
    pthread_mutex_unlock(&lock);
    if (rc < 0 || !sp.nsurv) {
        free(sp.surv);
        sp.surv = NULL;
    }
    if (rc < 0 || !sp.ngone) {
        free(sp.gone);
        sp.gone = NULL;
    }
    *surv = sp.surv;
    *nsurv = sp.nsurv;
    *gone = sp.gone;
    *ngone = sp.ngone;
    *released = sp.released;
    *orphans = sp.orphans;
    return rc;
}

struct ccap_permit *ccap_ptab_exec_restore(const struct ccap_ptab_ent *gone, size_t n)
{
    struct ccap_permit *dead = NULL;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n; i++) {
        struct ccap_permit *p = gone[i].p;
        p->flags |= PERMIT_MARK; /* seen: not yet on the dead list */
        slot_t *s = slot_of(gone[i].fd, true);
        if (s && !atomic_load_explicit(s, memory_order_relaxed) && same_file(gone[i].fd, p))
            attach_locked(s, p);
    }
    for (size_t i = 0; i < n; i++) {
        struct ccap_permit *p = gone[i].p;
        if (!(p->flags & PERMIT_MARK))
            continue;
        p->flags &= ~PERMIT_MARK;
        if (p->refs == 0)
            push(&dead, p);
    }
    pthread_mutex_unlock(&lock);
    return dead;
}
