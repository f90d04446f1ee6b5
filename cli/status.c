/* status.c -- `conncap status`: holders / limit of every semaphore, and who. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "sem.h"

/* Redis server time in ms. Returns -1 on error. */
static long long server_ms(struct ccap_redis *r)
{
    const char *a[] = { "TIME" };
    redisReply *rep = NULL;
    long long ms = -1;
    if (ccap_redis_command(r, 1, a, &rep) == 0 && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2)
        ms = atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
    if (rep) freeReplyObject(rep);
    return ms;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

/* Prints one semaphore; returns 1 when it is over its limit. */
static int show(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s, long long now,
                bool json, bool first)
{
    char hk[256], lk[256];
    ccap_sem_key(hk, sizeof(hk), cfg->redis.key_prefix, s->name, "holders");
    ccap_sem_key(lk, sizeof(lk), cfg->redis.key_prefix, s->name, "limit");
    const char *ga[] = { "GET", lk }, *za[] = { "ZRANGE", hk, "0", "-1", "WITHSCORES" };
    redisReply *lim = NULL, *hs = NULL;
    if (ccap_redis_command(r, 2, ga, &lim) < 0 || ccap_redis_command(r, 5, za, &hs) < 0 ||
        hs->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "conncap status: %s: %s\n", s->name, ccap_redis_errstr(r));
        if (lim) freeReplyObject(lim);
        if (hs) freeReplyObject(hs);
        return -1;
    }
    long long limit = lim->type == REDIS_REPLY_STRING ? atoll(lim->str) : s->limit;
    size_t live = 0;
    for (size_t i = 0; i + 1 < hs->elements; i += 2)
        if (atoll(hs->element[i + 1]->str) > now) live++;
    int over = (long long)live > limit;
    if (json) {
        printf("%s{\"name\":", first ? "" : ",");
        json_str(s->name);
        printf(",\"holders\":%zu,\"limit\":%lld,\"configured_limit\":%d,\"over_limit\":%s,\"list\":[", live, limit,
               s->limit, over ? "true" : "false");
    } else {
        printf("%-24s %zu/%lld%s%s\n", s->name, live, limit, limit != s->limit ? " (runtime override)" : "",
               over ? "  ALERT: over limit" : "");
    }
    int n = 0;
    for (size_t i = 0; i + 1 < hs->elements; i += 2) {
        long long left = atoll(hs->element[i + 1]->str) - now;
        if (left <= 0) continue;
        if (json) {
            printf("%s{\"holder\":", n++ ? "," : "");
            json_str(hs->element[i]->str);
            printf(",\"lease_left_ms\":%lld}", left);
        } else {
            printf("  %-64s lease left %lld ms\n", hs->element[i]->str, left);
        }
    }
    if (json) printf("]}");
    freeReplyObject(lim);
    freeReplyObject(hs);
    return over;
}

int ccap_cmd_status(int argc, char **argv)
{
    struct ccap_cli_opts o;
    if (ccap_cli_parse(argc, argv, &o, "status [-c FILE] [--json]") < 0) return CCAP_EXIT_USAGE;
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg) return CCAP_EXIT_USAGE;
    struct ccap_redis *r = ccap_cli_redis(cfg);
    if (!r) { ccap_config_free(cfg); return CCAP_EXIT_USAGE; }
    long long now = server_ms(r);
    int rc = now < 0 ? CCAP_EXIT_USAGE : CCAP_EXIT_OK;
    if (o.json) printf("{\"semaphores\":[");
    for (size_t i = 0; i < cfg->n_sems && rc != CCAP_EXIT_USAGE; i++) {
        int e = show(r, cfg, &cfg->sems[i], now, o.json, i == 0);
        if (e < 0) rc = CCAP_EXIT_USAGE;
        else if (e > 0) rc = CCAP_EXIT_ALERT;
    }
    if (o.json) printf("]}\n");
    ccap_redis_free(r);
    ccap_config_free(cfg);
    return rc;
}
