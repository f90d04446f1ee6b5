/* status.c -- `conncap status`: holders / limit of every semaphore, who, and alert marks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "ops.h"

#define USAGE "status [-c FILE] [--json] [--full-alert SECONDS] [NAME...]"

const char ccap_help_status[] = "Per semaphore: live holders / limit in force (a runtime override from\n"
                                "`conncap set-limit` is marked), waiters, and each holder with its lease left.\n"
                                "Alert marks: \"over limit\" when more holders than the limit (after a lowered\n"
                                "limit, or re-registration after a Redis loss), and \"no permit free for T\"\n"
                                "when the limit has been fully used for longer than --full-alert SECONDS\n"
                                "(default 60; 0 turns it off). With restart_grace_ms set: the time left\n"
                                "before new permits after Redis lost the semaphore.\n"
                                "  --json   one JSON object: {\"semaphores\": [{name, holders, limit,\n"
                                "           configured_limit, override, waiters, full_for_ms, over_limit,\n"
                                "           full_too_long, alert, restart_grace_left_ms (0 none, -1 the\n"
                                "           next connect starts one), list: [{holder, lease_left_ms}]}],\n"
                                "           functions: false when the function library is not loaded,\n"
                                "           library: its name}\n"
                                "A missing function library (conncap setup not run) is warned about on\n"
                                "stderr; the shim logs it only at debug.\n"
                                "Exit: 0 ok, 1 an alert on any semaphore, 2 usage, config or Redis error.";

/* The live holders of S and their lease left, as printed below its line. */
static int list_holders(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s,
                        long long now, bool json)
{
    struct ccap_ops_list l;
    if (ccap_ops_list_holders(r, cfg, s->name, now, false, &l) < 0) {
        fprintf(stderr, "conncap status: %s: %s\n", ccap_ops_esc(s->name), ccap_ops_esc(ccap_redis_errstr(r)));
        return -1;
    }
    for (size_t i = 0; i < l.n; i++) {
        long long left = l.v[i].expiry_ms > l.end_ms ? l.v[i].expiry_ms - l.end_ms : 0;
        if (json) {
            printf("%s{\"holder\":", i ? "," : "");
            ccap_ops_json_str(stdout, l.v[i].id);
            printf(",\"lease_left_ms\":%lld}", left);
        } else {
            printf("  %-64s lease left %lld ms\n", ccap_ops_esc(l.v[i].id), left);
        }
    }
    ccap_ops_list_free(&l);
    return 0;
}

/* Prints one semaphore; returns 1 when it deserves an alert, -1 on error. */
static int show(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s, long long now,
                bool json, bool first, long long full_alert_ms)
{
    struct ccap_ops_sem st;
    if (ccap_ops_read(r, cfg, s, now, &st) < 0) {
        fprintf(stderr, "conncap status: %s: %s\n", ccap_ops_esc(s->name), ccap_ops_esc(ccap_redis_errstr(r)));
        return -1;
    }
    long long full_for = ccap_ops_full_for_ms(&st);
    bool over = st.holders > st.limit;
    bool too_long = full_alert_ms > 0 && st.holders >= st.limit && full_for >= full_alert_ms;
    char d[32];
    if (json) {
        printf("%s{\"name\":", first ? "" : ",");
        ccap_ops_json_str(stdout, s->name);
        printf(",\"holders\":%lld,\"limit\":%lld,\"configured_limit\":%d,\"override\":%s,\"waiters\":%lld,"
               "\"full_for_ms\":%lld,\"over_limit\":%s,\"full_too_long\":%s,\"alert\":%s,"
               "\"restart_grace_left_ms\":%lld,\"list\":[",
               st.holders, st.limit, s->limit, st.override ? "true" : "false", st.waiters, full_for,
               over ? "true" : "false", too_long ? "true" : "false", over || too_long ? "true" : "false",
               st.grace_left_ms);
    } else {
        printf("%-24s %lld/%lld%s", ccap_ops_esc(s->name), st.holders, st.limit,
               st.override ? " (runtime override)" : "");
        if (st.waiters)
            printf(", %lld waiting", st.waiters);
        if (over)
            printf("  ALERT: over limit");
        if (too_long)
            printf("  ALERT: no permit free for %s", ccap_ops_duration(full_for, d, sizeof d));
        if (st.grace_left_ms > 0)
            printf("  restart grace: new permits in %s (redis lost this semaphore)",
                   ccap_ops_duration(st.grace_left_ms, d, sizeof d));
        else if (st.grace_left_ms < 0)
            printf(
                "  restart grace: starts at the next connect (no epoch key: redis lost this semaphore, or never saw it)");
        printf("\n");
    }
    int rc = list_holders(r, cfg, s, now, json);
    if (json)
        printf("]}");
    return rc < 0 ? -1 : over || too_long;
}

int ccap_cmd_status(int argc, char **argv)
{
    struct ccap_cli_opts o;
    double full_alert = 60;
    char *names[64];
    const struct ccap_opt opts[] = { { "full-alert", CCAP_OPT_NUM, &full_alert, 0, 1e9 }, { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, names, 64);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0)
        return CCAP_EXIT_USAGE;
    for (int i = 0; i < n; i++)
        if (!ccap_ops_sem(cfg, "status", names[i])) {
            ccap_ops_close(cfg, r);
            return CCAP_EXIT_USAGE;
        }
    long long now = ccap_ops_server_ms(r);
    int rc = CCAP_EXIT_OK;
    if (now < 0) {
        fprintf(stderr, "conncap status: redis TIME: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        rc = CCAP_EXIT_USAGE;
    }
    if (o.json && rc == CCAP_EXIT_OK)
        printf("{\"semaphores\":[");
    bool first = true;
    for (size_t i = 0; i < cfg->n_sems && rc != CCAP_EXIT_USAGE; i++) {
        bool want = n == 0;
        for (int j = 0; j < n; j++)
            want = want || !strcmp(names[j], cfg->sems[i].name);
        if (!want)
            continue;
        int e = show(r, cfg, &cfg->sems[i], now, o.json, first, (long long)(full_alert * 1000));
        first = false;
        if (e < 0)
            rc = CCAP_EXIT_USAGE;
        else if (e > 0)
            rc = CCAP_EXIT_ALERT;
    }
    /* the shim says a missing function library only at debug (every
     * process would say it): status carries it */
    int functions = rc != CCAP_EXIT_USAGE ? ccap_ops_functions_loaded(r) : 1;
    if (!functions)
        ccap_ops_warn_functions("status");
    if (o.json && now >= 0)
        printf("],\"functions\":%s,\"library\":\"conncap_%s\"}\n", functions ? "true" : "false",
               ccap_function_version());
    ccap_ops_close(cfg, r);
    return rc;
}
