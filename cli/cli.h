/* cli.h -- the conncap command's parts: one function per subcommand. */
#ifndef CCAP_CLI_H
#define CCAP_CLI_H

#include <stdbool.h>
#include "config.h"
#include "redis.h"

/* Exit statuses of every subcommand. */
enum { CCAP_EXIT_OK = 0, CCAP_EXIT_ALERT = 1, CCAP_EXIT_USAGE = 2 };

struct ccap_cmd {
    const char *name;
    int (*fn)(int argc, char **argv);   /* argv[0] is the subcommand */
    const char *usage, *help;
};

/* Absolute path of libconncap.so: $CONNCAP_LIBRARY, else beside the binary,
 * else ../lib beside it, else the install LIBDIR. */
const char *ccap_cli_library(void);

/* Common options: -c FILE and --json. Leaves *FIRST at the first operand.
 * Returns 0, or prints a usage error and returns -1. */
struct ccap_cli_opts {
    const char *config;
    bool json;
    int first;
};
int ccap_cli_parse(int argc, char **argv, struct ccap_cli_opts *o, const char *usage);

/* Loads the config named by O (or the default path); prints the error and
 * returns NULL on failure. */
struct ccap_config *ccap_cli_config(const struct ccap_cli_opts *o);

/* Connects to the config's Redis; prints the error and returns NULL. */
struct ccap_redis *ccap_cli_redis(const struct ccap_config *cfg);

int ccap_cmd_run(int argc, char **argv);
int ccap_cmd_check(int argc, char **argv);
int ccap_cmd_status(int argc, char **argv);

#endif
