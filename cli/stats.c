/* stats.c -- `conncap stats`: the counters the scripts keep, and wait-time percentiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "ops.h"

#define USAGE "stats [-c FILE] [--json] [NAME...]"

const char ccap_help_stats[] = "Per semaphore, the counters kept by the Redis scripts since the stats key\n"
                               "was created (they never expire): acquired, released, timed_out, denied\n"
                               "(refused attempts, every retry), reclaimed (lease expiry, or not re-registered\n"
                               "after a failover), reregistered\n"
                               "(re-added after Redis lost them), fallback_granted (granted while Redis\n"
                               "was down), reset_dropped, queue_full (refused at once: max_waiters queued);\n"
                               "and the wait before a grant or a timeout: count,\n"
                               "mean and the 50th/90th/99th percentiles, estimated from histogram buckets\n"
                               "of 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000 ms (linear\n"
                               "inside a bucket; a percentile beyond 10 s is shown as 10000).\n"
                               "  --json   {\"semaphores\": [{name, holders, limit, waiters, full_for_ms,\n"
                               "           counters: {acquired, ...}, wait: {count, sum_ms, mean_ms, p50_ms,\n"
                               "           p90_ms, p99_ms (null without waits), buckets: [{le_ms, count}]}}]}\n"
                               "           (bucket counts cumulative; the last has le_ms null: +Inf)\n"
                               "Exit: 0 ok, 2 usage, config or Redis error.";

static void print_text(const struct ccap_ops_sem *s)
{
    char d[32];
    printf("%s: %lld/%lld holders, %lld waiting", ccap_ops_esc(s->conf->name), s->holders, s->limit, s->waiters);
    if (ccap_ops_full_for_ms(s))
        printf(", no permit free for %s", ccap_ops_duration(ccap_ops_full_for_ms(s), d, sizeof d));
    printf("\n ");
    for (int i = 0; i < CCAP_OPS_N_COUNTERS; i++)
        printf(" %s %lld", ccap_ops_counters[i].field, s->counter[i]);
    printf("\n  wait: %lld waits", s->wait_count);
    if (s->wait_count) {
        printf(", mean %.1f ms, p50 %.1f ms, p90 %.1f ms, p99 %.1f ms (estimated)",
               (double)s->wait_sum_ms / (double)s->wait_count, ccap_ops_quantile(s->bucket, s->wait_count, 0.5),
               ccap_ops_quantile(s->bucket, s->wait_count, 0.9), ccap_ops_quantile(s->bucket, s->wait_count, 0.99));
        printf("\n  buckets:");
        for (int i = 0; i <= CCAP_WAIT_N_BOUNDS; i++)
            if (s->bucket[i]) {
                if (i < CCAP_WAIT_N_BOUNDS)
                    printf(" <=%dms %lld", ccap_ops_bounds_ms[i], s->bucket[i]);
                else
                    printf(" >%dms %lld", ccap_ops_bounds_ms[i - 1], s->bucket[i]);
            }
    }
    printf("\n");
}

int ccap_cmd_stats(int argc, char **argv)
{
    struct ccap_cli_opts o;
    char *names[64];
    int n = ccap_ops_parse(argc, argv, USAGE, &o, NULL, names, 64);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0)
        return CCAP_EXIT_USAGE;
    int rc = CCAP_EXIT_OK;
    for (int i = 0; i < n; i++)
        if (!ccap_ops_sem(cfg, "stats", names[i]))
            rc = CCAP_EXIT_USAGE;
    long long now = rc == CCAP_EXIT_OK ? ccap_ops_server_ms(r) : 0;
    if (now < 0) {
        fprintf(stderr, "conncap stats: redis TIME: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        rc = CCAP_EXIT_USAGE;
    }
    /* read everything first, so that an error leaves no half document */
    struct ccap_ops_sem *st = calloc(cfg->n_sems ? cfg->n_sems : 1, sizeof(*st));
    bool *want = calloc(cfg->n_sems ? cfg->n_sems : 1, sizeof(*want));
    if (!st || !want)
        rc = CCAP_EXIT_USAGE;
    for (size_t i = 0; rc == CCAP_EXIT_OK && i < cfg->n_sems; i++) {
        want[i] = n == 0;
        for (int j = 0; j < n; j++)
            want[i] = want[i] || !strcmp(names[j], cfg->sems[i].name);
        if (want[i] && ccap_ops_read(r, cfg, &cfg->sems[i], now, &st[i]) < 0) {
            fprintf(stderr, "conncap stats: %s: %s\n", ccap_ops_esc(cfg->sems[i].name),
                    ccap_ops_esc(ccap_redis_errstr(r)));
            rc = CCAP_EXIT_USAGE;
        }
    }
    if (rc == CCAP_EXIT_OK) {
        bool first = true;
        if (o.json)
            printf("{\"now_ms\":%lld,\"semaphores\":[", now);
        for (size_t i = 0; i < cfg->n_sems; i++) {
            if (!want[i])
                continue;
            if (o.json)
                ccap_ops_json_sem(stdout, &st[i], first);
            else
                print_text(&st[i]);
            first = false;
        }
        if (o.json)
            printf("]}\n");
    }
    free(st);
    free(want);
    ccap_ops_close(cfg, r);
    return rc;
}
