/* waiting.c -- waiting for a permit: attempts, the queue, blocking between them, on_redis_down while Redis is down. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <time.h>
#include "breaker.h"
#include "clock.h"
#include "log.h"
#include "rt_int.h"
#include "sem.h"
#include "wait.h"
#include "waiting.h"

#define WAIT_RECHECK_MS 1000   /* a waiter re-checks at least this often (wait.h) */
#define WAIT_DOWN_NAP_MS 50    /* Redis down and the local limit full: re-check this often */
#define WAIT_TICKET_SLACK_MS 500 /* a waiter's re-check may come this much late (ticket_ttl_ms) */

static void sleep_ms(long long ms)
{
    if (ms <= 0) return;
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}


/* One acquire attempt Q under rlock. Returns 1 granted, 0 denied (*RES
 * tells when to re-check), -errno. */
static int try_acquire(const struct ccap_sem_conf *s, const struct ccap_sem_req *q, struct ccap_sem_result *res)
{
    pthread_mutex_lock(&ccap_rt.rlock);
    int rc = -ECONNREFUSED;
    if (!ccap_breaker_open()) {
        rc = ccap_sem_acquire(ccap_rt.redis, ccap_rt.cfg->redis.key_prefix, s->name, q, res);
        ccap_breaker_note(rc);
    }
    pthread_mutex_unlock(&ccap_rt.rlock);
    return rc < 0 ? rc : res->granted;
}

/* Redis is down (or refused the call): apply on_redis_down to a connect
 * of semaphore S (index SEM) for P. Returns 1 granted (P is flagged
 * CCAP_PERMIT_LOCAL: the heartbeat registers it in Redis once Redis
 * answers, even above the limit, so the count tells the truth), 0 when
 * "local" is at local_limit (the caller may wait for a local permit, then
 * fails with on_timeout), or -ECONNREFUSED for "closed" -- at once, whatever
 * on_timeout is. Thread-safe: the local count is an atomic. */
static int redis_down(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p)
{
    switch (ccap_rt.cfg->on_redis_down) {
    case CCAP_DOWN_CLOSED:
        ccap_breaker_count(false);
        return -ECONNREFUSED;
    default: {
        int used = atomic_fetch_add(&ccap_rt.local_used[sem], 1);
        if (ccap_rt.cfg->on_redis_down == CCAP_DOWN_LOCAL && used >= s->local_limit) {
            atomic_fetch_sub(&ccap_rt.local_used[sem], 1);
            return 0;
        }
        p->flags |= CCAP_PERMIT_LOCAL;
        ccap_breaker_count(true);
        return 1;
    }
    }
}

/* Stats: HOLDER gave up on S after WAITED ms (best effort, under rlock). */
static void report_timeout(const struct ccap_sem_conf *s, const char *holder, long long waited)
{
    pthread_mutex_lock(&ccap_rt.rlock);
    if (!ccap_breaker_open() && ccap_sem_timeout(ccap_rt.redis, ccap_rt.cfg->redis.key_prefix, s->name, holder, waited,
                                                  ccap_rt_audit_maxlen()) < 0)
        ccap_log(CCAP_LOG_DEBUG, "timeout of %s not counted: %s", holder, ccap_redis_errstr(ccap_rt.redis));
    pthread_mutex_unlock(&ccap_rt.rlock);
}

/* Whether an attempt that failed with RC may have run in Redis all the
 * same: it was written, and what was lost is its reply (a timeout, a
 * connection lost after the write, a reply we could not read or parse).
 * Not when it was never sent (circuit open, connect refused, bad
 * arguments) or Redis refused to run it (-EAGAIN); any other error counts
 * as may-have-run, which costs at most one needless release. */
static bool may_have_run(int rc)
{
    return rc != -ECONNREFUSED && rc != -EAGAIN && rc != -EACCES && rc != -EINVAL && rc != -ENAMETOOLONG;
}

/* P's attempts may have left Redis a ticket in the queue, or a permit
 * that no socket will own (an attempt whose reply was lost ran late): its
 * holder id is released as a closed permit's is -- kept, and sent again
 * until Redis ran it -- and P gets a fresh id. The released id is never
 * used again: its release may reach Redis after a later attempt would.
 * Kept for two leases: the permit of an attempt Redis runs late lives a
 * lease from then. Wakes the heartbeat, which sends it once Redis answers. */
