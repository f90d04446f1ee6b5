/* test_config.c -- unit tests for the configuration loader and rule matching (core/config.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "conftext.h"
#include "log.h"

static char tmpdir[64];
static char fixture[128]; /* path of the last fixture written */

static int setup_dir(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/ccap-test-config.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes TEXT to the file NAME in the temp dir; its path goes to fixture. */
static const char *write_file(const char *name, const char *text)
{
    snprintf(fixture, sizeof fixture, "%s/%s", tmpdir, name);
    FILE *f = fopen(fixture, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return fixture;
}

static struct ccap_config *load_ok(const char *text)
{
    struct ccap_config *cfg = NULL;
    char err[512] = "";
    int rc = ccap_config_load(write_file("good.conf", text), &cfg, err, sizeof err);
    if (rc != 0)
        fail_msg("load failed (%d): %s", rc, err);
    assert_non_null(cfg);
    return cfg;
}

/* Loads TEXT and expects -EINVAL with "FILE:LINE: WANT" in the message
 * (LINE 0: no line expected, "FILE: WANT"). */
static void load_bad_line(const char *text, int line, const char *want)
{
    struct ccap_config *cfg = (void *)1;
    char err[512] = "", exp[512];
    const char *path = write_file("bad.conf", text);
    int rc = ccap_config_load(path, &cfg, err, sizeof err);
    if (line)
        snprintf(exp, sizeof exp, "%s:%d: %s", path, line, want);
    else
        snprintf(exp, sizeof exp, "%s: %s", path, want);
    if (rc != -EINVAL)
        fail_msg("rc %d (want -EINVAL) for\n%s\nmessage: %s", rc, text, err);
    assert_null(cfg);
    if (!strstr(err, exp))
        fail_msg("message \"%s\"\nlacks \"%s\"", err, exp);
}

#define SEM "semaphores = ( { name = \"api\"; limit = 4; } );\n"

static void test_defaults(void **state)
{
    (void)state;
    struct ccap_config *cfg = load_ok("# nothing\n");
    assert_string_equal(cfg->path, fixture);
    assert_string_equal(cfg->redis.host, "127.0.0.1");
    assert_int_equal(cfg->redis.port, 6379);
    assert_null(cfg->redis.socket);
    assert_int_equal(cfg->redis.db, 0);
    assert_int_equal(cfg->redis.connect_timeout_ms, 200);
    assert_int_equal(cfg->redis.command_timeout_ms, 200);
    assert_string_equal(cfg->redis.key_prefix, "conncap:");
    assert_null(cfg->redis.username);
    assert_null(cfg->redis.password);
    assert_null(cfg->redis.sentinels);
    assert_int_equal(cfg->redis.n_sentinels, 0);
    assert_null(cfg->redis.master);
    assert_null(cfg->redis.cluster);
    assert_int_equal(cfg->n_sems, 0);
    assert_int_equal(cfg->n_rules, 0);
    assert_int_equal(cfg->on_timeout_errno, ETIMEDOUT);
    assert_int_equal(cfg->on_redis_down, CCAP_DOWN_OPEN);
    assert_int_equal(cfg->nonblocking, CCAP_NONBLOCK_QUEUE);
    assert_int_equal(cfg->nonblocking_errno, ECONNREFUSED);
    assert_int_equal(cfg->log_level, CCAP_LOG_WARN);
    assert_int_equal(cfg->log_target, CCAP_LOG_STDERR);
    assert_false(cfg->audit);
    assert_int_equal(cfg->audit_maxlen, 10000);
    ccap_config_free(cfg);

    /* empty lists, written either way */
    cfg = load_ok("semaphores = ();\nrules = [];\nredis = {};\n");
    assert_int_equal(cfg->n_sems, 0);
    assert_int_equal(cfg->n_rules, 0);
    assert_int_equal(cfg->redis.port, 6379);
    ccap_config_free(cfg);

    /* semaphore and rule defaults */
    cfg = load_ok(SEM "rules = ( { semaphore = \"api\"; match = ( \"10.0.0.1\" ); } );\n");
    assert_int_equal(cfg->n_sems, 1);
    struct ccap_sem_conf *s = &cfg->sems[0];
    assert_string_equal(s->name, "api");
    assert_int_equal(s->limit, 4);
    assert_int_equal(s->lease_ms, 30000);
    assert_int_equal(s->wait_timeout_ms, 5000);
    assert_true(s->rate == 0.0);
    assert_int_equal(s->burst, 1);
    assert_int_equal(s->local_limit, 4);
    assert_int_equal(s->restart_grace_ms, 0);
    assert_int_equal(s->max_waiters, 0);
    assert_int_equal(s->line, 1);
    assert_int_equal(cfg->n_rules, 1);
    assert_int_equal(cfg->rules[0].sem, 0);
    assert_false(cfg->rules[0].resolve);
    assert_int_equal(cfg->rules[0].resolve_interval_s, 30);
    assert_int_equal(cfg->rules[0].line, 2);
    ccap_config_free(cfg);
}

static void test_full(void **state)
{
    (void)state;
    write_file("secret", "s3cr3t\nsecond line\n");
    char pwpath[128], text[2048];
    strcpy(pwpath, fixture);
    snprintf(text, sizeof text,
             "redis = {\n"
             "  host = \"redis.internal\"; port = 6380; db = 3;\n"
             "  connect_timeout_ms = 150; command_timeout_ms = 250L;\n"
             "  key_prefix = \"cc:\"; username = \"conncap\";\n"
             "  password_file = \"%s\";\n"
             "  sentinels = ( \"10.0.0.1:26379\", \"[::1]:26380\" ); master = \"mymaster\";\n"
             "};\n"
             "semaphores = (\n"
             "  { name = \"partner-api\"; limit = 4; lease_ms = 300; wait_timeout_ms = 0;\n"
             "    rate = 2.5; local_limit = 2; restart_grace_ms = 150; max_waiters = 7; },\n"
             "  { name = \"db.main_1\"; limit = 0L; rate = 10; burst = 3; }\n"
             ");\n"
             "rules = (\n"
             "  { semaphore = \"db.main_1\"; match = [ \"10.1.0.0/16:5432\" ];\n"
             "    resolve = true; resolve_interval_s = 5; },\n"
             "  { semaphore = \"partner-api\";\n"
             "    match = ( \"127.0.0.1:8080\", \"10.0.0.0/8:443\", \"[::1]:8080\",\n"
             "              \"api.partner.com:443\", \"*.partner.com\" ); }\n"
             ");\n"
             "on_timeout = \"ECONNREFUSED\"; on_redis_down = \"local\"; nonblocking = \"wait\";\n"
             "nonblocking_errno = \"ETIMEDOUT\";\n"
             "log_level = \"debug\"; log = \"syslog\"; audit = true; audit_maxlen = 500;\n",
             pwpath);
    struct ccap_config *cfg = load_ok(text);
    struct ccap_redis_conf *r = &cfg->redis;
    assert_string_equal(r->host, "redis.internal");
    assert_int_equal(r->port, 6380);
    assert_int_equal(r->db, 3);
    assert_int_equal(r->connect_timeout_ms, 150);
    assert_int_equal(r->command_timeout_ms, 250);
    assert_string_equal(r->key_prefix, "cc:");
    assert_string_equal(r->username, "conncap");
    assert_string_equal(r->password, "s3cr3t");
    assert_int_equal(r->n_sentinels, 2);
    assert_string_equal(r->sentinels[0], "10.0.0.1:26379");
    assert_string_equal(r->sentinels[1], "[::1]:26380");
    assert_string_equal(r->master, "mymaster");
    assert_int_equal(cfg->n_sems, 2);
    assert_string_equal(cfg->sems[0].name, "partner-api");
    assert_int_equal(cfg->sems[0].lease_ms, 300);
    assert_int_equal(cfg->sems[0].wait_timeout_ms, 0);
    assert_true(cfg->sems[0].rate == 2.5);
    assert_int_equal(cfg->sems[0].burst, 3); /* ceil(2.5) */
    assert_int_equal(cfg->sems[0].local_limit, 2);
    assert_int_equal(cfg->sems[0].restart_grace_ms, 150);
    assert_int_equal(cfg->sems[0].max_waiters, 7);
    assert_int_equal(cfg->sems[1].max_waiters, 0);
    assert_int_equal(cfg->sems[0].line, 9);
    assert_string_equal(cfg->sems[1].name, "db.main_1");
    assert_int_equal(cfg->sems[1].limit, 0);
    assert_true(cfg->sems[1].rate == 10.0);
    assert_int_equal(cfg->sems[1].burst, 3);
    assert_int_equal(cfg->sems[1].local_limit, 0);
    assert_int_equal(cfg->n_rules, 2);
    assert_int_equal(cfg->rules[0].sem, 1);
    assert_int_equal(cfg->rules[0].n_pats, 1);
    assert_true(cfg->rules[0].resolve);
    assert_int_equal(cfg->rules[0].resolve_interval_s, 5);
    assert_int_equal(cfg->rules[1].sem, 0);
    assert_int_equal(cfg->rules[1].n_pats, 5);
    assert_int_equal(cfg->rules[1].pats[3].kind, CCAP_PAT_HOST);
    assert_int_equal(cfg->rules[1].pats[4].kind, CCAP_PAT_WILDCARD);
    assert_int_equal(cfg->rules[1].line, 16);
    assert_int_equal(cfg->on_timeout_errno, ECONNREFUSED);
    assert_int_equal(cfg->on_redis_down, CCAP_DOWN_LOCAL);
    assert_int_equal(cfg->nonblocking, CCAP_NONBLOCK_WAIT);
    assert_int_equal(cfg->nonblocking_errno, ETIMEDOUT);
    assert_int_equal(cfg->log_level, CCAP_LOG_DEBUG);
    assert_int_equal(cfg->log_target, CCAP_LOG_SYSLOG);
    assert_true(cfg->audit);
    assert_int_equal(cfg->audit_maxlen, 500);
    assert_int_equal(ccap_config_sem_index(cfg, "db.main_1"), 1);
    assert_int_equal(ccap_config_sem_index(cfg, "partner-api"), 0);
    assert_int_equal(ccap_config_sem_index(cfg, "nope"), -1);
    ccap_config_free(cfg);

    /* socket, cluster, password from the environment */
    setenv("CCAP_TEST_PW", "from-env", 1);
    cfg = load_ok("redis = { socket = \"/run/redis.sock\"; password_env = \"CCAP_TEST_PW\"; };\n");
    assert_string_equal(cfg->redis.socket, "/run/redis.sock");
    assert_string_equal(cfg->redis.password, "from-env");
    ccap_config_free(cfg);
    cfg = load_ok("redis = { cluster = ( \"a:7000\", \"b:7001\", \"c:7002\" ); };\n");
    assert_int_equal(cfg->redis.n_cluster, 3);
    assert_string_equal(cfg->redis.cluster[2], "c:7002");
    ccap_config_free(cfg);

    /* a password file without a final newline, with CRLF */
    write_file("secret2", "pw\r\n");
    snprintf(text, sizeof text, "redis = { password_file = \"%s\"; };\n", fixture);
    cfg = load_ok(text);
    assert_string_equal(cfg->redis.password, "pw");
    ccap_config_free(cfg);
    write_file("secret3", "nonl");
    snprintf(text, sizeof text, "redis = { password_file = \"%s\"; };\n", fixture);
    cfg = load_ok(text);
    assert_string_equal(cfg->redis.password, "nonl");
    ccap_config_free(cfg);
}

static void test_reference_config(void **state)
{
    (void)state;
    struct ccap_config *cfg = NULL;
    char err[512] = "";
    /* run from the repository root (tests/run.sh does so) */
    int rc = ccap_config_load("conf/conncap.conf", &cfg, err, sizeof err);
    if (rc != 0)
        fail_msg("conf/conncap.conf: %d %s", rc, err);
    assert_int_equal(cfg->n_sems, 1);
    assert_string_equal(cfg->sems[0].name, "partner-api");
    assert_int_equal(cfg->n_rules, 1);
    assert_int_equal(cfg->rules[0].n_pats, 5);
    /* the documented defaults are the ones written in it */
    assert_string_equal(cfg->redis.host, "127.0.0.1");
    assert_int_equal(cfg->redis.port, 6379);
    assert_string_equal(cfg->redis.key_prefix, "conncap:");
    assert_int_equal(cfg->on_timeout_errno, ETIMEDOUT);
    assert_int_equal(cfg->audit_maxlen, 10000);
    ccap_config_free(cfg);
}

static void test_open_errors(void **state)
{
    (void)state;
    struct ccap_config *cfg = (void *)1;
    char err[512], exp[256];
    snprintf(exp, sizeof exp, "%s/none.conf", tmpdir);
    assert_int_equal(ccap_config_load(exp, &cfg, err, sizeof err), -ENOENT);
    assert_null(cfg);
    strcat(exp, ": cannot open: No such file or directory");
    assert_string_equal(err, exp);

    assert_int_equal(ccap_config_load(tmpdir, &cfg, err, sizeof err), -EISDIR);
    assert_non_null(strstr(err, "cannot open: Is a directory"));

    const char *p = write_file("noperm.conf", SEM);
    chmod(p, 0);
    if (geteuid() != 0) {
        assert_int_equal(ccap_config_load(p, &cfg, err, sizeof err), -EACCES);
        assert_non_null(strstr(err, ": cannot open: Permission denied"));
    } else { /* root reads it anyway: try as nobody, in a child */
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (setgid(65534) < 0 || setuid(65534) < 0)
                _exit(2);
            int rc = ccap_config_load(p, &cfg, err, sizeof err);
            _exit(rc == -EACCES && strstr(err, ": cannot open: Permission denied") ? 0 : 1);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    chmod(p, 0644);

    /* a syntax error: libconfig's line and text */
    load_bad_line("a = 1;\nb = ;\n", 2, "syntax error");
    load_bad_line("a = 1;\na = 2;\n", 2, "duplicate setting name");
}

/* ---- files that are not plain configuration files ---- */

/* Loads PATH in a child process, so that a loader that exits or hangs
 * fails the test instead of ending or stalling it: the child must exit 0
 * within 20 s (generous: a shared machine). Returns the loader's rc and
 * its message in ERR. */
static int load_in_child(const char *path, char *err, size_t errlen)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct ccap_config *cfg = NULL;
        char e[600] = "";
        close(p[0]);
        int rc = ccap_config_load(path, &cfg, e, sizeof e);
        ccap_config_free(cfg);
        if (write(p[1], &rc, sizeof rc) != sizeof rc || write(p[1], e, strlen(e) + 1) < 0)
            _exit(3);
        _exit(0);
    }
    close(p[1]);
    struct pollfd pf = { .fd = p[0], .events = POLLIN };
    int ready = poll(&pf, 1, 20000);
    if (ready != 1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(p[0]);
        fail_msg("loading %s did not return within 20 s", path);
    }
    char buf[sizeof(int) + 600];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf && (r = read(p[0], buf + got, sizeof buf - got)) > 0)
        got += (size_t)r;
    close(p[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("loading %s ended the process (status %#x)", path, st);
    assert_true(got > sizeof(int));
    int rc;
    memcpy(&rc, buf, sizeof rc);
    snprintf(err, errlen, "%.*s", (int)(got - sizeof rc), buf + sizeof rc);
    return rc;
}

/* Expects loading PATH (in a child) to fail with RC and a message holding WANT. */
static void load_refused(const char *path, int rc, const char *want)
{
    char err[600];
    int got = load_in_child(path, err, sizeof err);
    if (got != rc || !strstr(err, want))
        fail_msg("%s: rc %d (want %d), message \"%s\" (want \"%s\")", path, got, rc, err, want);
}

static void test_not_regular(void **state)
{
    (void)state;
    char fifo[128], want[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);

    /* as the configuration itself */
    snprintf(want, sizeof want, "%s: is a FIFO, not a regular file", fifo);
    load_refused(fifo, -EINVAL, want);
    load_refused("/proc/self/mem", -EIO, "/proc/self/mem: cannot read: Input/output error");
    load_refused("/dev/zero", -EINVAL, "/dev/zero: is a character device, not a regular file");

    /* @included: refused with the including file and line */
    const char *p = write_file("inc-dir.conf", "log_level = \"info\";\n\n@include \"/tmp\"\n");
    snprintf(want, sizeof want, "%s:3: @include \"/tmp\": /tmp: cannot open: Is a directory", p);
    load_refused(p, -EISDIR, want);
    p = write_file("inc-mem.conf", "@include \"/proc/self/mem\"\n");
    snprintf(want, sizeof want, "%s:1: @include \"/proc/self/mem\": /proc/self/mem: cannot read:", p);
    load_refused(p, -EIO, want);
    p = write_file("inc-fifo.conf", "# a FIFO, relative to this file\n  @include \"fifo\"  # here\n");
    snprintf(want, sizeof want, "%s:2: @include \"fifo\": %s: is a FIFO, not a regular file", p, fifo);
    load_refused(p, -EINVAL, want);
    unlink(fifo);
}

static void test_size_cap(void **state)
{
    (void)state;
    char path[128], want[640];
    snprintf(path, sizeof path, "%s/huge.conf", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    /* one long string: what made libconfig's scanner quadratic */
    fputs("a = \"", f);
    for (int i = 0; i < 4 * 1024; i++)
        for (int j = 0; j < 1024; j++)
            fputc('x', f);
    fputs("\";\n", f);
    assert_int_equal(fclose(f), 0);
    snprintf(want, sizeof want, "%s: is larger than %d bytes", path, CCAP_CONF_MAX_BYTES);
    load_refused(path, -EFBIG, want);

    /* at the cap it is read (and then judged) */
    assert_int_equal(truncate(path, CCAP_CONF_MAX_BYTES - 3), 0);
    f = fopen(path, "a");
    assert_non_null(f);
    fputs("\";\n", f);
    assert_int_equal(fclose(f), 0);
    snprintf(want, sizeof want, "%s:1: a: unknown setting", path);
    load_refused(path, -EINVAL, want);

    /* includes count towards the cap: two of 600 KiB are too many */
    assert_int_equal(truncate(path, 600 * 1024), 0);
    f = fopen(path, "r+");
    assert_non_null(f);
    fputs("#", f); /* a comment of 600 KiB (the file ends in no newline) */
    assert_int_equal(fclose(f), 0);
    char text[320];
    snprintf(text, sizeof text, "@include \"%s\"\n@include \"%s\"\n", path, path);
    const char *p = write_file("twice.conf", text);
    snprintf(want, sizeof want, "%s:2: @include \"%s\": %s: the configuration with its includes is larger", p, path,
             path);
    load_refused(p, -EFBIG, want);
}

static void test_unknown_settings(void **state)
{
    (void)state;
    load_bad_line("log_level = \"warn\";\nsemaphore = ();\n", 2,
                  "semaphore: unknown setting; did you mean \"semaphores\"?");
    load_bad_line("frobnicate = 1;\n", 1, "frobnicate: unknown setting");
    load_bad_line("redis = {\n  host = \"h\";\n  prot = 1;\n};\n", 3,
                  "redis.prot: unknown setting; did you mean \"port\"?");
    load_bad_line("redis = { passwordfile = \"/x\"; };\n", 1,
                  "redis.passwordfile: unknown setting; did you mean \"password_file\"?");
    load_bad_line("semaphores = (\n { name = \"a\";\n   limt = 1; } );\n", 3,
                  "semaphores[0].limt: unknown setting; did you mean \"limit\"?");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; lease = 900; } );\n", 1,
                  "semaphores[0].lease: unknown setting; did you mean \"lease_ms\"?");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; Limit = 2; } );\n", 1,
                  "semaphores[0].Limit: unknown setting; did you mean \"limit\"?");
    load_bad_line(SEM "rules = ( { semaphore = \"api\"; match = (\"a\"); },\n"
                      "  { semaphore = \"api\"; matches = (\"b\"); } );\n",
                  3, "rules[1].matches: unknown setting; did you mean \"match\"?");
    /* the unknown setting is reported even when the name is far from all */
    load_bad_line("redis = { zzzzzzzz = 1; };\n", 1, "redis.zzzzzzzz: unknown setting");
}

