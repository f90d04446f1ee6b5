/* conncap.c -- the conncap command: run, check, status and the ops tools. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include <libconfig.h>
#include "cli.h"

#ifndef CCAP_VERSION
#define CCAP_VERSION "unknown"
#endif
#ifndef CCAP_LIBDIR
#define CCAP_LIBDIR "/usr/local/lib"
#endif

static const struct ccap_cmd commands[] = {
    { "run", ccap_cmd_run, "run [-c FILE] -- CMD [ARGS...]", "run CMD with the shim preloaded" },
    { "check", ccap_cmd_check, "check [-c FILE]", "validate the config, ping Redis, load the scripts" },
    { "status", ccap_cmd_status, "status [-c FILE] [--json] [--full-alert S] [NAME...]", "holders / limit of every semaphore, alert marks",
      ccap_help_status },
    { "explain", ccap_cmd_explain, "explain [-c FILE] HOST[:PORT]", "which rule and semaphore apply, and why" },
    { "holders", ccap_cmd_holders, "holders [-c FILE] [--json] NAME", "each holder: host, pid, fd, destination, age, lease left",
      ccap_help_holders },
    { "stats", ccap_cmd_stats, "stats [-c FILE] [--json] [NAME...]", "counters and wait-time percentiles", ccap_help_stats },
    { "metrics", ccap_cmd_metrics, "metrics [-c FILE] [--listen ADDR:PORT]", "Prometheus text exposition (or serve it)",
      ccap_help_metrics },
    { "set-limit", ccap_cmd_set_limit, "set-limit [-c FILE] NAME N|--default", "change the cap for every process at once",
      ccap_help_set_limit },
    { "reset", ccap_cmd_reset, "reset [-c FILE] NAME --yes", "drop all holders of NAME (after an incident)", ccap_help_reset },
    { "watch", ccap_cmd_watch, "watch [-c FILE] [--interval S] [--iterations N] [NAME]", "refreshing view of counts, waiters, latency",
      ccap_help_watch },
    { "audit", ccap_cmd_audit, "audit [-c FILE] [--json] [--count N] [--follow] NAME", "show / tail the audit stream of NAME",
      ccap_help_audit },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: conncap COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-54s %s\n", commands[i].usage, commands[i].help);
    fprintf(f, "  %-54s %s\n", "--version", "version, library versions and the shim's path");
    fprintf(f, "\nThe config is -c FILE, else $CONNCAP_CONFIG, else %s.\n"
               "Exit status: 0 ok, 1 alert, 2 usage, config or connection error.\n", "/etc/conncap.conf");
}

const char *ccap_cli_library(void)
{
    static char buf[PATH_MAX];
    const char *env = getenv("CONNCAP_LIBRARY");
    if (env && *env) return realpath(env, buf) ? buf : env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *dir = dirname(exe);
        const char *cands[] = { "%s/libconncap.so", "%s/../lib/libconncap.so" };
        for (size_t i = 0; i < 2; i++) {
            char p[PATH_MAX];
            snprintf(p, sizeof(p), cands[i], dir);
            if (access(p, R_OK) == 0 && realpath(p, buf)) return buf;
        }
    }
    return CCAP_LIBDIR "/libconncap.so";
}

int main(int argc, char **argv)
{
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("conncap %s (hiredis %d.%d.%d, libconfig %d.%d.%d)\nlibrary: %s\n", CCAP_VERSION, HIREDIS_MAJOR,
               HIREDIS_MINOR, HIREDIS_PATCH, LIBCONFIG_VER_MAJOR, LIBCONFIG_VER_MINOR, LIBCONFIG_VER_REVISION,
               ccap_cli_library());
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name)) {
            for (int a = 2; a < argc && strcmp(argv[a], "--"); a++)
                if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
                    printf("usage: conncap %s\n  %s\n", commands[i].usage, commands[i].help);
                    if (commands[i].details) printf("\n%s\n", commands[i].details);
                    return 0;
                }
            return commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "conncap: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
