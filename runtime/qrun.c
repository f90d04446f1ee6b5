/* qrun.c -- the queue's runner: many queued connects' waits polled by one thread, due by kick or by time (a min-heap). */
#include "qrun.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "clock.h"
#include "rt_int.h"
#include "waiting.h"

/* The runner's state, under mu (a leaf lock: a kick takes it with the
 * waker's or the waits' lock held). HEAP orders the waits not being polled
 * by AT; N counts those and the one being polled. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC: an item became due, or one was added */
    bool cv_ready;
    bool running;
    struct ccap_qrun_item **heap;
    int len, cap, n;
    unsigned long long seq; /* the last item's added */
} R = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void cv_init(void)
{
    pthread_condattr_t a;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&R.cv, &a);
    pthread_condattr_destroy(&a);
    R.cv_ready = true;
}

/* A before B: the earlier time, and among equal times (every wait added
 * or kicked is due at 0) the one added first. A wait joins its waker at
 * its first poll, and the waker's BLPOP names the first-joined 256 of a
 * semaphore's waiters as the head of its queue: waits must join in the
 * order their tickets queued, or a grant token may go to a waiter left out
 * of the BLPOP, its permit held unused until its ticket's refresh. */
static bool before(const struct ccap_qrun_item *a, const struct ccap_qrun_item *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void put(int i, struct ccap_qrun_item *it)
{
    R.heap[i] = it;
    it->hidx = i;
}

static void sift_up(int i)
{
    struct ccap_qrun_item *it = R.heap[i];

    while (i > 0 && before(it, R.heap[(i - 1) / 2])) {
        put(i, R.heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    put(i, it);
}

static void sift_down(int i)
{
    struct ccap_qrun_item *it = R.heap[i];

    for (;;) {
        int c = 2 * i + 1;
        if (c >= R.len)
            break;
        if (c + 1 < R.len && before(R.heap[c + 1], R.heap[c]))
            c++;
        if (!before(R.heap[c], it))
            break;
        put(i, R.heap[c]);
        i = c;
    }
    put(i, it);
}

/* Into the heap (room made by ccap_qrun_add). Under mu. */
static void heap_push(struct ccap_qrun_item *it)
{
    put(R.len++, it);
    sift_up(R.len - 1);
}

/* The earliest out of the heap (not empty). Under mu. */
static struct ccap_qrun_item *heap_pop(void)
{
    struct ccap_qrun_item *top = R.heap[0];

    if (--R.len > 0) {
        put(0, R.heap[R.len]);
        sift_down(0);
    }
    top->hidx = -1;
    return top;
}

static struct timespec mono_ts(long long ms)
{
    return (struct timespec){ ms / 1000, (ms % 1000) * 1000000L };
}

/* A kick of IT's wait: due now. From any thread, any lock held. */
static void kick(void *arg)
{
    struct ccap_qrun_item *it = arg;

    pthread_mutex_lock(&R.mu);
    it->kicked = true;
    if (it->hidx >= 0) {
        it->at = 0;
        sift_up(it->hidx);
    }
    pthread_cond_signal(&R.cv);
    pthread_mutex_unlock(&R.mu);
}

/* Polls IT (out of the heap, mu not held), then puts it back at the time
 * it asks for, or hands it to its DONE. Returns with mu held. */
static void poll_one(struct ccap_qrun_item *it)
{
    long long next = 0;
    int rc;

    pthread_mutex_unlock(&R.mu);
    rc = ccap_rt_wait_poll(it->ws, &next);
    if (rc != 0) {
        it->ws = NULL; /* ended and freed: no kick reaches IT any more */
        it->done(it, rc);
        pthread_mutex_lock(&R.mu);
        R.n--;
        return;
    }
    pthread_mutex_lock(&R.mu);
    it->at = it->kicked ? 0 : next;
    it->kicked = false;
    heap_push(it);
}

/* The runner: the due waits one after another, else asleep until the
 * earliest; ends CCAP_QRUN_IDLE_S after its last wait. */
static void *run(void *arg)
{
    long long idle_since = ccap_now_ms();

    (void)arg;
    pthread_mutex_lock(&R.mu);
    for (;;) {
        long long now = ccap_now_ms(), until;
        if (R.n == 0 && now - idle_since >= CCAP_QRUN_IDLE_S * 1000LL)
            break;
        if (R.len > 0 && R.heap[0]->at <= now) {
            struct ccap_qrun_item *it = heap_pop();
            it->kicked = false;
            poll_one(it);
            if (R.n == 0)
                idle_since = ccap_now_ms();
            continue;
        }
        until = R.len > 0 ? R.heap[0]->at : idle_since + CCAP_QRUN_IDLE_S * 1000LL;
        struct timespec ts = mono_ts(until);
        pthread_cond_timedwait(&R.cv, &R.mu, &ts);
    }
    R.running = false;
    pthread_mutex_unlock(&R.mu);
    return NULL;
}

/* The runner runs, started now if it was not (or had just ended). Under mu. */
static bool up_locked(void)
{
    if (!R.cv_ready)
        cv_init();
    if (!R.running && ccap_rt.hooks.spawn)
        R.running = ccap_rt.hooks.spawn(run, NULL);
    return R.running;
}

bool ccap_qrun_start(void)
{
    bool up;

    pthread_mutex_lock(&R.mu);
    up = up_locked();
    pthread_mutex_unlock(&R.mu);
    return up;
}

bool ccap_qrun_add(struct ccap_qrun_item *it)
{
    bool ok = false;

    it->hidx = -1;
    it->kicked = false;
    ccap_rt_wait_on_kick(it->ws, kick, it);
    pthread_mutex_lock(&R.mu);
    if (up_locked() && R.n == R.cap) { /* room for every wait: the one being polled goes back */
        int cap = R.cap ? 2 * R.cap : 64;
        struct ccap_qrun_item **h = realloc(R.heap, (size_t)cap * sizeof *h);
        if (h) {
            R.heap = h;
            R.cap = cap;
        }
    }
    if (R.running && R.n < R.cap) {
        it->at = 0;
        it->seq = ++R.seq;
        heap_push(it);
        R.n++;
        pthread_cond_signal(&R.cv);
        ok = true;
    }
    pthread_mutex_unlock(&R.mu);
    if (!ok)
        ccap_rt_wait_on_kick(it->ws, NULL, NULL);
    return ok;
}

int ccap_qrun_count(void)
{
    int n;

    pthread_mutex_lock(&R.mu);
    n = R.n;
    pthread_mutex_unlock(&R.mu);
    return n;
}

void ccap_qrun_fork_child(void)
{
    pthread_mutex_init(&R.mu, NULL);
    cv_init();
    R.running = false;
    free(R.heap);
    R.heap = NULL;
    R.len = R.cap = R.n = 0;
}
