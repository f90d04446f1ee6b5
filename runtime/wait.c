/* wait.c -- waiters' own Redis connections (a small pool) and their bounded BLPOP blocks. */
#include "wait.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "keys.h"
#include "rt_int.h"
#include "sem.h"

#define now_ms ccap_now_ms

/* Every connection made, lent or idle: a fork child must close its copies
 * of all of them. */
struct slot {
    struct ccap_redis *r; /* NULL: free slot */
    bool lent;
    long long idle_since; /* ms, monotonic, when not lent */
};

/* A waker: one thread and one blocking connection serving the waiters of
 * one lane (all of the process's waiters; in Redis Cluster, those of one
 * semaphore, whose keys share a slot). Under P.lock. */
struct ccap_wait_lane {
    bool used;                    /* made: TAG, POKE, CV valid */
    bool running;                 /* its thread exists */
    bool blocking;                /* a BLPOP is pending ... */
    bool stale;                   /* ... and misses a waiter's key (a poke was asked for) */
    int failures;                 /* failed blocks in a row: > 0, waiters poll instead */
    char tag[256];                /* semaphore name (cluster), or "" */
    char poke[CCAP_WAIT_KEY_MAX]; /* the lane's poke list, in its waiters' slot */
    struct ccap_redis *r;         /* its lent connection, or NULL */
    struct ccap_waiter *solo;     /* a lone waiter whose own thread has the pending BLPOP (below) */
    bool solo_reading;            /* ... and reads its reply now: R is that thread's */
    bool solo_cut;                /* ... and the waker shut R down to end it */
    bool solo_kick;               /* ... and must end it: a nudge */
    bool adopt;                   /* a BLPOP pending on R is the waker's to read (a lone waiter left it) */
    long long solo_until;         /* the lone waiter's wake-up time (monotonic ms) */
    long long waker_wake;         /* the waker sleeps on CV until then (LLONG_MIN: it is awake) */
    struct ccap_waiter *head;
    pthread_cond_t cv; /* the waker's idle and backoff sleeps */
};

