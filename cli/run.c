/* run.c -- `conncap run` (the entrypoint wrapper) and `conncap check`. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "cli.h"
#include "fileset.h"
#include "log.h"
#include "ops.h"

/* LD_PRELOAD with LIB first and every other entry kept, LIB not repeated
 * (malloc'd; NULL when out of memory). */
static char *preload_with(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    size_t n = strlen(lib) + (old ? strlen(old) : 0) + 2;
    char *out = malloc(n), *copy = strdup(old ? old : "");
    if (!out || !copy) {
        free(out);
        free(copy);
        return NULL;
    }
    strcpy(out, lib);
    for (char *save, *tok = strtok_r(copy, ": ", &save); tok; tok = strtok_r(NULL, ": ", &save)) {
        if (!strcmp(tok, lib))
            continue;
        strcat(out, ":");
        strcat(out, tok);
    }
    free(copy);
    return out;
}

const char ccap_help_run[] = "Runs CMD with libconncap.so first in LD_PRELOAD (entries already there are\n"
                             "kept, after it) and CONNCAP_CONFIG set to the configuration's absolute\n"
                             "path; the configuration is validated first, and what was validated (the\n"
                             "file, its includes, password and TLS files) is handed to the shim on a\n"
                             "sealed descriptor (CONNCAP_CONFIG_FD): CMD uses exactly that, even as a\n"
                             "user who cannot read the files. conncap execs CMD (no child\n"
                             "process), so signals, the pid and the exit status are CMD's own: use it as a\n"
                             "container entrypoint or in ExecStart=. The shim is $CONNCAP_LIBRARY, else the\n"
                             "one installed with this conncap (conncap --version names it).\n"
                             "  -c FILE  the configuration (else $CONNCAP_CONFIG, else /etc/conncap.conf);\n"
                             "           not \"-\": the program re-reads the file (hot reload)\n"
                             "  --refuse-uncapped  do not run CMD when it cannot be capped (exit 125)\n"
                             "CMD is found as exec finds it ($PATH; a #! script's interpreter). When it\n"
                             "cannot be capped -- statically linked, a Go program (raw system calls),\n"
                             "setuid, setgid or with file capabilities (the loader ignores LD_PRELOAD),\n"
                             "another ELF class or machine, a loader other than glibc's -- a warning on\n"
                             "stderr says so and why, and CMD runs uncapped.\n"
                             "Exit: CMD's own status; 125 conncap's own error (usage, bad configuration,\n"
                             "shim missing, --refuse-uncapped refused CMD); 126 CMD cannot be executed;\n"
                             "127 CMD not found.";

/* Takes run's own flag out of ARGV (before CMD: an option of CMD's is
 * CMD's); sets *REFUSE when it was there. */
static void take_refuse(int *argc, char **argv, bool *refuse)
{
    *refuse = false;
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--") || argv[i][0] != '-' || !argv[i][1])
            return;
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) {
            i++;
        } else if (!strcmp(argv[i], "--refuse-uncapped")) {
            *refuse = true;
            memmove(&argv[i], &argv[i + 1], (size_t)(*argc - i) * sizeof *argv); /* with the NULL after it */
            (*argc)--, i--;
        }
    }
}

/* Checks what `run` needs before the exec; prints the problem and returns
 * -1 (exit 125), or 0 with O parsed. */
static int run_args(int argc, char **argv, struct ccap_cli_opts *o)
{
    static const char *usage = "run [-c FILE] [--refuse-uncapped] -- CMD [ARGS...]";
    if (ccap_cli_parse(argc, argv, o, usage) < 0)
        return -1;
    const char *why = o->json            ? "--json does not apply (run prints nothing; its exit status is CMD's)"
                      : o->first >= argc ? "no command given"
                      : o->config && !strcmp(o->config, "-") ? "-c - does not apply: the program re-reads the "
                                                               "configuration from its file (give a file)"
                                                             : NULL;
    if (why) {
        fprintf(stderr, "conncap run: %s\nusage: conncap %s\n", why, usage);
        return -1;
    }
    return 0;
}

