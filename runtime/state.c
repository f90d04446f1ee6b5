/* state.c -- the runtime's per-process state: the configuration in force, the Redis client, per-semaphore counters. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "boot.h"
#include "env.h"
#include "log.h"
#include "reload.h"
#include "rt_int.h"
#include "sem.h"
#include "wait.h"

struct ccap_rt_state ccap_rt = { .rlock = PTHREAD_MUTEX_INITIALIZER };

/* How far the load got. NONE: not yet, or it failed for a transient
 * reason (out of descriptors or memory): the next connect tries again.
 * DONE: ccap_rt.cfg is in force. GAVE_UP: the configuration is bad
 * (missing, unreadable, invalid): every connect passes, for good. */
enum { LOAD_NONE, LOAD_DONE, LOAD_GAVE_UP };
static atomic_int load_state;
/* The pid of the process one of whose threads loads now, 0 when none: a
 * fork child inherits its parent's value without that thread, and takes
 * over (a lock would stay locked in it). */
static atomic_int loading;
static _Thread_local bool in_load;
static unsigned failures; /* transient failures so far; under loading */

void ccap_rt_config_applied(const struct ccap_config *cfg)
{
    ccap_log_setup(cfg->log_level, cfg->log_target);
}

int ccap_rt_audit_maxlen(void)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    return cfg && cfg->audit ? cfg->audit_maxlen : 0;
}

/* Puts CFG in force: the Redis client, the counters (sized for any index
 * a reload may add: ccap_live_sem_slots), ownership, hot reload from
 * SEED. Returns 0, or -ENOMEM with nothing kept (CFG is the caller's). */
static int start(struct ccap_config *cfg, const struct ccap_boot_seed *seed)
{
    ccap_rt_config_applied(cfg);
    ccap_rt.redis = ccap_redis_new(&cfg->redis);
    ccap_rt.local_used = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.local_used));
    ccap_rt.held = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.held));
    ccap_rt.sem_epoch = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.sem_epoch));
    ccap_rt.sem_used_ms = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.sem_used_ms));
    ccap_rt.refusal_log = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.refusal_log));
    if (!ccap_rt.redis || !ccap_rt.local_used || !ccap_rt.held || !ccap_rt.sem_epoch || !ccap_rt.sem_used_ms ||
        !ccap_rt.refusal_log) {
        ccap_redis_free(ccap_rt.redis);
        free(ccap_rt.local_used);
        free(ccap_rt.held);
        free(ccap_rt.sem_epoch);
        free(ccap_rt.sem_used_ms);
        free(ccap_rt.refusal_log);
        ccap_rt.redis = NULL;
        ccap_rt.local_used = ccap_rt.held = NULL;
        ccap_rt.sem_epoch = NULL;
        ccap_rt.sem_used_ms = NULL;
        ccap_rt.refusal_log = NULL;
        return -ENOMEM;
    }
    ccap_rt_ident_init();
    if (ccap_env_dropped())
        ccap_log(CCAP_LOG_WARN, "%zu CONNCAP_* environment variables too large to keep: ignored",
                 ccap_env_dropped());
    ccap_rt_claim();
    ccap_rt.cfg = cfg;
    if (ccap_live_init(&ccap_rt.cfg, seed) < 0)
        ccap_log(CCAP_LOG_WARN, "out of memory at start-up: no hot reload, host-name rules match by address only");
    ccap_log(CCAP_LOG_DEBUG, "loaded %s: %zu semaphores, %zu rules", cfg->path, cfg->n_sems, cfg->n_rules);
    return 0;
}

/* One attempt, by the one thread that loads (see loading). A transient
 * failure is said once and leaves the state NONE; a bad configuration is
 * said once, with file and line, and is final. */
