/* wait.c -- waiters' own Redis connections (a small pool) and their bounded BLPOP blocks. */
#include "wait.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Every connection made, lent or idle: a fork child must close its copies
 * of all of them. */
struct slot {
    struct ccap_redis *r;  /* NULL: free slot */
    bool lent;
    long long idle_since;  /* ms, monotonic, when not lent */
};

static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    struct slot s[CCAP_WAIT_MAX_CONNS];
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT };

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* fork(): the child must neither share the parent's sockets nor use a lock
 * some other thread held at fork time. Every connection is forgotten without
 * I/O (only the child's copies of the descriptors are closed) and freed:
 * lent ones belong to threads that the child does not have. */
static void fork_prepare(void) { pthread_mutex_lock(&P.lock); }
static void fork_parent(void) { pthread_mutex_unlock(&P.lock); }
static void fork_child(void)
{
    for (int i = 0; i < CCAP_WAIT_MAX_CONNS; i++) {
        if (!P.s[i].r)
            continue;
        ccap_redis_forget(P.s[i].r);
        ccap_redis_free(P.s[i].r);
        P.s[i].r = NULL;
    }
    pthread_mutex_unlock(&P.lock);
}

static void pool_init(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

struct ccap_redis *ccap_wait_conn_get(const struct ccap_redis_conf *conf)
{
    struct ccap_redis *r = NULL;
    int free_slot = -1;

    pthread_once(&P.once, pool_init);
    pthread_mutex_lock(&P.lock);
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