static struct {
    pthread_mutex_t lock;
    struct slot s[CCAP_WAIT_MAX_CONNS];
    struct ccap_wait_lane l[CCAP_WAIT_LANES];
} P = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* fork(): the child must neither share the parent's sockets nor use a lock
 * some other thread held at fork time. Every connection is forgotten without
 * I/O (only the child's copies of the descriptors are closed) and freed:
 * lent ones belong to threads that the child does not have. */
void ccap_wait_fork_prepare(void)
{
    pthread_mutex_lock(&P.lock);
}
void ccap_wait_fork_parent(void)
{
    pthread_mutex_unlock(&P.lock);
}
void ccap_wait_fork_child(void)
{
    for (int i = 0; i < CCAP_WAIT_MAX_CONNS; i++) {
        if (!P.s[i].r)
            continue;
        ccap_redis_forget(P.s[i].r);
        ccap_redis_free(P.s[i].r);
        P.s[i].r = NULL;
    }
    /* no waker thread and no waiter in the child: the lanes start afresh */
    memset(P.l, 0, sizeof P.l);
    pthread_mutex_unlock(&P.lock);
}

/* ccap_wait_conn_get under P.lock. */
static struct ccap_redis *conn_get_locked(const struct ccap_redis_conf *conf)
{
    struct ccap_redis *r = NULL;
    int free_slot = -1;

    for (int i = 0; i < CCAP_WAIT_MAX_CONNS && !r; i++) {
        if (P.s[i].r && !P.s[i].lent) {
            P.s[i].lent = true;
            r = P.s[i].r;
        } else if (!P.s[i].r && free_slot < 0) {
            free_slot = i;
        }
    }
    if (!r && free_slot >= 0 && (r = ccap_redis_new(conf))) {
        P.s[free_slot].r = r;
        P.s[free_slot].lent = true;
    }
    return r;
}

struct ccap_redis *ccap_wait_conn_get(const struct ccap_redis_conf *conf)
{
    struct ccap_redis *r;

    pthread_mutex_lock(&P.lock);
    r = conn_get_locked(conf);
    pthread_mutex_unlock(&P.lock);
    return r;
}

void ccap_wait_conn_put(struct ccap_redis *r, bool keep)
{
    if (!r)
        return;
    pthread_mutex_lock(&P.lock);
    for (int i = 0; i < CCAP_WAIT_MAX_CONNS; i++) {
        if (P.s[i].r != r)
            continue;
        if (keep) {
            P.s[i].lent = false;
            P.s[i].idle_since = now_ms();
            r = NULL;
        } else {
            P.s[i].r = NULL;
        }
        break;
    }
    pthread_mutex_unlock(&P.lock);
    ccap_redis_free(r); /* closes it (if its descriptor is still ours) */
}

void ccap_wait_reap(int idle_ms)
{
    struct ccap_redis *gone[CCAP_WAIT_MAX_CONNS];
    int n = 0;
    long long now = now_ms();

    pthread_mutex_lock(&P.lock);
    for (int i = 0; i < CCAP_WAIT_MAX_CONNS; i++) {
        if (P.s[i].r && !P.s[i].lent && (idle_ms <= 0 || now - P.s[i].idle_since >= idle_ms)) {
            gone[n++] = P.s[i].r;
            P.s[i].r = NULL;
        }
    }
    pthread_mutex_unlock(&P.lock);
    for (int i = 0; i < n; i++)
        ccap_redis_free(gone[i]);
}

int ccap_wait_conn_count(void)
{
    int n = 0;

    pthread_mutex_lock(&P.lock);
    for (int i = 0; i < CCAP_WAIT_MAX_CONNS; i++)
        n += P.s[i].r != NULL;
    pthread_mutex_unlock(&P.lock);
    return n;
}

int ccap_wait_block(struct ccap_redis *r, const char *key, int block_ms)
{
    char secs[16];
    const char *argv[3] = { "BLPOP", key, secs };
    redisReply *rep;
    int rc;

    if (block_ms < 0)
        block_ms = 0;
    /* whole seconds: older servers take no fractions */
    snprintf(secs, sizeof secs, "%d", block_ms / 1000 + 2);
    rc = ccap_redis_send(r, 3, argv);
    if (rc < 0)
        return rc;
    rc = ccap_redis_recv(r, block_ms, &rep);
    if (rc == -EAGAIN)
        return 0;
    if (rc < 0)
        return rc;
    rc = rep->type == REDIS_REPLY_ERROR ? -EPROTO : 1;
    freeReplyObject(rep);
    if (rc < 0)
        ccap_redis_close(r); /* e.g. BLPOP refused by an ACL: never spin on it */
    return rc;
}

int ccap_wait_finish(struct ccap_redis *r, int timeout_ms)
{
    redisReply *rep;
    int rc = ccap_redis_recv(r, timeout_ms, &rep);

    if (rc == 0) {
        freeReplyObject(rep);
        return 0;
    }
    ccap_redis_close(r);
    return rc == -EAGAIN ? -ETIMEDOUT : rc;
}

/* ---- the waker: one blocking connection for all of a lane's waiters ---- */

#define WAKER_BLOCK_S 30          /* server timeout of a waker's BLPOP: a safety net, then sent again */
#define WAKER_REPLY_SLACK_MS 5000 /* its reply may come this much after the server's timeout */
#define SOLO_SOFT_SLACK_MS 500    /* a soft lone block is cut this long after its server timeout */
#define WAKER_IDLE_MS 10000       /* a waker without waiters ends after this long */
#define WAKER_BACKOFF_MS 250      /* a failed block is tried again after this, doubling ... */
#define WAKER_BACKOFF_MAX_MS 4000 /* ... up to this */

static void cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* Waits on CV (P.lock held) until signalled or UNTIL (monotonic ms). */
static void cond_wait_until(pthread_cond_t *cv, long long until)
{
    struct timespec ts = { .tv_sec = until / 1000, .tv_nsec = (until % 1000) * 1000000L };

    pthread_cond_timedwait(cv, &P.lock, &ts);
}

/* Under P.lock: L's waker sleeps on its CV until UNTIL or a signal; L
 * knows until when (a lone waiter signals it only for an earlier time). */
static void waker_sleep(struct ccap_wait_lane *l, long long until)
{
    l->waker_wake = until;
    cond_wait_until(&l->cv, until);
    l->waker_wake = LLONG_MIN;
}

/* Under P.lock: sets BITS on every waiter of L and wakes them. */
static void wake_all(struct ccap_wait_lane *l, int bits)
{
    for (struct ccap_waiter *w = l->head; w; w = w->next) {
        w->woke |= bits;
        ccap_nap_kick(w->nap);
    }
}

/* Under P.lock: whether a waiter of L wants its key in a BLPOP. */
static bool any_armed(const struct ccap_wait_lane *l)
{
    for (const struct ccap_waiter *w = l->head; w; w = w->next)
        if (w->armed)
            return true;
    return false;
}

#define WAKER_KEYS_PER_SEM 256 /* a BLPOP's keys per semaphore (its cost grows with its keys) */
#define WAKER_SEMS 16          /* semaphores counted so in one lane; more are not bounded */

/* Armed waiters of one semaphore in a lane, for collect. */
struct sem_count {
    const char *key; /* a waiter's key: the semaphore is its part up to "}:wake:" */
    size_t len;
    int taken; /* keys of it in the BLPOP so far */
};

/* The semaphore of wake list KEY in C (*N of them, WAKER_SEMS at most),
 * added if new; NULL when C is full. */
static struct sem_count *sem_of(struct sem_count *c, int *n, const char *key)
{
    const char *p = NULL;

    for (const char *q = key; (q = strstr(q, "}:" CCAP_KEY_WAKE)); q++)
        p = q;
    size_t len = p ? (size_t)(p - key) : strlen(key);
    for (int i = 0; i < *n; i++)
        if (c[i].len == len && memcmp(c[i].key, key, len) == 0)
            return &c[i];
    if (*n == WAKER_SEMS)
        return NULL;
    c[*n] = (struct sem_count){ key, len, 0 };
    return &c[(*n)++];
}

/* Under P.lock: the BLPOP's arguments for L's armed waiters, copied into
 * *BUF (the keys) and *ARGV (grown as needed; the caller frees both). At
 * most WAKER_KEYS_PER_SEM keys of one semaphore: those of its oldest
 * waiters (L's list is newest first), who are first in its queue, oldest
 * first (BLPOP pops the first list that has a token); a BLPOP of 10,000
 * keys takes Redis milliseconds each time. The waiters left out are marked
 * in the block too (they need not poll: a token pushed to them stays in
 * their lists, and they come in as older waiters leave; the ticket's
 * refresh re-checks them anyway). Marks L blocking. Returns argc, or
 * -ENOMEM. */
static int collect(struct ccap_wait_lane *l, char **buf, size_t *cap, const char ***argv, size_t *acap)
{
    struct sem_count c[WAKER_SEMS], *g;
    struct ccap_waiter **armed = NULL;
    size_t n = 0, na = 0, ca = 0, len = 0, off = 0;
    int argc = 0, nc = 0;

    for (struct ccap_waiter *w = l->head; w; w = w->next) {
        w->in_block = w->armed;
        if (!w->armed)
            continue;
        if (na == ca) {
            struct ccap_waiter **a = realloc(armed, (ca = ca ? 2 * ca : 64) * sizeof *a);
            if (!a) {
                free(armed);
                return -ENOMEM;
            }
            armed = a;
        }
        armed[na++] = w;
    }
    for (size_t i = na; i-- > 0;) { /* oldest first; the ones left out become NULL */
        if ((g = sem_of(c, &nc, armed[i]->key)) && g->taken++ >= WAKER_KEYS_PER_SEM) {
            armed[i] = NULL;
            continue;
        }
        len += strlen(armed[i]->key) + 1;
        n++;
    }
    len += strlen(l->poke) + 1 + 16;
    if (len > *cap) {
        char *b = realloc(*buf, len);
        if (!b) {
            free(armed);
            return -ENOMEM;
        }
        *buf = b, *cap = len;
    }
    if (n + 3 > *acap) {
        const char **a = realloc(*argv, (n + 3) * sizeof **argv);
        if (!a) {
            free(armed);
            return -ENOMEM;
        }
        *argv = a, *acap = n + 3;
    }
    (*argv)[argc++] = "BLPOP";
    for (size_t i = na; i-- > 0;) {
        if (!armed[i])
            continue;
        (*argv)[argc++] = strcpy(*buf + off, armed[i]->key);
        off += strlen(armed[i]->key) + 1;
    }
    free(armed);
    (*argv)[argc++] = strcpy(*buf + off, l->poke);
    off += strlen(l->poke) + 1;
    snprintf(*buf + off, 16, "%d", WAKER_BLOCK_S); /* whole seconds: older servers take no fractions */
    (*argv)[argc++] = *buf + off;
    l->blocking = true;
    l->stale = false;
    return argc;
}

/* Reads the reply of the BLPOP pending on R: the key it popped into KEY
 * ("" when the server's timeout ended it), *GRANT whether its token was a
 * grant. Returns 0, or -errno after closing R (a lost connection, no reply
 * in time, an error reply). */
static int block_reply(struct ccap_redis *r, char *key, size_t keylen, bool *grant)
{
    redisReply *rep;
    int rc = ccap_redis_recv(r, WAKER_BLOCK_S * 1000 + WAKER_REPLY_SLACK_MS, &rep);

    key[0] = '\0';
    *grant = false;
    if (rc == -EAGAIN)
        rc = -ETIMEDOUT;
    if (rc == 0) {
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_STRING) {
            snprintf(key, keylen, "%s", rep->element[0]->str);
            *grant = rep->element[1]->type == REDIS_REPLY_STRING &&
                     strcmp(rep->element[1]->str, CCAP_SEM_TOKEN_GRANT) == 0;
        } else if (rep->type != REDIS_REPLY_NIL)
            rc = -EPROTO; /* e.g. BLPOP refused by an ACL */
        freeReplyObject(rep);
    }
    if (rc < 0)
        ccap_redis_close(r);
    return rc;
}

