/* waiting.c -- a connect's wait for a permit: fair queue, tokens from the process's waker, rate, deadline, on_redis_down. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "breaker.h"
#include "cleanup.h"
#include "clock.h"
#include "holder.h"
#include "log.h"
#include "nap.h"
#include "queued.h"
#include "reload.h"
#include "rt_int.h"
#include "sem.h"
#include "wait.h"
#include "waiting.h"

#define WAIT_DOWN_NAP_MS 50     /* Redis down and the local limit full: re-check this often */
#define WAIT_ALIVE_MS 1000      /* a queued connect: looks this often whether its descriptor is still open */
#define WAIT_ALIVE_RATE 200     /* ... but all of a process's queued connects together at most this often a second */
#define WAIT_TICKET_MIN_MS 3000 /* the shortest ticket TTL (short leases) */
#define WAIT_INTERRUPTED CCAP_WAIT_INTERRUPTED /* step(): a handler without SA_RESTART interrupted a sleep */
#define REFUSAL_LOG_MS 10000 /* a semaphore's refusals: one line this often, the others counted in it */

/* One wait: what the attempts carry from one to the next. */
struct ccap_wait {
    const struct ccap_config *cfg;
    const struct ccap_sem_conf *s;
    size_t sem;
    struct ccap_permit *p;
    bool at_once;    /* a non-blocking connect that was not to wait at all */
    bool heap;       /* allocated by ccap_rt_wait_start: freed by ccap_rt_wait_resume */
    bool in_redis;   /* Redis may keep a ticket or a permit of P's holder id */
    bool left_queue; /* the last attempt left the queue */
    bool joined;     /* W is registered with the waker */
    bool unjoinable; /* no waker for W: poll */
    bool granted;    /* a grant token came: Redis admitted P's holder id (release.lua) */
    bool sleep_next; /* the last attempt was refused, its sleep not taken yet (step without BLOCK) */
    int flags;       /* CCAP_WAIT_PROGRAM, CCAP_WAIT_INTR: how the thread that runs it now waits */
    int fail_errno;
    struct sockaddr_in6 dest; /* the connect's destination (an AF_INET one fits too), for its log line */
    socklen_t dest_len;
    long long start, deadline, last_ms; /* monotonic ms; LAST_MS: the last attempt's end */
    long long yield_at;                 /* monotonic ms, 0 none: ccap_rt_wait_yield_at */
    long long down_at;                  /* monotonic ms: the nap redis_down left to a step without BLOCK */
    bool napping;                       /* polled (ccap_rt_wait_poll): its sleep is armed, UNTIL..LOOK_AT set */
    long long until, poll_at, look_at;  /* polled: the sleep's end, a re-check while a token may be missed,
                                         * the next look at its descriptor */
    bool yielded;                       /* the last interruption was YIELD_AT's */
    struct ccap_sem_req q;
    struct ccap_sem_result res;
    struct ccap_waiter w;
    struct ccap_nap nap;   /* every sleep of the wait; the waker kicks it */
    atomic_bool execd;     /* an exec or exit released P's holder id (ccap_rt_waits_drop) */
    atomic_bool cancelled; /* ccap_rt_wait_cancel: the descriptor is gone */
    unsigned long long id; /* for ccap_rt_wait_cancel (never reused) */
    bool (*alive)(void *); /* a queued connect: false once its descriptor is gone */
    void *alive_arg;
    struct ccap_wait *next; /* in the process's list of waits */
};

/* The waits in progress in this process, for an exec. Lock order: waits_lock
 * before rlock. */
static pthread_mutex_t waits_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ccap_wait *waits_head;

static void waits_add(struct ccap_wait *ws)
{
    pthread_mutex_lock(&waits_lock);
    ws->next = waits_head;
    waits_head = ws;
    pthread_mutex_unlock(&waits_lock);
}

static void waits_remove(struct ccap_wait *ws)
{
    pthread_mutex_lock(&waits_lock);
    for (struct ccap_wait **pp = &waits_head; *pp; pp = &(*pp)->next) {
        if (*pp == ws) {
            *pp = ws->next;
            break;
        }
    }
    pthread_mutex_unlock(&waits_lock);
}

/* How long a waiter's ticket lives unless refreshed: about a lease. A live
 * waiter refreshes it at 2/3 of that (block), so one re-check per 2/3
 * lease at least keeps its place; a third of the TTL is left for a late
 * refresh. The ticket of a waiter that stopped waiting without leaving
 * (killed) expires at most one TTL after its last refresh, and the next
 * acquire of the semaphore then sweeps it and wakes who may go: a live
 * waiter's refresh at the latest, 2/3 TTL later. So a dead waiter holds the
 * queue at most 5/3 of the TTL (50 s with the default lease of 30 s). */