static void load(void)
{
    char err[512];
    struct ccap_config *cfg = NULL;
    struct ccap_boot_seed seed;
    int rc = ccap_boot_take(&cfg, &seed, err, sizeof err);
    if (rc == 0 && (rc = start(cfg, &seed)) < 0) {
        snprintf(err, sizeof err, "%s: out of memory at start-up", cfg->path);
        ccap_boot_put_back(cfg);
    }
    if (rc == 0) {
        if (failures)
            ccap_log(CCAP_LOG_WARN, "loaded %s after %u failed attempt%s: connections are capped from now on",
                     cfg->path, failures, failures > 1 ? "s" : "");
        atomic_store(&load_state, LOAD_DONE);
    } else if (ccap_boot_transient(rc)) {
        if (failures++ == 0)
            ccap_log(CCAP_LOG_WARN,
                     "cannot load the configuration now, connections pass through until it loads (tried "
                     "again at each connect): %s",
                     err);
    } else {
        if (rc == -EACCES)
            snprintf(err + strlen(err), sizeof err - strlen(err),
                     " (as uid %u: `conncap run` hands over the configuration it checked)", (unsigned)geteuid());
        ccap_log(CCAP_LOG_ERROR, "bad configuration, passing every connection through: %s", err);
        atomic_store(&load_state, LOAD_GAVE_UP);
    }
}

/* Loads in one thread of the process at a time; the others wait for it
 * (a millisecond at a time: a load costs well under that) and, after a
 * failure that may pass, try in turn. */
static int load_serialised(void)
{
    int me = (int)getpid(), st;
    if (in_load)
        return LOAD_NONE; /* a hook reached from the load itself */
    for (;;) {
        int cur = 0;
        if (atomic_compare_exchange_strong(&loading, &cur, me) ||
            (cur != me && atomic_compare_exchange_strong(&loading, &cur, me))) {
            in_load = true;
            if (atomic_load(&load_state) == LOAD_NONE)
                load();
            in_load = false;
            atomic_store(&loading, 0);
            return atomic_load(&load_state);
        }
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
        if ((st = atomic_load(&load_state)) != LOAD_NONE)
            return st;
    }
}

const struct ccap_config *ccap_rt_config(void)
{
    int st = atomic_load_explicit(&load_state, memory_order_acquire);
    if (st == LOAD_NONE)
        st = load_serialised();
    return st == LOAD_DONE ? ccap_rt.cfg : NULL;
}

void ccap_rt_set_hooks(const struct ccap_rt_hooks *hooks)
{
    ccap_rt.hooks = *hooks;
    ccap_wait_set_spawn(hooks->spawn);
}

bool ccap_rt_active(void)
{
    return ccap_rt_config() != NULL;
}

void ccap_rt_kick(void)
{
    if (ccap_rt.hooks.need_heartbeat)
        ccap_rt.hooks.need_heartbeat();
}

int ccap_rt_sem_index(const char *name)
{
    return ccap_rt.cfg ? ccap_config_sem_index(ccap_rt.cfg, name) : -1;
}

atomic_int *ccap_rt_held_count(const char *sem)
{
    int i = ccap_rt_config() ? ccap_rt_sem_index(sem) : -1;
    return i >= 0 ? &ccap_rt.held[i] : NULL;
}

void ccap_rt_state_fork_child(void)
{
    if (ccap_rt.redis)
        ccap_redis_forget(ccap_rt.redis);
    if (ccap_rt.local_used && ccap_rt.cfg)
        for (size_t i = 0; i < ccap_rt.cfg->n_sems; i++)
            atomic_store(&ccap_rt.local_used[i], 0);
    if (ccap_rt.held && ccap_rt.cfg) /* the child holds none of its parent's permits */
        for (size_t i = 0; i < ccap_rt.cfg->n_sems; i++)
            atomic_store(&ccap_rt.held[i], 0);
    if (ccap_rt.refusal_log && ccap_rt.cfg) /* the parent's refusals are the parent's to report */
        for (size_t i = 0; i < ccap_rt.cfg->n_sems; i++)
            ccap_rt.refusal_log[i] = (struct ccap_log_every){ 0 };
}