/* Under P.lock: the outcome RC of one block of L, KEY the list it popped,
 * GRANT whether its token was a grant (the waiter takes its permit without
 * an acquire). A token goes to its waiter, which it disarms (out of the
 * next BLPOP: it re-checks, and usually takes its permit and leaves). A
 * grant for a waiter that left is dropped: a wait that ends without its
 * permit releases its holder id whenever Redis may keep a ticket of it
 * (runtime/waiting.c, wait_end), which removes a granted permit too. The
 * first failure in a row makes every waiter re-check once (a token may have
 * been lost with Redis's data, or a ticket), then the waker backs off
 * (waiters poll meanwhile). */
static void deliver(struct ccap_wait_lane *l, int rc, const char *key, bool grant)
{
    if (rc >= 0) {
        l->failures = 0;
        for (struct ccap_waiter *w = l->head; w && key[0]; w = w->next) {
            if (strcmp(w->key, key) == 0) {
                w->woke |= CCAP_WOKE_TOKEN | (grant ? CCAP_WOKE_GRANT : 0);
                w->armed = false;
                ccap_nap_kick(w->nap);
            }
        }
        return;
    }
    if (l->failures++ == 0)
        wake_all(l, CCAP_WOKE_BROKEN);
    int backoff = WAKER_BACKOFF_MS << (l->failures < 5 ? l->failures - 1 : 4);
    waker_sleep(l, now_ms() + (backoff < WAKER_BACKOFF_MAX_MS ? backoff : WAKER_BACKOFF_MAX_MS));
}

