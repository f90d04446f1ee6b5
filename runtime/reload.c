/* reload.c -- the live configuration: watches the file, swaps rules atomically, records resolved names, runs resolve = true. */
#include "reload.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "boot.h"
#include "clock.h"
#include "rt_int.h"
#include "log.h"
#include "names.h"
#include "sem.h"
#include "waiting.h"

#define SWEEP_PERIOD_MS 10000

struct job { /* one name of a resolve = true rule */
    char name[256];
    int interval_s;
    long long due_ms;
    bool failing;
};

struct retired { /* a replaced config waiting out its grace */
    struct ccap_config *cfg;
    long long free_at_ms;
    struct retired *next;
};

struct sig { /* identity of one version of the file */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtim, ctim;
};

static struct {
    struct ccap_config *_Atomic *slot; /* core's current config */
    struct ccap_names *_Atomic names;  /* created when a config has host names */
    struct ccap_names *fork_locked;    /* the map the fork handlers locked */
    pthread_mutex_t mu;                /* jobs, retired, first-round wait; never held across slow work */
    pthread_cond_t cond;               /* first round of lookups done */
    atomic_int first_round;            /* 0 pending, 1 done, 2 stopped waiting for it */
    char *path;
    size_t sem_cap;
    struct ccap_redis_conf redis; /* the boot config's, shared by every later one; never freed */
    /* the rest belongs to the watch thread (ccap_live_tick) */
    struct sig sig;
    bool sig_ok, missing_logged, pending;
    long long next_check_ms, next_sweep_ms;
    struct job *jobs;
    size_t n_jobs;
    struct retired *retired;
    size_t n_retired;
} live = { .mu = PTHREAD_MUTEX_INITIALIZER, .first_round = 1 };

static struct ccap_names *names_get(bool create)
{
    struct ccap_names *m = atomic_load(&live.names);
    if (m || !create)
        return m;
    struct ccap_names *n = ccap_names_new(CCAP_NAMES_MAX), *expect = NULL;
    if (!n)
        return NULL;
    if (!atomic_compare_exchange_strong(&live.names, &expect, n)) {
        ccap_names_free(n);
        return expect;
    }
    return n;
}

/* ---- the file's identity ---- */

static struct sig sig_of(const struct stat *st)
{
    struct sig s = { st->st_dev, st->st_ino, st->st_size, st->st_mtim, st->st_ctim };
    return s;
}

static bool sig_eq(const struct sig *a, const struct sig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtim.tv_sec == b->mtim.tv_sec &&
           a->mtim.tv_nsec == b->mtim.tv_nsec && a->ctim.tv_sec == b->ctim.tv_sec &&
           a->ctim.tv_nsec == b->ctim.tv_nsec;
}

/* ---- resolve = true ---- */

static int job_ttl_ms(const struct job *j)
{
    long long t = 3LL * j->interval_s * 1000;
    if (t < CCAP_NAMES_TTL_MS)
        t = CCAP_NAMES_TTL_MS;
    return t > INT_MAX ? INT_MAX : (int)t;
}

/* The exact host names of CFG's resolve = true rules, each once (with the
 * shortest interval of the rules naming it), all due now. */
static int build_jobs(const struct ccap_config *cfg, struct job **out, size_t *n_out)
{
    size_t n = 0, cap = 0;
    *out = NULL;
    *n_out = 0;
    for (size_t i = 0; i < cfg->n_rules; i++)
        if (cfg->rules[i].resolve)
            cap += cfg->rules[i].n_pats;
    if (!cap)
        return 0;
    struct job *jobs = calloc(cap, sizeof *jobs);
    if (!jobs)
        return -ENOMEM;
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct ccap_rule *r = &cfg->rules[i];
        for (size_t k = 0; r->resolve && k < r->n_pats; k++) {
            if (r->pats[k].kind != CCAP_PAT_HOST)
                continue;
            size_t j = 0;
            while (j < n && strcmp(jobs[j].name, r->pats[k].name))
                j++;
            if (j == n) {
                snprintf(jobs[n].name, sizeof jobs[n].name, "%s", r->pats[k].name);
                jobs[n++].interval_s = r->resolve_interval_s;
            } else if (r->resolve_interval_s < jobs[j].interval_s) {
                jobs[j].interval_s = r->resolve_interval_s;
            }
        }
    }
    *out = jobs;
    *n_out = n;
    return 0;
}