int ccap_rt_ticket_ttl_ms(const struct ccap_sem_conf *s)
{
    return s->lease_ms > WAIT_TICKET_MIN_MS ? s->lease_ms : WAIT_TICKET_MIN_MS;
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

/* One acquire attempt Q of semaphore S (index SEM) under rlock, on a master
 * whose failovers this process acted on: one found on the way (-ESTALE,
 * not run) is acted on first (failover.c), then the attempt is made there.
 * Returns 1 granted, 0 denied (*RES tells when to re-check), -errno; -EINTR
 * without any call when *EXECD is set by then: an exit or exec released this
 * holder id already (ccap_rt_waits_drop sets it, then takes rlock to send
 * the release), and an attempt after that release would queue a ticket
 * nobody gives back. */
static int try_acquire(const struct ccap_sem_conf *s, size_t sem, const struct ccap_sem_req *q,
                       struct ccap_sem_result *res, atomic_bool *execd)
{
    pthread_mutex_lock(&ccap_rt.rlock);
    int rc = -ECONNREFUSED;
    if (atomic_load(execd)) {
        pthread_mutex_unlock(&ccap_rt.rlock);
        return -EINTR;
    }
    if (!ccap_breaker_open()) {
        struct ccap_sem_req a = *q;
        for (int k = 0;; k++) {
            a.check_epoch = ccap_rt_epoch_of((int)sem, &a.epoch);
            rc = ccap_sem_acquire(ccap_rt.redis, ccap_rt.cfg->redis.key_prefix, s->name, &a, res);
            if (rc != -ESTALE)
                break;
            if (k == 4) { /* failing over again and again: as a master that cannot serve yet */
                rc = -EAGAIN;
                break;
            }
            if ((rc = ccap_rt_failover(s->name)) < 0)
                break;
        }
        if (rc == 0 && res->granted)
            ccap_rt_note_use((int)sem);
        else if (rc == 0)
            ccap_redis_reserve(ccap_rt.redis); /* the waker connects later: perhaps with no descriptor free */
        ccap_breaker_note(rc);
    }
    pthread_mutex_unlock(&ccap_rt.rlock);
    return rc < 0 ? rc : res->granted;
}

/* Redis is down (or refused the call): apply on_redis_down to a connect
 * of semaphore S (index SEM) for P; under "local", the process holds at
 * most local_limit permits of S, whoever granted them. Returns 1 granted (P is flagged
 * CCAP_PERMIT_LOCAL: the heartbeat registers it in Redis once Redis
 * answers, even above the limit, so the count tells the truth), 0 when
 * "local" is at local_limit (the caller may wait for a local permit, then
 * fails with on_timeout), or -ECONNREFUSED for "closed" -- at once, whatever
 * on_timeout is. Thread-safe: the local count is an atomic. */
static int down_grant(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p)
{
    switch (ccap_rt.cfg->on_redis_down) {
    case CCAP_DOWN_CLOSED: ccap_breaker_count(false); return -ECONNREFUSED;
    default: {
        /* the permits the process holds count too, those Redis granted before it went down among them:
         * HELD counts each once attached, LOCAL_USED the local ones from their grant */
        int used = atomic_fetch_add(&ccap_rt.local_used[sem], 1), held = atomic_load(&ccap_rt.held[sem]);
        if (ccap_rt.cfg->on_redis_down == CCAP_DOWN_LOCAL && (used > held ? used : held) >= s->local_limit) {
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
    if (!ccap_breaker_open() && ccap_sem_timeout(ccap_rt.redis, ccap_rt.cfg->redis.key_prefix, s->name, holder,
                                                 waited, ccap_rt_audit_maxlen()) < 0)
        ccap_log(CCAP_LOG_DEBUG, "timeout of %s not counted: %s", holder, ccap_redis_errstr(ccap_rt.redis));
    pthread_mutex_unlock(&ccap_rt.rlock);
}

/* P's attempts may have left Redis a ticket in the queue, or a permit
 * that no socket will own (an attempt whose reply was lost ran late): its
 * holder id is released as a closed permit's is -- kept, and sent again
 * until Redis ran it -- and P gets a fresh id (renew_holder_id). The
 * released id is never used again: its release may reach Redis after a
 * later attempt would. Kept for two leases: the permit of an attempt Redis
 * runs late lives a lease from then. */
static void release_holder_id(const struct ccap_permit *p)
{
    pthread_mutex_lock(&ccap_rt.rlock);
    ccap_rt_release_kept(p->sem, ccap_config_sem_index(ccap_rt.cfg, p->sem), p->holder, false,
                         ccap_now_ms() + 2LL * p->lease_ms);
    pthread_mutex_unlock(&ccap_rt.rlock);
}

/* The rest of dropping P's holder id, once nobody else reads it (the wait
 * is out of the process's list): P gets a fresh id, the heartbeat is woken
 * to send the release if Redis did not take it. */
static void renew_holder_id(struct ccap_permit *p)
{
    ccap_rt_next_holder(p);
    ccap_rt_kick();
}

bool ccap_rt_waits_drop(void)
{
    bool any = false;
    pthread_mutex_lock(&waits_lock);
    for (struct ccap_wait *ws = waits_head; ws; ws = ws->next) {
        if (atomic_exchange(&ws->execd, true))
            continue; /* released by an exec that failed; the waiter has not gone on yet */
        pthread_mutex_lock(&ccap_rt.rlock);
        ccap_rt_release_kept(ws->p->sem, ccap_config_sem_index(ccap_rt.cfg, ws->p->sem), ws->p->holder, false,
                             ccap_now_ms() + 2LL * ws->p->lease_ms);
        pthread_mutex_unlock(&ccap_rt.rlock);
        any = true;
    }
    pthread_mutex_unlock(&waits_lock);
    return any;
}

void ccap_rt_waits_nudge(void)
{
    pthread_mutex_lock(&waits_lock);
    for (struct ccap_wait *ws = waits_head; ws; ws = ws->next)
        ccap_waiter_nudge(&ws->w); /* a no-op for a wait not registered with a waker */
    pthread_mutex_unlock(&waits_lock);
}

void ccap_rt_waits_exec_failed(void)
{
    pthread_mutex_lock(&waits_lock);
    for (struct ccap_wait *ws = waits_head; ws; ws = ws->next)
        if (atomic_load(&ws->execd))
            ccap_waiter_nudge(&ws->w);
    pthread_mutex_unlock(&waits_lock);
}

void ccap_rt_waits_fork_prepare(void)
{
    pthread_mutex_lock(&waits_lock);
}

void ccap_rt_waits_fork_parent(void)
{
    pthread_mutex_unlock(&waits_lock);
}

void ccap_rt_waits_fork_child(void)
{
    pthread_mutex_init(&waits_lock, NULL);
    for (struct ccap_wait *ws = waits_head; ws; ws = ws->next) {
        int fd = atomic_exchange(&ws->nap.fd, -1);
        if (fd >= 0)
            close(fd); /* the child's copy of a waiting thread's timerfd */
    }
    waits_head = NULL; /* the waiting threads stayed in the parent */
}

/* An exec that failed released P's holder id (ccap_rt_waits_drop): the
 * wait goes on with a fresh id and a new ticket, joined again under it.
 * Returns false when the process is exiting instead: the wait must end
 * without queueing again (no ticket may outlive the process). */
static bool after_exec(struct ccap_wait *ws)
{
    if (!atomic_exchange(&ws->execd, false))
        return true;
    ws->in_redis = false;
    ws->granted = false; /* granted to the holder id released */
    if (atomic_load(&ccap_rt.shutting_down))
        return false;
    ccap_rt_next_holder(ws->p);
    if (ws->joined) {
        ccap_waiter_leave(&ws->w);
        ws->joined = false;
    }
    return true;
}

/* Pushes one token to list KEY (the waker's poke list, named as a wake
 * list: the worker ACL's LPUSH and PEXPIRE on wake lists cover it; TTL 60
 * s) on the shared connection, unless the circuit is open. Returns 0 or
 * -errno (-ECONNREFUSED: circuit open). Takes rlock. */
static int poke_waker(const char *key)
{
    const char *push[] = { "LPUSH", key, "p" }, *ttl[] = { "PEXPIRE", key, "60000" };
    redisReply *rep = NULL;
    int rc = -ECONNREFUSED;

    pthread_mutex_lock(&ccap_rt.rlock);
    if (!ccap_breaker_open()) {
        rc = ccap_redis_command(ccap_rt.redis, 3, push, &rep);
        if (rc == 0) {
            freeReplyObject(rep);
            rc = ccap_redis_command(ccap_rt.redis, 3, ttl, &rep);
            if (rc == 0)
                freeReplyObject(rep);
        }
        ccap_breaker_note(rc);
    }
    pthread_mutex_unlock(&ccap_rt.rlock);
    return rc;
}

static atomic_ullong wait_ids;

/* MODE: how a connect waits (enum ccap_wait_mode, waiting.h). */
static void wait_init(struct ccap_wait *ws, const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p,
                      const struct sockaddr *sa, socklen_t len, int mode)
{
    int wait_ms;

    memset(ws, 0, sizeof *ws);
    ccap_nap_init(&ws->nap);
    ws->cfg = ccap_rt_config();
    ws->s = s;
    ws->sem = sem;
    ws->p = p;
    ws->id = atomic_fetch_add(&wait_ids, 1) + 1;
    ws->dest_len = len < sizeof ws->dest ? len : sizeof ws->dest;
    memcpy(&ws->dest, sa, ws->dest_len);
    wait_ms = mode == CCAP_WAIT_AT_ONCE ? 0 : s->wait_timeout_ms;
    ws->at_once = mode == CCAP_WAIT_AT_ONCE;
    ws->fail_errno = mode == CCAP_WAIT_AT_ONCE || mode == CCAP_WAIT_NONBLOCK ? ws->cfg->nonblocking_errno
                                                                             : ws->cfg->on_timeout_errno;
    ws->start = ccap_now_ms();
    ws->deadline = ws->start + wait_ms;
    ws->q = (struct ccap_sem_req){ .holder = p->holder,
                                   .lease_ms = s->lease_ms,
                                   .limit = s->limit,
                                   .ticket_ttl_ms = wait_ms > 0 ? ccap_rt_ticket_ttl_ms(s) : 0,
                                   .rate = s->rate,
                                   .burst = s->burst,
                                   .grace_ms = s->restart_grace_ms,
                                   .max_waiters = s->max_waiters,
                                   .audit_maxlen = ccap_rt_audit_maxlen() };
}

/* A reload replaced the configuration while this connect waits: its
 * next attempts ask with the semaphore's limit, rate, burst and
 * max_waiters in force (a raised limit lets it in at once), not the ones
 * it started with. Its lease, deadline and errno stay the connect's. The
 * old configuration outlives the wait (runtime/reload.c's grace). */
static void follow_reload(struct ccap_wait *ws)
{
    const struct ccap_config *cfg = ccap_rt_config();
    int i;

    if (!cfg || cfg == ws->cfg || (i = ccap_config_sem_index(cfg, ws->s->name)) < 0)
        return;
    ws->cfg = cfg;
    ws->s = &cfg->sems[i];
    ws->q.limit = ws->s->limit;
    ws->q.rate = ws->s->rate;
    ws->q.burst = ws->s->burst;
    ws->q.max_waiters = ws->s->max_waiters;
}

/* One acquire attempt; the one at the deadline leaves the queue. Returns
 * 1 granted, 0 denied (ws->res says when to re-check), -errno. */
static int attempt(struct ccap_wait *ws)
{
    long long t = ccap_now_ms();
    int rc;

    follow_reload(ws);
    ws->q.waited_ms = t - ws->start;
    ws->q.wait_left_ms = ws->deadline - t;
    ws->q.flags = t >= ws->deadline && ws->q.ticket_ttl_ms > 0 ? CCAP_SEM_LEAVE : 0;
    /* a waiter its waker serves takes grants (a poller would sit on one) */
    if (!ws->q.flags && ws->q.ticket_ttl_ms > 0 && !ws->unjoinable && !(ws->q.rate > 0))
        ws->q.flags = CCAP_SEM_GRANTS;
    rc = try_acquire(ws->s, ws->sem, &ws->q, &ws->res, &ws->execd);
    ws->left_queue = ws->q.flags & CCAP_SEM_LEAVE;
    if (rc != 1)
        ws->in_redis = rc < 0 ? ws->in_redis || may_have_run(rc) : ws->q.ticket_ttl_ms > 0 && !ws->left_queue;
    ws->last_ms = ccap_now_ms();
    return rc;
}

/* Sleeps until UNTIL (monotonic ms) or a kick. Returns 0, or
 * WAIT_INTERRUPTED when a handler without SA_RESTART interrupted it and the
 * wait is to end on that (CCAP_WAIT_INTR); other interruptions are
 * restarted as SA_RESTART would. */
static int nap(struct ccap_wait *ws, long long until)
{
    return ccap_nap_sleep(&ws->nap, until) == -EINTR && (ws->flags & CCAP_WAIT_INTR) ? WAIT_INTERRUPTED : 0;
}

/* An attempt failed with Redis down: on_redis_down decides. Returns 1
 * granted locally, -errno to fail, or 0 (after a nap if NAP) to try again,
 * WAIT_INTERRUPTED if that nap was. */
static int redis_down(struct ccap_wait *ws, bool may_nap)
{
    long long t = ccap_now_ms();
    int rc = down_grant(ws->s, ws->sem, ws->p);

    if (rc == 0 && t >= ws->deadline) {
        ccap_breaker_count(false);
        ccap_log(CCAP_LOG_WARN, "redis down and local_limit %d of %s reached for %lld ms: connect fails with %s",
                 ws->s->local_limit, ws->s->name, t - ws->start, ccap_errno_name(ws->fail_errno));
        return -ws->fail_errno;
    }
    long long again = ws->deadline - t < WAIT_DOWN_NAP_MS ? ws->deadline : t + WAIT_DOWN_NAP_MS;
    if (rc == 0 && may_nap)
        rc = nap(ws, again);
    else if (rc == 0)
        ws->down_at = again; /* a polled wait's runner sleeps it */
    return rc;
}

/* Logs the refusal of WS's connect: WHAT (why), its destination (with the
 * host name its rule matched by, when it did by one), the holders, limit
 * and queue length of Redis's last reply, then how the connect fails (THEN,
 * and the errno). At most one line per semaphore per REFUSAL_LOG_MS: the
 * refusals held back meanwhile are counted in the next line ("(N more
 * since)"), or at exit and exec (ccap_rt_log_flush). */
static void log_refusal(struct ccap_wait *ws, const char *what, const char *then)
{
    const struct sockaddr *sa = (const struct sockaddr *)&ws->dest;
    char dest[INET6_ADDRSTRLEN + 16], name[256], queue[24] = "?", more[48] = "";
    unsigned held = 0;

    if (ccap_rt.refusal_log &&
        !ccap_log_every(&ccap_rt.refusal_log[ws->sem], ccap_now_coarse_ms(), REFUSAL_LOG_MS, &held))
        return;
    ccap_holder_dest(dest, sizeof dest, sa);
    ccap_live_match_name(ws->cfg, sa, ws->dest_len, name, sizeof name);
    if (ws->res.queue_len >= 0)
        snprintf(queue, sizeof queue, "%lld", ws->res.queue_len);
    if (held)
        snprintf(more, sizeof more, " (%u more since)", held);
    ccap_log(CCAP_LOG_WARN, "%s for %s%s%s%s: holders %lld/%lld, queue %s: %s with %s%s", what, dest,
             name[0] ? " (" : "", name, name[0] ? ")" : "", ws->res.count, ws->res.limit, queue, then,
             ccap_errno_name(ws->fail_errno), more);
}

void ccap_rt_log_flush(void)
{
    const struct ccap_config *cfg = ccap_rt.cfg;

    for (size_t i = 0; ccap_rt.refusal_log && cfg && i < cfg->n_sems; i++) {
        unsigned n = ccap_log_every_take(&ccap_rt.refusal_log[i]);
        if (n)
            ccap_log(CCAP_LOG_WARN, "%u more refusals of %s since its last line (one line per %d s)", n,
                     cfg->sems[i].name, REFUSAL_LOG_MS / 1000);
    }
    ccap_log_flush();
}

/* Redis said no at the deadline: logs, and counts the timeout unless the
 * connect was not to wait (the acquire counted it as denied, and a second
 * round trip would stall its event loop). Returns -fail_errno. */
static int refuse(struct ccap_wait *ws)
{
    const struct ccap_sem_conf *s = ws->s;
    char what[CCAP_SEM_NAME_MAX + 64];

    if (ws->at_once) {
        snprintf(what, sizeof what, "no permit of %s free (nonblocking = \"fail\")", s->name);
        log_refusal(ws, what, "non-blocking connect fails at once");
        return -ws->fail_errno;
    }
    report_timeout(s, ws->p->holder, ccap_now_ms() - ws->start);
    snprintf(what, sizeof what, "no permit of %s within %d ms", s->name, s->wait_timeout_ms);
    log_refusal(ws, what, "connect fails");
    return -ws->fail_errno;
}

/* The queue holds max_waiters tickets already: the connect fails at once
 * (load is shed, not piled up; acquire.lua counted it). Returns -fail_errno. */
static int shed(struct ccap_wait *ws)
{
    char what[CCAP_SEM_NAME_MAX + 64];

    snprintf(what, sizeof what, "queue of %s full (max_waiters %d)", ws->s->name, ws->s->max_waiters);
    log_refusal(ws, what, "connect fails at once");
    return -ws->fail_errno;
}

/* Registers the waiter with its process's waker (once per wait), or arms
 * it again after a token (runtime/wait.h), and pokes the waker when it asks
 * for it. */
static void join(struct ccap_wait *ws)
{
    char poke[CCAP_WAIT_KEY_MAX];
    const char *prefix = ws->cfg->redis.key_prefix;
    int rc;

    if (ws->joined) {
        if (ccap_waiter_arm(&ws->w, poke, sizeof poke) == 1 && poke_waker(poke) < 0)
            ccap_waiter_poke_failed(&ws->w);
        return;
    }
    rc = ccap_sem_wake_key(ws->w.key, sizeof ws->w.key, prefix, ws->s->name, ws->p->holder);
    if (rc >= 0)
        rc = ccap_waiter_join(&ws->w, &ws->nap, &ws->cfg->redis, prefix, ws->s->name, poke, sizeof poke);
    if (rc < 0) {
        static atomic_bool told; /* an operator learns it once: waits are slow then (RLIMIT_NPROC, pids.max) */
        ccap_log(atomic_exchange(&told, true) ? CCAP_LOG_DEBUG : CCAP_LOG_WARN,
                 "no waker for %s (%s: no thread or Redis connection for it): its wait re-checks every %d ms, "
                 "and a permit freed meanwhile waits for it",
                 ws->p->holder, strerror(-rc), CCAP_WAIT_POLL_MS);
        ws->unjoinable = true;
        return;
    }
    ws->joined = true;
    if (ccap_rt.hooks.waiting)
        ccap_rt.hooks.waiting(); /* reloads must reach this wait even if the program makes no other call */
    if (rc == 1 && poke_waker(poke) < 0)
        ccap_waiter_poke_failed(&ws->w);
}

/* True once the wait was cancelled, or its descriptor found gone (the
 * program closed it behind the shim's back): the wait then ends. */
static bool gone(struct ccap_wait *ws)
{
    if (!atomic_load(&ws->cancelled) && ws->alive && !ws->alive(ws->alive_arg))
        atomic_store(&ws->cancelled, true);
    return atomic_load(&ws->cancelled);
}

/* How often a queued connect's thread looks whether its descriptor is
 * still open (a close the shim's hooks saw ends its wait at once; this
 * finds the others): WAIT_ALIVE_MS, stretched so that the process's
 * queued connects together wake at most WAIT_ALIVE_RATE times a second (a
 * thread each: 10,000 queued ones would otherwise be 10,000 wake-ups a
 * second, most of the process's CPU, and Redis preempted in its calls). */
static long long alive_every_ms(void)
{
    long long live = atomic_load_explicit(&ccap_q_live, memory_order_relaxed);
    long long every = live * 1000 / WAIT_ALIVE_RATE;

    return every > WAIT_ALIVE_MS ? every : WAIT_ALIVE_MS;
}

/* The next re-check of WS's sleep: the rate's next slot, the earliest lease
 * end, the ticket's refresh, or the deadline (monotonic ms). */
static long long sleep_until(const struct ccap_wait *ws)
{
    long long until = ws->deadline, t = ws->last_ms;
    long long refresh = t + ws->q.ticket_ttl_ms * 2LL / 3;

    if (ws->res.retry_ms > 0 && t + ws->res.retry_ms < until)
        until = t + ws->res.retry_ms;
    if (ws->res.wake_ms >= 0 && t + ws->res.wake_ms + 1 < until)
        until = t + ws->res.wake_ms + 1;
    if (refresh < until)
        until = refresh;
    if (ws->yield_at > 0 && (ws->flags & CCAP_WAIT_INTR) && ws->yield_at < until)
        until = ws->yield_at;
    return until;
}

/* Sleeps until the next re-check: a token, a failed waker, the rate's next
 * slot, the earliest lease end, the ticket's refresh, or the deadline.
 * Returns 0, or WAIT_INTERRUPTED (see nap). In a program's thread the nap
 * has a timerfd: its sleeps are the program's (runtime/nap.h); in the
 * queue's it is a shim thread's (a lone waiter there blocks on its wake
 * list itself, its looks at the descriptor soft slices of that block). */
static int block(struct ccap_wait *ws)
{
    long long until = sleep_until(ws), t;
    int woke;

    if (ws->flags & CCAP_WAIT_PROGRAM)
        ccap_nap_want_fd(&ws->nap); /* its sleeps are the program's: a timerfd, made at the first */
    else
        ccap_nap_shim(&ws->nap); /* the queue's thread: alone, it blocks on its wake list itself */
    if (!ws->unjoinable)
        join(ws);
    if (!ws->joined) {
        t = ccap_now_ms();
        int rc = nap(ws, until < t + CCAP_WAIT_POLL_MS ? until : t + CCAP_WAIT_POLL_MS);
        gone(ws);
        return rc;
    }
    for (;;) {
        long long slice = until, every = alive_every_ms();
        if (ws->alive && ccap_now_ms() + every < until)
            slice = ccap_now_ms() + every;
        ws->w.soft = slice < until; /* only a look at the descriptor is due then: it may come late */
        woke = ccap_waiter_wait(&ws->w, slice);
        if (woke & CCAP_WOKE_GRANT)
            ws->granted = true; /* kept through an interruption: a resumed wait takes it */
        if ((woke & CCAP_WOKE_SIGNAL) && (ws->flags & CCAP_WAIT_INTR))
            return WAIT_INTERRUPTED;
        if ((woke & ~CCAP_WOKE_SIGNAL) || slice >= until || gone(ws))
            return 0;
    }
}

/* A grant token came (release.lua made P's holder id a holder, with its
 * ticket's lease): the permit is taken without another acquire, unless an
 * exit or exec released that holder id meanwhile (checked under rlock, as
 * try_acquire does: -EINTR then, and after_exec says what next). Returns 1
 * or -EINTR. */
static int take_grant(struct ccap_wait *ws)
{
    int rc = 1;

    ws->granted = false;
    pthread_mutex_lock(&ccap_rt.rlock);
    if (atomic_load(&ws->execd))
        rc = -EINTR;
    else
        ccap_rt_note_use((int)ws->sem);
    pthread_mutex_unlock(&ccap_rt.rlock);
    return rc;
}

/* One pass of a wait: an attempt, then (if BLOCK) the sleep until the next
 * re-check. Returns 1 granted, -errno to end, 0 to go on, WAIT_INTERRUPTED
 * (the wait still in progress). */
static int step(struct ccap_wait *ws, bool block_ok)
{
    int rc;

    if (!after_exec(ws))
        return -ws->fail_errno; /* the process is exiting */
    if (atomic_load(&ws->cancelled))
        return -ECANCELED; /* a grant too: wait_end releases the holder id */
    if (ws->granted && take_grant(ws) == 1)
        return 1;
    rc = attempt(ws);
    if (rc == -EINTR)
        return 0; /* an exit or exec released the holder id meanwhile: after_exec says what next */
    if (rc == 1)
        return 1;
    if (rc == 0 && ws->res.queue_full)
        return shed(ws);
    if (rc < 0)
        return redis_down(ws, block_ok); /* 1 granted, 0 local limit full, -errno */
    if (ccap_now_ms() >= ws->deadline) {
        if (!ws->left_queue && ws->q.ticket_ttl_ms > 0)
            return 0; /* one last attempt, leaving the queue */
        return refuse(ws);
    }
    if (ws->yield_at > 0 && (ws->flags & CCAP_WAIT_INTR) && ccap_now_ms() >= ws->yield_at) {
        ws->yielded = true;
        return WAIT_INTERRUPTED; /* the caller's own bound: the wait goes on elsewhere */
    }
    if (!block_ok)
        ws->sleep_next = true; /* the resumed wait sleeps first: an attempt now would be refused again */
    return block_ok ? block(ws) : 0;
}

/* The end of wait WS with result RC: its holder id released if Redis may
 * keep a ticket of it, then out of the process's list and its waker. In
 * that order: an exit (ccap_rt_waits_drop) releases the tickets of the
 * waits still listed, and may end the process while this thread runs; a
 * wait out of the list must have its release written already (a release
 * both made is harmless). */
static int wait_end(struct ccap_wait *ws, int rc)
{
    struct ccap_permit *p = ws->p;

    bool drop;

    if (atomic_load(&ws->execd))
        ws->in_redis = false; /* its holder id is released already */
    drop = ws->in_redis && (rc != 1 || (p->flags & CCAP_PERMIT_LOCAL));
    if (drop)
        release_holder_id(p);
    waits_remove(ws);
    if (drop)
        renew_holder_id(p); /* out of the list: an exit reads the id no more */
    if (ws->joined)
        ccap_waiter_leave(&ws->w);
    ws->joined = false;
    ccap_nap_destroy(&ws->nap); /* nobody kicks it now: out of the list and the waker */
    return rc;
}

/* A program's thread was cancelled in one of WS's sleeps (the only points
 * where its cancellation is enabled and its signals are not held), or a
 * signal handler's longjmp left one: the wait ends as a failed one -- out of
 * the process's list and its waker, its ticket released -- and its permit,
 * never granted, is freed, before the thread unwinds on into the program's
 * own cleanup handlers. */
static void wait_cancelled(void *arg)
{
    struct ccap_wait *ws = arg;

    ccap_nap_unwinding();
    wait_end(ws, -ECANCELED);
    free(ws->p);
    if (ws->heap)
        free(ws);
    ccap_nap_unwound();
}

/* Steps WS until it ends or is interrupted, FLAGS saying how this thread
 * waits. Returns as step (never 0). */
static int run(struct ccap_wait *ws, int flags)
{
    int rc;

    ws->flags = flags;
    CCAP_CLEANUP_PUSH(wait_cancelled, ws);
    rc = 0;
    if (ws->sleep_next && !atomic_load(&ws->cancelled) && !atomic_load(&ws->execd))
        rc = block(ws); /* (cancelled, or its id released: step ends it or goes on at once) */
    ws->sleep_next = false;
    while (rc == 0 && (rc = step(ws, true)) == 0) {
    }
    CCAP_CLEANUP_POP(0);
    return rc;
}

int ccap_rt_wait_for_permit(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p,
                            const struct sockaddr *sa, socklen_t len, int mode, int flags)
{
    struct ccap_wait ws;
    int rc;

    wait_init(&ws, s, sem, p, sa, len, mode);
    waits_add(&ws);
    rc = run(&ws, flags & ~CCAP_WAIT_INTR);
    return wait_end(&ws, rc);
}

/* FIRST (on the caller's stack, in the list of waits, never joined to a
 * waker: step(false) does not sleep) becomes a heap copy, swapped into the
 * list under its lock, so that an exec's ccap_rt_waits_drop or a cancel sees
 * one or the other. Its nap is made afresh (a condition is not copied).
 * Returns the copy, or NULL (out of memory: FIRST is left as it is). */
static struct ccap_wait *to_heap(struct ccap_wait *first)
{
    struct ccap_wait *ws = malloc(sizeof *ws);

    if (!ws)
        return NULL;
    pthread_mutex_lock(&waits_lock);
    memcpy(ws, first, sizeof *ws);
    ccap_nap_init(&ws->nap);
    ws->heap = true;
    for (struct ccap_wait **pp = &waits_head; *pp; pp = &(*pp)->next) {
        if (*pp == first) {
            *pp = ws;
            break;
        }
    }
    pthread_mutex_unlock(&waits_lock);
    ccap_nap_destroy(&first->nap);
    return ws;
}

int ccap_rt_wait_start(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p, const struct sockaddr *sa,
                       socklen_t len, struct ccap_wait **out)
{
    struct ccap_wait first;
    int rc;

    /* a permit free at the first attempt (the usual case) costs no
     * allocation: only a wait that goes on moves to the heap */
    *out = NULL;
    wait_init(&first, s, sem, p, sa, len, CCAP_WAIT_BLOCK);
    waits_add(&first);
    rc = step(&first, false);
    if (rc == 0 && !(*out = to_heap(&first)))
        rc = run(&first, CCAP_WAIT_PROGRAM); /* out of memory: it waits here */
    return rc == 0 ? 0 : wait_end(&first, rc);
}

void ccap_rt_wait_yield_at(struct ccap_wait *ws, long long at_ms)
{
    ws->yield_at = at_ms;
    ws->yielded = false;
}

bool ccap_rt_wait_yielded(const struct ccap_wait *ws)
{
    return ws->yielded;
}

unsigned long long ccap_rt_wait_id(const struct ccap_wait *ws)
{
    return ws->id;
}

void ccap_rt_wait_watch(struct ccap_wait *ws, bool (*alive)(void *), void *arg)
{
    ws->alive = alive;
    ws->alive_arg = arg;
}

int ccap_rt_wait_resume(struct ccap_wait *ws, int flags)
{
    int rc = run(ws, flags);

    if (rc == WAIT_INTERRUPTED)
        return CCAP_WAIT_INTERRUPTED; /* still in progress: the caller hands it on or abandons it */
    rc = wait_end(ws, rc);
    free(ws);
    return rc;
}

void ccap_rt_wait_abandon(struct ccap_wait *ws)
{
    wait_end(ws, -EINTR);
    free(ws);
}

void ccap_rt_wait_cancel(unsigned long long id)
{
    pthread_mutex_lock(&waits_lock);
    for (struct ccap_wait *ws = waits_head; ws; ws = ws->next) {
        if (ws->id == id) {
            atomic_store(&ws->cancelled, true);
            ccap_waiter_nudge(&ws->w);
            ccap_nap_kick(&ws->nap); /* also a wait that sleeps without a waker */
        }
    }
    pthread_mutex_unlock(&waits_lock);
}

void ccap_rt_wait_on_kick(struct ccap_wait *ws, void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&waits_lock); /* a cancel's kick reads it under this lock */
    ccap_nap_on_kick(&ws->nap, fn, arg);
    pthread_mutex_unlock(&waits_lock);
}

/* A polled WS's sleep begins (after a refused attempt): what ends it is
 * set, and WS joins its waker (or arms again) as block() does. */
static void poll_arm(struct ccap_wait *ws, long long now)
{
    ws->until = sleep_until(ws);
    if (!ws->unjoinable)
        join(ws);
    ws->poll_at = now + CCAP_WAIT_POLL_MS;
    if (ws->alive && ws->look_at == 0)
        ws->look_at = now + alive_every_ms();
    ws->napping = true;
}

/* Whether polled WS's sleep is over at NOW: a token, a nudge or cancel, its
 * end, a re-check while a token may be missed, its descriptor gone. Else
 * *NEXT is when to look again. */
static bool poll_due(struct ccap_wait *ws, long long now, long long *next)
{
    bool must = true; /* not joined: polls, as block() does */
    int woke = ws->joined ? ccap_waiter_take(&ws->w, &must) : 0;

    if (woke & CCAP_WOKE_GRANT)
        ws->granted = true;
    if (woke || now >= ws->until || atomic_load(&ws->cancelled) || (must && now >= ws->poll_at))
        return true;
    if (ws->alive && now >= ws->look_at) {
        ws->look_at = now + alive_every_ms();
        if (gone(ws))
            return true;
    }
    *next = ws->until;
    if (must && ws->poll_at < *next)
        *next = ws->poll_at;
    if (ws->alive && ws->look_at < *next)
        *next = ws->look_at;
    return false;
}

int ccap_rt_wait_poll(struct ccap_wait *ws, long long *next_ms)
{
    long long now = ccap_now_ms();
    int rc;

    ws->flags = 0; /* a thread of the shim's: no signal, no cancel */
    if (ws->sleep_next) {
        if (!ws->napping)
            poll_arm(ws, now);
        if (!poll_due(ws, now, next_ms))
            return 0;
        ws->napping = false;
        ws->sleep_next = false;
    } else if (ws->down_at > now && !atomic_load(&ws->cancelled)) {
        *next_ms = ws->down_at;
        return 0;
    }
    ws->down_at = 0;
    rc = step(ws, false);
    if (rc == 0) {
        *next_ms = ws->down_at > 0 ? ws->down_at : now; /* a sleep is armed at the next poll */
        return 0;
    }
    rc = wait_end(ws, rc);
    free(ws);
    return rc;
}