static void test_wrong_types(void **state)
{
    (void)state;
    load_bad_line("semaphores = ( { name = \"a\";\n limit = \"4\"; } );\n", 2,
                  "semaphores[0].limit: must be an integer >= 0, not a string");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 4.0; } );\n", 1,
                  "semaphores[0].limit: must be an integer >= 0, not a float");
    load_bad_line("audit = \"yes\";\n", 1, "audit: must be true or false, not a string");
    load_bad_line("redis = 5;\n", 1, "redis: must be a group");
    load_bad_line("redis = { host = 127; };\n", 1, "redis.host: must be a string, not an integer");
    load_bad_line("semaphores = { name = \"a\"; };\n", 1, "semaphores: must be a list of groups");
    load_bad_line("semaphores = ( \"a\" );\n", 1, "semaphores[0]: must be a group");
    load_bad_line("rules = [ 1 ];\n", 1, "rules: must be a list of groups");
    load_bad_line(SEM "rules = ( { semaphore = \"api\"; match = \"10.0.0.1\"; } );\n", 2,
                  "rules[0].match: must be a list of strings");
    load_bad_line(SEM "rules = ( { semaphore = \"api\"; match = (); } );\n", 2, "rules[0].match: must not be empty");
    load_bad_line(SEM "rules = ( { semaphore = \"api\";\n match = ( \"a\", 5 ); } );\n", 3,
                  "rules[0].match[1]: must be a string, not an integer");
    load_bad_line(SEM "rules = ( { semaphore = \"api\"; match = (\"a\"); resolve = 1; } );\n", 2,
                  "rules[0].resolve: must be true or false, not an integer");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; rate = \"fast\"; } );\n", 1,
                  "semaphores[0].rate: must be a number >= 0");
    load_bad_line("on_timeout = 110;\n", 1, "on_timeout: must be a string, not an integer");
}