/* Under P.lock: whether L's only waiter is W and may block on its own wake
 * list in its own thread (a lone waiter: one thread wake-up per token, not
 * the waker's and then its own). Only a waiter sleeping on a timerfd nap (a
 * program's thread) does: its block is then a blocking recv, as its nap's
 * read would be, for the same signals and cancellation (runtime/nap.h); or
 * one in a thread of the shim's (ccap_nap_shim: the queue's), whose recv,
 * as its condition would, sees no signal and no cancel (a cancel of its
 * wait is a nudge: the waker cuts the block). */
static bool lone(const struct ccap_wait_lane *l, const struct ccap_waiter *w)
{
    return l->head == w && !w->next && w->solo_ok && l->failures == 0;
}

/* Under P.lock: whether the waker must block for L's armed waiters (a
 * lone waiter blocks by itself). */
static bool waker_needed(const struct ccap_wait_lane *l)
{
    return any_armed(l) && !lone(l, l->head);
}

/* Under P.lock: waits, without a BLPOP, until a waiter of L needs the
 * waker, a lone waiter blocks on its own or left a BLPOP to read (true),
 * or L had no waiter for WAKER_IDLE_MS (false). Waiters that are
 * registered but not armed (woken, re-checking) keep the waker. */
static bool idle_wait(struct ccap_wait_lane *l)
{
    long long until = now_ms() + WAKER_IDLE_MS;

    while (!waker_needed(l) && !l->solo && !l->adopt) {
        long long now = now_ms();
        if (l->head)
            until = now + WAKER_IDLE_MS;
        else if (now >= until)
            return false;
        waker_sleep(l, until);
    }
    return true;
}