static void drop_holder_id(struct ccap_permit *p)
{
    pthread_mutex_lock(&ccap_rt.rlock);
    ccap_rt_release_kept(p->sem, ccap_config_sem_index(ccap_rt.cfg, p->sem), p->holder, ccap_now_ms() + 2LL * p->lease_ms);
    pthread_mutex_unlock(&ccap_rt.rlock);
    ccap_rt_next_holder(p);
    ccap_rt_kick();
}

/* True if this process holds a permit of semaphore SEM: one atomic load. */
static bool holds_permit(size_t sem)
{
    return atomic_load_explicit(&ccap_rt.held[sem], memory_order_relaxed) > 0;
}

/* Redis said no to HOLDER's connect after WAITED ms: logs, and counts the
 * timeout unless AT_ONCE (a non-blocking connect that was not to wait: the
 * acquire counted it as denied, and a second round trip would stall its
 * event loop). Returns -ERR. */
static int refuse(const struct ccap_sem_conf *s, const char *holder, long long waited, bool at_once, int err)
{
    if (at_once) {
        ccap_log(CCAP_LOG_WARN, "no permit of %s free: non-blocking connect fails at once with %s (nonblocking = %s)",
                 s->name, ccap_errno_name(err), ccap_rt.cfg->nonblocking == CCAP_NONBLOCK_FAIL ? "\"fail\"" :
                 "\"wait\", and this process holds one");
        return -err;
    }
    report_timeout(s, holder, waited);
    ccap_log(CCAP_LOG_WARN, "no permit of %s within %d ms: connect fails with %s", s->name, s->wait_timeout_ms,
             ccap_errno_name(err));
    return -err;
}

/* How long a waiter's ticket lives unless refreshed: a live waiter
 * refreshes it at every re-check, at most WAIT_RECHECK_MS apart plus a
 * command each way and WAIT_TICKET_SLACK_MS of scheduling; one late beyond
 * that loses its place in the queue (it lines up again at its next
 * re-check). A ticket whose owner stopped waiting without leaving (killed,
 * or its last re-check ran in Redis after it gave up) blocks the queue at
 * most that long: about one round of re-checks. */
static int ticket_ttl_ms(void)
{
    int cmd = ccap_rt.cfg->redis.command_timeout_ms > 0 ? ccap_rt.cfg->redis.command_timeout_ms : 200;
    return WAIT_RECHECK_MS + WAIT_TICKET_SLACK_MS + 2 * cmd;
}

/* Waits for a permit of S for P (no polling, FIFO order, the rate). Each
 * attempt is one acquire.lua call on the shared connection; in between the
 * thread blocks with BLPOP on its own wake list, on a connection of its own
 * (core/wait.c), until a token comes (a release, or an attempt that swept
 * expired leases or dead tickets, admits it), the rate's next slot, the
 * earliest lease expiry, WAIT_RECHECK_MS, or the deadline, whichever is
 * first; the deadline is kept here, not by Redis. The last attempt, at the
 * deadline, leaves the queue unless it gets the permit. A non-blocking
 * socket makes one attempt and no wait under nonblocking = "fail", and
 * under "wait" whenever this process holds a permit of S (an event loop
 * must not wait for permits only it can give back). Ending without a
 * permit Redis granted (a failure, or a local grant) while Redis may keep a
 * ticket or a permit of P's holder id, it releases that id and gives P a
 * new one (drop_holder_id). Returns 1 granted, or -errno: on_timeout's
 * (nonblocking_errno's for a non-blocking socket), or on_redis_down's. */
