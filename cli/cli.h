/* cli.h -- the conncap command's parts: one function per subcommand. */
#ifndef CCAP_CLI_H
#define CCAP_CLI_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>
#include "config.h"
#include "redis.h"

/* Exit statuses of every subcommand. `run` exits with the program's own
 * status, so its own failures use 125 (as env, timeout and nice do), and
 * 126/127 when the program cannot be executed / is not found. */
enum {
    CCAP_EXIT_OK = 0,
    CCAP_EXIT_ALERT = 1,
    CCAP_EXIT_USAGE = 2,
    CCAP_EXIT_RUN_FAILED = 125,
    CCAP_EXIT_CANNOT_EXEC = 126,
    CCAP_EXIT_NOT_FOUND = 127
};

struct ccap_cmd {
    const char *name;
    int (*fn)(int argc, char **argv); /* argv[0] is the subcommand */
    const char *usage, *help;
    const char *details; /* longer --help text, or NULL */
};

/* Absolute path of libconncap.so: $CONNCAP_LIBRARY, else beside the binary
 * (the build tree), else at the install's PKGLIBDIR taken relative to the
 * binary's own directory (so a moved or DESTDIR-staged tree works), else the
 * absolute PKGLIBDIR (returned even when absent, for the error message).
 * Returns a static buffer: not thread-safe. */
const char *ccap_cli_library(void);

/* Common options: -c FILE and --json. Leaves *FIRST at the first operand.
 * Returns 0, or prints a usage error and returns -1. */
struct ccap_cli_opts {
    const char *config;
    bool json;
    int first;
    unsigned load_flags; /* CCAP_CONF_* for ccap_config_load_flags (0 after parsing) */
};
int ccap_cli_parse(int argc, char **argv, struct ccap_cli_opts *o, const char *usage);

/* Loads the config named by O (or the default path; "-" reads it from
 * standard input, named "<stdin>" in messages); prints the error and
 * returns NULL on failure. */
struct ccap_config *ccap_cli_config(const struct ccap_cli_opts *o);

/* Connects to the config's Redis; prints the error and returns NULL. */
struct ccap_redis *ccap_cli_redis(const struct ccap_config *cfg);

/* A client for CFG's Redis, not connected yet, that accepts the larger
 * replies the commands read (ccap_resp_caps_cli). NULL when out of memory. */
struct ccap_redis *ccap_cli_redis_new(const struct ccap_config *cfg);

/* Prints R's last error to stderr with the address CFG names ("conncap:
 * redis at ADDR: ERROR"). */
void ccap_cli_redis_error(const struct ccap_config *cfg, const struct ccap_redis *r);

/* What keeps a program from being capped (cli/program.c). */
enum {
    CCAP_PROG_STATIC = 1,  /* statically linked: no dynamic loader reads LD_PRELOAD */
    CCAP_PROG_GO = 2,      /* a Go program: its connections are raw system calls */
    CCAP_PROG_SECURE = 4,  /* set-id bits or file capabilities: secure-execution mode */
    CCAP_PROG_FOREIGN = 8, /* another ELF class or machine than the shim's */
    CCAP_PROG_LOADER = 16, /* a dynamic loader other than glibc's (musl's) */
};
struct ccap_prog {
    char path[PATH_MAX]; /* what exec runs: CMD, along $PATH when it has no slash */
    char elf[PATH_MAX];  /* the ELF file that comes to (a script's interpreter, followed) */
    char interp[256];    /* that file's PT_INTERP, or "" */
    unsigned why;        /* CCAP_PROG_* bits: 0 when nothing keeps it from being capped */
    bool unread;         /* an ELF whose headers could not be read: nothing can be told */
    char detail[1024];   /* the reasons in words, "; " between them */
};

/* Finds CMD as execvp would and inspects what it runs: an ELF's headers
 * (PT_INTERP, class, machine, the Go build id), its set-id bits and file
 * capabilities, a #! script's interpreter (and env's NAME), up to 4 deep.
 * 0 (P filled), or -errno when exec itself would fail (-ENOENT, -EACCES):
 * nothing to say then. Reads headers only, every offset checked. */
int ccap_prog_inspect(const char *cmd, struct ccap_prog *p);

/* "PATH", or "PATH (run by ELF)" for a script, into BUF. */
const char *ccap_prog_name(const struct ccap_prog *p, char *buf, size_t n);

/* cli/access.c: who may open the Unix socket PATH (the Redis address).
 * Modes (and, as the user, access()) only: LSMs are not read. */

/* A user's rights, as a daemon's workers get them after a privilege drop. */
struct ccap_access_user {
    uid_t uid;
    gid_t gid;
    char name[64]; /* its passwd name, for its groups; "" for none (no supplementary groups) */
};

/* 1 when any user may open PATH (x on every directory its lookup goes
 * through, symlinks' targets included, w on the socket), 0 when not (WHY,
 * N bytes, names the first part that keeps others out, "/run/redis is
 * drwxr-x--- redis:redis", and the symlink the lookup went through),
 * -ENOTSOCK when PATH is not a socket (WHY gives its mode), -errno when a
 * part cannot be looked up. Not thread-safe (getpwuid). */
int ccap_access_others(const char *path, char *why, size_t n);

/* SPEC into *U: a user name, a UID or UID:GID (as a container's --user:
 * a UID with a passwd entry takes its gid and groups, one without runs
 * with GID, default 0, and no supplementary groups). 0, -ESRCH (no such
 * user name), -EINVAL (empty, or a malformed number). Not thread-safe. */
int ccap_access_user(const char *spec, struct ccap_access_user *u);

/* Connects to PATH in a child with U's uid, gid and groups and closes it
 * at once. 0 when it connected; the child's -errno (-EACCES, with WHY, N
 * bytes, naming the part that refused U where it found one, else "";
 * -ENOENT, -ECONNREFUSED); -EPERM when this process is not root and U is
 * not itself. Not thread-safe (fork). */
int ccap_access_try_as(const char *path, const struct ccap_access_user *u, char *why, size_t n);

int ccap_cmd_run(int argc, char **argv);
int ccap_cmd_check(int argc, char **argv);
int ccap_cmd_setup(int argc, char **argv); /* cli/setup.c */
int ccap_cmd_status(int argc, char **argv);
int ccap_cmd_explain(int argc, char **argv); /* cli/explain.c: exit 0 matched, 1 not, 2 error */
/* ops commands (cli/status.c holders.c stats.c metrics.c setlimit.c reset.c watch.c audit.c) */
int ccap_cmd_holders(int argc, char **argv);
int ccap_cmd_stats(int argc, char **argv);
int ccap_cmd_metrics(int argc, char **argv);
int ccap_cmd_set_limit(int argc, char **argv);
int ccap_cmd_reset(int argc, char **argv);
int ccap_cmd_watch(int argc, char **argv);
int ccap_cmd_audit(int argc, char **argv);
extern const char ccap_help_run[], ccap_help_check[], ccap_help_explain[], ccap_help_setup[];
extern const char ccap_help_status[], ccap_help_holders[], ccap_help_stats[], ccap_help_metrics[],
    ccap_help_set_limit[], ccap_help_reset[], ccap_help_watch[], ccap_help_audit[];

#endif
