/* run.c -- `conncap run` (the entrypoint wrapper) and `conncap check`. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "log.h"

/* LD_PRELOAD with LIB first and every other entry kept, LIB not repeated. */
static char *preload_with(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    size_t n = strlen(lib) + (old ? strlen(old) : 0) + 2;
    char *out = malloc(n), *copy = strdup(old ? old : "");
    if (!out || !copy) exit(CCAP_EXIT_USAGE);
    strcpy(out, lib);
    for (char *save, *tok = strtok_r(copy, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
        if (!strcmp(tok, lib)) continue;
        strcat(out, ":");
        strcat(out, tok);
    }
    free(copy);
    return out;
}

int ccap_cmd_run(int argc, char **argv)
{
    static const char *usage = "run [-c FILE] -- CMD [ARGS...]";
    struct ccap_cli_opts o;
    if (ccap_cli_parse(argc, argv, &o, usage) < 0) return CCAP_EXIT_USAGE;
    if (o.first >= argc) {
        fprintf(stderr, "conncap run: no command given\nusage: conncap %s\n", usage);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg) return CCAP_EXIT_USAGE;
    char abs[PATH_MAX];
    const char *path = realpath(cfg->path, abs) ? abs : cfg->path;
    const char *lib = ccap_cli_library();
    if (access(lib, R_OK) != 0) {
        fprintf(stderr, "conncap run: cannot read the shim %s: %s (set CONNCAP_LIBRARY)\n", lib, strerror(errno));
        return CCAP_EXIT_USAGE;
    }
    if (setenv("CONNCAP_CONFIG", path, 1) != 0 || setenv("LD_PRELOAD", preload_with(lib), 1) != 0) {
        perror("conncap run: setenv");
        return CCAP_EXIT_USAGE;
    }
    ccap_config_free(cfg);
    execvp(argv[o.first], argv + o.first);
    fprintf(stderr, "conncap run: %s: %s\n", argv[o.first], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}

static const char *down_name(int d)
{
    return d == CCAP_DOWN_OPEN ? "open" : d == CCAP_DOWN_CLOSED ? "closed" : "local";
}

static void print_config(const struct ccap_config *cfg)
{
    const struct ccap_redis_conf *r = &cfg->redis;
    printf("config %s: ok\n", cfg->path);
    if (r->n_cluster) {
        printf("redis: cluster, seeds");
        for (size_t i = 0; i < r->n_cluster; i++) printf(" %s", r->cluster[i]);
    } else if (r->n_sentinels) {
        printf("redis: master \"%s\" via sentinels", r->master);
        for (size_t i = 0; i < r->n_sentinels; i++) printf(" %s", r->sentinels[i]);
        printf(", db %d", r->db);
    } else if (r->socket) {
        printf("redis: unix:%s db %d", r->socket, r->db);
    } else {
        printf("redis: %s:%d db %d", r->host, r->port, r->db);
    }
    /* the user name is shown, the password never: only whether there is one */
    printf(", timeouts %d/%d ms, key prefix \"%s\"%s%s%s%s\n", r->connect_timeout_ms, r->command_timeout_ms,
           r->key_prefix, r->username ? ", user \"" : "", r->username ? r->username : "", r->username ? "\"" : "",
           r->password ? ", password set" : "");
    printf("on_timeout %s, on_redis_down %s\n", ccap_errno_name(cfg->on_timeout_errno), down_name(cfg->on_redis_down));
    for (size_t i = 0; i < cfg->n_sems; i++) {
        const struct ccap_sem_conf *s = &cfg->sems[i];
        printf("semaphore %s: limit %d, lease %d ms, wait %d ms", s->name, s->limit, s->lease_ms, s->wait_timeout_ms);
        if (s->rate > 0) printf(", rate %g/s burst %d", s->rate, s->burst);
        printf("\n");
    }
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct ccap_rule *ru = &cfg->rules[i];
        if (ru->file && strcmp(ru->file, cfg->path))
            printf("rule %zu (%s:%d) -> %s:", i + 1, ru->file, ru->line, cfg->sems[ru->sem].name);
        else
            printf("rule %zu (line %d) -> %s:", i + 1, ru->line, cfg->sems[ru->sem].name);
        for (size_t j = 0; j < ru->n_pats; j++) printf(" %s", ru->pats[j].text);
        printf("\n");
    }
}

static void print_note(bool warn, const char *msg, void *arg)
{
    (void)arg;
    fprintf(stderr, "conncap check: %s: %s\n", warn ? "warning" : "note", msg);
}

int ccap_cmd_check(int argc, char **argv)
{
    struct ccap_cli_opts o;
    if (ccap_cli_parse(argc, argv, &o, "check [-c FILE]") < 0) return CCAP_EXIT_USAGE;
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg) return CCAP_EXIT_USAGE;
    print_config(cfg);
    ccap_config_notes(cfg, print_note, NULL);   /* the shim logs the same at start */
    int rc = CCAP_EXIT_USAGE;
    struct ccap_redis *r = ccap_cli_redis(cfg);
    if (r) {
        rc = CCAP_EXIT_OK;
        /* One PING first: a silent port or a server that is not Redis gets
         * one clear line, not one error per script. */
        const char *ping[] = { "PING" };
        redisReply *pong = NULL;
        int pe = ccap_redis_command(r, 1, ping, &pong);
        if (pe < 0 || pong->type != REDIS_REPLY_STATUS || strcmp(pong->str, "PONG")) {
            fprintf(stderr, "conncap check: the server did not answer PING like a Redis server: %s\n",
                    pe < 0 ? ccap_redis_errstr(r) : "unexpected reply");
            rc = CCAP_EXIT_USAGE;
        }
        if (pong) freeReplyObject(pong);
        for (int s = 0; s < CCAP_SCRIPT_COUNT && rc == CCAP_EXIT_OK; s++) {
            const char *args[] = { "SCRIPT", "LOAD", ccap_script_source(s) };
            redisReply *rep = NULL;
            int e = ccap_redis_command(r, 3, args, &rep);
            if (e < 0 || rep->type != REDIS_REPLY_STRING || strcmp(rep->str, ccap_script_sha(s))) {
                fprintf(stderr, "conncap check: loading script %d failed: %s\n", s,
                        e < 0 ? ccap_redis_errstr(r) : "unexpected sha");
                rc = CCAP_EXIT_USAGE;
            }
            if (rep) freeReplyObject(rep);
        }
        if (rc == CCAP_EXIT_OK) printf("redis: reachable, %d scripts loaded\n", CCAP_SCRIPT_COUNT);
        ccap_redis_free(r);
    }
    ccap_config_free(cfg);
    return rc;
}
