/* holders.c -- `conncap holders NAME`: who holds NAME's permits, since when, lease left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "ops.h"

#define USAGE "holders [-c FILE] [--json] NAME"

const char ccap_help_holders[] =
    "Each live holder of semaphore NAME, oldest first: host, pid, fd and\n"
    "destination (from the holder id host/pid/fd/destination/nonce.seq), age\n"
    "(since the permit was granted, or since it was re-registered after Redis\n"
    "lost it) and lease left (renewed every lease/3 by the holder's heartbeat).\n"
    "  --json   {\"semaphore\", \"now_ms\", \"holders\": [{holder, host, pid, fd,\n"
    "           destination, age_ms (null if unknown), lease_left_ms}]}\n"
    "           (host, pid, fd, destination are null for an id of another shape)\n"
    "Exit: 0 ok, 2 usage, config or Redis error.";

struct row {
    const char *id;
    long long lease_left, age; /* age -1: unknown */
};

static int older_first(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    if (x->age != y->age) return x->age < y->age ? 1 : -1;
    return strcmp(x->id, y->id);
}

static void print_json(const char *name, long long now, const struct row *rows, size_t n)
{
    printf("{\"semaphore\":");
    ccap_ops_json_str(stdout, name);
    printf(",\"now_ms\":%lld,\"holders\":[", now);
    for (size_t i = 0; i < n; i++) {
        struct ccap_ops_holder h;
        bool ok = ccap_ops_parse_holder(rows[i].id, &h) == 0;
        printf("%s{\"holder\":", i ? "," : "");
        ccap_ops_json_str(stdout, rows[i].id);
        if (ok) {
            printf(",\"host\":");
            ccap_ops_json_str(stdout, h.host);
            printf(",\"pid\":%ld,\"fd\":%ld,\"destination\":", h.pid, h.fd);
            ccap_ops_json_str(stdout, h.dest);
        } else {
            printf(",\"host\":null,\"pid\":null,\"fd\":null,\"destination\":null");
        }
        if (rows[i].age >= 0) printf(",\"age_ms\":%lld", rows[i].age);
        else printf(",\"age_ms\":null");
        printf(",\"lease_left_ms\":%lld}", rows[i].lease_left);
    }
    printf("]}\n");
}

static void print_table(FILE *f, const struct row *rows, size_t n, size_t max)
{
    char a[32], l[32];
    fprintf(f, "%-20s %7s %5s  %-26s %12s %12s\n", "HOST", "PID", "FD", "DESTINATION", "AGE", "LEASE LEFT");
    for (size_t i = 0; i < n && i < max; i++) {
        struct ccap_ops_holder h;
        ccap_ops_duration(rows[i].age, a, sizeof a);
        ccap_ops_duration(rows[i].lease_left, l, sizeof l);
        if (ccap_ops_parse_holder(rows[i].id, &h) == 0)
            fprintf(f, "%-20s %7ld %5ld  %-26s %12s %12s\n", ccap_ops_esc(h.host), h.pid, h.fd, ccap_ops_esc(h.dest), a, l);
        else
            fprintf(f, "%-20s %7s %5s  %-26s %12s %12s\n", ccap_ops_esc(rows[i].id), "?", "?", "?", a, l);
    }
    if (n > max) fprintf(f, "... and %zu more\n", n - max);
    if (!n) fprintf(f, "(no holders)\n");
}

/* Reads the live holders and their acquire times; prints them to F (JSON,
 * or a table of at most MAX rows). */
static int show(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg, const char *name, bool json, size_t max)
{
    char hk[600], sk[600], nowx[32];
    long long now = ccap_ops_server_ms(r);
    if (now < 0) {
        fprintf(stderr, "conncap holders: redis TIME: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        return CCAP_EXIT_USAGE;
    }
    ccap_sem_key(hk, sizeof hk, cfg->redis.key_prefix, name, "holders");
    ccap_sem_key(sk, sizeof sk, cfg->redis.key_prefix, name, "since");
    snprintf(nowx, sizeof nowx, "(%lld", now);
    const char *za[] = { "ZRANGEBYSCORE", hk, nowx, "+inf", "WITHSCORES" };
    redisReply *hs = NULL, *since = NULL;
    if (ccap_redis_command(r, 5, za, &hs) < 0 || hs->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "conncap holders: %s: %s\n", ccap_ops_esc(name), hs ? "unexpected reply" : ccap_ops_esc(ccap_redis_errstr(r)));
        if (hs) freeReplyObject(hs);
        return CCAP_EXIT_USAGE;
    }
    size_t n = hs->elements / 2;
    struct row *rows = calloc(n ? n : 1, sizeof(*rows));
    const char **hm = calloc(n + 2, sizeof(*hm));
    int rc = rows && hm ? CCAP_EXIT_OK : CCAP_EXIT_USAGE;
    for (size_t i = 0; rc == CCAP_EXIT_OK && i < n; i++) {
        rows[i].id = hm[i + 2] = hs->element[2 * i]->str;
        rows[i].lease_left = atoll(hs->element[2 * i + 1]->str) - now;
        rows[i].age = -1;
    }
    if (rc == CCAP_EXIT_OK && n) { /* the acquire times, in the same order */
        hm[0] = "HMGET";
        hm[1] = sk;
        if (ccap_redis_command(r, (int)n + 2, hm, &since) < 0 || since->type != REDIS_REPLY_ARRAY ||
            since->elements != n) {
            fprintf(stderr, "conncap holders: %s: %s\n", ccap_ops_esc(name), since ? "unexpected reply" : ccap_ops_esc(ccap_redis_errstr(r)));
            rc = CCAP_EXIT_USAGE;
        }
        for (size_t i = 0; rc == CCAP_EXIT_OK && i < n; i++)
            if (since->element[i]->type == REDIS_REPLY_STRING) {
                long long t = atoll(since->element[i]->str);
                rows[i].age = now > t ? now - t : 0;
            }
    }
    if (rc == CCAP_EXIT_OK) {
        qsort(rows, n, sizeof(*rows), older_first);
        if (json) print_json(name, now, rows, n);
        else print_table(f, rows, n, max);
    }
    free(rows);
    free(hm);
    freeReplyObject(hs);
    if (since) freeReplyObject(since);
    return rc;
}

int ccap_ops_holders_table(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg, const char *name,
                           size_t max_rows)
{
    return show(f, r, cfg, name, false, max_rows) == CCAP_EXIT_OK ? 0 : -1;
}

int ccap_cmd_holders(int argc, char **argv)
{
    struct ccap_cli_opts o;
    char *names[1];
    int n = ccap_ops_parse(argc, argv, USAGE, &o, NULL, names, 1);
    if (n < 0) return CCAP_EXIT_USAGE;
    if (n != 1) {
        fprintf(stderr, "conncap holders: which semaphore?\nusage: conncap %s\n", USAGE);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0) return CCAP_EXIT_USAGE;
    int rc = ccap_ops_sem(cfg, "holders", names[0]) ? show(stdout, r, cfg, names[0], o.json, (size_t)-1) : CCAP_EXIT_USAGE;
    ccap_ops_close(cfg, r);
    return rc;
}