/* Says plainly when CMD cannot be capped; false when it cannot and REFUSE
 * asks not to run it. A CMD exec will not find is exec's to report. */
static bool cappable_or_said(const char *cmd, bool refuse)
{
    struct ccap_prog p;
    char name[2 * PATH_MAX + 16];
    if (ccap_prog_inspect(cmd, &p) < 0 || !p.why)
        return true;
    fprintf(stderr, "conncap run: %s%s cannot be capped: %s; %s\n",
            refuse ? "" : "warning: ", ccap_prog_name(&p, name, sizeof name), p.detail,
            refuse ? "not run (--refuse-uncapped)" : "it runs uncapped");
    return !refuse;
}

/* FS (what was checked: the file, its includes, its password and TLS
 * files) into a sealed memfd the exec keeps open, named by
 * CONNCAP_CONFIG_FD: the shim then uses exactly the configuration checked
 * here, even where the program's user cannot read the files (a
 * `setpriv`, `gosu` or `runuser` after us). A descriptor, not the
 * environment: a secret never lands in the program's environment (which
 * any process of its user can read in /proc and every child inherits); the
 * shim keeps it close-on-exec, but for an exec that preloads the shim
 * again. Sealed, so that nobody holding it can change what was checked.
 * Returns 0 or -errno (the caller says so). */
static int hand_over(const struct ccap_fileset *fs)
{
    char *buf = NULL, num[16];
    size_t len = 0;
    int rc = ccap_fileset_encode(fs, &buf, &len), fd = -1;
    if (rc == 0 && (fd = memfd_create("conncap-config", MFD_ALLOW_SEALING)) < 0)
        rc = -errno;
    for (size_t done = 0; rc == 0 && done < len;) {
        ssize_t w = write(fd, buf + done, len - done);
        rc = w > 0 ? 0 : w < 0 && errno == EINTR ? 0 : w < 0 ? -errno : -EIO;
        done += w > 0 ? (size_t)w : 0;
    }
    if (rc == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0)
        rc = -errno;
    snprintf(num, sizeof num, "%d", fd);
    if (rc == 0 && setenv(CCAP_CONFIG_FD_ENV, num, 1) != 0)
        rc = -errno;
    if (buf)
        explicit_bzero(buf, len);
    free(buf);
    if (rc < 0 && fd >= 0)
        close(fd);
    return rc;
}

/* The configuration at its absolute path (what CONNCAP_CONFIG will say),
 * recorded into FS as it is read. Prints the problem and returns NULL. */
static struct ccap_config *load_checked(const struct ccap_cli_opts *o, struct ccap_fileset *fs)
{
    char abs[PATH_MAX], err[512];
    const char *given = o->config ? o->config : ccap_config_path();
    struct ccap_config *cfg = NULL;
    if (ccap_config_load_from(realpath(given, abs) ? abs : given, fs, 0, &cfg, err, sizeof err) < 0)
        fprintf(stderr, "conncap: %s\n", err);
    return cfg;
}

int ccap_cmd_run(int argc, char **argv)
{
    struct ccap_cli_opts o;
    bool refuse;
    take_refuse(&argc, argv, &refuse);
    struct ccap_fileset fs = { .record = true };
    if (run_args(argc, argv, &o) < 0)
        return CCAP_EXIT_RUN_FAILED;
    struct ccap_config *cfg = load_checked(&o, &fs);
    const char *lib = ccap_cli_library();
    int rc = !cfg ? -EINVAL : access(lib, R_OK) != 0 ? -errno : 0;
    if (cfg && rc < 0)
        fprintf(stderr, "conncap run: cannot read the shim %s: %s (set CONNCAP_LIBRARY)\n", lib, strerror(-rc));
    if (rc == 0 && !cappable_or_said(argv[o.first], refuse))
        rc = -EPERM; /* said */
    char *preload = rc == 0 ? preload_with(lib) : NULL;
    if (rc == 0 &&
        (!preload || setenv("CONNCAP_CONFIG", cfg->path, 1) != 0 || setenv("LD_PRELOAD", preload, 1) != 0)) {
        perror("conncap run: setenv");
        rc = -ENOMEM;
    }
    if (rc == 0 && (rc = hand_over(&fs)) < 0)
        fprintf(stderr, "conncap run: cannot hand the configuration over: %s\n", strerror(-rc));
    free(preload);
    ccap_config_free(cfg);
    ccap_fileset_free(&fs);
    if (rc < 0)
        return CCAP_EXIT_RUN_FAILED;
    execvp(argv[o.first], argv + o.first);
    int e = errno;
    fprintf(stderr, "conncap run: %s: %s\n", argv[o.first], strerror(e));
    return e == ENOENT ? CCAP_EXIT_NOT_FOUND : CCAP_EXIT_CANNOT_EXEC;
}

