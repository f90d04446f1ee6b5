/* state.c -- the runtime's per-process state: the configuration in force, the Redis client, per-semaphore counters. */
#include <stdlib.h>
#include "env.h"
#include "log.h"
#include "reload.h"
#include "rt_int.h"
#include "sem.h"
#include "wait.h"

struct ccap_rt_state ccap_rt = { .once = PTHREAD_ONCE_INIT, .rlock = PTHREAD_MUTEX_INITIALIZER };

void ccap_rt_config_applied(const struct ccap_config *cfg)
{
    ccap_log_setup(cfg->log_level, cfg->log_target);
}

int ccap_rt_audit_maxlen(void)
{
    const struct ccap_config *cfg = ccap_rt.cfg;
    return cfg && cfg->audit ? cfg->audit_maxlen : 0;
}

/* The first load: the file, the Redis client, the counters (sized for any
 * index a reload may add: ccap_live_sem_slots), ownership, hot reload. On
 * any failure the configuration stays NULL and every connect passes. */
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
    ccap_rt_config_applied(cfg);
    ccap_rt.redis = ccap_redis_new(&cfg->redis);
    ccap_rt.local_used = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.local_used));
    ccap_rt.held = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.held));
    ccap_rt.sem_epoch = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.sem_epoch));
    ccap_rt.sem_used_ms = calloc(ccap_live_sem_slots(cfg), sizeof(*ccap_rt.sem_used_ms));
    if (!ccap_rt.redis || !ccap_rt.local_used || !ccap_rt.held || !ccap_rt.sem_epoch || !ccap_rt.sem_used_ms) {
        ccap_log(CCAP_LOG_ERROR, "out of memory at start-up, passing every connection through");
        ccap_config_free(cfg);
        return;
    }
    ccap_rt_ident_init();
    if (ccap_env_dropped())
        ccap_log(CCAP_LOG_WARN, "%zu CONNCAP_* environment variables too large to keep: ignored",
                 ccap_env_dropped());
    ccap_rt_claim();
    ccap_rt.cfg = cfg;
    if (ccap_live_init(&ccap_rt.cfg) < 0)
        ccap_log(CCAP_LOG_WARN, "out of memory at start-up: no hot reload, host-name rules match by address only");
    ccap_log(CCAP_LOG_DEBUG, "loaded %s: %zu semaphores, %zu rules", path, cfg->n_sems, cfg->n_rules);
}

const struct ccap_config *ccap_rt_config(void)
{
    pthread_once(&ccap_rt.once, init_once);
    return ccap_rt.cfg;
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
}
