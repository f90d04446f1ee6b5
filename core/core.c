/* core.c -- the shim's brain: config, rule match, permits, Redis, fallback. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "config.h"
#include "core.h"
#include "env.h"
#include "handoff.h"
#include "log.h"
#include "redis.h"
#include "reload.h"
#include "sem.h"
#include "wait.h"
#include "waiting.h"

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

#define CIRCUIT_MIN_MS 250
#define CIRCUIT_MAX_MS 5000

static struct {
    pthread_once_t once;
    struct ccap_core_hooks hooks;
    struct ccap_config *_Atomic cfg; /* NULL: not usable, pass everything through; swapped by reload.c */
    pthread_mutex_t rlock;       /* serialises use of the Redis connection */
    struct ccap_redis *redis;
    char host[64];
    unsigned nonce;
    atomic_ulong seq;
    /* circuit breaker, under rlock */
    bool down;
    long long retry_at_ms;
    int backoff_ms;
    long long down_since_ms;
    atomic_uint down_granted;    /* this outage: permits on_redis_down granted */
    atomic_uint down_refused;    /* this outage: connects it failed */
    atomic_int *local_used;      /* per semaphore, permits granted locally */
    atomic_int *held;            /* per semaphore, permits in this process's table (permit.h) */
    atomic_bool shutting_down;
} g = { .once = PTHREAD_ONCE_INIT, .rlock = PTHREAD_MUTEX_INITIALIZER };

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Per thread, seeded again in a fork child: prefork workers forked from one
 * thread must not draw the same jitter. */
static unsigned rand_u32(void)
{
    static _Thread_local unsigned s;
    static _Thread_local int seeded_pid;
    int pid = (int)getpid();
    if (!s || seeded_pid != pid) {
        s = (unsigned)now_ms() ^ (unsigned)pid ^ (unsigned)(uintptr_t)&s;
        s = s ? s : 1;
        seeded_pid = pid;
    }
    s ^= s << 13; s ^= s >> 17; s ^= s << 5;
    return s;
}

/* Lifecycle: who owns the state, where the Redis descriptor lives. The
 * owner is the process that created the state (ccap_core_claim), and after
 * a fork() the child (fork_child): never merely the process that loaded
 * the library, whose prefork children create state of their own. */
static atomic_int owner_pid;      /* the process the state belongs to; 0 before any */
static atomic_bool stateful;      /* fork handlers registered: state may exist */
static atomic_int own_fd_base = INT32_MAX;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) { pthread_mutex_lock(&g.rlock); ccap_ptab_fork_prepare(); }
static void fork_parent(void) { ccap_ptab_fork_parent(); pthread_mutex_unlock(&g.rlock); }

/* Only the forking thread exists in the child. rlock, taken by
 * fork_prepare, starts afresh before anything here closes a descriptor: a
 * close at own_fd_base or above takes it (it used to wait its full 2 s on
 * this very thread, in every fork). */
static void fork_child(void)
{
    pthread_mutex_init(&g.rlock, NULL);
    atomic_store(&owner_pid, (int)getpid());
    ccap_ptab_fork_child();
    if (g.redis) ccap_redis_forget(g.redis);
    if (g.local_used && g.cfg)
        for (size_t i = 0; i < g.cfg->n_sems; i++) atomic_store(&g.local_used[i], 0);
    if (g.held && g.cfg)    /* the child holds none of its parent's permits */
        for (size_t i = 0; i < g.cfg->n_sems; i++) atomic_store(&g.held[i], 0);
    g.down = false;
    g.retry_at_ms = 0;
    g.nonce = 0;
    ccap_handoff_fork_child();
    if (g.hooks.fork_child) g.hooks.fork_child();
}

static void register_atfork(void)
{
    atomic_store(&own_fd_base, ccap_redis_fd_base());
    atomic_store(&owner_pid, (int)getpid());
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atomic_store(&stateful, true);
}

void ccap_core_claim(void) { pthread_once(&atfork_once, register_atfork); }