static const char *down_name(int d)
{
    return d == CCAP_DOWN_OPEN ? "open" : d == CCAP_DOWN_CLOSED ? "closed" : "local";
}

static const char *level_name(int l)
{
    static const char *const names[] = { "error", "warn", "info", "debug" };
    return l >= 0 && l <= 3 ? names[l] : "?";
}

/* TLS: what is trusted and checked (paths only: no secret is printed). */
static void print_tls(const struct ccap_config *cfg)
{
    const struct ccap_tls_conf *t = &cfg->redis.tls;
    if (!t->enabled) {
        printf("tls: off\n");
        return;
    }
    printf("tls: on, verify %s, ca %s%s%s, client certificate %s", t->verify ? "on" : "OFF",
           t->ca_file  ? t->ca_file
           : t->ca_dir ? t->ca_dir
                       : "the system's",
           t->ca_file && t->ca_dir ? " and " : "", t->ca_file && t->ca_dir ? t->ca_dir : "",
           t->cert_file ? t->cert_file : "none");
    if (t->server_name)
        printf(", server name %s", t->server_name);
    if (cfg->redis.n_sentinels)
        printf(", sentinels %s", t->sentinels ? "over TLS" : "plain");
    printf("\n");
}

static void print_config(const struct ccap_config *cfg)
{
    const struct ccap_redis_conf *r = &cfg->redis;
    printf("config %s: ok\n", cfg->path);
    if (r->n_cluster) {
        printf("redis: cluster, seeds");
        for (size_t i = 0; i < r->n_cluster; i++)
            printf(" %s", r->cluster[i]);
    } else if (r->n_sentinels) {
        printf("redis: master \"%s\" via sentinels", r->master);
        for (size_t i = 0; i < r->n_sentinels; i++)
            printf(" %s", r->sentinels[i]);
        printf(", db %d", r->db);
    } else if (r->socket) {
        printf("redis: unix:%s db %d", r->socket, r->db);
    } else {
        printf("redis: %s:%d db %d", r->host, r->port, r->db);
    }
    /* the user name is shown, the password never: only whether there is one */
    printf(", timeouts %d/%d ms, key prefix \"%s\"%s%s%s%s\n", r->connect_timeout_ms, r->command_timeout_ms,
           r->key_prefix, r->username ? ", user \"" : "", r->username ? r->username : "", r->username ? "\"" : "",
           r->password        ? ", password set"
           : cfg->secret_note ? ", password not checked"
                              : "");
    print_tls(cfg);
    const struct ccap_config_sources *f = &cfg->from;
    printf("from: redis address %s, log_level %s (%s)", f->address, f->log_level, level_name(cfg->log_level));
    if (r->tls.enabled)
        printf(", tls.ca_file %s, tls.cert_file %s, tls.key_file %s", f->ca_file, f->cert_file, f->key_file);
    printf("\n");
    printf("on_timeout %s, on_redis_down %s\n", ccap_errno_name(cfg->on_timeout_errno),
           down_name(cfg->on_redis_down));
    if (cfg->nonblocking == CCAP_NONBLOCK_FAIL)
        printf("nonblocking fail: a non-blocking connect with no permit free fails at once with %s\n",
               ccap_errno_name(cfg->nonblocking_errno));
    else if (cfg->nonblocking == CCAP_NONBLOCK_WAIT)
        printf("nonblocking wait: a non-blocking connect waits in its thread like a blocking one (%s after "
               "wait_timeout_ms)\n",
               ccap_errno_name(cfg->nonblocking_errno));
    else
        printf("nonblocking queue: a non-blocking connect with no permit free is in progress until its turn "
               "(%s after wait_timeout_ms); the program's thread never waits\n",
               ccap_errno_name(cfg->on_timeout_errno));
    for (size_t i = 0; i < cfg->n_sems; i++) {
        const struct ccap_sem_conf *s = &cfg->sems[i];
        printf("semaphore %s: limit %d, lease %d ms, wait %d ms", s->name, s->limit, s->lease_ms,
               s->wait_timeout_ms);
        if (s->rate > 0)
            printf(", rate %g/s burst %d", s->rate, s->burst);
        printf("\n");
    }
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct ccap_rule *ru = &cfg->rules[i];
        if (ru->file && strcmp(ru->file, cfg->path))
            printf("rule %zu (%s:%d) -> %s:", i + 1, ru->file, ru->line, cfg->sems[ru->sem].name);
        else
            printf("rule %zu (line %d) -> %s:", i + 1, ru->line, cfg->sems[ru->sem].name);
        for (size_t j = 0; j < ru->n_pats; j++)
            printf(" %s", ru->pats[j].text);
        printf("\n");
    }
}