/* Under P.lock, after a block of L ended: a lone armed waiter sleeping on
 * its nap (it found this block pending) is kicked to block on its own. */
static void kick_lone(struct ccap_wait_lane *l)
{
    if (l->head && any_armed(l) && lone(l, l->head) && !l->solo)
        ccap_nap_kick(l->head->nap);
}

/* Under P.lock: the waker's part while a lone waiter blocks in its own
 * thread: at the lone waiter's wake-up time, or when it is nudged, the
 * waker shuts the connection down to end that block (a token it may lose
 * then is found by the waiter's next attempt: a holder asking again keeps
 * its permit); when the lone waiter left its BLPOP pending (a signal, a
 * cancel), the waker reads its reply and delivers it (KEY: a buffer). */
static void watch_solo(struct ccap_wait_lane *l, char *key, size_t keylen)
{
    while (l->solo) {
        long long now = now_ms();
        if (!l->solo_reading && !l->solo_cut && (l->solo_kick || now >= l->solo_until)) {
            l->solo_cut = true;
            ccap_redis_interrupt(l->r);
        }
        waker_sleep(l, l->solo_cut || l->solo_kick ? now + 100 : l->solo_until);
    }
    if (l->adopt) {
        struct ccap_redis *r = l->r;
        bool grant;
        l->adopt = false;
        pthread_mutex_unlock(&P.lock);
        int rc = block_reply(r, key, keylen, &grant);
        pthread_mutex_lock(&P.lock);
        l->blocking = false;
        deliver(l, rc, key, grant);
        kick_lone(l);
    }
}

/* A lane's thread: blocks on all of its armed waiters' wake lists and its
 * poke list at once, hands each token to its waiter, sleeps without a BLPOP
 * while no waiter is armed, and ends after WAKER_IDLE_MS without waiters,
 * giving its connection back to the pool. */
static void *waker_main(void *arg)
{
    struct ccap_wait_lane *l = arg;
    struct ccap_redis *r;
    char *buf = NULL, key[CCAP_WAIT_KEY_MAX];
    bool grant = false;
    const char **argv = NULL;
    size_t cap = 0, acap = 0;

    pthread_mutex_lock(&P.lock);
    while (idle_wait(l)) {
        if (l->solo || l->adopt) {
            watch_solo(l, key, sizeof key);
            continue;
        }
        int rc = collect(l, &buf, &cap, &argv, &acap);
        r = l->r;
        pthread_mutex_unlock(&P.lock);
        if (rc > 0)
            rc = ccap_redis_send(r, rc, argv);
        if (rc >= 0) {
            pthread_mutex_lock(&P.lock);
            l->failures = 0; /* connected: waiters wait for tokens again */
            pthread_mutex_unlock(&P.lock);
            rc = block_reply(r, key, sizeof key, &grant);
        }
        pthread_mutex_lock(&P.lock);
        l->blocking = false;
        deliver(l, rc, key, grant);
        kick_lone(l);
    }
    r = l->r;
    l->r = NULL;
    l->running = false;
    pthread_mutex_unlock(&P.lock);
    ccap_wait_conn_put(r, true);
    free(buf);
    free(argv);
    return NULL;
}

/* How waker threads start: set by the runtime (the shim's guarded
 * threads), else plain detached threads with every signal blocked. */
static ccap_wait_spawn_fn *spawn_fn;

void ccap_wait_set_spawn(ccap_wait_spawn_fn *fn)
{
    spawn_fn = fn;
}

static bool spawn(struct ccap_wait_lane *l)
{
    sigset_t all, old;
    pthread_attr_t a;
    pthread_t t;
    bool ok;

    if (spawn_fn)
        return spawn_fn(waker_main, l);
    sigfillset(&all); /* the thread must not take the program's signals */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 128 * 1024);
    ok = pthread_create(&t, &a, waker_main, l) == 0;
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return ok;
}

/* Under P.lock: the lane of semaphore NAME -- the only one, or in Redis
 * Cluster NAME's own (a BLPOP takes keys of one slot only) -- made if
 * needed, with its poke list in NAME's slot. NULL when all are taken. */
