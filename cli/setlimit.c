/* setlimit.c -- `conncap set-limit NAME N|--default`: the fleet-wide cap, through the limit key. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "ops.h"

#define USAGE "set-limit [-c FILE] [--json] NAME N | set-limit [-c FILE] [--json] NAME --default"

const char ccap_help_set_limit[] = "Sets the limit of semaphore NAME to N (an integer >= 0) for every process\n"
                                   "at once, by writing the key <key_prefix>{NAME}:limit; running programs apply\n"
                                   "it at their next acquire (no restart; the waiters in its queue, up to the\n"
                                   "new limit, are woken to try at once). Lowering it removes nobody: holders\n"
                                   "above the new limit keep their connections, nobody new is admitted until\n"
                                   "the count is below it. --default deletes the key: the limit of the\n"
                                   "configuration file applies again. The key has no TTL. Logged to the audit\n"
                                   "stream when audit is on.\n"
                                   "  --json   {semaphore, limit, override (false after --default),\n"
                                   "           configured_limit, previous_limit, previous_override}\n"
                                   "Exit: 0 done, 2 usage, config or Redis error.";

/* Prints the new limit of S (V, or -1 after --default) and the one the
 * limit key OLD (GET's reply) held before. */
static void print_result(const struct ccap_sem_conf *s, long long v, const redisReply *old, bool json)
{
    char was[64];
    bool def = v < 0, had = old->type == REDIS_REPLY_STRING;
    if (had)
        snprintf(was, sizeof was, "%s (runtime override)", old->str);
    else
        snprintf(was, sizeof was, "%d (configured)", s->limit);
    if (json) {
        printf("{\"semaphore\":");
        ccap_ops_json_str(stdout, s->name);
        printf(",\"limit\":%lld,\"override\":%s,\"configured_limit\":%d,\"previous_limit\":%lld,"
               "\"previous_override\":%s}\n",
               def ? s->limit : v, def ? "false" : "true", s->limit, had ? atoll(old->str) : s->limit,
               had ? "true" : "false");
    } else {
        if (def)
            printf("%s: limit %d (configured; override removed), was %s\n", s->name, s->limit, was);
        else
            printf("%s: limit %lld (runtime override; configured %d), was %s\n", s->name, v, s->limit, was);
        printf("running programs apply it at their next acquire (waiters: at once)\n");
    }
}

/* S's full_since gauge (and its full_limit) under the new limit N: the
 * scripts set it only at a filling grant or a refusal, so a semaphore that
 * the new limit leaves full (holders >= N) would read "a permit free" until
 * the next connect tried. So: not full under N, both deleted (as `conncap
 * reset` does); full, dated from the fill before when that one still holds
 * (its holders are all still there, under a limit >= N: no permit has been
 * free since), else from now. One HSET, so a script's write in between is
 * overwritten whole or not at all. Returns 0 or -errno (the error in R). */
static int date_full_since(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s,
                           long long n)
{
    char key[600], since[32], lim[32];
    struct ccap_ops_sem st;
    redisReply *rep = NULL;
    long long now = ccap_ops_server_ms(r);
    if (ccap_sem_key(key, sizeof key, cfg->redis.key_prefix, s->name, CCAP_KEY_STATS) < 0)
        return -ENAMETOOLONG;
    if (now < 0 || ccap_ops_read(r, cfg, s, now, &st) < 0)
        return -EIO;
    int rc;
    if (st.holders < n) {
        const char *hdel[] = { "HDEL", key, CCAP_STAT_FULL_SINCE, CCAP_STAT_FULL_LIMIT };
        rc = ccap_redis_command(r, 4, hdel, &rep);
    } else {
        bool kept = st.full_since_ms >= 0 && st.full_limit >= n && st.holders >= st.full_limit;
        snprintf(since, sizeof since, "%lld", kept ? st.full_since_ms : now);
        snprintf(lim, sizeof lim, "%lld", n);
        const char *hset[] = { "HSET", key, CCAP_STAT_FULL_SINCE, since, CCAP_STAT_FULL_LIMIT, lim };
        rc = ccap_redis_command(r, 6, hset, &rep);
    }
    if (rep)
        freeReplyObject(rep);
    return rc;
}

int ccap_cmd_set_limit(int argc, char **argv)
{
    struct ccap_cli_opts o;
    bool def = false;
    char *ops[2];
    const struct ccap_opt opts[] = { { "default", CCAP_OPT_FLAG, &def, 0, 0 }, { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, ops, 2);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    long long v = -1;
    if (n == 2 && !def) {
        char *end;
        errno = 0;
        v = strtoll(ops[1], &end, 10);
        if (errno || end == ops[1] || *end || v < 0 || v > INT_MAX) {
            fprintf(stderr, "conncap set-limit: the limit must be an integer from 0 to %d, not '%s'\n", INT_MAX,
                    ops[1]);
            return CCAP_EXIT_USAGE;
        }
    } else if (!(n == 1 && def)) {
        fprintf(stderr, "conncap set-limit: give NAME and either N or --default\nusage: conncap %s\n", USAGE);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0)
        return CCAP_EXIT_USAGE;
    const struct ccap_sem_conf *s = ccap_ops_sem(cfg, "set-limit", ops[0]);
    int rc = s ? CCAP_EXIT_OK : CCAP_EXIT_USAGE;
    char key[600], val[24], who[300];
    redisReply *old = NULL, *rep = NULL;
    if (s) {
        ccap_sem_key(key, sizeof key, cfg->redis.key_prefix, s->name, CCAP_KEY_LIMIT);
        snprintf(val, sizeof val, "%lld", v);
        const char *get[] = { "GET", key }, *set[] = { "SET", key, val }, *del[] = { "DEL", key };
        if (ccap_redis_command(r, 2, get, &old) < 0 ||
            (def ? ccap_redis_command(r, 2, del, &rep) : ccap_redis_command(r, 3, set, &rep)) < 0) {
            fprintf(stderr, "conncap set-limit: %s: %s\n", s->name, ccap_ops_esc(ccap_redis_errstr(r)));
            rc = CCAP_EXIT_USAGE;
        }
    }
    if (rc == CCAP_EXIT_OK) {
        print_result(s, def ? -1 : v, old, o.json);
        const char *kv[] = { "event", "set-limit",          "by", ccap_ops_who(who, sizeof who),
                             "limit", def ? "default" : val };
        if (ccap_ops_audit(r, cfg, s->name, kv, 6) < 0)
            fprintf(stderr, "conncap set-limit: audit stream: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        if (date_full_since(r, cfg, s, def ? s->limit : v) < 0)
            fprintf(stderr, "conncap set-limit: full_since: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        /* a raised limit frees permits: the waiters sleep until told */
        if (ccap_ops_wake_queue(r, cfg, s, -1) < 0)
            fprintf(stderr, "conncap set-limit: waking the waiters: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
    }
    if (old)
        freeReplyObject(old);
    if (rep)
        freeReplyObject(rep);
    ccap_ops_close(cfg, r);
    return rc;
}