static void test_ranges(void **state)
{
    (void)state;
    load_bad_line("\n\n\n\n\n\nsemaphores = ( { name = \"a\"; limit = -1; } );\n", 7,
                  "semaphores[0].limit: must be an integer >= 0");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 9999999999L; } );\n", 1,
                  "semaphores[0].limit: must be an integer >= 0, not 9999999999");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; lease_ms = 299; } );\n", 1,
                  "semaphores[0].lease_ms: must be an integer >= 300, not 299");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; wait_timeout_ms = -1; } );\n", 1,
                  "semaphores[0].wait_timeout_ms: must be an integer >= 0, not -1");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; max_waiters = -2; } );\n", 1,
                  "semaphores[0].max_waiters: must be an integer >= 0 (0: no bound), not -2");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; rate = -0.5; } );\n", 1,
                  "semaphores[0].rate: must be a number 0-1e9");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; burst = 5; } );\n", 1,
                  "semaphores[0].burst: has no effect without a rate > 0");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; rate = 1; burst = 0; } );\n", 1,
                  "semaphores[0].burst: must be an integer >= 1, not 0");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; local_limit = -2; } );\n", 1,
                  "semaphores[0].local_limit: must be an integer >= 0, not -2");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; restart_grace_ms = -1; } );\n", 1,
                  "semaphores[0].restart_grace_ms: must be an integer >= 0, not -1");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; lease_ms = 1000;\n restart_grace_ms = 1001; } );\n", 2,
                  "semaphores[0].restart_grace_ms: 1001 is longer than lease_ms (1000)");
    load_bad_line("redis = { port = 0; };\n", 1, "redis.port: must be an integer 1-65535, not 0");
    load_bad_line("redis = { port = 70000; };\n", 1, "redis.port: must be an integer 1-65535, not 70000");
    load_bad_line("redis = { db = -1; };\n", 1, "redis.db: must be an integer >= 0");
    load_bad_line("redis = { connect_timeout_ms = 0; };\n", 1, "redis.connect_timeout_ms: must be an integer >= 1");
    load_bad_line("redis = { host = \"\"; };\n", 1, "redis.host: must not be empty");
    load_bad_line(
        "redis = { key_prefix = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"; };\n", 1,
        "redis.key_prefix: must be at most 64 characters");
    load_bad_line(SEM "rules = ( { semaphore = \"api\"; match = (\"a\"); resolve_interval_s = 0; } );\n", 2,
                  "rules[0].resolve_interval_s: must be an integer >= 1, not 0");
    load_bad_line("audit_maxlen = 0;\n", 1, "audit_maxlen: must be an integer >= 1, not 0");
}

