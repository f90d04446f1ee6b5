/* common.c -- what every conncap subcommand shares: options, config, Redis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

int ccap_cli_parse(int argc, char **argv, struct ccap_cli_opts *o, const char *usage)
{
    memset(o, 0, sizeof(*o));
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) {
            if (++i >= argc) goto bad;
            o->config = argv[i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            o->config = argv[i] + 9;
        } else if (!strcmp(argv[i], "--json")) {
            o->json = true;
        } else if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "conncap %s: unknown option '%s'\n", argv[0], argv[i]);
            goto bad;
        } else {
            break;
        }
    }
    o->first = i;
    return 0;
bad:
    fprintf(stderr, "usage: conncap %s\n", usage);
    return -1;
}

struct ccap_config *ccap_cli_config(const struct ccap_cli_opts *o)
{
    char err[512];
    struct ccap_config *cfg = NULL;
    const char *path = o->config ? o->config : ccap_config_path();
    if (ccap_config_load(path, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "conncap: %s\n", err);
        return NULL;
    }
    return cfg;
}

struct ccap_redis *ccap_cli_redis_new(const struct ccap_config *cfg)
{
    struct ccap_redis *r = ccap_redis_new(&cfg->redis);
    if (r) ccap_redis_set_caps(r, &ccap_resp_caps_cli);
    return r;
}

struct ccap_redis *ccap_cli_redis(const struct ccap_config *cfg)
{
    struct ccap_redis *r = ccap_cli_redis_new(cfg);
    if (!r) {
        fprintf(stderr, "conncap: out of memory\n");
        return NULL;
    }
    int rc = ccap_redis_connect(r);
    if (rc < 0) {
        ccap_cli_redis_error(cfg, r);
        ccap_redis_free(r);
        return NULL;
    }
    return r;
}

void ccap_cli_redis_error(const struct ccap_config *cfg, const struct ccap_redis *r)
{
    const struct ccap_redis_conf *c = &cfg->redis;
    const char *e = ccap_redis_errstr(r)[0] ? ccap_redis_errstr(r) : "no answer", *why = strstr(e, ": ");
    if (!strncmp(e, "redis connect to ", 17) && why) e = why + 2;   /* the address is said once */
    if (c->n_sentinels || c->n_cluster) fprintf(stderr, "conncap: redis: %s\n", e);
    else if (c->socket) fprintf(stderr, "conncap: redis at %s: %s\n", c->socket, e);
    else fprintf(stderr, "conncap: redis at %s:%d: %s\n", c->host, c->port, e);
}