bool ccap_core_owner(void)
{
    int me = (int)getpid();
    if (atomic_load_explicit(&owner_pid, memory_order_relaxed) == me) return true;
    if (atomic_load(&stateful)) return false;   /* shares its parent's memory */
    atomic_store(&owner_pid, me);              /* a fork child before any state */
    return true;
}

bool ccap_core_own_fd_begin(unsigned lo, unsigned hi)
{
    (void)lo;
    if (!atomic_load_explicit(&stateful, memory_order_relaxed) ||
        hi < (unsigned)atomic_load_explicit(&own_fd_base, memory_order_relaxed))
        return false;
    /* A vfork child has a descriptor table of its own: nothing to guard, and
     * it must never take (and maybe die holding) its parent's lock. */
    if (!ccap_core_owner()) return false;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 2;   /* bounded: never hang a close, even from a signal handler */
    return pthread_mutex_timedlock(&g.rlock, &ts) == 0;
}

void ccap_core_own_fd_end(bool locked)
{
    if (locked) pthread_mutex_unlock(&g.rlock);
}

void ccap_core_kick(void)
{
    if (g.hooks.need_heartbeat) g.hooks.need_heartbeat();
}

static void init_once(void)
{
    char err[512];
    struct ccap_config *cfg = NULL;
    const char *path = ccap_config_path();
    int rc = ccap_live_load(path, &cfg, err, sizeof(err));
    if (rc < 0) {
        ccap_log(CCAP_LOG_ERROR, "bad configuration, passing every connection through: %s", err);
        return;
    }
    ccap_log_setup(cfg->log_level, cfg->log_target);
    ccap_sem_set_audit(cfg->audit ? cfg->audit_maxlen : 0);
    g.redis = ccap_redis_new(&cfg->redis);
    g.local_used = calloc(ccap_live_sem_slots(cfg), sizeof(*g.local_used)); /* indices survive reloads */
    g.held = calloc(ccap_live_sem_slots(cfg), sizeof(*g.held));
    if (!g.redis || !g.local_used || !g.held) {
        ccap_log(CCAP_LOG_ERROR, "out of memory at start-up, passing every connection through");
        ccap_config_free(cfg);
        return;
    }
    if (gethostname(g.host, sizeof(g.host) - 1) != 0) strcpy(g.host, "unknown");
    if (ccap_env_dropped())
        ccap_log(CCAP_LOG_WARN, "%zu CONNCAP_* environment variables too large to keep: ignored", ccap_env_dropped());
    ccap_core_claim();
    g.cfg = cfg;
    if (ccap_live_init(&g.cfg) < 0)
        ccap_log(CCAP_LOG_WARN, "out of memory at start-up: no hot reload, host-name rules match by address only");
    ccap_log(CCAP_LOG_DEBUG, "loaded %s: %zu semaphores, %zu rules", path, cfg->n_sems, cfg->n_rules);
}

static const struct ccap_config *config(void)
{
    pthread_once(&g.once, init_once);
    return g.cfg;
}

void ccap_core_set_hooks(const struct ccap_core_hooks *hooks)
{
    g.hooks = *hooks;
}

bool ccap_core_active(void) { return config() != NULL; }

/* One getsockopt: the protocol alone tells TCP (and MPTCP) from UDP, SCTP
 * and raw sockets. A kernel without SO_PROTOCOL (< 2.6.32): the type. */
static bool is_tcp(int fd)
{
    int v = 0;
    socklen_t l = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) == 0) return v == IPPROTO_TCP || v == IPPROTO_MPTCP;
    l = sizeof(v);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) == 0 && v == SOCK_STREAM;
}

/* Appends S at *P, never past END (which stays for the NUL). */
static void put(char **p, char *end, const char *s)
{
    while (*s && *p < end) *(*p)++ = *s++;
}

static void put_num(char **p, char *end, unsigned long long v)
{
    char d[24];
    ccap_fmt_ll(d, (long long)v);
    put(p, end, d);
}

