/* reset.c -- `conncap reset NAME --yes`: drop every holder of a semaphore, logged. */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "log.h"
#include "ops.h"

#define USAGE "reset [-c FILE] [--json] NAME --yes"

const char ccap_help_reset[] =
    "Drops every holder of semaphore NAME at once (and their acquire times),\n"
    "for after an incident, e.g. when crashed processes left permits with long\n"
    "leases. Counters are kept. Processes still alive and holding connections\n"
    "register their permits again at their next heartbeat (within a third of\n"
    "the lease; counted in reregistered), so the count comes back to the truth.\n"
    "Refuses to run without --yes. The reset is logged on stderr, to the\n"
    "configured log target when it is syslog, and to the audit stream (event\n"
    "reset, by user@host) when audit is on.\n"
    "  --json   also print {semaphore, dropped, by} on stdout\n"
    "Exit: 0 done, 2 usage (no --yes), config or Redis error.";

int ccap_cmd_reset(int argc, char **argv)
{
    struct ccap_cli_opts o;
    bool yes = false;
    char *ops[1];
    const struct ccap_opt opts[] = { { "yes", CCAP_OPT_FLAG, &yes, 0, 0 }, { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, ops, 1);
    if (n < 0) return CCAP_EXIT_USAGE;
    if (n != 1) {
        fprintf(stderr, "conncap reset: which semaphore?\nusage: conncap %s\n", USAGE);
        return CCAP_EXIT_USAGE;
    }
    if (!yes) {
        fprintf(stderr, "conncap reset: this drops every holder of '%s' for the whole fleet; "
                        "add --yes to do it\nusage: conncap %s\n", ops[0], USAGE);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0) return CCAP_EXIT_USAGE;
    const struct ccap_sem_conf *s = ccap_ops_sem(cfg, "reset", ops[0]);
    int rc = CCAP_EXIT_USAGE;
    if (s) {
        char who[300];
        ccap_ops_who(who, sizeof who);
        int dropped = ccap_sem_reset(r, cfg->redis.key_prefix, s->name, who, cfg->audit ? cfg->audit_maxlen : 0);
        if (dropped < 0) {
            fprintf(stderr, "conncap reset: %s: %s\n", s->name, ccap_ops_esc(ccap_redis_errstr(r)));
        } else {
            rc = CCAP_EXIT_OK;
            fprintf(stderr, "conncap reset: dropped %d holders of %s (by %s)%s\n", dropped, s->name, who,
                    cfg->audit ? "; recorded in the audit stream" : "");
            if (o.json) {
                printf("{\"semaphore\":");
                ccap_ops_json_str(stdout, s->name);
                printf(",\"dropped\":%d,\"by\":", dropped);
                ccap_ops_json_str(stdout, who);
                printf("}\n");
            }
            if (cfg->log_target == CCAP_LOG_SYSLOG) {
                ccap_log_setup(CCAP_LOG_WARN, CCAP_LOG_SYSLOG);
                ccap_log(CCAP_LOG_WARN, "reset: dropped %d holders of %s (by %s)", dropped, s->name, who);
            }
        }
    }
    ccap_ops_close(cfg, r);
    return rc;
}