static void print_note(bool warn, const char *msg, void *arg)
{
    (void)arg;
    fprintf(stderr, "conncap check: %s: %s\n", warn ? "warning" : "note", msg);
}

static void json_note(bool warn, const char *msg, void *arg)
{
    bool *first = arg;
    printf("%s{\"level\":\"%s\",\"message\":", *first ? "" : ",", warn ? "warning" : "note");
    ccap_ops_json_str(stdout, msg);
    printf("}");
    *first = false;
}

/* The configuration as `check --json` prints it (the password never). */
static void print_config_json(const struct ccap_config *cfg)
{
    const struct ccap_redis_conf *r = &cfg->redis;
    printf("\"config\":");
    ccap_ops_json_str(stdout, cfg->path);
    printf(",\"redis\":{\"mode\":\"%s\",\"address\":", r->n_cluster     ? "cluster"
                                                       : r->n_sentinels ? "sentinel"
                                                       : r->socket      ? "unix"
                                                                        : "tcp");
    char addr[300];
    snprintf(addr, sizeof addr, "%s:%d", r->host ? r->host : "", r->port);
    ccap_ops_json_str(stdout, r->n_cluster     ? r->cluster[0]
                              : r->n_sentinels ? r->master
                              : r->socket      ? r->socket
                                               : addr);
    printf(",\"db\":%d,\"connect_timeout_ms\":%d,\"command_timeout_ms\":%d,\"key_prefix\":", r->db,
           r->connect_timeout_ms, r->command_timeout_ms);
    ccap_ops_json_str(stdout, r->key_prefix);
    printf(",\"password_set\":%s,\"tls\":%s,\"tls_verify\":%s,\"from\":{\"address\":\"%s\","
           "\"log_level\":\"%s\"}},",
           r->password ? "true" : "false", r->tls.enabled ? "true" : "false", r->tls.verify ? "true" : "false",
           cfg->from.address, cfg->from.log_level);
    printf("\"on_timeout\":\"%s\",\"on_redis_down\":\"%s\",\"semaphores\":[", ccap_errno_name(cfg->on_timeout_errno),
           down_name(cfg->on_redis_down));
    for (size_t i = 0; i < cfg->n_sems; i++) {
        const struct ccap_sem_conf *s = &cfg->sems[i];
        printf("%s{\"name\":", i ? "," : "");
        ccap_ops_json_str(stdout, s->name);
        printf(",\"limit\":%d,\"lease_ms\":%d,\"wait_timeout_ms\":%d,\"rate\":%g,\"burst\":%d}", s->limit,
               s->lease_ms, s->wait_timeout_ms, s->rate, s->burst);
    }
    printf("],\"rules\":[");
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct ccap_rule *ru = &cfg->rules[i];
        printf("%s{\"line\":%d,\"semaphore\":", i ? "," : "", ru->line);
        ccap_ops_json_str(stdout, cfg->sems[ru->sem].name);
        printf(",\"match\":[");
        for (size_t j = 0; j < ru->n_pats; j++) {
            printf("%s", j ? "," : "");
            ccap_ops_json_str(stdout, ru->pats[j].text);
        }
        printf("]}");
    }
    bool first = true;
    printf("],\"notes\":[");
    ccap_config_notes(cfg, json_note, &first);
    printf("]");
}