/* "a.b.c.d:port" or "[v6]:port", without sprintf (inet_ntop's IPv4 form is
 * one): the holder id is built on every matched connect (issue 6). */
static void put_dest(char **p, char *end, const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const void *)sa;
        const unsigned char *b = (const unsigned char *)&s4->sin_addr;
        for (int i = 0; i < 4; i++) {
            if (i) put(p, end, ".");
            put_num(p, end, b[i]);
        }
        put(p, end, ":");
        put_num(p, end, ntohs(s4->sin_port));
    } else {
        const struct sockaddr_in6 *s6 = (const void *)sa;
        char a[INET6_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
        put(p, end, "[");
        put(p, end, a);
        put(p, end, "]:");
        put_num(p, end, ntohs(s6->sin6_port));
    }
}

/* This process's pid without a syscall once the fork handlers keep it. */
static int self_pid(void)
{
    int pid = atomic_load_explicit(&owner_pid, memory_order_relaxed);
    return atomic_load_explicit(&stateful, memory_order_relaxed) && pid > 0 ? pid : (int)getpid();
}

/* Holder id: host/pid/fd/destination/nonce.seq -- what ops read in `status`. */
static void make_holder(struct ccap_permit *p, int fd, const struct sockaddr *sa)
{
    /* one nonce per process image, chosen by the first connect of any thread */
    unsigned nonce = __atomic_load_n(&g.nonce, __ATOMIC_RELAXED);
    if (!nonce) {
        unsigned n = 0, none = 0;
        if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != sizeof(n)) n = rand_u32();
        n = n ? n : 1;
        nonce = __atomic_compare_exchange_n(&g.nonce, &none, n, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ? n : none;
    }
    static const char hex[] = "0123456789abcdef";
    char nx[9], *o = p->holder, *end = p->holder + sizeof(p->holder) - 1;
    for (int i = 0; i < 8; i++) nx[i] = hex[(nonce >> (28 - 4 * i)) & 0xf];
    nx[8] = '\0';
    put(&o, end, g.host);
    put(&o, end, "/");
    put_num(&o, end, (unsigned)self_pid());
    put(&o, end, "/");
    put_num(&o, end, (unsigned)fd);
    put(&o, end, "/");
    put_dest(&o, end, sa);
    put(&o, end, "/");
    put(&o, end, nx);
    put(&o, end, ".");
    put_num(&o, end, atomic_fetch_add(&g.seq, 1));
    *o = '\0';
}

/* Gives P a holder id no attempt has used: the same as make_holder's, but
 * for the sequence number at its end. */
static void next_holder_id(struct ccap_permit *p)
{
    char *o = strrchr(p->holder, '.'), *end = p->holder + sizeof(p->holder) - 1;
    if (!o) return;
    o++;
    put_num(&o, end, atomic_fetch_add(&g.seq, 1));
    *o = '\0';
}

/* Circuit breaker: while open, Redis is not tried at all. Under rlock. */
static bool circuit_open(void)
{
    return g.down && now_ms() < g.retry_at_ms;
}

/* The longest backoff: CIRCUIT_MAX_MS, but at most a quarter of the
 * shortest lease, so that a holder's heartbeat probes often enough to renew
 * its leases before they run out once Redis is back (an outage shorter than
 * about 3/4 of a lease then costs no lease). */
static int circuit_max_ms(void)
{
    int m = CIRCUIT_MAX_MS;
    for (size_t i = 0; i < g.cfg->n_sems; i++)
        if (g.cfg->sems[i].lease_ms / 4 < m) m = g.cfg->sems[i].lease_ms / 4;
    return m < CIRCUIT_MIN_MS ? CIRCUIT_MIN_MS : m;
}

/* A call failed because Redis could not serve it -- unreachable, timed out,
 * an oversized or malformed reply, or an error reply of any kind (loading,
 * out of memory, too many clients, denied, not authenticated, a script it
 * refused): open the circuit, or keep it open with the next backoff
 * (doubling from CIRCUIT_MIN_MS to circuit_max_ms(), jittered). Only the
 * opening is logged, with Redis's reason. */
