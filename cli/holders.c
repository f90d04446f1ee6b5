/* holders.c -- `conncap holders NAME`: who holds NAME's permits, since when, lease left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "ops.h"

#define USAGE "holders [-c FILE] [--json] [--limit N] NAME"

const char ccap_help_holders[] = "Each live holder of semaphore NAME, oldest first: host, pid, program, fd\n"
                                 "and destination (from the holder id\n"
                                 "host/pid/fd/destination/program/nonce.seq; the program is the process's\n"
                                 "name as ps shows it, \"?\" for an id of an older shim), age\n"
                                 "(since the permit was granted, or since it was re-registered after Redis\n"
                                 "lost it; before its first renewal: from its lease expiry and this file's\n"
                                 "lease_ms, exact when it was granted that lease) and lease left (renewed\n"
                                 "every lease/3 by the holder's heartbeat).\n"
                                 "  --limit N  show the N oldest only (then \"... and M more\")\n"
                                 "  --json   {\"semaphore\", \"now_ms\", \"total\" (live holders), \"holders\":\n"
                                 "           [{holder, host, pid, program, fd, destination, age_ms (null if\n"
                                 "           unknown), lease_left_ms}] (the --limit oldest)}\n"
                                 "           (host, pid, program, fd, destination are null for an id of\n"
                                 "           another shape; program null for an id without one)\n"
                                 "Exit: 0 ok, 2 usage, config or Redis error.";

struct row {
    const char *id;
    long long lease_left, age; /* age -1: unknown */
};

static int older_first(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    if (x->age != y->age)
        return x->age < y->age ? 1 : -1;
    return strcmp(x->id, y->id);
}

static void print_json(const char *name, long long now, const struct row *rows, size_t n, size_t max)
{
    printf("{\"semaphore\":");
    ccap_ops_json_str(stdout, name);
    printf(",\"now_ms\":%lld,\"total\":%zu,\"holders\":[", now, n);
    for (size_t i = 0; i < n && i < max; i++) {
        struct ccap_ops_holder h;
        bool ok = ccap_ops_parse_holder(rows[i].id, &h) == 0;
        printf("%s{\"holder\":", i ? "," : "");
        ccap_ops_json_str(stdout, rows[i].id);
        if (ok) {
            printf(",\"host\":");
            ccap_ops_json_str(stdout, h.host);
            printf(",\"pid\":%ld,\"program\":", h.pid);
            if (h.prog[0])
                ccap_ops_json_str(stdout, h.prog);
            else
                printf("null");
            printf(",\"fd\":%ld,\"destination\":", h.fd);
            ccap_ops_json_str(stdout, h.dest);
        } else {
            printf(",\"host\":null,\"pid\":null,\"program\":null,\"fd\":null,\"destination\":null");
        }
        if (rows[i].age >= 0)
            printf(",\"age_ms\":%lld", rows[i].age);
        else
            printf(",\"age_ms\":null");
        printf(",\"lease_left_ms\":%lld}", rows[i].lease_left);
    }
    printf("]}\n");
}

static void print_table(FILE *f, const struct row *rows, size_t n, size_t max)
{
    char a[32], l[32];
    fprintf(f, "%-20s %7s  %-15s %5s  %-26s %12s %12s\n", "HOST", "PID", "PROGRAM", "FD", "DESTINATION", "AGE",
            "LEASE LEFT");
    for (size_t i = 0; i < n && i < max; i++) {
        struct ccap_ops_holder h;
        ccap_ops_duration(rows[i].age, a, sizeof a);
        ccap_ops_duration(rows[i].lease_left, l, sizeof l);
        if (ccap_ops_parse_holder(rows[i].id, &h) == 0)
            fprintf(f, "%-20s %7ld  %-15s %5ld  %-26s %12s %12s\n", ccap_ops_esc(h.host), h.pid,
                    h.prog[0] ? ccap_ops_esc(h.prog) : "?", h.fd, ccap_ops_esc(h.dest), a, l);
        else
            fprintf(f, "%-20s %7s  %-15s %5s  %-26s %12s %12s\n", ccap_ops_esc(rows[i].id), "?", "?", "?", "?", a,
                    l);
    }
    if (n > max)
        fprintf(f, "... and %zu more\n", n - max);
    if (!n)
        fprintf(f, "(no holders)\n");
}

/* Reads the live holders and their acquire times; prints them to F (JSON,
 * or a table), at most MAX of them. */
static int show(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg, const char *name, bool json,
                size_t max)
{
    long long now = ccap_ops_server_ms(r);
    if (now < 0) {
        fprintf(stderr, "conncap holders: redis TIME: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        return CCAP_EXIT_USAGE;
    }
    struct ccap_ops_list l;
    if (ccap_ops_list_holders(r, cfg, name, now, true, &l) < 0) {
        fprintf(stderr, "conncap holders: %s: %s\n", ccap_ops_esc(name), ccap_ops_esc(ccap_redis_errstr(r)));
        return CCAP_EXIT_USAGE;
    }
    struct row *rows = calloc(l.n ? l.n : 1, sizeof(*rows));
    if (!rows) {
        fprintf(stderr, "conncap holders: out of memory\n");
        ccap_ops_list_free(&l);
        return CCAP_EXIT_USAGE;
    }
    now = l.end_ms; /* ages and leases as of the end of the reading */
    for (size_t i = 0; i < l.n; i++) {
        long long t = l.v[i].since_ms, e = l.v[i].expiry_ms;
        rows[i] = (struct row){ l.v[i].id, e > now ? e - now : 0, t < 0 ? -1 : now > t ? now - t : 0 };
    }
    qsort(rows, l.n, sizeof(*rows), older_first);
    if (json)
        print_json(name, now, rows, l.n, max);
    else
        print_table(f, rows, l.n, max);
    free(rows);
    ccap_ops_list_free(&l);
    return CCAP_EXIT_OK;
}

int ccap_ops_holders_table(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg, const char *name,
                           size_t max_rows)
{
    return show(f, r, cfg, name, false, max_rows) == CCAP_EXIT_OK ? 0 : -1;
}

int ccap_cmd_holders(int argc, char **argv)
{
    struct ccap_cli_opts o;
    long long limit = -1;
    char *names[1];
    const struct ccap_opt opts[] = { { "limit", CCAP_OPT_INT, &limit, 0, 1e12 }, { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, names, 1);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    if (n != 1) {
        fprintf(stderr, "conncap holders: which semaphore?\nusage: conncap %s\n", USAGE);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0)
        return CCAP_EXIT_USAGE;
    int rc = ccap_ops_sem(cfg, "holders", names[0])
                 ? show(stdout, r, cfg, names[0], o.json, limit < 0 ? (size_t)-1 : (size_t)limit)
                 : CCAP_EXIT_USAGE;
    ccap_ops_close(cfg, r);
    return rc;
}