/* Looks J's name up (the watch thread runs guarded: this getaddrinfo is not
 * recorded by the shim's hook) and records every address it has now. */
static void run_job(struct job *j, long long now)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    int rc = getaddrinfo(j->name, NULL, &hints, &res);
    j->due_ms = now + j->interval_s * 1000LL;
    if (rc != 0) {
        if (!j->failing)
            ccap_log(CCAP_LOG_WARN,
                     "resolve = true: cannot resolve %s (%s): its addresses stay known as last "
                     "seen until they expire",
                     j->name, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        j->failing = true;
        return;
    }
    if (j->failing)
        ccap_log(CCAP_LOG_INFO, "resolve = true: %s resolves again", j->name);
    j->failing = false;
    struct ccap_names *m = names_get(true);
    size_t n = 0;
    for (struct addrinfo *ai = res; ai && m; ai = ai->ai_next) {
        struct ccap_addr a;
        if (ccap_addr_from_sa(ai->ai_addr, ai->ai_addrlen, &a) == 0 &&
            ccap_names_add(m, &a, j->name, now, job_ttl_ms(j)) >= 0)
            n++;
    }
    freeaddrinfo(res);
    ccap_log(CCAP_LOG_DEBUG, "resolve = true: %s has %zu addresses", j->name, n);
}

static void run_jobs(struct job *jobs, size_t n, bool all)
{
    for (size_t i = 0; i < n; i++)
        if (all || ccap_now_coarse_ms() >= jobs[i].due_ms)
            run_job(&jobs[i], ccap_now_coarse_ms());
}

/* At debug: every process of a fleet would say the same of the same file
 * (a cron job: a mail per run); `conncap check` warns about it, once. */
static void log_note(bool warn, const char *msg, void *arg)
{
    (void)arg;
    (void)warn;
    ccap_log(CCAP_LOG_DEBUG, "%s", msg);
}

/* Says once per loaded config what resolve = true cannot do. */
static void note_resolve_rules(const struct ccap_config *cfg)
{
    ccap_config_notes(cfg, log_note, NULL);
}

static void first_round_done(void)
{
    pthread_mutex_lock(&live.mu);
    atomic_store(&live.first_round, 1);
    pthread_cond_broadcast(&live.cond);
    pthread_mutex_unlock(&live.mu);
}

/* A connect waits (once per process) for the first lookups of resolve = true names. */
static void wait_first_round(void)
{
    if (atomic_load(&live.first_round) != 0)
        return;
    struct timespec ts = ccap_deadline_ts(CCAP_RESOLVE_FIRST_WAIT_MS);
    pthread_mutex_lock(&live.mu);
    while (atomic_load(&live.first_round) == 0)
        if (pthread_cond_timedwait(&live.cond, &live.mu, &ts) == ETIMEDOUT) {
            int pending = 0;
            if (atomic_compare_exchange_strong(&live.first_round, &pending, 2))
                ccap_log(CCAP_LOG_WARN,
                         "resolve = true: the first lookup takes longer than %d ms; connects go "
                         "on and match once it is done",
                         CCAP_RESOLVE_FIRST_WAIT_MS);
            break;
        }
    pthread_mutex_unlock(&live.mu);
}

/* ---- reload ---- */