static struct ccap_wait_lane *lane_for(const struct ccap_redis_conf *conf, const char *prefix, const char *name)
{
    const char *tag = conf->n_cluster > 0 ? name : "";
    struct ccap_wait_lane *l = NULL;
    char id[64];

    for (int i = 0; i < CCAP_WAIT_LANES; i++) {
        if (P.l[i].used && strcmp(P.l[i].tag, tag) == 0)
            return &P.l[i];
        if (!P.l[i].used && !l)
            l = &P.l[i];
    }
    if (!l || strlen(tag) >= sizeof l->tag)
        return NULL;
    snprintf(id, sizeof id, "poke.%d.%d.%lld", (int)getpid(), (int)(l - P.l), now_ms());
    if (ccap_sem_wake_key(l->poke, sizeof l->poke, prefix, name, id) < 0)
        return NULL;
    strcpy(l->tag, tag);
    l->waker_wake = LLONG_MIN;
    cond_init(&l->cv);
    l->used = true;
    return l;
}

/* Under P.lock: arms W (registered). Returns 1 when a poke must be pushed
 * (POKE written): the waker blocks without W's key, and no poke is on its
 * way; else 0, and an idle waker starts blocking. */
static int arm_locked(struct ccap_waiter *w, char *poke, size_t pokelen)
{
    struct ccap_wait_lane *l = w->lane;

    w->armed = true;
    w->in_block = false;
    if (l->blocking && !l->stale && (size_t)snprintf(poke, pokelen, "%s", l->poke) < pokelen) {
        l->stale = true;
        return 1;
    }
    if (waker_needed(l))
        pthread_cond_signal(&l->cv); /* an idle waker starts blocking (a lone waiter blocks on its own) */
    return 0;
}

int ccap_waiter_join(struct ccap_waiter *w, struct ccap_nap *nap, const struct ccap_redis_conf *conf,
                     const char *prefix, const char *name, char *poke, size_t pokelen)
{
    struct ccap_redis *spare = NULL;
    struct ccap_wait_lane *l;
    int rc = 0;

    w->woke = 0;
    w->armed = false;
    w->in_block = false;
    w->soft = false;
    pthread_mutex_lock(&P.lock);
    l = lane_for(conf, prefix, name);
    if (l && !l->r)
        l->r = conn_get_locked(conf);
    if (l && l->r && !l->running && !(l->running = spawn(l))) {
        spare = l->r; /* no thread: nobody would give it back */
        l->r = NULL;
    }
    if (!l || !l->r) {
        pthread_mutex_unlock(&P.lock);
        ccap_wait_conn_put(spare, true);
        return l ? -ENOMEM : -EAGAIN;
    }
    if (!nap) {
        ccap_nap_init(&w->own);
        nap = &w->own;
    }
    w->nap = nap;
    w->solo_ok = atomic_load(&nap->fd) >= 0 || nap->program || nap->shim;
    w->lane = l;
    w->next = l->head;
    l->head = w;
    rc = arm_locked(w, poke, pokelen);
    pthread_mutex_unlock(&P.lock);
    return rc;
}

int ccap_waiter_arm(struct ccap_waiter *w, char *poke, size_t pokelen)
{
    int rc = 0;

    pthread_mutex_lock(&P.lock);
    if (!w->armed)
        rc = arm_locked(w, poke, pokelen);
    pthread_mutex_unlock(&P.lock);
    return rc;
}

void ccap_waiter_poke_failed(struct ccap_waiter *w)
{
    pthread_mutex_lock(&P.lock);
    w->lane->stale = false;
    pthread_mutex_unlock(&P.lock);
}

/* Under P.lock: whether W may miss a token: it is not armed, or its waker
 * is failing, or blocks without W's key and no poke is on its way. */
static bool must_poll(const struct ccap_waiter *w)
{
    const struct ccap_wait_lane *l = w->lane;

    return !w->armed || l->failures > 0 || (l->blocking && !w->in_block && !l->stale);
}

/* Under P.lock: L's lone waiter leaves its own block before its reply
 * (a signal, a cancel): the waker reads the pending BLPOP and delivers it,
 * or, when the waker cut it already, the connection is dropped (the next
 * block reconnects). */