/* PINGs R, then looks for the function library, else loads the scripts
 * (the shim's fallback). Returns the number of scripts the shim can run,
 * or -1 after printing the problem to stderr; *FUNCTIONS tells how. */
static int check_redis(struct ccap_redis *r, int *functions)
{
    /* One PING first: a silent port or a server that is not Redis gets one
     * clear line, not one error per script. */
    const char *ping[] = { "PING" };
    redisReply *pong = NULL;
    int pe = ccap_redis_command(r, 1, ping, &pong), rc = 0;
    if (pe < 0 || pong->type != REDIS_REPLY_STATUS || strcmp(pong->str, "PONG")) {
        fprintf(stderr, "conncap check: the server did not answer PING like a Redis server: %s\n",
                pe < 0 ? ccap_ops_esc(ccap_redis_errstr(r)) : "unexpected reply");
        rc = -1;
    }
    if (pong)
        freeReplyObject(pong);
    *functions = rc == 0 && ccap_ops_functions_loaded(r) == 1;
    if (*functions)
        return CCAP_SCRIPT_COUNT;
    for (int s = 0; s < CCAP_SCRIPT_COUNT && rc >= 0; s++, rc++) {
        const char *args[] = { "SCRIPT", "LOAD", ccap_script_source(s) };
        redisReply *rep = NULL;
        int e = ccap_redis_command(r, 3, args, &rep);
        if (e < 0 || rep->type != REDIS_REPLY_STRING || strcmp(rep->str, ccap_script_sha(s))) {
            fprintf(stderr,
                    "conncap check: the function library conncap_%s is not loaded, and loading "
                    "script %d failed: %s\n  (run `conncap setup` with an administrative user)\n",
                    ccap_function_version(), s, e < 0 ? ccap_ops_esc(ccap_redis_errstr(r)) : "unexpected sha");
            rc = -2;
        }
        if (rep)
            freeReplyObject(rep);
    }
    if (rc >= 0)
        ccap_ops_warn_functions("check");
    return rc < 0 ? -1 : rc;
}