static void circuit_failure(int rc)
{
    int max = circuit_max_ms();
    if (!g.down) {
        bool reached = rc == -EAGAIN || rc == -EPROTO || rc == -EACCES;
        ccap_log(CCAP_LOG_WARN, "redis %s (%s): on_redis_down=\"%s\" until it answers",
                 reached ? "cannot serve" : "unreachable",
                 ccap_redis_errstr(g.redis)[0] ? ccap_redis_errstr(g.redis) : strerror(-rc),
                 g.cfg->on_redis_down == CCAP_DOWN_OPEN ? "open" :
                 g.cfg->on_redis_down == CCAP_DOWN_CLOSED ? "closed" : "local");
        g.down = true;
        g.down_since_ms = now_ms();
        atomic_store(&g.down_granted, 0);
        atomic_store(&g.down_refused, 0);
        g.backoff_ms = CIRCUIT_MIN_MS;
    } else if (g.backoff_ms < max) {
        g.backoff_ms = g.backoff_ms * 2 > max ? max : g.backoff_ms * 2;
    }
    /* full jitter over the upper half: avoids a fleet probing in step */
    g.retry_at_ms = now_ms() + g.backoff_ms / 2 + rand_u32() % (g.backoff_ms / 2 + 1);
}

/* Redis answered: close the circuit; the end of an outage is logged once,
 * with what on_redis_down decided meanwhile. */
static void circuit_success(void)
{
    if (g.down)
        ccap_log(CCAP_LOG_WARN, "redis reachable again after %lld ms: permits are counted globally "
                 "(meanwhile on_redis_down granted %u, refused %u; granted ones are registered at the next heartbeat)",
                 now_ms() - g.down_since_ms, atomic_load(&g.down_granted), atomic_load(&g.down_refused));
    g.down = false;
    g.backoff_ms = 0;
}

/* The circuit learns the outcome RC (>= 0 or -errno) of a Redis call:
 * every failure counts but our own (a bad argument, no memory). */
static void circuit_note(int rc)
{
    if (rc >= 0) circuit_success();
    else if (rc != -EINVAL && rc != -ENOMEM && rc != -ENAMETOOLONG) circuit_failure(rc);
}

int ccap_core_try_acquire(const struct ccap_sem_conf *s, const struct ccap_sem_req *q, struct ccap_sem_result *res)
{
    pthread_mutex_lock(&g.rlock);
    int rc = -ECONNREFUSED;
    if (!circuit_open()) {
        rc = ccap_sem_acquire_fair(g.redis, g.cfg->redis.key_prefix, s->name, q, res);
        circuit_note(rc);
    }
    pthread_mutex_unlock(&g.rlock);
    return rc < 0 ? rc : res->granted;
}

/* Redis is down (or refused the call): apply on_redis_down to a connect
 * of semaphore S (index SEM) for P. Returns 1 granted (P is flagged
 * CCAP_PERMIT_LOCAL: the heartbeat registers it in Redis once Redis
 * answers, even above the limit, so the count tells the truth), 0 when
 * "local" is at local_limit (the caller may wait for a local permit, then
 * fails with on_timeout), or -ECONNREFUSED for "closed" -- at once, whatever
 * on_timeout is. Thread-safe: the local count is an atomic. */
int ccap_core_redis_down(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p)
{
    switch (g.cfg->on_redis_down) {
    case CCAP_DOWN_CLOSED:
        atomic_fetch_add(&g.down_refused, 1);
        return -ECONNREFUSED;
    default: {
        int used = atomic_fetch_add(&g.local_used[sem], 1);
        if (g.cfg->on_redis_down == CCAP_DOWN_LOCAL && used >= s->local_limit) {
            atomic_fetch_sub(&g.local_used[sem], 1);
            return 0;
        }
        p->flags |= CCAP_PERMIT_LOCAL;
        atomic_fetch_add(&g.down_granted, 1);
        return 1;
    }
    }
}