static void solo_abandon(struct ccap_wait_lane *l)
{
    if (l->solo_cut) {
        ccap_redis_close(l->r); /* no I/O: its descriptor closed */
        l->blocking = false;
    } else {
        l->adopt = true;
    }
    l->solo = NULL;
    l->solo_cut = l->solo_kick = false;
    pthread_cond_signal(&l->cv);
}

/* The outcome RC of lone waiter W's own block (KEY popped, GRANT), under
 * P.lock: as deliver, without a kick (W's thread is here), and a failure
 * hands the lane to the waker (its backoff). A block the waker cut short
 * (W's wake-up time, a nudge) is no failure. */
static void solo_done(struct ccap_waiter *w, int rc, const char *key, bool grant)
{
    struct ccap_wait_lane *l = w->lane;
    bool cut = l->solo_cut;

    l->solo = NULL;
    l->solo_reading = l->solo_cut = l->solo_kick = false;
    l->blocking = false;
    if (rc >= 0 && key[0] && strcmp(w->key, key) == 0) {
        w->woke |= CCAP_WOKE_TOKEN | (grant ? CCAP_WOKE_GRANT : 0);
        w->armed = false;
    } else if (rc < 0 && !cut && l->failures++ == 0) {
        wake_all(l, CCAP_WOKE_BROKEN);
    } else if (rc < 0 && cut) {
        w->woke |= CCAP_WOKE_TOKEN; /* a token the cut lost is found by a re-check now, not at the
                                     * wait's next step (a queued wait's soft slices end with none) */
    }
    if (waker_needed(l))
        pthread_cond_signal(&l->cv); /* a waiter joined (its poke ended this block), or a failure: the waker's */
}

/* A lone block of W until UNTIL_MS: its BLPOP's server timeout (seconds)
 * into *SECS, and when the waker cuts it (*WATCH, monotonic ms). A soft
 * UNTIL_MS (W->soft) is the server's timeout itself, rounded up to whole
 * seconds (older servers take no fractions): the block ends with a nil
 * reply and the connection kept, and the waker cuts it only if that reply
 * is SOLO_SOFT_SLACK_MS late. Otherwise the waker cuts it at UNTIL_MS. */
static void solo_times(const struct ccap_waiter *w, long long until_ms, int *secs, long long *watch)
{
    long long now = now_ms(), left = until_ms - now;

    *secs = WAKER_BLOCK_S;
    *watch = until_ms;
    if (w->soft && left > 0 && left <= WAKER_BLOCK_S * 1000LL) {
        *secs = (int)((left + 999) / 1000);
        *watch = now + *secs * 1000LL + SOLO_SOFT_SLACK_MS;
    }
}

/* Under P.lock (released meanwhile): lone waiter W (lone, armed, no block
 * pending) blocks on its own wake list and the poke list in its own thread,
 * on the lane's connection, until a token, UNTIL_MS (solo_times) or a nudge
 * (the waker cuts it), or a signal. Returns 0; 1 when the server's timeout
 * of a soft block ended it (W's slice is over); or -EINTR: a handler
 * without SA_RESTART interrupted it, and its BLPOP, still pending, is the
 * waker's to read. In a program's thread the block is the program's
 * (runtime/nap.h); in a shim's, hooks.outside changes nothing. */