static void test_semaphore_errors(void **state)
{
    (void)state;
    load_bad_line("semaphores = (\n { limit = 1; } );\n", 2, "semaphores[0].name: is required");
    load_bad_line("semaphores = (\n { name = \"a\"; } );\n", 2, "semaphores[0].limit: is required");
    load_bad_line("semaphores = ( { name = \"a b\"; limit = 1; } );\n", 1,
                  "semaphores[0].name: \"a b\" is not a valid name (1-64 of A-Z a-z 0-9 . _ -)");
    load_bad_line("semaphores = ( { name = \"\"; limit = 1; } );\n", 1,
                  "semaphores[0].name: \"\" is not a valid name");
    load_bad_line(
        "semaphores = ( { name = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"; limit = 1; } );\n",
        1, "semaphores[0].name: \"aaaa");
    load_bad_line("semaphores = (\n { name = \"a\"; limit = 1; },\n { name = \"a\"; limit = 2; } );\n", 3,
                  "semaphores[1].name: duplicate name \"a\" (first at line 2)");
}

static void test_rule_errors(void **state)
{
    (void)state;
    load_bad_line(SEM "rules = (\n { match = (\"a\"); } );\n", 3, "rules[0].semaphore: is required");
    load_bad_line(SEM "rules = (\n { semaphore = \"api\"; } );\n", 3, "rules[0].match: is required");
    load_bad_line(SEM "rules = ( { semaphore = \"apl\"; match = (\"a\"); } );\n", 2,
                  "rules[0].semaphore: no semaphore named \"apl\"; did you mean \"api\"?");
    load_bad_line(SEM "rules = ( { semaphore = \"other\"; match = (\"a\"); } );\n", 2,
                  "rules[0].semaphore: no semaphore named \"other\"");
    load_bad_line("rules = ( { semaphore = \"api\"; match = (\"a\"); } );\n", 1,
                  "rules[0].semaphore: no semaphore named \"api\"");
    load_bad_line(SEM "rules = (\n"
                      "  { semaphore = \"api\"; match = ( \"10.0.0.1\" ); },\n"
                      "  { semaphore = \"api\";\n"
                      "    match = ( \"a.com\", \"b.com\",\n"
                      "              \"10.0.0.0/33\" ); } );\n",
                  6, "rules[1].match[2]: bad CIDR length 33 in \"10.0.0.0/33\"");
    load_bad_line(SEM "rules = ( { semaphore = \"api\"; match = ( \"10.0.0.1/8\" ); } );\n", 2,
                  "rules[0].match[0]: 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?");
    load_bad_line(SEM "rules = ( { semaphore = \"api\"; match = ( \"foo.*.com\" ); } );\n", 2,
                  "rules[0].match[0]: \"*\" is only allowed as the whole first label");
}

static void test_policy_errors(void **state)
{
    (void)state;
    load_bad_line("on_timeout = \"ETIMEOUT\";\n", 1,
                  "on_timeout: unknown errno name \"ETIMEOUT\"; did you mean \"ETIMEDOUT\"?");
    load_bad_line("on_timeout = \"nonsense-words\";\n", 1, "on_timeout: unknown errno name \"nonsense-words\"");
    load_bad_line("on_redis_down = \"opn\";\n", 1,
                  "on_redis_down: must be \"open\", \"closed\" or \"local\", not \"opn\"");
    load_bad_line("nonblocking = \"block\";\n", 1,
                  "nonblocking: must be \"queue\", \"wait\" or \"fail\", not \"block\"");
    load_bad_line("nonblocking_errno = \"ECONREFUSED\";\n", 1,
                  "nonblocking_errno: unknown errno name \"ECONREFUSED\"; did you mean \"ECONNREFUSED\"?");
    /* an in-progress errno would make an event loop use an unconnected socket */
    const char *inprogress[] = { "EAGAIN", "EWOULDBLOCK", "EINPROGRESS", "EALREADY", "EINTR", "EISCONN" };
    for (size_t i = 0; i < sizeof(inprogress) / sizeof(inprogress[0]); i++) {
        char line[64];
        snprintf(line, sizeof(line), "nonblocking_errno = \"%s\";\n", inprogress[i]);
        load_bad_line(line, 1, "nonblocking_errno: must not say that the connect is under way or done");
    }
    load_bad_line("log_level = \"verbose\";\n", 1,
                  "log_level: must be \"error\", \"warn\", \"info\" or \"debug\", not \"verbose\"");
    load_bad_line("log = \"stdout\";\n", 1, "log: must be \"stderr\" or \"syslog\", not \"stdout\"");
    struct ccap_config *cfg = load_ok("on_timeout = \"EAGAIN\";\n");
    assert_int_equal(cfg->on_timeout_errno, EAGAIN);
    ccap_config_free(cfg);
}

static void test_redis_errors(void **state)
{
    (void)state;
    char text[512], missing[128];
    snprintf(missing, sizeof missing, "%s/no-such-secret", tmpdir);
    snprintf(text, sizeof text, "redis = {\n password_file = \"%s\"; };\n", missing);
    char want[256];
    snprintf(want, sizeof want, "redis.password_file: cannot read %s: No such file or directory", missing);
    load_bad_line(text, 2, want);
    write_file("empty-secret", "\n");
    snprintf(text, sizeof text, "redis = { password_file = \"%s\"; };\n", fixture);
    load_bad_line(text, 1, "redis.password_file: first line of");
    load_bad_line("redis = { password_file = \"secret\"; };\n", 1, "redis.password_file: must be an absolute path");
    unsetenv("CCAP_TEST_UNSET");
    load_bad_line("redis = { password_env = \"CCAP_TEST_UNSET\"; };\n", 1,
                  "redis.password_env: environment variable CCAP_TEST_UNSET is not set");
    setenv("CCAP_TEST_EMPTY", "", 1);
    load_bad_line("redis = { password_env = \"CCAP_TEST_EMPTY\"; };\n", 1,
                  "redis.password_env: environment variable CCAP_TEST_EMPTY is empty");
    setenv("CCAP_TEST_PW", "x", 1);
    snprintf(text, sizeof text, "redis = { password_file = \"%s\";\n password_env = \"CCAP_TEST_PW\"; };\n",
             fixture);
    load_bad_line(text, 2, "redis.password_env: cannot be combined with redis.password_file");
    load_bad_line("redis = { username = \"u\"; };\n", 1,
                  "redis.username: needs redis.password_file or redis.password_env");
    load_bad_line("redis = { socket = \"redis.sock\"; };\n", 1, "redis.socket: must be an absolute path");
    load_bad_line("redis = {\n sentinels = ( \"a:1\" ); };\n", 2, "redis.master: is required with redis.sentinels");
    load_bad_line("redis = { master = \"m\"; };\n", 1, "redis.master: has no effect without redis.sentinels");
    load_bad_line("redis = { sentinels = ( \"a:1\" ); master = \"m\";\n cluster = ( \"b:2\" ); };\n", 2,
                  "redis.cluster: cannot be combined with redis.sentinels");
    load_bad_line("redis = { socket = \"/s\"; cluster = ( \"b:2\" ); };\n", 1,
                  "redis.socket: cannot be combined with redis.cluster");
    load_bad_line("redis = { cluster = ( \"b:2\",\n \"nocolon\" ); };\n", 2,
                  "redis.cluster[1]: \"nocolon\" is not \"host:port\"");
    load_bad_line("redis = { cluster = ( \"b:0\" ); };\n", 1, "redis.cluster[0]: \"b:0\" is not \"host:port\"");
    load_bad_line("redis = { cluster = ( \"::1:6379\" ); };\n", 1,
                  "redis.cluster[0]: \"::1:6379\" is not \"host:port\" (port 1-65535; IPv6 as \"[addr]:port\")");
    load_bad_line("redis = { cluster = (); };\n", 1, "redis.cluster: must not be empty");
    load_bad_line("redis = { sentinels = \"a:1\"; master = \"m\"; };\n", 1,
                  "redis.sentinels: must be a list of strings");
}

static struct sockaddr_storage sa4(const char *ip, int port, socklen_t *len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, ip, &in->sin_addr), 1);
    *len = sizeof *in;
    return ss;
}

static struct sockaddr_storage sa6(const char *ip, int port, socklen_t *len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
    *len = sizeof *in6;
    return ss;
}

/* Index of the rule matching IP:PORT with NAMES, or -1. */
static int which(const struct ccap_config *cfg, const char *ip, int port, const char *const *names, size_t n)
{
    socklen_t len;
    struct sockaddr_storage ss = strchr(ip, ':') ? sa6(ip, port, &len) : sa4(ip, port, &len);
    const struct ccap_rule *r = ccap_config_match(cfg, (struct sockaddr *)&ss, len, names, n);
    return r ? (int)(r - cfg->rules) : -1;
}