/* Stats: HOLDER gave up on S after WAITED ms (best effort, under rlock). */
void ccap_core_report_timeout(const struct ccap_sem_conf *s, const char *holder, long long waited)
{
    pthread_mutex_lock(&g.rlock);
    if (!circuit_open() && ccap_sem_timeout(g.redis, g.cfg->redis.key_prefix, s->name, holder, waited) < 0)
        ccap_log(CCAP_LOG_DEBUG, "timeout of %s not counted: %s", holder, ccap_redis_errstr(g.redis));
    pthread_mutex_unlock(&g.rlock);
}

/* Releases HOLDER of semaphore SEM (index I, -1 unknown): sent at once
 * unless the circuit is open, kept either way until Redis ran it or UNTIL
 * (monotonic ms) passed (core/redis_defer.c). Under rlock. */
static void release_kept(const char *sem, int i, const char *holder, long long until)
{
    bool send = !circuit_open();
    int rc = ccap_sem_release_defer(g.redis, g.cfg->redis.key_prefix, sem, holder,
                                    i >= 0 ? g.cfg->sems[i].limit : -1, until, send);
    if (rc < 0 && send) {   /* kept (but for -ENOMEM): sent again when redis answers */
        circuit_note(rc);
        ccap_log(CCAP_LOG_INFO, "release of %s not sent (%s): %s", holder, strerror(-rc),
                 rc == -ENOMEM ? "it expires with its lease" : "sent again when redis answers");
    } else if (!send) {     /* the circuit was open already: the same, told the same way */
        ccap_log(CCAP_LOG_INFO, "release of %s not sent (redis down): %s", holder,
                 rc == -ENOMEM ? "it expires with its lease" : "sent again when redis answers");
    }
}

/* P's attempts may have left Redis a ticket in the queue, or a permit
 * that no socket will own (an attempt whose reply was lost ran late): its
 * holder id is released as a closed permit's is -- kept, and sent again
 * until Redis ran it -- and P gets a fresh id. The released id is never
 * used again: its release may reach Redis after a later attempt would.
 * Kept for two leases: the permit of an attempt Redis runs late lives a
 * lease from then. Wakes the heartbeat, which sends it once Redis answers. */
void ccap_core_drop_holder_id(struct ccap_permit *p)
{
    pthread_mutex_lock(&g.rlock);
    release_kept(p->sem, ccap_config_sem_index(g.cfg, p->sem), p->holder, now_ms() + 2LL * p->lease_ms);
    pthread_mutex_unlock(&g.rlock);
    next_holder_id(p);
    ccap_core_kick();
}

/* True if this process holds a permit of semaphore SEM: one atomic load. */
bool ccap_core_holds_permit(size_t sem)
{
    return atomic_load_explicit(&g.held[sem], memory_order_relaxed) > 0;
}

const struct ccap_config *ccap_core_config(void)
{
    return config();
}

void ccap_core_down_refused(void)
{
    atomic_fetch_add(&g.down_refused, 1);
}

int ccap_core_poke(const char *key)
{
    const char *push[] = { "LPUSH", key, "p" }, *ttl[] = { "PEXPIRE", key, "60000" };
    redisReply *rep = NULL;
    int rc = -ECONNREFUSED;

    pthread_mutex_lock(&g.rlock);
    if (!circuit_open()) {
        rc = ccap_redis_command(g.redis, 3, push, &rep);
        if (rc == 0) {
            freeReplyObject(rep);
            rc = ccap_redis_command(g.redis, 3, ttl, &rep);
            if (rc == 0) freeReplyObject(rep);
        }
        circuit_note(rc);
    }
    pthread_mutex_unlock(&g.rlock);
    return rc;
}