const char ccap_help_check[] = "Parses the configuration and prints what it means: the Redis address\n"
                               "(never the password), TLS, on_timeout, on_redis_down, every semaphore and\n"
                               "rule with its line, and where the Redis address, log_level and TLS files\n"
                               "came from (file, default, or CONNCAP_REDIS_URL and the like). Settings\n"
                               "that load but cannot take effect (resolve = true without an exact host\n"
                               "name) are warned about on stderr. Then it connects to Redis, sends PING\n"
                               "and looks for the function library conncap_<version> that `conncap setup`\n"
                               "loads (the shim calls it with FCALL); without it, loads the scripts as the\n"
                               "shim then does (EVALSHA), and warns that isolation is weaker. Over TLS it\n"
                               "prints the protocol, cipher and the server's certificate subject, or why\n"
                               "the handshake failed.\n"
                               "  --offline  validate the file only, without contacting Redis (an image\n"
                               "             build, CI); exit 0 when the file is valid. A secret this\n"
                               "             machine does not have (password_env's variable not set,\n"
                               "             password_file missing or unreadable) is not checked, and\n"
                               "             said so in a note\n"
                               "  --json     one JSON object: {config, redis: {mode, address, db,\n"
                               "             connect_timeout_ms, command_timeout_ms, key_prefix,\n"
                               "             password_set, tls, tls_verify, from: {address, log_level}},\n"
                               "             on_timeout, on_redis_down, semaphores: [{name, limit,\n"
                               "             lease_ms, wait_timeout_ms, rate, burst}], rules: [{line,\n"
                               "             semaphore, match: [...]}], notes: [{level, message}],\n"
                               "             redis_checked, redis_ok (false: Redis failed, exit 2),\n"
                               "             scripts_loaded, functions: true when the library is\n"
                               "             loaded, library: its name}\n"
                               "  -c -       read the configuration from standard input\n"
                               "  --program PATH  also say whether PATH (found as exec finds it: $PATH, a #!\n"
                               "             script's interpreter) can be capped, and if not why: statically\n"
                               "             linked, a Go program, setuid/setgid/file capabilities, another\n"
                               "             ELF class or machine, a loader other than glibc's (--json:\n"
                               "             program: {name, path, runs, interpreter, cappable (null: its\n"
                               "             headers cannot be read), reasons, detail})\n"
                               "  --refuse-uncapped  exit 2 when the --program cannot be capped\n"
                               "  --user NAME  connect to the Redis Unix socket with NAME's uid, gid and\n"
                               "             groups (root only), as the workers of a daemon that drops to\n"
                               "             NAME will: exit 2 when NAME cannot, naming the part of the\n"
                               "             path that refused it. NAME: a user name, UID, or UID:GID (a\n"
                               "             UID without a passwd entry: GID, default 0, no other groups).\n"
                               "             A note says when the socket's or a directory's mode (symlinks\n"
                               "             followed) keeps some users out (--json: socket: {others,\n"
                               "             detail, user, user_ok, user_errno, user_detail})\n"
                               "Errors go to stderr (a configuration error with file and line), nothing to\n"
                               "stdout but the --json object.\n"
                               "Exit: 0 valid (and Redis reachable, library or scripts usable, unless --offline);\n"
                               "2 usage or configuration error, Redis unreachable or not answering like Redis,\n"
                               "--program not found, or not cappable under --refuse-uncapped, --user cannot\n"
                               "connect.";

/* What the Redis Unix socket's rights say about the workers (check, not
 * --offline): OTHERS is ccap_access_others's answer (WHY its detail),
 * TRIED whether --user was tried, USER_RC its answer (UWHY the part that
 * refused the user). */
struct sock_access {
    int others, user_rc;
    bool tried;
    char why[PATH_MAX + 192], uwhy[PATH_MAX + 192];
};

/* The consequence of a worker not reaching Redis, for the messages. */
static const char *down_effect(const struct ccap_config *cfg)
{
    return cfg->on_redis_down == CCAP_DOWN_OPEN     ? "its connects run uncapped (on_redis_down = open)"
           : cfg->on_redis_down == CCAP_DOWN_CLOSED ? "its capped connects fail (on_redis_down = closed)"
                                                    : "it caps alone, per process (on_redis_down = local)";
}

/* Looks at who may open the socket and, with USER (NAME its spelling),
 * tries it as USER; notes and errors go to stderr, the success line to
 * stdout unless JSON. False when USER cannot connect. */
static bool check_socket(const struct ccap_config *cfg, const char *name, const struct ccap_access_user *user,
                         bool json, struct sock_access *a)
{
    const char *path = cfg->redis.socket;
    a->others = ccap_access_others(path, a->why, sizeof a->why);
    a->tried = user != NULL;
    a->user_rc = user ? ccap_access_try_as(path, user, a->uwhy, sizeof a->uwhy) : 0;
    if (a->others == 0)
        fprintf(stderr,
                "conncap check: note: not every user may open the redis socket: %s. A worker running as "
                "another user (after a privilege drop) cannot reach Redis, and %s%s\n",
                ccap_ops_esc(a->why), down_effect(cfg), user ? "" : "; try one with --user NAME");
    else if (a->others == -ENOTSOCK)
        fprintf(stderr, "conncap check: note: %s: nobody can connect to Redis there\n", ccap_ops_esc(a->why));
    if (!user)
        return true;
    if (a->user_rc == 0 && !json)
        printf("redis socket: user %s can connect\n", ccap_ops_esc(name));
    else if (a->user_rc == -EPERM && geteuid() != 0)
        fprintf(stderr, "conncap check: --user %s: only root can take another user's rights\n", ccap_ops_esc(name));
    else if (a->user_rc) {
        const char *part = a->uwhy[0] ? a->uwhy : a->others == 0 ? a->why : "";
        fprintf(stderr, "conncap check: user %s cannot connect to the redis socket %s: %s%s%s%s; %s\n",
                ccap_ops_esc(name), ccap_ops_esc(path), strerror(-a->user_rc), part[0] ? " (" : "",
                ccap_ops_esc(part), part[0] ? ")" : "", down_effect(cfg));
    }
    return a->user_rc == 0;
}

