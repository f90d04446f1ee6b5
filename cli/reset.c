/* reset.c -- `conncap reset NAME --yes`: drop every holder of a semaphore, logged. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "log.h"
#include "ops.h"

#define USAGE "reset [-c FILE] [--json] NAME --yes"

const char ccap_help_reset[] = "Drops every holder of semaphore NAME at once (and their acquire times),\n"
                               "for after an incident, e.g. when crashed processes left permits with long\n"
                               "leases. Counters are kept. Processes still alive and holding connections\n"
                               "register their permits again at their next heartbeat (within a third of\n"
                               "the lease; counted in reregistered), so the count comes back to the truth.\n"
                               "The first waiters in its queue (up to the limit) are woken at once.\n"
                               "Refuses to run without --yes. The reset is logged on stderr, to the\n"
                               "configured log target when it is syslog, and to the audit stream (event\n"
                               "reset, by user@host) when audit is on.\n"
                               "  --json   also print {semaphore, dropped, by} on stdout\n"
                               "Exit: 0 done, 2 usage (no --yes), config or Redis error.";

/* Runs ARGV; stores its integer reply in *OUT when OUT. An error reply
 * containing NOSUCH (may be NULL; "no such key") counts as 0. 0 or -errno
 * as ccap_redis_command. */
static int run(struct ccap_redis *r, int argc, const char **argv, long long *out, const char *nosuch)
{
    redisReply *rep = NULL;
    int rc = ccap_redis_command(r, argc, argv, &rep);
    if (out)
        *out = rc == 0 && rep->type == REDIS_REPLY_INTEGER ? rep->integer : 0;
    if (rc == -EPROTO && nosuch && strstr(ccap_redis_errstr(r), nosuch))
        rc = 0;
    if (rep)
        freeReplyObject(rep);
    return rc;
}

/* Drops every holder of NAME at once: RENAME takes the holders set out of
 * the acquirers' sight in one O(1) step (no holder granted meanwhile can
 * be dropped by a later step, so no permit is given twice), ZCOUNT counts
 * its holders (not a failover window's marker, score 0: the window ends
 * with them), UNLINK frees it and the acquire times off Redis's main thread. Each
 * call is O(1) for Redis whatever the number of holders. A holder that
 * acquires between RENAME and UNLINK of the acquire times keeps its permit
 * and loses its acquire time. Returns the number dropped, or -errno. */
static long long drop_all(struct ccap_redis *r, const char *pfx, const char *name)
{
    char hk[600], sk[600], stk[600], tmp[600], sfx[96];
    snprintf(sfx, sizeof sfx, "%s:reset:%ld.%lld", CCAP_KEY_HOLDERS, (long)getpid(), ccap_ops_server_ms(r));
    if (ccap_sem_key(hk, sizeof hk, pfx, name, CCAP_KEY_HOLDERS) < 0 ||
        ccap_sem_key(sk, sizeof sk, pfx, name, CCAP_KEY_SINCE) < 0 ||
        ccap_sem_key(stk, sizeof stk, pfx, name, CCAP_KEY_STATS) < 0 ||
        ccap_sem_key(tmp, sizeof tmp, pfx, name, sfx) < 0)
        return -ENAMETOOLONG;
    long long n = 0;
    char num[24];
    if (run(r, 3, (const char *[]){ "RENAME", hk, tmp }, NULL, "no such key") < 0 ||
        run(r, 4, (const char *[]){ "ZCOUNT", tmp, "(0", "+inf" }, &n, NULL) < 0 ||
        run(r, 3, (const char *[]){ "UNLINK", tmp, sk }, NULL, NULL) < 0)
        return -EIO;
    snprintf(num, sizeof num, "%lld", n);
    if (run(r, 3, (const char *[]){ "HDEL", stk, CCAP_STAT_FULL_SINCE }, NULL, NULL) < 0 ||
        run(r, 4, (const char *[]){ "HINCRBY", stk, CCAP_STAT_RESET_DROPPED, num }, NULL, NULL) < 0)
        return -EIO;
    return n;
}

/* Prints and logs the outcome of a reset of S that dropped N holders. */
static void report(const struct ccap_config *cfg, const struct ccap_sem_conf *s, long long n, const char *who,
                   bool json)
{
    fprintf(stderr, "conncap reset: dropped %lld holders of %s (by %s)%s\n", n, s->name, who,
            cfg->audit ? "; recorded in the audit stream" : "");
    if (json) {
        printf("{\"semaphore\":");
        ccap_ops_json_str(stdout, s->name);
        printf(",\"dropped\":%lld,\"by\":", n);
        ccap_ops_json_str(stdout, who);
        printf("}\n");
    }
    if (cfg->log_target == CCAP_LOG_SYSLOG) {
        ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_SYSLOG);
        ccap_log(CCAP_LOG_WARN, "reset: dropped %lld holders of %s (by %s)", n, s->name, who);
    }
}

int ccap_cmd_reset(int argc, char **argv)
{
    struct ccap_cli_opts o;
    bool yes = false;
    char *ops[1];
    const struct ccap_opt opts[] = { { "yes", CCAP_OPT_FLAG, &yes, 0, 0 }, { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, ops, 1);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    if (n != 1) {
        fprintf(stderr, "conncap reset: which semaphore?\nusage: conncap %s\n", USAGE);
        return CCAP_EXIT_USAGE;
    }
    if (!yes) {
        fprintf(stderr,
                "conncap reset: this drops every holder of '%s' for the whole fleet; "
                "add --yes to do it\nusage: conncap %s\n",
                ops[0], USAGE);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0)
        return CCAP_EXIT_USAGE;
    const struct ccap_sem_conf *s = ccap_ops_sem(cfg, "reset", ops[0]);
    int rc = CCAP_EXIT_USAGE;
    long long dropped = s ? drop_all(r, cfg->redis.key_prefix, s->name) : -1;
    if (s && dropped < 0) {
        fprintf(stderr, "conncap reset: %s: %s\n", s->name, ccap_ops_esc(ccap_redis_errstr(r)));
    } else if (s) {
        char who[300], num[24];
        ccap_ops_who(who, sizeof who);
        snprintf(num, sizeof num, "%lld", dropped);
        const char *kv[] = { "event", "reset", "by", who, "dropped", num };
        if (ccap_ops_audit(r, cfg, s->name, kv, 6) < 0)
            fprintf(stderr, "conncap reset: audit stream: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        if (ccap_ops_wake_queue(r, cfg, s, -1) < 0) /* the freed permits go to the queue now */
            fprintf(stderr, "conncap reset: waking the waiters: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        report(cfg, s, dropped, who, o.json);
        rc = CCAP_EXIT_OK;
    }
    ccap_ops_close(cfg, r);
    return rc;
}