int ccap_core_connect_pre(int fd, const struct sockaddr *sa, socklen_t len, struct ccap_ticket *t)
{
    t->permit = NULL;
    if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) return 0;
    const struct ccap_config *cfg = config();
    if (!cfg) return 0;
    if (g.hooks.need_watch) g.hooks.need_watch();
    const struct ccap_rule *rule = ccap_live_match(cfg, sa, len);
    if (!rule || !is_tcp(fd)) return 0;

    struct ccap_permit *orphan, *held = ccap_ptab_get(fd, &orphan);
    ccap_core_release(orphan);
    if (held) return 0;             /* connect again on the same socket */

    const struct ccap_sem_conf *s = &cfg->sems[rule->sem];
    struct stat st;
    struct ccap_permit *p = ccap_permit_new();
    if (!p || fstat(fd, &st) != 0) {
        free(p);
        return 0;
    }
    p->dev = st.st_dev;
    p->ino = st.st_ino;
    p->lease_ms = s->lease_ms;
    snprintf(p->sem, sizeof(p->sem), "%s", s->name);
    make_holder(p, fd, sa);
    p->held = &g.held[rule->sem];

    int rc = ccap_wait_for_permit(s, rule->sem, p, fd);
    if (rc < 0) {
        free(p);
        return rc;
    }
    if (ccap_ptab_attach(fd, p) < 0) {
        ccap_log(CCAP_LOG_WARN, "descriptor %d is beyond the permit table: not counted", fd);
        ccap_core_release(p);
        return 0;
    }
    t->permit = p;
    if (g.hooks.need_heartbeat) g.hooks.need_heartbeat();
    return 0;
}

void ccap_core_connect_post(int fd, struct ccap_ticket *t, int rc, int err)
{
    if (!t->permit || rc == 0 || err == EINPROGRESS || err == EINTR) return;
    ccap_core_release(ccap_ptab_detach(fd));
}

struct ccap_permit *ccap_core_close_pre(int fd)
{
    return ccap_core_owner() ? ccap_ptab_detach(fd) : NULL;
}

struct ccap_permit *ccap_core_dup(int oldfd, int newfd)
{
    return ccap_core_owner() ? ccap_ptab_dup(oldfd, newfd) : NULL;
}

struct ccap_permit *ccap_core_close_range(unsigned lo, unsigned hi)
{
    return !ccap_ptab_empty() && ccap_core_owner() ? ccap_ptab_detach_range(lo, hi) : NULL;
}

void ccap_core_release_list(struct ccap_permit *p)
{
    while (p) {
        struct ccap_permit *n = p->next;
        ccap_core_release(p);
        p = n;
    }
}

static int sem_index_of(const char *name)
{
    return g.cfg ? ccap_config_sem_index(g.cfg, name) : -1;
}

atomic_int *ccap_core_held_count(const char *sem)
{
    int i = config() ? sem_index_of(sem) : -1;
    return i >= 0 ? &g.held[i] : NULL;
}

void ccap_core_release(struct ccap_permit *p)
{
    ccap_core_unregister(p);
    free(p);
}

/* The release goes out without waiting for Redis's reply (issue 6: a
 * matched close costs one write, not a round trip); the reply is read
 * before the next command. While the circuit is open it is only kept. Kept
 * either way until Redis ran it (core/redis_defer.c): one lost with its
 * connection, or that Redis missed while down, is sent again -- by the next
 * command, or by the heartbeat once Redis answers -- unless the lease has
 * ended by then. A locally granted permit is released only while Redis
 * answers (see below). */
void ccap_core_unregister(struct ccap_permit *p)
{
    if (!p || !config()) return;    /* loads it for a permit adopted across exec */
    int i = sem_index_of(p->sem);
    if (!g.redis) {
        if ((p->flags & CCAP_PERMIT_LOCAL) && i >= 0) atomic_fetch_sub(&g.local_used[i], 1);
        return;
    }
    pthread_mutex_lock(&g.rlock);
    bool send = !circuit_open();
    /* Read under rlock: the heartbeat registers local permits and clears
     * the flag under it. One closed between the heartbeat's renew (which
     * registered it) and the clearing is still flagged: while Redis
     * answers it is released like any other (a release of a holder Redis
     * never had changes nothing); while it does not, it was never
     * registered. Before, it was left in Redis until its lease ended. */
    if (p->flags & CCAP_PERMIT_LOCAL) {
        if (i >= 0) atomic_fetch_sub(&g.local_used[i], 1);
        if (!send) {
            pthread_mutex_unlock(&g.rlock);
            return;
        }
    }
    release_kept(p->sem, i, p->holder, now_ms() + p->lease_ms);
    pthread_mutex_unlock(&g.rlock);
}