static void test_match(void **state)
{
    (void)state;
    struct ccap_config *cfg =
        load_ok("semaphores = ( { name = \"a\"; limit = 1; }, { name = \"b\"; limit = 2; } );\n"
                "rules = (\n"
                "  { semaphore = \"b\"; match = ( \"10.0.0.5:443\", \"db.internal:5432\" ); },\n"
                "  { semaphore = \"a\"; match = ( \"10.0.0.0/8:443\", \"[2001:db8::/32]:443\",\n"
                "                                \"*.partner.com:443\" ); },\n"
                "  { semaphore = \"b\"; match = ( \"*.partner.com\" ); }\n"
                ");\n");
    /* first rule in file order wins */
    assert_int_equal(which(cfg, "10.0.0.5", 443, NULL, 0), 0);
    assert_int_equal(which(cfg, "10.0.0.6", 443, NULL, 0), 1);
    assert_int_equal(which(cfg, "::ffff:10.0.0.5", 443, NULL, 0), 0);
    assert_int_equal(which(cfg, "10.0.0.6", 80, NULL, 0), -1);
    assert_int_equal(which(cfg, "2001:db8::1", 443, NULL, 0), 1);
    assert_int_equal(which(cfg, "2001:db9::1", 443, NULL, 0), -1);
    assert_int_equal(cfg->rules[1].sem, (size_t)ccap_config_sem_index(cfg, "a"));
    /* host names, with the port from the address */
    const char *n1[] = { "x.example", "API.partner.com." };
    assert_int_equal(which(cfg, "192.0.2.1", 443, n1, 2), 1);
    assert_int_equal(which(cfg, "192.0.2.1", 80, n1, 2), 2);
    const char *n2[] = { "partner.com" };
    assert_int_equal(which(cfg, "192.0.2.1", 443, n2, 1), -1);
    const char *n3[] = { "db.internal" };
    assert_int_equal(which(cfg, "192.0.2.1", 5432, n3, 1), 0);
    assert_int_equal(which(cfg, "192.0.2.1", 5433, n3, 1), -1);
    /* an address pattern never matches a name that looks like it */
    const char *n4[] = { "10.0.0.5" };
    assert_int_equal(which(cfg, "192.0.2.1", 443, n4, 1), -1);
    /* NULL entries, bad sockaddrs, no config */
    const char *n5[] = { NULL, "a.partner.com" };
    assert_int_equal(which(cfg, "192.0.2.1", 443, n5, 2), 1);
    socklen_t len;
    struct sockaddr_storage ss = sa4("10.0.0.5", 443, &len);
    assert_null(ccap_config_match(cfg, (struct sockaddr *)&ss, len - 1, NULL, 0));
    assert_null(ccap_config_match(NULL, (struct sockaddr *)&ss, len, NULL, 0));
    ((struct sockaddr *)&ss)->sa_family = AF_UNIX;
    assert_null(ccap_config_match(cfg, (struct sockaddr *)&ss, sizeof ss, NULL, 0));
    ccap_config_free(cfg);
    ccap_config_free(NULL);
}