static int solo_block(struct ccap_waiter *w, long long until_ms)
{
    struct ccap_wait_lane *l = w->lane;
    struct ccap_redis *r = l->r;
    char secs[16], poke[CCAP_WAIT_KEY_MAX], key[CCAP_WAIT_KEY_MAX];
    const char *argv[4] = { "BLPOP", w->key, poke, secs };
    bool grant = false;
    long long watch;
    int rc, back, timeout_s;

    solo_times(w, until_ms, &timeout_s, &watch);
    snprintf(poke, sizeof poke, "%s", l->poke);
    snprintf(secs, sizeof secs, "%d", timeout_s);
    l->solo = w;
    l->solo_until = watch;
    l->solo_reading = true; /* R is this thread's while it sends */
    l->blocking = true;
    l->stale = false;
    w->in_block = true;
    pthread_mutex_unlock(&P.lock);
    rc = ccap_redis_send(r, 4, argv);
    pthread_mutex_lock(&P.lock);
    l->solo_reading = false; /* from now on the waker may cut the block */
    if (rc >= 0 && (l->solo_kick || now_ms() >= watch)) {
        l->solo_cut = true; /* due already: the pending BLPOP is abandoned */
        ccap_redis_interrupt(r);
    } else if (watch < l->waker_wake || l->solo_kick) {
        pthread_cond_signal(&l->cv); /* the waker ends this block at UNTIL_MS: it must know */
    }
    pthread_mutex_unlock(&P.lock);
    if (rc >= 0) {
        back = ccap_rt.hooks.outside ? ccap_rt.hooks.outside() : -1;
        rc = ccap_redis_await(r);
        if (ccap_rt.hooks.inside)
            ccap_rt.hooks.inside(back);
    }
    pthread_mutex_lock(&P.lock);
    if (rc == -EINTR) {
        solo_abandon(l);
        return -EINTR;
    }
    if (rc >= 0) {
        l->solo_reading = true;
        pthread_mutex_unlock(&P.lock);
        rc = block_reply(r, key, sizeof key, &grant);
        pthread_mutex_lock(&P.lock);
    } else {
        key[0] = '\0';
        if (rc != -ECONNREFUSED) /* sent, then lost: a later reply is not this block's (no I/O here) */
            ccap_redis_close(r);
    }
    solo_done(w, rc, key, grant);
    return rc >= 0 && !key[0] && w->soft ? 1 : 0;
}

int ccap_waiter_wait(struct ccap_waiter *w, long long until_ms)
{
    long long start = now_ms(), poll_end = start + CCAP_WAIT_POLL_MS;
    int woke = 0;

    pthread_mutex_lock(&P.lock);
    for (;;) {
        long long now = now_ms();
        bool poll = must_poll(w);
        if (w->woke || now >= until_ms) {
            woke = w->woke;
            break;
        }
        if (poll && now >= poll_end) {
            woke = CCAP_WOKE_POLL;
            break;
        }
        if (w->armed && lone(w->lane, w) && !w->lane->blocking && !w->lane->adopt && w->lane->r) {
            int rc = solo_block(w, until_ms);
            if (rc == -EINTR) {
                woke = w->woke | CCAP_WOKE_SIGNAL;
                break;
            }
            if (rc == 1 && !w->woke)
                break; /* the soft slice is over (by the server's clock, perhaps a little before ours) */
            continue;
        }
        /* the sleep holds no lock: the nap may be a cancellation point */
        pthread_mutex_unlock(&P.lock);
        int rc = ccap_nap_sleep(w->nap, poll && poll_end < until_ms ? poll_end : until_ms);
        pthread_mutex_lock(&P.lock);
        if (rc == -EINTR) {
            woke = w->woke | CCAP_WOKE_SIGNAL;
            break;
        }
    }
    w->woke = 0;
    pthread_mutex_unlock(&P.lock);
    return woke;
}

int ccap_waiter_take(struct ccap_waiter *w, bool *poll)
{
    int woke;

    pthread_mutex_lock(&P.lock);
    woke = w->woke;
    w->woke = 0;
    *poll = must_poll(w);
    pthread_mutex_unlock(&P.lock);
    return woke;
}

void ccap_waiter_leave(struct ccap_waiter *w)
{
    pthread_mutex_lock(&P.lock);
    if (w->lane->solo == w) /* cancelled in its own block */
        solo_abandon(w->lane);
    for (struct ccap_waiter **pp = &w->lane->head; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&P.lock);
    if (w->nap == &w->own)
        ccap_nap_destroy(&w->own);
}

void ccap_waiter_nudge(struct ccap_waiter *w)
{
    pthread_mutex_lock(&P.lock);
    for (struct ccap_waiter *x = w->lane ? w->lane->head : NULL; x; x = x->next) {
        if (x == w) {
            w->woke |= CCAP_WOKE_TOKEN;
            ccap_nap_kick(w->nap);
            if (w->lane->solo == w) { /* blocking on its own: the waker ends that block */
                w->lane->solo_kick = true;
                pthread_cond_signal(&w->lane->cv);
            }
            break;
        }
    }
    pthread_mutex_unlock(&P.lock);
}

int ccap_wait_waker_count(void)
{
    int n = 0;

    pthread_mutex_lock(&P.lock);
    for (int i = 0; i < CCAP_WAIT_LANES; i++)
        n += P.l[i].running;
    pthread_mutex_unlock(&P.lock);
    return n;
}