/* Reads the replies of the releases sent and sends those not sent yet.
 * Under rlock. Returns how many are still kept. */
static size_t flush_releases(void)
{
    if (!ccap_redis_deferred(g.redis) || circuit_open()) return ccap_redis_deferred(g.redis);
    int rc = ccap_redis_flush(g.redis);
    if (rc >= 0) {
        circuit_success();
        return (size_t)rc;
    }
    circuit_note(rc);
    return ccap_redis_deferred(g.redis);
}

void ccap_core_flush(void)
{
    if (!g.redis || !ccap_core_owner()) return;
    pthread_mutex_lock(&g.rlock);
    flush_releases();
    pthread_mutex_unlock(&g.rlock);
}

/* Heartbeat: the holders to renew, grouped by semaphore. */
struct beat {
    const char **holders;
    char (*sems)[72];
    struct ccap_permit **permits;
    size_t n, cap;
    int min_lease;
};

static void collect(struct ccap_permit *p, void *arg)
{
    struct beat *b = arg;
    if (b->n == b->cap) return;
    b->holders[b->n] = strdup(p->holder);
    memcpy(b->sems[b->n], p->sem, sizeof(b->sems[0]));
    b->permits[b->n] = p;
    if (!b->min_lease || p->lease_ms < b->min_lease) b->min_lease = p->lease_ms;
    b->n++;
}

static void renew_all(struct beat *b)
{
    for (size_t i = 0; i < b->n; i++) {
        if (!b->holders[i] || !b->sems[i][0]) continue;
        /* batch every holder of this semaphore into one call */
        size_t m = 0;
        const char **batch = malloc(b->n * sizeof(*batch));
        if (!batch) return;
        char sem[72];
        memcpy(sem, b->sems[i], sizeof(sem));
        int lease = b->permits[i]->lease_ms;
        for (size_t j = i; j < b->n; j++)
            if (b->holders[j] && strcmp(b->sems[j], sem) == 0) {
                batch[m++] = b->holders[j];
                b->sems[j][0] = '\0';
            }
        int rc = ccap_sem_renew(g.redis, g.cfg->redis.key_prefix, sem, batch, m, lease, 1);
        if (rc > 0) ccap_log(CCAP_LOG_WARN, "re-registered %d permit(s) of %s that redis had lost (restart, failover, "
                             "or granted while it was down)", rc, sem);
        circuit_note(rc);
        free(batch);
        if (rc < 0) return;
    }
}

/* ARG: per-semaphore counts of the permits registered now (stats), or NULL. */
static void clear_local_flags(struct ccap_permit *p, void *arg)
{
    if (p->flags & CCAP_PERMIT_LOCAL) {
        int i = sem_index_of(p->sem);
        if (i >= 0) atomic_fetch_sub(&g.local_used[i], 1);
        if (i >= 0 && arg) ((int *)arg)[i]++;
        p->flags &= ~CCAP_PERMIT_LOCAL;
    }
}

/* Clears the local flags of permits now registered in Redis and counts
 * them in each semaphore's fallback_granted. Under rlock. */
static void count_fallback(void)
{
    int *n = calloc(ccap_live_sem_slots(g.cfg), sizeof(*n)); /* room for any index a reload adds meanwhile */
    ccap_ptab_each(clear_local_flags, n);
    for (size_t i = 0; n && i < g.cfg->n_sems; i++)
        if (n[i] && ccap_sem_count_fallback(g.redis, g.cfg->redis.key_prefix, g.cfg->sems[i].name, n[i]) < 0)
            ccap_log(CCAP_LOG_DEBUG, "fallback grants of %s not counted: %s", g.cfg->sems[i].name,
                     ccap_redis_errstr(g.redis));
    free(n);
}