static void test_errno_names(void **state)
{
    (void)state;
    static const struct {
        const char *n;
        int v;
    } want[] = {
        { "ETIMEDOUT", ETIMEDOUT },
        { "ECONNREFUSED", ECONNREFUSED },
        { "EAGAIN", EAGAIN },
        { "EWOULDBLOCK", EWOULDBLOCK },
        { "EHOSTUNREACH", EHOSTUNREACH },
        { "ENETUNREACH", ENETUNREACH },
        { "ECONNRESET", ECONNRESET },
        { "ECONNABORTED", ECONNABORTED },
        { "EACCES", EACCES },
        { "EPERM", EPERM },
        { "EBUSY", EBUSY },
        { "EINTR", EINTR },
        { "ENOBUFS", ENOBUFS },
        { "EADDRNOTAVAIL", EADDRNOTAVAIL },
        { "ENETDOWN", ENETDOWN },
        { "EHOSTDOWN", EHOSTDOWN },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_int_equal(ccap_errno_parse(want[i].n), want[i].v);
    assert_int_equal(ccap_errno_parse("etimedout"), ETIMEDOUT);
    assert_int_equal(ccap_errno_parse("ETIMEOUT"), -EINVAL);
    assert_int_equal(ccap_errno_parse(""), -EINVAL);
    assert_int_equal(ccap_errno_parse(NULL), -EINVAL);
    assert_string_equal(ccap_errno_name(ETIMEDOUT), "ETIMEDOUT");
    assert_string_equal(ccap_errno_name(EAGAIN), "EAGAIN");
    assert_string_equal(ccap_errno_name(ECONNREFUSED), "ECONNREFUSED");
    assert_string_equal(ccap_errno_name(-1), "E?");
    assert_string_equal(ccap_errno_name(0), "E?");
    /* every listed name parses back to a value whose name parses to it too */
    size_t i = 0;
    for (const char *n; (n = ccap_errno_name_at(i)); i++) {
        int v = ccap_errno_parse(n);
        assert_true(v > 0);
        assert_int_equal(ccap_errno_parse(ccap_errno_name(v)), v);
    }
    assert_true(i >= 16);
}

static void test_config_path(void **state)
{
    (void)state;
    unsetenv("CONNCAP_CONFIG");
    assert_string_equal(ccap_config_path(), CCAP_DEFAULT_CONFIG);
    setenv("CONNCAP_CONFIG", "", 1);
    assert_string_equal(ccap_config_path(), CCAP_DEFAULT_CONFIG);
    setenv("CONNCAP_CONFIG", "/tmp/x.conf", 1);
    assert_string_equal(ccap_config_path(), "/tmp/x.conf");
    unsetenv("CONNCAP_CONFIG");
}

static void test_small_err_buffer(void **state)
{
    (void)state;
    struct ccap_config *cfg;
    char err[16];
    memset(err, 'x', sizeof err);
    const char *p = write_file("bad.conf", "semaphores = ( { name = \"a\"; limit = -1; } );\n");
    assert_int_equal(ccap_config_load(p, &cfg, err, sizeof err), -EINVAL);
    assert_int_equal(strlen(err), sizeof err - 1);
    assert_int_equal(ccap_config_load(p, &cfg, NULL, 0), -EINVAL);
    assert_null(cfg);
}

/* What loads but cannot work is told: resolve = true on a rule with no
 * exact host name has no effect (a warning), on a wildcard it is limited
 * (a note); both name the file and line. */
struct notes {
    int warn, info;
    char last[512];
};

static void take_note(bool warn, const char *msg, void *arg)
{
    struct notes *n = arg;
    if (warn)
        n->warn++;
    else
        n->info++;
    snprintf(n->last, sizeof n->last, "%s", msg);
}

static void test_notes(void **state)
{
    struct notes n = { 0 };
    char want[256];
    (void)state;
    struct ccap_config *cfg = load_ok(SEM "rules = ( { semaphore = \"api\"; match = (\"10.0.0.0/8:443\");\n"
                                          "  resolve = true; } );\n");
    assert_int_equal(ccap_config_notes(cfg, take_note, &n), 1);
    assert_int_equal(n.warn, 1);
    snprintf(want, sizeof want, "%s:2: rules[0]: resolve = true, but the rule has no exact host name", fixture);
    if (!strstr(n.last, want))
        fail_msg("note: %s", n.last);
    ccap_config_free(cfg);

    memset(&n, 0, sizeof n);
    cfg = load_ok(
        SEM "rules = ( { semaphore = \"api\"; match = (\"*.x.test\", \"api.x.test:443\"); resolve = true; } );\n");
    assert_int_equal(ccap_config_notes(cfg, take_note, &n), 0);
    assert_int_equal(n.info, 1);
    assert_non_null(strstr(n.last, "cannot look up the wildcard \"*.x.test\""));
    ccap_config_free(cfg);

    memset(&n, 0, sizeof n);
    cfg = load_ok(SEM "rules = ( { semaphore = \"api\"; match = (\"api.x.test:443\"); resolve = true; },\n"
                      "  { semaphore = \"api\"; match = (\"10.0.0.0/8\"); } );\n");
    assert_int_equal(ccap_config_notes(cfg, take_note, &n), 0);
    assert_int_equal(n.warn + n.info, 0);
    ccap_config_free(cfg);
}

/* The URL forms, and a clear reason (never the password) for bad ones. */
static void test_url(void **state)
{
    (void)state;
    struct ccap_redis_conf u;
    char why[160];
    assert_int_equal(ccap_redis_url_parse("rediss://app:p%40ss%3Aw@[::1]:6380/3", &u, why, sizeof why), 0);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 3);
    assert_string_equal(u.username, "app");
    assert_string_equal(u.password, "p@ss:w");
    assert_true(u.tls.enabled);
    free(u.host), free(u.username), free(u.password);
    assert_int_equal(ccap_redis_url_parse("redis://:only@redis.example", &u, why, sizeof why), 0);
    assert_string_equal(u.host, "redis.example");
    assert_int_equal(u.port, 6379);
    assert_null(u.username);
    assert_string_equal(u.password, "only");
    assert_false(u.tls.enabled);
    free(u.host), free(u.password);
    assert_int_equal(ccap_redis_url_parse("unix:///run/redis.sock?db=2", &u, why, sizeof why), 0);
    assert_string_equal(u.socket, "/run/redis.sock");
    assert_int_equal(u.db, 2);
    assert_null(u.host);
    free(u.socket);
    static const char *const bad[][2] = {
        { "http://h", "must start with redis://, rediss:// or unix://" },
        { "redis://h:0", "the port must be 1-65535" },
        { "redis://h:65536", "the port must be 1-65535" },
        { "redis://h:x/1", "the port must be 1-65535" },
        { "redis://h/x", "the database after '/' must be a number" },
        { "redis://", "the host is missing" },
        { "redis://[::1", "closing ']'" },
        { "redis://u:pw%zz@h", "the password has a bad %-escape" },
        { "redis://u:pw%00@h", "the password has a bad %-escape" },
        { "redis://u@h", "a user name needs a password" },
        { "unix://run/x", "absolute path" },
        { "unix:///x?pw=1", "?db=N" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(why, 0, sizeof why);
        assert_int_equal(ccap_redis_url_parse(bad[i][0], &u, why, sizeof why), -EINVAL);
        if (!strstr(why, bad[i][1]))
            fail_msg("%s: \"%s\" lacks \"%s\"", bad[i][0], why, bad[i][1]);
        assert_null(strstr(why, "pw"));
        free(u.host), free(u.socket), free(u.username), free(u.password);
    }
    char shown[128];
    ccap_redis_url_redact("rediss://u:s3cret@h:1/0", shown, sizeof shown);
    assert_string_equal(shown, "rediss://u:***@h:1/0");
    ccap_redis_url_redact("redis://h:1", shown, sizeof shown);
    assert_string_equal(shown, "redis://h:1");
}

/* redis.url and redis.tls in the file: what they exclude, what they set. */
static void test_url_tls_file(void **state)
{
    (void)state;
    char ca[128], text[512];
    snprintf(ca, sizeof ca, "%s", write_file("ca.pem", "-----BEGIN CERTIFICATE-----\n"));
    snprintf(text, sizeof text,
             "redis = { url = \"rediss://h.example:6380/1\"; tls = { ca_file = \"%s\";\n"
             "  server_name = \"r.example\"; verify = false; }; };\n" SEM,
             ca);
    struct ccap_config *cfg = load_ok(text);
    assert_string_equal(cfg->redis.host, "h.example");
    assert_int_equal(cfg->redis.port, 6380);
    assert_int_equal(cfg->redis.db, 1);
    assert_true(cfg->redis.tls.enabled);
    assert_false(cfg->redis.tls.verify);
    assert_true(cfg->redis.tls.sentinels);
    assert_string_equal(cfg->redis.tls.ca_file, ca);
    assert_string_equal(cfg->redis.tls.ca_pem, "-----BEGIN CERTIFICATE-----\n"); /* read with the file */
    assert_int_equal(cfg->redis.tls.ca_len, 28);
    assert_null(cfg->redis.tls.key_pem);
    assert_string_equal(cfg->redis.tls.server_name, "r.example");
    assert_string_equal(cfg->from.address, "file");
    assert_string_equal(cfg->from.ca_file, "file");
    ccap_config_free(cfg);
    cfg = load_ok("redis = { tls = { }; };\n" SEM);
    assert_true(cfg->redis.tls.enabled && cfg->redis.tls.verify);
    ccap_config_free(cfg);
    load_bad_line("redis = { url = \"redis://h\";\n port = 1; };\n" SEM, 2,
                  "redis.url: cannot be combined with redis.port");
    load_bad_line("redis = { url = \"redis://u:secret@h\"; password_env = \"X\"; };\n" SEM, 1,
                  "redis.url: has a password, and so cannot be combined with redis.password_env");
    load_bad_line("redis = { url = \"redis://u:secret@h:x\"; };\n" SEM, 1,
                  "redis.url: \"redis://u:***@h:x\": the port must be 1-65535");
    load_bad_line("redis = { url = \"redis://h\";\n tls = { }; };\n" SEM, 2,
                  "redis.tls: the URL says redis:// (plain TCP): use rediss://");
    load_bad_line("redis = { url = \"unix:///r.sock\";\n tls = { }; };\n" SEM, 2,
                  "redis.tls: does not apply to a Unix socket");
    load_bad_line("redis = { tls = {\n ca_file = \"ca.pem\"; }; };\n" SEM, 2,
                  "redis.tls.ca_file: must be an absolute path");
    load_bad_line("redis = { tls = {\n cert_file = \"/c.pem\"; }; };\n" SEM, 2,
                  "redis.tls.cert_file: needs redis.tls.key_file");
    load_bad_line("redis = { tls = {\n verfy = true; }; };\n" SEM, 2,
                  "redis.tls.verfy: unknown setting; did you mean \"verify\"?");
    /* a TLS file that cannot be read is an error of the configuration, as the password file's is */
    struct ccap_config *none = (void *)1;
    char err[512] = "";
    snprintf(text, sizeof text, "redis = { tls = { cert_file = \"%s/no-cert.pem\"; key_file = \"%s\"; }; };\n" SEM,
             tmpdir, ca);
    assert_int_equal(ccap_config_load(write_file("bad.conf", text), &none, err, sizeof err), -ENOENT);
    assert_null(none);
    assert_non_null(strstr(err, "bad.conf: redis.tls.cert_file: cannot read "));
    assert_non_null(strstr(err, "no-cert.pem: No such file or directory"));
    /* not read with CCAP_LOAD_NO_SECRETS (a hot reload) */
    assert_int_equal(ccap_config_load_from(fixture, NULL, CCAP_LOAD_NO_SECRETS, &none, err, sizeof err), 0);
    assert_true(none->secrets_skipped);
    assert_null(none->redis.tls.cert_pem);
    ccap_config_free(none);
}

/* Loads TEXT and expects -EINVAL with WANT (from the environment: no file
 * or line) in the message. */
static void load_bad_env(const char *text, const char *want)
{
    struct ccap_config *cfg = (void *)1;
    char err[512] = "";
    int rc = ccap_config_load(write_file("bad.conf", text), &cfg, err, sizeof err);
    if (rc != -EINVAL)
        fail_msg("rc %d (want -EINVAL) for\n%s\nmessage: %s", rc, text, err);
    assert_null(cfg);
    if (strncmp(err, want, strlen(want)))
        fail_msg("message \"%s\"\ndoes not start with \"%s\"", err, want);
}

/* The environment replaces the file's address, TLS paths and log level, and says so. */
static void test_env_overrides(void **state)
{
    (void)state;
    char env_ca[128];
    snprintf(env_ca, sizeof env_ca, "%s", write_file("env-ca.pem", "env CA"));
    setenv("CONNCAP_REDIS_URL", "rediss://u:pw@10.0.0.9:7000/4", 1);
    setenv("CONNCAP_REDIS_TLS_CA_FILE", env_ca, 1);
    setenv("CONNCAP_LOG_LEVEL", "debug", 1);
    struct ccap_config *cfg = load_ok("redis = { sentinels = ( \"h:1\" ); master = \"m\";\n"
                                      " tls = { ca_file = \"/no/file-ca.pem\"; }; };\nlog_level = \"error\";\n" SEM);
    assert_string_equal(cfg->redis.host, "10.0.0.9");
    assert_int_equal(cfg->redis.port, 7000);
    assert_int_equal(cfg->redis.db, 4);
    assert_int_equal(cfg->redis.n_sentinels, 0);
    assert_null(cfg->redis.master);
    assert_string_equal(cfg->redis.password, "pw");
    assert_string_equal(cfg->redis.tls.ca_file, env_ca);
    assert_string_equal(cfg->redis.tls.ca_pem, "env CA"); /* the file the environment names, not the file's */
    assert_int_equal(cfg->log_level, 3);
    assert_string_equal(cfg->from.address, "CONNCAP_REDIS_URL");
    assert_string_equal(cfg->from.ca_file, "CONNCAP_REDIS_TLS_CA_FILE");
    assert_string_equal(cfg->from.log_level, "CONNCAP_LOG_LEVEL");
    ccap_config_free(cfg);
    /* no redis section at all */
    cfg = load_ok(SEM);
    assert_true(cfg->redis.tls.enabled);
    assert_string_equal(cfg->redis.host, "10.0.0.9");
    ccap_config_free(cfg);
    setenv("CONNCAP_REDIS_URL", "redis://h", 1);
    load_bad_env(SEM, "CONNCAP_REDIS_TLS_*: CONNCAP_REDIS_URL says redis:// (plain TCP)");
    unsetenv("CONNCAP_REDIS_TLS_CA_FILE");
    setenv("CONNCAP_REDIS_URL", "redis://u:topsecret@h:99999", 1);
    load_bad_env(SEM, "CONNCAP_REDIS_URL: \"redis://u:***@h:99999\": the port must be 1-65535");
    setenv("CONNCAP_REDIS_URL", "redis://h", 1);
    setenv("CONNCAP_LOG_LEVEL", "loud", 1);
    load_bad_env(SEM, "CONNCAP_LOG_LEVEL: \"loud\" is not one of error, warn, info, debug");
    unsetenv("CONNCAP_LOG_LEVEL");
    setenv("CONNCAP_REDIS_TLS_KEY_FILE", "/k.pem", 1);
    setenv("CONNCAP_REDIS_URL", "rediss://h", 1);
    load_bad_env(SEM, "CONNCAP_REDIS_TLS_CERT_FILE and _KEY_FILE (or redis.tls.cert_file and key_file) go together");
    unsetenv("CONNCAP_REDIS_TLS_KEY_FILE");
    unsetenv("CONNCAP_REDIS_URL");
    cfg = load_ok(SEM);
    assert_false(cfg->redis.tls.enabled);
    assert_string_equal(cfg->from.address, "default");
    ccap_config_free(cfg);
}

/* Expects loading PATH to fail with -EINVAL and WANT in the message. */
static void load_bad_path(const char *path, const char *want)
{
    struct ccap_config *cfg = (void *)1;
    char err[600] = "";
    int rc = ccap_config_load(path, &cfg, err, sizeof err);
    assert_null(cfg);
    if (rc != -EINVAL || !strstr(err, want))
        fail_msg("%s: rc %d, message \"%s\" (want \"%s\")", path, rc, err, want);
}

static void test_include(void **state)
{
    (void)state;
    char text[512], want[512], sub[128], inc[160];
    snprintf(sub, sizeof sub, "%s/sub", tmpdir);
    mkdir(sub, 0700);
    /* relative to the including file's directory, nested, and inside a group */
    write_file("sub/redis.inc", "port = 6390;\n@include \"db.inc\"\n");
    write_file("sub/db.inc", "db = 3;"); /* no final newline */
    write_file("sub/rules.inc", "rules = ( { semaphore = \"api\"; match = ( \"10.0.0.1\" ); },\n"
                                "          { semaphore = \"api\"; match = ( \"10.0.0.2\" ); } );\n");
    snprintf(inc, sizeof inc, "%s/rules.inc", sub);
    snprintf(text, sizeof text,
             "redis = {\n  @include \"sub/redis.inc\"\n};\n" SEM "@include \"%s\" // absolute\n"
             "a_string = \"\n@include \\\"/none\\\"\n\"; # not an include: in a string\n",
             inc);
    const char *p = write_file("main.conf", text);
    /* (a_string is unknown: its line is the main file's 6, after 2 included lines) */
    snprintf(want, sizeof want, "%s:6: a_string: unknown setting", p);
    load_bad_path(p, want);
    snprintf(text, sizeof text,
             "redis = {\n  @include \"sub/redis.inc\"\n};\n" SEM
             "/* @include \"/none\"\n@include \"/none\" */\n@include \"%s\"\n",
             inc);
    struct ccap_config *cfg = load_ok(text);
    assert_int_equal(cfg->redis.port, 6390);
    assert_int_equal(cfg->redis.db, 3);
    assert_int_equal(cfg->n_rules, 2);
    assert_string_equal(cfg->rules[1].file, inc);
    assert_int_equal(cfg->rules[1].line, 2);
    assert_string_equal(cfg->rules[0].file, inc);
    assert_int_equal(cfg->sems[0].line, 4);
    ccap_config_free(cfg);

    /* errors name the included file and its line */
    write_file("sub/bad.inc", "limit_x = 1;\n\nb = ;\n");
    p = write_file("main.conf", "log_level = \"info\";\n@include \"sub/bad.inc\"\n");
    snprintf(want, sizeof want, "%s/bad.inc:3: syntax error", sub);
    load_bad_path(p, want);
    write_file("sub/bad.inc", "\nsemaphores = ( { name = \"x\"; limit = -1; } );\n");
    snprintf(want, sizeof want, "%s/bad.inc:2: semaphores[0].limit: must be an integer >= 0", sub);
    load_bad_path(p, want);
    /* and after an include, the lines are the including file's again */
    write_file("sub/top.inc", "log_level = \"info\";\naudit = true;"); /* no final newline */
    p = write_file("main.conf", "@include \"sub/top.inc\"\n\nbogus = 1;\n");
    snprintf(want, sizeof want, "%s:3: bogus: unknown setting", p);
    load_bad_path(p, want);
}

static void test_include_errors(void **state)
{
    (void)state;
    char want[512];
    const char *p = write_file("self.conf", "\n@include \"self.conf\"\n");
    snprintf(want, sizeof want, "%s:2: @include \"self.conf\": includes nested deeper than %d", p,
             CCAP_CONF_MAX_DEPTH);
    struct ccap_config *cfg = (void *)1;
    char err[600];
    assert_int_equal(ccap_config_load(p, &cfg, err, sizeof err), -ELOOP);
    if (!strstr(err, want))
        fail_msg("%s", err);
    p = write_file("after.conf", "@include \"x.inc\" a = 1;\n");
    snprintf(want, sizeof want, "%s:1: @include \"x.inc\": only a # or // comment may follow it", p);
    load_bad_path(p, want);
    p = write_file("noquote.conf", "\n@include x.inc\n");
    snprintf(want, sizeof want, "%s:2: @include: the file name must be in double quotes", p);
    load_bad_path(p, want);
    p = write_file("empty.conf", "@include \"\"\n");
    load_bad_path(p, "@include \"\": the file name is empty");
    write_file("open.inc", "a = 1; /* never closed\n");
    p = write_file("open.conf", "@include \"open.inc\"\nb = 2; */\n");
    snprintf(want, sizeof want, "%s/open.inc:1: a /* comment is never closed", tmpdir);
    load_bad_path(p, want);
    p = write_file("str.conf", "\n\na = \"never closed;\n");
    snprintf(want, sizeof want, "%s:3: a string is never closed", p);
    load_bad_path(p, want);
}

static void test_bounds(void **state)
{
    (void)state;
    static char text[200000];
    char want[512];
    size_t n = 0;
    /* settings in a group: libconfig checks each new one against all */
    n += (size_t)sprintf(text + n, "redis = {\n");
    for (int i = 0; i < CCAP_CONF_MAX_GROUP + 1; i++)
        n += (size_t)sprintf(text + n, " x%d = 1;\n", i);
    n += (size_t)sprintf(text + n, "};\n");
    const char *p = write_file("group.conf", text);
    snprintf(want, sizeof want, "%s:%d: more than %d settings in one group", p, CCAP_CONF_MAX_GROUP + 2,
             CCAP_CONF_MAX_GROUP);
    load_bad_path(p, want);
    /* nesting */
    n = (size_t)sprintf(text, "a = ");
    for (int i = 0; i < CCAP_CONF_MAX_NEST + 1; i++)
        text[n++] = '(';
    text[n] = '\0';
    p = write_file("nest.conf", text);
    load_bad_path(p, "groups and lists nested deeper than");
    /* semaphores */
    n = (size_t)sprintf(text, "semaphores = (");
    for (int i = 0; i <= CCAP_CONF_MAX_SEMS; i++)
        n += (size_t)sprintf(text + n, "%s{ name = \"s%d\"; limit = 1; }\n", i ? "," : "", i);
    sprintf(text + n, ");\n");
    p = write_file("sems.conf", text);
    snprintf(want, sizeof want, "%s:%d: semaphores: more than %d semaphores", p, CCAP_CONF_MAX_SEMS + 1,
             CCAP_CONF_MAX_SEMS);
    load_bad_path(p, want);
    /* at the bound: each rule finds its semaphore, a duplicate is found */
    n = (size_t)sprintf(text, "semaphores = (");
    for (int i = CCAP_CONF_MAX_SEMS - 1; i >= 0; i--)
        n += (size_t)sprintf(text + n, "%s{ name = \"s%d\"; limit = %d; }\n", i < CCAP_CONF_MAX_SEMS - 1 ? "," : "",
                             i, i);
    n += (size_t)sprintf(text + n, ");\nrules = ( { semaphore = \"s7\"; match = (\"10.0.0.7\"); },\n"
                                   "{ semaphore = \"s1000\"; match = (\"10.0.0.8\"); } );\n");
    struct ccap_config *cfg = load_ok(text);
    assert_int_equal(cfg->sems[cfg->rules[0].sem].limit, 7);
    assert_int_equal(cfg->sems[cfg->rules[1].sem].limit, 1000);
    ccap_config_free(cfg);
    load_bad_line(SEM "rules = ( { semaphore = \"apj\"; match = (\"10.0.0.7\"); } );\n", 2,
                  "rules[0].semaphore: no semaphore named \"apj\"; did you mean \"api\"?");
    load_bad_line("semaphores = ( { name = \"a\"; limit = 1; },\n { name = \"a\"; limit = 2; } );\n", 2,
                  "semaphores[1].name: duplicate name \"a\" (first at line 1)");
    /* patterns in all rules */
    n = (size_t)sprintf(text, SEM "rules = ( { semaphore = \"api\"; match = (");
    for (int i = 0; i <= CCAP_CONF_MAX_PATTERNS; i++)
        n += (size_t)sprintf(text + n, "%s\"1.2.3.4\"", i ? "," : "");
    sprintf(text + n, "); } );\n");
    load_bad_line(text, 2, "rules[0].match: more than 16384 patterns in all rules");
    /* a NUL byte */
    struct ccap_config *c2 = (void *)1;
    char err[600];
    assert_int_equal(ccap_config_load_text("/x/mem.conf", "a = 1;\n\nb\0 = 2;\n", 16, &c2, err, sizeof err),
                     -EINVAL);
    assert_null(c2);
    assert_string_equal(err, "/x/mem.conf:3: contains a NUL byte");
}

static void test_password_mode(void **state)
{
    (void)state;
    char text[256], want[512];
    const char *pw = write_file("pw", "secret\n");
    char pwpath[128];
    snprintf(pwpath, sizeof pwpath, "%s", pw);
    snprintf(text, sizeof text, "redis = {\n  password_file = \"%s\"; };\n", pwpath);
    chmod(pwpath, 0644);
    struct ccap_config *cfg = load_ok(text);
    assert_string_equal(cfg->redis.password, "secret");
    struct notes n = { 0 };
    assert_int_equal(ccap_config_notes(cfg, take_note, &n), 1);
    snprintf(want, sizeof want, "%s:2: redis.password_file: %s is readable by group and others (mode 0644)", fixture,
             pwpath);
    if (!strstr(n.last, want))
        fail_msg("note: %s", n.last);
    ccap_config_free(cfg);
    chmod(pwpath, 0640);
    cfg = load_ok(text);
    memset(&n, 0, sizeof n);
    assert_int_equal(ccap_config_notes(cfg, take_note, &n), 1);
    assert_non_null(strstr(n.last, "is readable by its group (mode 0640)"));
    ccap_config_free(cfg);
    chmod(pwpath, 0600);
    cfg = load_ok(text);
    memset(&n, 0, sizeof n);
    assert_int_equal(ccap_config_notes(cfg, take_note, &n), 0);
    assert_int_equal(n.warn + n.info, 0);
    ccap_config_free(cfg);

    /* a FIFO as the password file is refused, never waited on */
    char fifo[128];
    snprintf(fifo, sizeof fifo, "%s/pwfifo", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(text, sizeof text, "redis = { password_file = \"%s\"; };\n", fifo);
    const char *p = write_file("pwfifo.conf", text);
    snprintf(want, sizeof want, "redis.password_file: cannot read %s: is a FIFO, not a regular file", fifo);
    load_refused(p, -EINVAL, want);
    unlink(fifo);
}

/* CCAP_CONF_SECRETS_UNCHECKED (check --offline): a password this machine
 * does not have is a note, not an error; the rest is still validated. */
static void test_secrets_unchecked(void **state)
{
    (void)state;
    struct ccap_config *cfg = NULL;
    char err[512], text[512], missing[128];
    struct notes n;
    unsetenv("CCAP_TEST_UNSET");
    const char *p =
        write_file("unset.conf", "redis = { username = \"w\";\n password_env = \"CCAP_TEST_UNSET\"; };\n");
    assert_int_equal(ccap_config_load(p, &cfg, err, sizeof err), -EINVAL); /* without the flag: as before */
    assert_int_equal(ccap_config_load_flags(p, CCAP_CONF_SECRETS_UNCHECKED, &cfg, err, sizeof err), 0);
    assert_null(cfg->redis.password);
    assert_string_equal(cfg->redis.username, "w");
    assert_non_null(cfg->secret_note);
    assert_non_null(strstr(cfg->secret_note, "unset.conf:2: redis.password_env: environment variable "
                                             "CCAP_TEST_UNSET is not set: the password is not checked"));
    memset(&n, 0, sizeof n);
    assert_int_equal(ccap_config_notes(cfg, take_note, &n), 0); /* a note, not a warning */
    assert_int_equal(n.info, 1);
    ccap_config_free(cfg);

    snprintf(missing, sizeof missing, "%s/no-such-secret", tmpdir);
    snprintf(text, sizeof text, "redis = { password_file = \"%s\"; };\n", missing);
    p = write_file("missing.conf", text);
    assert_int_equal(ccap_config_load_flags(p, CCAP_CONF_SECRETS_UNCHECKED, &cfg, err, sizeof err), 0);
    assert_non_null(strstr(cfg->secret_note, "No such file or directory): the password is not checked"));
    ccap_config_free(cfg);

    /* what is wrong in the file itself stays an error */
    p = write_file("relative.conf", "redis = { password_file = \"secret\"; };\n");
    assert_int_equal(ccap_config_load_flags(p, CCAP_CONF_SECRETS_UNCHECKED, &cfg, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "must be an absolute path"));
    p = write_file("badlimit.conf", "redis = { password_env = \"CCAP_TEST_UNSET\"; };\n"
                                    "semaphores = ( { name = \"a\"; limit = -1; } );\n");
    assert_int_equal(ccap_config_load_flags(p, CCAP_CONF_SECRETS_UNCHECKED, &cfg, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "badlimit.conf:2: semaphores[0].limit"));
    p = write_file("nouser.conf", "redis = { username = \"u\"; };\n");
    assert_int_equal(ccap_config_load_flags(p, CCAP_CONF_SECRETS_UNCHECKED, &cfg, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "redis.username: needs redis.password_file or redis.password_env"));
    /* a secret that is there is read and checked as always */
    setenv("CCAP_TEST_PW", "x", 1);
    p = write_file("set.conf", "redis = { password_env = \"CCAP_TEST_PW\"; };\n");
    assert_int_equal(ccap_config_load_flags(p, CCAP_CONF_SECRETS_UNCHECKED, &cfg, err, sizeof err), 0);
    assert_string_equal(cfg->redis.password, "x");
    assert_null(cfg->secret_note);
    ccap_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_reference_config),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_unknown_settings),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_semaphore_errors),
        cmocka_unit_test(test_rule_errors),
        cmocka_unit_test(test_policy_errors),
        cmocka_unit_test(test_redis_errors),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_errno_names),
        cmocka_unit_test(test_config_path),
        cmocka_unit_test(test_small_err_buffer),
        cmocka_unit_test(test_notes),
        cmocka_unit_test(test_url),
        cmocka_unit_test(test_url_tls_file),
        cmocka_unit_test(test_env_overrides),
        cmocka_unit_test(test_not_regular),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_include),
        cmocka_unit_test(test_include_errors),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_password_mode),
        cmocka_unit_test(test_secrets_unchecked),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