static bool str_eq(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

static bool strv_eq(char **a, size_t na, char **b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (!str_eq(a[i], b[i]))
            return false;
    return true;
}

static bool tls_same(const struct ccap_tls_conf *a, const struct ccap_tls_conf *b)
{
    return a->enabled == b->enabled && a->verify == b->verify && a->sentinels == b->sentinels &&
           str_eq(a->ca_file, b->ca_file) && str_eq(a->ca_dir, b->ca_dir) && str_eq(a->cert_file, b->cert_file) &&
           str_eq(a->key_file, b->key_file) && str_eq(a->server_name, b->server_name);
}

/* Whether B (a reload's) says what A (the running settings) says; B's
 * password only when it was read (not CCAP_LOAD_NO_SECRETS: B_PW). */
static bool redis_same(const struct ccap_redis_conf *a, const struct ccap_redis_conf *b, bool b_pw)
{
    return str_eq(a->host, b->host) && a->port == b->port && str_eq(a->socket, b->socket) && a->db == b->db &&
           a->connect_timeout_ms == b->connect_timeout_ms && a->command_timeout_ms == b->command_timeout_ms &&
           str_eq(a->key_prefix, b->key_prefix) && str_eq(a->username, b->username) &&
           (!b_pw || str_eq(a->password, b->password)) &&
           strv_eq(a->sentinels, a->n_sentinels, b->sentinels, b->n_sentinels) && str_eq(a->master, b->master) &&
           strv_eq(a->cluster, a->n_cluster, b->cluster, b->n_cluster) && tls_same(&a->tls, &b->tls);
}

/* Gives NEW's semaphores the indices they had in OLD (a semaphore that left
 * the file stays, with its old settings and no rule; new ones are appended)
 * and remaps NEW's rules. Returns 0, -ENOSPC (more slots than the process
 * has; WHY says so) or -ENOMEM; NEW is unchanged on failure. */
static int stabilize(const struct ccap_config *old, struct ccap_config *new, char *why, size_t whylen)
{
    size_t n = old->n_sems;
    for (size_t j = 0; j < new->n_sems; j++)
        n += ccap_config_sem_index(old, new->sems[j].name) < 0;
    if (n > live.sem_cap) {
        snprintf(why, whylen,
                 "%s: %zu semaphores over the reloads so far, more than the %zu this process can "
                 "track: restart it to apply",
                 new->path, n, live.sem_cap);
        return -ENOSPC;
    }
    struct ccap_sem_conf *s = calloc(n ? n : 1, sizeof *s);
    size_t *map = calloc(new->n_sems ? new->n_sems : 1, sizeof *map);
    bool *taken = calloc(new->n_sems ? new->n_sems : 1, sizeof *taken);
    bool *copied = calloc(n ? n : 1, sizeof *copied);
    if (!s || !map || !taken || !copied)
        goto nomem;
    for (size_t i = 0; i < old->n_sems; i++) {
        int j = ccap_config_sem_index(new, old->sems[i].name);
        if (j >= 0) {
            s[i] = new->sems[j];
            taken[j] = true;
            map[j] = i;
        } else {
            s[i] = old->sems[i];
            if (!(s[i].name = strdup(old->sems[i].name)))
                goto nomem;
            copied[i] = true;
        }
    }
    size_t k = old->n_sems;
    for (size_t j = 0; j < new->n_sems; j++)
        if (!taken[j]) {
            s[k] = new->sems[j];
            map[j] = k++;
        }
    for (size_t r = 0; r < new->n_rules; r++)
        new->rules[r].sem = map[new->rules[r].sem];
    free(new->sems);
    new->sems = s;
    new->n_sems = k;
    free(map);
    free(taken);
    free(copied);
    return 0;
nomem:
    for (size_t i = 0; s && i < n; i++)
        if (copied && copied[i])
            free(s[i].name);
    free(s);
    free(map);
    free(taken);
    free(copied);
    snprintf(why, whylen, "%s: out of memory", new->path);
    return -ENOMEM;
}

/* How long a replaced CFG may still be read by a thread that loaded it. */
static long long grace_ms(const struct ccap_config *cfg)
{
    long long wait = 0;
    for (size_t i = 0; i < cfg->n_sems; i++)
        if (cfg->sems[i].wait_timeout_ms > wait)
            wait = cfg->sems[i].wait_timeout_ms;
    return CCAP_RETIRED_GRACE_MS + wait + 2LL * (cfg->redis.connect_timeout_ms + cfg->redis.command_timeout_ms);
}

static void free_retired(long long now, bool all)
{
    struct retired *done = NULL;
    pthread_mutex_lock(&live.mu);
    for (struct retired **pp = &live.retired; *pp;) {
        struct retired *r = *pp;
        if (all || now >= r->free_at_ms) {
            *pp = r->next;
            r->next = done;
            done = r;
            live.n_retired--;
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&live.mu);
    while (done) {
        struct retired *n = done->next;
        memset(&done->cfg->redis, 0, sizeof done->cfg->redis); /* live.redis's, not its own */
        ccap_config_free(done->cfg);
        free(done);
        done = n;
    }
}

/* NEW takes the running Redis settings (live.redis, shared, not owned); its
 * own are compared, then freed with the rest of a throw-away config (so
 * that whatever ccap_config_free knows to free is freed). */
static int adopt_redis(struct ccap_config *new)
{
    struct ccap_config *husk = calloc(1, sizeof *husk);
    if (!husk)
        return -ENOMEM;
    if (!redis_same(&live.redis, &new->redis, !new->secrets_skipped))
        ccap_log(CCAP_LOG_WARN,
                 "%s: the redis settings changed: they take effect when the program restarts; "
                 "the other changes apply now",
                 live.path);
    husk->redis = new->redis;
    new->redis = live.redis;
    ccap_config_free(husk);
    return 0;
}

/* Swaps NEW in (owned from here on): rules, semaphores, policies and logging
 * take effect; Redis settings keep the running ones. */
static void apply(struct ccap_config *new, long long now)
{
    struct ccap_config *cur = atomic_load(live.slot);
    char why[512];
    struct job *jobs = NULL;
    size_t n_jobs = 0;
    struct retired *ret = malloc(sizeof *ret);
    int rc = !ret ? -ENOMEM : stabilize(cur, new, why, sizeof why);
    if (rc == -ENOMEM)
        snprintf(why, sizeof why, "%s: out of memory", live.path);
    if (rc == 0 && (rc = build_jobs(new, &jobs, &n_jobs)) < 0)
        snprintf(why, sizeof why, "%s: out of memory", live.path);
    if (rc == 0 && (rc = adopt_redis(new)) < 0)
        snprintf(why, sizeof why, "%s: out of memory", live.path);
    if (rc < 0) {
        ccap_log(CCAP_LOG_ERROR, "hot reload failed, keeping the rules in force: %s", why);
        free(ret);
        free(jobs);
        ccap_config_free(new);
        return;
    }
    if (new->has_names)
        names_get(true);
    note_resolve_rules(new);
    run_jobs(jobs, n_jobs, true); /* the names are known before the rules naming them apply */

    pthread_mutex_lock(&live.mu);
    atomic_store(live.slot, new);
    struct job *old_jobs = live.jobs;
    live.jobs = jobs;
    live.n_jobs = n_jobs;
    ret->cfg = cur;
    ret->free_at_ms = now + grace_ms(cur);
    ret->next = live.retired;
    live.retired = ret;
    live.n_retired++;
    pthread_mutex_unlock(&live.mu);
    free(old_jobs);
    if (atomic_load(&live.first_round) != 1)
        first_round_done();
    ccap_rt_config_applied(new);
    ccap_rt_waits_nudge();
    ccap_log(CCAP_LOG_INFO, "reloaded %s: %zu semaphores, %zu rules", live.path, new->n_sems, new->n_rules);
}

/* Says once that the file cannot be stat()ed (E); the rules in force stay. */
static void cannot_stat(int e)
{
    if (live.missing_logged)
        return;
    live.missing_logged = true;
    if (e == EACCES)
        ccap_log(CCAP_LOG_WARN,
                 "hot reload: cannot stat %s (%s: this process runs as uid %u now): keeping the rules it "
                 "loaded at start",
                 live.path, strerror(e), (unsigned)geteuid());
    else
        ccap_log(CCAP_LOG_WARN, "hot reload: cannot stat %s (%s): keeping the rules in force", live.path,
                 strerror(e));
}

static void check_file(long long now)
{
    struct stat st;
    if (stat(live.path, &st) != 0) {
        cannot_stat(errno);
        return;
    }
    live.missing_logged = false;
    struct sig s = sig_of(&st);
    bool fresh = !live.sig_ok || !sig_eq(&s, &live.sig);
    if (!fresh && !live.pending)
        return;
    live.sig = s;
    live.sig_ok = true;
    live.pending = false;
    free_retired(now, false);
    if (live.n_retired >= CCAP_RETIRED_MAX) {
        live.pending = true; /* too many reloads within the grace: try again later */
        if (fresh)
            ccap_log(CCAP_LOG_INFO, "%s changed; applied once an older config may be freed", live.path);
        return;
    }
    char err[512];
    struct ccap_config *cfg = NULL;
    /* the Redis settings never change by a reload: their secrets are not read again */
    int rc = ccap_config_load_from(live.path, NULL, CCAP_LOAD_NO_SECRETS, &cfg, err, sizeof err);
    if (rc < 0) {
        live.pending = ccap_boot_transient(rc); /* out of descriptors or memory: again at the next tick */
        if (fresh)
            ccap_log(CCAP_LOG_ERROR, "hot reload failed, keeping the rules in force: %s%s", err,
                     live.pending ? " (tried again every second)" : "");
        return;
    }
    apply(cfg, now);
}

/* ---- fork ---- */

void ccap_live_fork_prepare(void)
{
    pthread_mutex_lock(&live.mu);
    live.fork_locked = atomic_load(&live.names);
    ccap_names_fork_prepare(live.fork_locked);
}

void ccap_live_fork_parent(void)
{
    ccap_names_fork_parent(live.fork_locked);
    pthread_mutex_unlock(&live.mu);
}

void ccap_live_fork_child(void)
{
    ccap_names_fork_child(live.fork_locked);
    /* a thread of the parent may have waited on it: start it afresh */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&live.cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_unlock(&live.mu);
}

/* ---- public ---- */

size_t ccap_live_sem_slots(const struct ccap_config *boot)
{
    return (boot ? boot->n_sems : 0) + CCAP_SEM_SLOTS_SPARE;
}

int ccap_live_init(struct ccap_config *_Atomic *slot, const struct ccap_boot_seed *seed)
{
    struct ccap_config *cfg = atomic_load(slot);
    char abs[PATH_MAX];
    struct stat st;
    if (!cfg)
        return -ENOMEM;
    /* absolute: the program may chdir() (a relative name was resolved at load) */
    const char *path = seed->abs ? seed->abs : realpath(cfg->path, abs) ? abs : cfg->path;
    if (!(live.path = strdup(path)))
        return -ENOMEM;
    /* the version in force: as read at load, or as it is now */
    live.sig_ok = seed->st || stat(live.path, &st) == 0;
    if (live.sig_ok)
        live.sig = sig_of(seed->st ? seed->st : &st);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&live.cond, &ca);
    pthread_condattr_destroy(&ca);
    live.sem_cap = ccap_live_sem_slots(cfg);
    live.redis = cfg->redis;
    if (build_jobs(cfg, &live.jobs, &live.n_jobs) < 0)
        return -ENOMEM;
    atomic_store(&live.first_round, live.n_jobs ? 0 : 1);
    if (cfg->has_names)
        names_get(true);
    note_resolve_rules(cfg);
    live.next_check_ms = ccap_now_coarse_ms() + CCAP_WATCH_PERIOD_MS;
    live.next_sweep_ms = ccap_now_coarse_ms() + SWEEP_PERIOD_MS;
    live.slot = slot;
    return 0;
}

const struct ccap_config *ccap_live_current(void)
{
    return live.slot ? atomic_load(live.slot) : NULL;
}

const struct ccap_rule *ccap_live_match(const struct ccap_config *cfg, const struct sockaddr *sa, socklen_t len)
{
    if (!cfg->has_names)
        return ccap_config_match(cfg, sa, len, NULL, 0);
    if (cfg->has_resolve)
        wait_first_round();
    return ccap_names_match(atomic_load(&live.names), cfg, sa, len, ccap_now_coarse_ms());
}

void ccap_live_match_name(const struct ccap_config *cfg, const struct sockaddr *sa, socklen_t len, char *name,
                          size_t cap)
{
    if (cap)
        name[0] = '\0';
    if (cfg && cfg->has_names)
        ccap_names_match_name(atomic_load(&live.names), cfg, sa, len, ccap_now_coarse_ms(), name, cap);
}

/* The config, if it has host-name rules: the one to record names for. */
static const struct ccap_config *recording(const char *node)
{
    struct in_addr a4;
    if (!node || !*node || strchr(node, ':') || inet_aton(node, &a4))
        return NULL; /* numeric: an address, not a name */
    if (!ccap_rt_active() || !live.slot)
        return NULL;
    const struct ccap_config *cfg = atomic_load(live.slot);
    return cfg && cfg->has_names ? cfg : NULL;
}

void ccap_live_resolved_addrinfo(const char *node, int ai_flags, const struct addrinfo *res)
{
    char name[256];
    if ((ai_flags & AI_NUMERICHOST) || !recording(node) || ccap_name_normalize(node, name, sizeof name) < 0)
        return;
    struct ccap_names *m = names_get(true);
    long long now = ccap_now_coarse_ms();
    for (const struct addrinfo *ai = res; ai && m; ai = ai->ai_next) {
        struct ccap_addr a;
        if (ccap_addr_from_sa(ai->ai_addr, ai->ai_addrlen, &a) == 0)
            ccap_names_add(m, &a, name, now, CCAP_NAMES_TTL_MS);
    }
}

void ccap_live_resolved_hostent(const char *node, const struct hostent *he)
{
    char name[256];
    if (!he || !he->h_addr_list || !recording(node) || ccap_name_normalize(node, name, sizeof name) < 0)
        return;
    struct ccap_names *m = names_get(true);
    long long now = ccap_now_coarse_ms();
    for (char **p = he->h_addr_list; *p && m; p++) {
        struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
        struct sockaddr_in s4 = { .sin_family = AF_INET };
        struct ccap_addr a;
        int rc = -1;
        if (he->h_addrtype == AF_INET && he->h_length == 4) {
            memcpy(&s4.sin_addr, *p, 4);
            rc = ccap_addr_from_sa((struct sockaddr *)&s4, sizeof s4, &a);
        } else if (he->h_addrtype == AF_INET6 && he->h_length == 16) {
            memcpy(&s6.sin6_addr, *p, 16);
            rc = ccap_addr_from_sa((struct sockaddr *)&s6, sizeof s6, &a);
        }
        if (rc == 0)
            ccap_names_add(m, &a, name, now, CCAP_NAMES_TTL_MS);
    }
}

int ccap_live_tick(void)
{
    struct ccap_config *cur = live.slot ? atomic_load(live.slot) : NULL;
    if (!cur)
        return -1;
    if (atomic_load(&live.first_round) != 1) {
        run_jobs(live.jobs, live.n_jobs, true);
        first_round_done();
    }
    long long now = ccap_now_coarse_ms();
    if (now >= live.next_check_ms) {
        live.next_check_ms = now + CCAP_WATCH_PERIOD_MS;
        check_file(now);
    }
    run_jobs(live.jobs, live.n_jobs, false);
    now = ccap_now_coarse_ms();
    if (now >= live.next_sweep_ms) {
        live.next_sweep_ms = now + SWEEP_PERIOD_MS;
        ccap_names_expire(atomic_load(&live.names), now);
        free_retired(now, false);
    }
    long long next = live.next_check_ms;
    for (size_t i = 0; i < live.n_jobs; i++)
        if (live.jobs[i].due_ms < next)
            next = live.jobs[i].due_ms;
    next -= now;
    return next < 50 ? 50 : next > CCAP_WATCH_PERIOD_MS ? CCAP_WATCH_PERIOD_MS : (int)next;
}