/* check --json's "socket" member: {others (null: not looked up), detail,
 * user, user_ok, user_errno, user_detail}. */
static void print_socket_json(const char *user, const struct sock_access *a)
{
    printf(",\"socket\":{\"others\":%s,\"detail\":", a->others < 0 ? "null" : a->others ? "true" : "false");
    ccap_ops_json_str(stdout, a->others == 0 || a->others == -ENOTSOCK ? a->why : "");
    printf(",\"user\":");
    if (user)
        ccap_ops_json_str(stdout, user);
    else
        printf("null");
    printf(",\"user_ok\":%s,\"user_errno\":\"%s\",\"user_detail\":",
           !a->tried    ? "null"
           : a->user_rc ? "false"
                        : "true",
           a->tried && a->user_rc ? ccap_errno_name(-a->user_rc) : "");
    ccap_ops_json_str(stdout, a->uwhy);
    printf("}");
}

static const char *const prog_reasons[] = { "static", "go", "secure", "foreign", "loader" };

/* check --program: one line "program NAME: ..." (or its JSON member);
 * false when it was not found. */
static bool print_program(const char *cmd, bool json, struct ccap_prog *p)
{
    int rc = ccap_prog_inspect(cmd, p);
    char name[2 * PATH_MAX + 16];
    if (rc < 0) {
        fprintf(stderr, "conncap check: --program %s: %s\n", ccap_ops_esc(cmd),
                rc == -ENOENT && !strchr(cmd, '/') ? "not found along $PATH" : strerror(-rc));
        return false;
    }
    if (!json) {
        if (p->unread && !p->why)
            printf("program %s: cannot tell whether it can be capped: its ELF headers cannot be read\n",
                   ccap_prog_name(p, name, sizeof name));
        else if (p->why)
            printf("program %s: cannot be capped: %s\n", ccap_prog_name(p, name, sizeof name), p->detail);
        else
            printf("program %s: can be capped (%s%s)\n", ccap_prog_name(p, name, sizeof name),
                   p->interp[0] ? "dynamic loader " : "a shared object run directly: the dynamic loader itself",
                   p->interp);
        return true;
    }
    printf(",\"program\":{\"name\":");
    ccap_ops_json_str(stdout, cmd);
    printf(",\"path\":");
    ccap_ops_json_str(stdout, p->path);
    printf(",\"runs\":");
    ccap_ops_json_str(stdout, p->elf);
    printf(",\"interpreter\":");
    ccap_ops_json_str(stdout, p->interp);
    printf(",\"cappable\":%s,\"reasons\":[", p->why ? "false" : p->unread ? "null" : "true");
    for (unsigned i = 0, n = 0; i < sizeof prog_reasons / sizeof *prog_reasons; i++)
        if (p->why & (1u << i))
            printf("%s\"%s\"", n++ ? "," : "", prog_reasons[i]);
    printf("],\"detail\":");
    ccap_ops_json_str(stdout, p->detail);
    printf("}");
    return true;
}

