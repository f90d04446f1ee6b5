/* audit.c -- `conncap audit NAME`: the last events of a semaphore's audit stream, and follow it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "ops.h"

#define USAGE "audit [-c FILE] [--json] [--count N] [--follow] NAME"
#define BLOCK_MS "1000" /* XREAD BLOCK per round: the stop flag is looked at in between */

const char ccap_help_audit[] = "Prints the last --count N (default 10) events of the audit stream of\n"
                               "semaphore NAME (<key_prefix>{NAME}:audit; written when the config says\n"
                               "audit = true, bounded by audit_maxlen), oldest first:\n"
                               "  TIME (UTC)  EVENT  FIELD=VALUE...\n"
                               "Events: acquire (holder, wait_ms, count, limit), release (holder, count),\n"
                               "timeout (holder, wait_ms), reset (by, dropped), set-limit (by, limit).\n"
                               "  --follow  then waits for new events (XREAD BLOCK) and prints them as they\n"
                               "            come, until Ctrl-C or SIGTERM\n"
                               "  --json    one JSON object per line: {id, time_ms, event, FIELD: VALUE...}\n"
                               "            (values as strings)\n"
                               "Exit: 0 ok, 2 usage, config or Redis error.";

/* Prints one stream entry {id, [field, value, ...]}; stores its id in LAST. */
static void entry(const redisReply *e, bool json, char *last, size_t lastlen)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING ||
        e->element[1]->type != REDIS_REPLY_ARRAY)
        return;
    const char *id = e->element[0]->str;
    const redisReply *kv = e->element[1];
    long long ms = atoll(id);
    snprintf(last, lastlen, "%s", id);
    if (json) {
        printf("{\"id\":");
        ccap_ops_json_str(stdout, id);
        printf(",\"time_ms\":%lld", ms);
        for (size_t i = 0; i + 1 < kv->elements; i += 2) {
            putchar(',');
            ccap_ops_json_str(stdout, kv->element[i]->str ? kv->element[i]->str : "");
            putchar(':');
            ccap_ops_json_str(stdout, kv->element[i + 1]->str ? kv->element[i + 1]->str : "");
        }
        printf("}\n");
        return;
    }
    char when[40] = "?";
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (gmtime_r(&t, &tm)) {
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when + strlen(when), sizeof when - strlen(when), ".%03lldZ", ms % 1000);
    }
    const char *ev = "?";
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->str && !strcmp(kv->element[i]->str, "event"))
            ev = kv->element[i + 1]->str;
    printf("%s  %-9s", when, ccap_ops_esc(ev));
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->str && strcmp(kv->element[i]->str, "event"))
            printf(" %s=%s", ccap_ops_esc(kv->element[i]->str), ccap_ops_esc(kv->element[i + 1]->str));
    printf("\n");
}

/* The last COUNT entries, oldest first; LAST gets the newest id seen. */
static int backlog(struct ccap_redis *r, const char *key, long long count, bool json, char *last, size_t lastlen)
{
    char cnt[24];
    snprintf(cnt, sizeof cnt, "%lld", count > 0 ? count : 1);
    const char *a[] = { "XREVRANGE", key, "+", "-", "COUNT", cnt };
    redisReply *rep = NULL;
    if (ccap_redis_command(r, 6, a, &rep) < 0 || rep->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "conncap audit: %s: %s\n", ccap_ops_esc(key),
                rep ? "not a stream" : ccap_ops_esc(ccap_redis_errstr(r)));
        if (rep)
            freeReplyObject(rep);
        return -1;
    }
    if (count > 0) {
        for (size_t i = rep->elements; i-- > 0;)
            entry(rep->element[i], json, last, lastlen);
    } else if (rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY && rep->element[0]->elements == 2) {
        snprintf(last, lastlen, "%s", rep->element[0]->element[0]->str); /* only where to follow from */
    }
    freeReplyObject(rep);
    fflush(stdout);
    return 0;
}

static int follow(struct ccap_redis *r, const char *key, bool json, char *last, size_t lastlen)
{
    ccap_ops_catch_signals();
    while (!ccap_ops_stop) {
        const char *a[] = { "XREAD", "COUNT", "100", "BLOCK", BLOCK_MS, "STREAMS", key, last };
        redisReply *rep = NULL;
        if (ccap_redis_command(r, 8, a, &rep) < 0) {
            if (ccap_ops_stop)
                break;
            fprintf(stderr, "conncap audit: %s: %s\n", ccap_ops_esc(key), ccap_ops_esc(ccap_redis_errstr(r)));
            return -1;
        }
        /* nil on timeout; else [[key, [entries]]] */
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_ARRAY &&
            rep->element[0]->elements == 2 && rep->element[0]->element[1]->type == REDIS_REPLY_ARRAY) {
            const redisReply *es = rep->element[0]->element[1];
            for (size_t i = 0; i < es->elements; i++)
                entry(es->element[i], json, last, lastlen);
            fflush(stdout);
        }
        freeReplyObject(rep);
    }
    return 0;
}

int ccap_cmd_audit(int argc, char **argv)
{
    struct ccap_cli_opts o;
    long long count = 10;
    bool follow_on = false;
    char *ops[1];
    const struct ccap_opt opts[] = { { "count", CCAP_OPT_INT, &count, 0, 1e9 },
                                     { "follow", CCAP_OPT_FLAG, &follow_on, 0, 0 },
                                     { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, ops, 1);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    if (n != 1) {
        fprintf(stderr, "conncap audit: which semaphore?\nusage: conncap %s\n", USAGE);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg;
    struct ccap_redis *r;
    /* XREAD BLOCK needs a command timeout past the block time */
    if (ccap_ops_open(&o, follow_on ? 1000 + 2000 : 0, &cfg, &r) < 0)
        return CCAP_EXIT_USAGE;
    int rc = CCAP_EXIT_USAGE;
    if (ccap_ops_sem(cfg, "audit", ops[0])) {
        char key[600], last[64] = "0-0";
        ccap_sem_key(key, sizeof key, cfg->redis.key_prefix, ops[0], CCAP_KEY_AUDIT);
        if (!cfg->audit)
            fprintf(stderr, "conncap audit: note: audit is off in %s (audit = true records events)\n", cfg->path);
        if (backlog(r, key, count, o.json, last, sizeof last) == 0 &&
            (!follow_on || follow(r, key, o.json, last, sizeof last) == 0))
            rc = CCAP_EXIT_OK;
    }
    ccap_ops_close(cfg, r);
    return rc;
}