int ccap_core_heartbeat(void)
{
    if (!config() || atomic_load(&g.shutting_down)) return -1;  /* loads it for adopted permits */
    struct ccap_permit *orphans;
    ccap_ptab_sweep(&orphans);
    ccap_core_release_list(orphans);
    pthread_mutex_lock(&g.rlock);
    size_t cap = ccap_ptab_count();
    struct beat b = { 0 };
    b.cap = cap;
    b.holders = calloc(cap + 1, sizeof(*b.holders));
    b.sems = calloc(cap + 1, sizeof(*b.sems));
    b.permits = calloc(cap + 1, sizeof(*b.permits));
    if (b.holders && b.sems && b.permits) {
        ccap_ptab_each(collect, &b);
        if (b.n && !circuit_open()) {
            renew_all(&b);
            if (!g.down) count_fallback();  /* all registered now */
        }
    }
    size_t pending = flush_releases();
    /* While Redis is down the beat comes when the circuit lets a probe
     * through, so that permits are registered again (and missed releases
     * sent) soon after Redis is back, not a third of a lease later. */
    long long probe = g.down ? g.retry_at_ms - now_ms() : -1;
    for (size_t i = 0; i < b.n; i++) free((void *)b.holders[i]);
    free(b.holders);
    free(b.sems);
    free(b.permits);
    pthread_mutex_unlock(&g.rlock);
    ccap_wait_reap(b.n ? CCAP_WAIT_IDLE_MS : 0);    /* waiters' idle connections (issue 6) */
    if (probe >= 0 && probe < CIRCUIT_MIN_MS) probe = CIRCUIT_MIN_MS;
    if (!b.n) {
        if (pending) return probe > 0 && probe < 1000 ? (int)probe : 1000;
        return ccap_ptab_count() ? 1000 : -1;
    }
    int ms = b.min_lease / 3;
    if (probe > 0 && probe < ms) ms = (int)probe;
    return ms < 50 ? 50 : ms;
}

void ccap_core_shutdown(void)
{
    if (!ccap_core_owner()) return;
    if (ccap_handoff_waiting()) ccap_handoff_adopt();
    if (!atomic_load(&stateful) || !config()) return;   /* never used: nothing to load */
    atomic_store(&g.shutting_down, true);
    ccap_core_release_list(ccap_ptab_take_all());
    ccap_core_flush();      /* the releases reach Redis before the process ends */
}

/* Renews one semaphore's batch. Under rlock. */
static int renew_batch(const char *sem, const char **holders, size_t n, int lease)
{
    if (circuit_open()) return -ECONNREFUSED;
    int rc = ccap_sem_renew(g.redis, g.cfg->redis.key_prefix, sem, holders, n, lease, 1);
    circuit_note(rc);
    return rc < 0 ? rc : 0;
}

int ccap_core_renew_entries(const struct ccap_handoff_entry *e, size_t n)
{
    if (!n) return 0;
    if (!config()) return -EINVAL;
    const char **batch = malloc(n * sizeof(*batch));
    bool *done = calloc(n, sizeof(*done));
    int rc = batch && done ? 0 : -ENOMEM;
    pthread_mutex_lock(&g.rlock);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (done[i]) continue;
        size_t m = 0;
        int lease = 0;
        for (size_t j = i; j < n; j++) {
            if (done[j] || strcmp(e[j].sem, e[i].sem) != 0) continue;
            done[j] = true;
            batch[m++] = e[j].holder;   /* a repeated holder (dup'ed socket) is harmless */
            if (e[j].lease_ms > lease) lease = e[j].lease_ms;
        }
        rc = renew_batch(e[i].sem, batch, m, lease > 0 ? lease : 1);
    }
    pthread_mutex_unlock(&g.rlock);
    free(batch);
    free(done);
    return rc;
}
