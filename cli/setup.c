/* setup.c -- `conncap setup`: load this build's function library on every master (an administrator's step). */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "ops.h"

#define USAGE "setup [-c FILE] [--json] [--prune]"
#define SETUP_MAX_LIBS 32

const char ccap_help_setup[] = "Loads (FUNCTION LOAD REPLACE) the function library conncap_<version>,\n"
                               "built from the scripts this conncap was built with, on the Redis server\n"
                               "(with Cluster: on every master). The shim and the CLI then call its\n"
                               "functions with FCALL, so their Redis users need no EVAL or SCRIPT rights\n"
                               "(see examples/redis-acl.conf). Run it with a configuration whose Redis\n"
                               "user may run FUNCTION (an administrator: not the workers' user), after\n"
                               "each upgrade of conncap and after adding a Cluster master; it is safe to\n"
                               "run again. The library of another conncap version is left loaded, for the\n"
                               "processes still running it during a rolling upgrade, unless --prune.\n"
                               "Until the library is loaded, the shim runs the same scripts with EVALSHA\n"
                               "(if its user may), and warns once; `conncap check` says which.\n"
                               "  --prune  also delete the conncap_* libraries of other versions\n"
                               "  --json   one JSON object: {library, loaded, failed, pruned: [names]}\n"
                               "Exit: 0 loaded on every master; 2 usage, config or Redis error (each\n"
                               "server's error on stderr).";

struct setup_ctx {
    int failed;
    char libs[SETUP_MAX_LIBS][64]; /* --prune: conncap_* libraries of other versions */
    int n_libs;
};

static void on_load(void *ctx, const char *node, const redisReply *rep, int rc)
{
    struct setup_ctx *c = ctx;
    if (rc == 0 && rep->type == REDIS_REPLY_STRING) {
        fprintf(stderr, "conncap setup: %s: loaded %s\n", ccap_ops_esc(node), ccap_ops_esc(rep->str));
        return;
    }
    c->failed++;
    fprintf(stderr, "conncap setup: %s: not loaded: %s\n", ccap_ops_esc(node),
            rc < 0                           ? "unreachable"
            : rep->type == REDIS_REPLY_ERROR ? ccap_ops_esc(rep->str)
                                             : "unexpected reply");
}

/* FUNCTION LIST reply: [[library_name, NAME, ...], ...]: remembers the
 * conncap_* names that are not ours. */
static void on_list(void *ctx, const char *node, const redisReply *rep, int rc)
{
    struct setup_ctx *c = ctx;
    (void)node;
    if (rc < 0 || rep->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *lib = rep->element[i];
        for (size_t j = 0; lib->type == REDIS_REPLY_ARRAY && j + 1 < lib->elements; j += 2) {
            const redisReply *k = lib->element[j], *v = lib->element[j + 1];
            if (k->type != REDIS_REPLY_STRING || strcmp(k->str, "library_name") || v->type != REDIS_REPLY_STRING ||
                strncmp(v->str, "conncap_", 8) || strlen(v->str) >= sizeof c->libs[0] ||
                !strcmp(v->str + 8, ccap_function_version()))
                continue;
            bool seen = false;
            for (int n = 0; n < c->n_libs; n++)
                seen |= !strcmp(c->libs[n], v->str);
            if (!seen && c->n_libs < SETUP_MAX_LIBS)
                snprintf(c->libs[c->n_libs++], sizeof c->libs[0], "%s", v->str);
        }
    }
}

static void on_delete(void *ctx, const char *node, const redisReply *rep, int rc)
{
    (void)ctx;
    if (rc == 0 && rep->type == REDIS_REPLY_STATUS)
        fprintf(stderr, "conncap setup: %s: deleted\n", node);
}

/* Deletes the other versions' libraries wherever they are. */
static void prune(struct ccap_redis *r, struct setup_ctx *c)
{
    const char *list[] = { "FUNCTION", "LIST", "LIBRARYNAME", "conncap_*" };
    ccap_redis_command_each(r, 4, list, on_list, c);
    for (int i = 0; i < c->n_libs; i++) {
        const char *del[] = { "FUNCTION", "DELETE", c->libs[i] };
        fprintf(stderr, "conncap setup: deleting %s\n", c->libs[i]);
        ccap_redis_command_each(r, 3, del, on_delete, c);
    }
}

int ccap_cmd_setup(int argc, char **argv)
{
    struct ccap_cli_opts o;
    bool do_prune = false;
    char *ops[1];
    const struct ccap_opt opts[] = { { "prune", CCAP_OPT_FLAG, &do_prune, 0, 0 }, { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, ops, 0);
    if (n != 0)
        return CCAP_EXIT_USAGE;
    struct ccap_config *cfg;
    struct ccap_redis *r;
    if (ccap_ops_open(&o, 0, &cfg, &r) < 0)
        return CCAP_EXIT_USAGE;
    struct setup_ctx c = { 0 };
    const char *load[] = { "FUNCTION", "LOAD", "REPLACE", ccap_function_library() };
    int loaded = ccap_redis_command_each(r, 4, load, on_load, &c);
    if (loaded < 0) {
        fprintf(stderr, "conncap setup: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
        c.failed++;
    }
    if (do_prune && c.failed == 0)
        prune(r, &c);
    if (o.json) {
        printf("{\"library\":\"conncap_%s\",\"loaded\":%d,\"failed\":%d,\"pruned\":[", ccap_function_version(),
               loaded < 0 ? 0 : loaded, c.failed);
        for (int i = 0; do_prune && i < c.n_libs; i++)
            printf("%s\"%s\"", i ? "," : "", c.libs[i]);
        printf("]}\n");
    }
    ccap_ops_close(cfg, r);
    return c.failed || loaded <= 0 ? CCAP_EXIT_USAGE : CCAP_EXIT_OK;
}