int ccap_cmd_check(int argc, char **argv)
{
    struct ccap_cli_opts o;
    bool offline = false, refuse = false;
    const char *program = NULL, *user = NULL;
    char *ops[1];
    const struct ccap_opt opts[] = { { "offline", CCAP_OPT_FLAG, &offline, 0, 0 },
                                     { "program", CCAP_OPT_STR, &program, 0, 0 },
                                     { "user", CCAP_OPT_STR, &user, 0, 0 },
                                     { "refuse-uncapped", CCAP_OPT_FLAG, &refuse, 0, 0 },
                                     { NULL } };
    if (ccap_ops_parse(argc, argv,
                       "check [-c FILE] [--offline] [--json] [--program PATH [--refuse-uncapped]] [--user NAME]", &o,
                       opts, ops, 0) < 0)
        return CCAP_EXIT_USAGE;
    /* an image build or CI has the file, not the secrets: a password_env not
     * set or a password_file missing is a note there, not an error */
    if (offline)
        o.load_flags |= CCAP_CONF_SECRETS_UNCHECKED;
    if (refuse && !program) {
        fprintf(stderr, "conncap check: --refuse-uncapped needs --program PATH\n");
        return CCAP_EXIT_USAGE;
    }
    if (user && offline) {
        fprintf(stderr, "conncap check: --user tries the Redis socket: not with --offline\n");
        return CCAP_EXIT_USAGE;
    }
    struct ccap_access_user uid;
    int ue = user ? ccap_access_user(user, &uid) : 0;
    if (ue < 0) { /* before anything is printed: a typo is not a check that ran */
        fprintf(stderr, "conncap check: --user %s: %s (give a user name, a uid, or uid:gid)\n", ccap_ops_esc(user),
                ue == -ESRCH ? "no such user" : "not a user name or number");
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg)
        return CCAP_EXIT_USAGE;
    struct ccap_prog prog = { 0 };
    bool prog_ok = true;
    if (!o.json) {
        print_config(cfg);
        if (program)
            prog_ok = print_program(program, false, &prog);
    }
    ccap_config_notes(cfg, print_note, NULL); /* the shim logs the same at start */
    int loaded = 0, functions = 0;
    struct sock_access sock = { .others = -1 };
    bool sock_ok = true, unix_sock = cfg->redis.socket && !cfg->redis.n_cluster && !cfg->redis.n_sentinels;
    if (!offline && unix_sock)
        sock_ok = check_socket(cfg, user, user ? &uid : NULL, o.json, &sock);
    else if (user)
        fprintf(stderr, "conncap check: note: --user: Redis is not reached through a Unix socket; no file "
                        "rights apply\n");
    if (!offline) {
        struct ccap_redis *r = ccap_cli_redis(cfg);
        loaded = r ? check_redis(r, &functions) : -1;
        if (!o.json && loaded >= 0 && ccap_redis_tls_info(r)[0])
            printf("redis tls: %s\n", ccap_redis_tls_info(r));
        ccap_redis_free(r);
    }
    if (o.json) { /* also when Redis failed (its error on stderr): redis_ok false */
        printf("{");
        print_config_json(cfg);
        if (program)
            prog_ok = print_program(program, true, &prog);
        if (!offline && unix_sock)
            print_socket_json(user, &sock);
        printf(",\"redis_checked\":%s,\"redis_ok\":%s,\"scripts_loaded\":%d,\"functions\":%s,"
               "\"library\":\"conncap_%s\"}\n",
               offline ? "false" : "true",
               offline       ? "null"
               : loaded >= 0 ? "true"
                             : "false",
               loaded > 0 ? loaded : 0,
               offline || loaded < 0 ? "null"
               : functions           ? "true"
                                     : "false",
               ccap_function_version());
    } else {
        if (offline)
            printf("redis: not contacted (--offline)\n");
        else if (loaded >= 0 && functions)
            printf("redis: reachable, function library conncap_%s loaded (FCALL)\n", ccap_function_version());
        else if (loaded >= 0)
            printf("redis: reachable, %d scripts loaded (EVALSHA: function library conncap_%s not loaded, "
                   "isolation weaker; run conncap setup)\n",
                   loaded, ccap_function_version());
    }
    ccap_config_free(cfg);
    if (!prog_ok || (refuse && prog.why) || !sock_ok)
        return CCAP_EXIT_USAGE;
    return loaded >= 0 ? CCAP_EXIT_OK : CCAP_EXIT_USAGE;
}