int ccap_rt_wait_for_permit(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p, int fd)
{
    int fl = fcntl(fd, F_GETFL);
    bool nonblock = fl >= 0 && (fl & O_NONBLOCK);
    bool guard = nonblock && ccap_rt.cfg->nonblocking == CCAP_NONBLOCK_WAIT;  /* stop waiting once it holds one */
    int wait_ms = nonblock && (!guard || holds_permit(sem)) ? 0 : s->wait_timeout_ms;
    int fail_errno = nonblock ? ccap_rt.cfg->nonblocking_errno : ccap_rt.cfg->on_timeout_errno;
    long long start = ccap_now_ms(), deadline = start + wait_ms;
    struct ccap_sem_req q = { .holder = p->holder, .lease_ms = s->lease_ms, .limit = s->limit,
                              .ticket_ttl_ms = wait_ms > 0 ? ticket_ttl_ms() : 0, .rate = s->rate,
                              .burst = s->burst, .grace_ms = s->restart_grace_ms,
                              .max_waiters = s->max_waiters, .audit_maxlen = ccap_rt_audit_maxlen() };
    struct ccap_sem_result res;
    struct ccap_redis *wc = NULL;
    char wake[640] = "";    /* made before the first block: most connects never wait */
    bool pending = false, can_block = true, reblocked = false, in_redis = false;
    int rc;
    for (;;) {
        long long t = ccap_now_ms();
        if (guard && t < deadline && holds_permit(sem)) deadline = t;   /* one last attempt */
        q.waited_ms = t - start;
        q.wait_left_ms = deadline - t;
        if (t >= deadline && q.ticket_ttl_ms > 0) q.flags |= CCAP_SEM_LEAVE;
        rc = try_acquire(s, &q, &res);
        if (pending) {          /* our BLPOP was ended by the attempt's own token (if it ran) */
            pending = false;
            if (rc < 0 ||
                ccap_wait_finish(wc, ccap_rt.cfg->redis.command_timeout_ms > 0 ? ccap_rt.cfg->redis.command_timeout_ms : 200) < 0) {
                ccap_wait_conn_put(wc, false);
                wc = NULL;
            }
        }
        bool left_queue = q.flags & CCAP_SEM_LEAVE;
        q.flags = 0;
        if (rc == 1) break;
        if (rc == 0 && res.queue_full) {    /* max_waiters queued already: shed at once */
            ccap_log(CCAP_LOG_WARN, "queue of %s full (max_waiters %d): connect fails at once with %s", s->name,
                     s->max_waiters, ccap_errno_name(fail_errno));
            rc = -fail_errno;
            break;
        }
        /* may Redis keep a ticket or a permit of this id? */
        in_redis = rc < 0 ? in_redis || may_have_run(rc) : q.ticket_ttl_ms > 0 && !left_queue;
        t = ccap_now_ms();
        if (rc < 0) {
            rc = redis_down(s, sem, p);     /* 1 granted, 0 local limit full, -errno */
            if (rc == 0 && t >= deadline) {
                ccap_breaker_count(false);
                ccap_log(CCAP_LOG_WARN, "redis down and local_limit %d of %s reached for %lld ms: connect fails with %s",
                         s->local_limit, s->name, t - start, ccap_errno_name(fail_errno));
                rc = -fail_errno;
            }
            if (rc != 0) break;
            sleep_ms(deadline - t < WAIT_DOWN_NAP_MS ? deadline - t : WAIT_DOWN_NAP_MS);
            continue;
        }
        if (t >= deadline) {
            if (!left_queue && q.ticket_ttl_ms > 0) continue;   /* one last attempt, leaving the queue */
            rc = refuse(s, p->holder, t - start, nonblock && wait_ms == 0, fail_errno);
            break;
        }
        long long block = deadline - t;
        if (block > WAIT_RECHECK_MS) block = WAIT_RECHECK_MS;
        if (res.retry_ms > 0 && res.retry_ms < block) block = res.retry_ms;
        if (res.wake_ms >= 0 && res.wake_ms + 1 < block) block = res.wake_ms + 1;
        if (can_block && !wake[0])
            can_block = ccap_sem_wake_key(wake, sizeof(wake), ccap_rt.cfg->redis.key_prefix, s->name, p->holder) > 0;
        if (can_block && !wc) wc = ccap_wait_conn_get(&ccap_rt.cfg->redis);
        int w = wc ? ccap_wait_block(wc, wake, (int)block) : -ENOMEM;
        if (w < 0 && wc && !reblocked) {
            /* a pooled connection the server closed (CLIENT KILL, its idle
             * timeout, a restart): once more on a new one, not a sleep */
            ccap_wait_conn_put(wc, false);
            reblocked = true;
            wc = ccap_wait_conn_get(&ccap_rt.cfg->redis);
            w = wc ? ccap_wait_block(wc, wake, (int)block) : -ENOMEM;
        }
        if (w >= 0) reblocked = false;
        if (w == 0) {
            pending = true;     /* the next attempt pushes a token to end it */
            q.flags |= CCAP_SEM_UNBLOCK;
        } else if (w < 0) {     /* no connection to block on: sleep instead */
            if (wc) ccap_wait_conn_put(wc, false);
            wc = NULL;
            can_block = false;
            sleep_ms(t + block - ccap_now_ms());
        }
    }
    if (wc) ccap_wait_conn_put(wc, rc == 1);
    if (in_redis && (rc != 1 || (p->flags & CCAP_PERMIT_LOCAL))) drop_holder_id(p);
    return rc;
}
