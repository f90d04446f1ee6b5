/* test_boot.c -- unit tests for the configuration read at load (runtime/boot.c, state.c): kept in memory, handed over, retried. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "boot.h"
#include "env.h"
#include "fileset.h"
#include "rt_int.h"

static char dir[64];

/* In a child: a failed check ends it with status 1 (cmocka's own asserts
 * would go on running the other tests in the child). */
#define CHECK(cond)                                                                                                 \
    do {                                                                                                            \
        if (!(cond)) {                                                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                \
            _exit(1);                                                                                               \
        }                                                                                                           \
    } while (0)

/* Runs FN in a fresh child (the runtime's state is the process's) and expects it to pass. */
static void in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static const char *put(const char *name, const char *text)
{
    static char p[4][160];
    static int k;
    char *out = p[k++ % 4];
    snprintf(out, sizeof p[0], "%s/%s", dir, name);
    FILE *f = fopen(out, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
    return out;
}

/* DIR/c.conf with limit LIMIT, and with PW a password_file beside it. */
static const char *conf(int limit, bool pw)
{
    char text[512], pwline[256] = "";
    if (pw)
        snprintf(pwline, sizeof pwline, " password_file = \"%s\";", put("pw", "sekrit\n"));
    snprintf(text, sizeof text,
             "redis = { host = \"127.0.0.1\"; port = 1;%s };\n"
             "semaphores = ( { name = \"s\"; limit = %d; } );\n"
             "rules = ( { semaphore = \"s\"; match = ( \"10.0.0.0/8\" ); } );\n",
             pwline, limit);
    const char *p = put("c.conf", text);
    setenv("CONNCAP_CONFIG", p, 1);
    return p;
}

/* A sealed memfd with the set FILE was loaded from, as conncap run makes it (SEAL false: not sealed). */
static int handover(const char *file, bool seal)
{
    struct ccap_fileset fs = { .record = true };
    struct ccap_config *cfg = NULL;
    char err[512], *buf, num[16];
    size_t len;
    CHECK(ccap_config_load_from(file, &fs, 0, &cfg, err, sizeof err) == 0);
    ccap_config_free(cfg);
    CHECK(ccap_fileset_encode(&fs, &buf, &len) == 0);
    int fd = memfd_create("conncap-config", MFD_ALLOW_SEALING);
    CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
    if (seal)
        CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) == 0);
    free(buf);
    ccap_fileset_free(&fs);
    snprintf(num, sizeof num, "%d", fd);
    setenv(CCAP_CONFIG_FD_ENV, num, 1);
    return fd;
}

static void boot(void)
{
    ccap_env_capture();
    ccap_rt_boot();
}

/* The file and its password_file are read at load: gone from the disk
 * afterwards, the first connect puts them in force all the same. */
static void read_at_load(void)
{
    const char *p = conf(3, true);
    boot();
    unlink(p);
    unlink(put("pw", ""));
    const struct ccap_config *cfg = ccap_rt_config();
    CHECK(cfg && cfg->sems[0].limit == 3 && cfg->redis.password && !strcmp(cfg->redis.password, "sekrit"));
}

/* A file that names no other file is read at load and parsed later. */
static void parsed_later(void)
{
    const char *p = conf(4, false);
    boot();
    unlink(p);
    const struct ccap_config *cfg = ccap_rt_config();
    CHECK(cfg && cfg->sems[0].limit == 4);
}

/* Missing at load, there by the first connect: tried once more, used. */
static void missing_at_load(void)
{
    unlink(conf(4, false));
    boot();
    conf(5, false);
    const struct ccap_config *cfg = ccap_rt_config();
    CHECK(cfg && cfg->sems[0].limit == 5);
}

/* Still missing at the first connect: final (the connects pass). */
static void missing_for_good(void)
{
    unlink(conf(4, false));
    boot();
    CHECK(!ccap_rt_config());
    conf(5, false);
    CHECK(!ccap_rt_config());
}

/* conncap run's hand-over: used even with the files gone; the descriptor
 * is close-on-exec, inheritable only for an exec that preloads the shim. */
static void handed_over(void)
{
    const char *p = conf(2, true);
    int fd = handover(p, true);
    conf(9, false); /* changed after the check: the checked one is used */
    boot();
    unlink(p);
    const struct ccap_config *cfg = ccap_rt_config();
    CHECK(cfg && cfg->sems[0].limit == 2 && cfg->redis.password && !strcmp(cfg->redis.password, "sekrit"));
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    char num[40], *with[] = { num, "LD_PRELOAD=/other/dir/libconncap.so", NULL }, *without[] = { num, NULL };
    snprintf(num, sizeof num, "%s=%d", CCAP_CONFIG_FD_ENV, fd);
    CHECK(!ccap_boot_exec_pre(without, "/usr/lib/conncap/libconncap.so"));
    CHECK(ccap_boot_exec_pre(with, "/usr/lib/conncap/libconncap.so"));
    CHECK(!(fcntl(fd, F_GETFD) & FD_CLOEXEC));
    ccap_boot_exec_post(true);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    /* a number that no longer is the hand-over is never made inheritable */
    int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(dup3(other, fd, O_CLOEXEC) == fd);
    CHECK(!ccap_boot_exec_pre(with, "/usr/lib/conncap/libconncap.so"));
}

/* An unsealed descriptor is not trusted: the file is read instead. */
static void unsealed(void)
{
    const char *p = conf(2, false);
    handover(p, false);
    conf(7, false);
    boot();
    const struct ccap_config *cfg = ccap_rt_config();
    CHECK(cfg && cfg->sems[0].limit == 7);
}

/* Out of descriptors at load and at the first connect: no configuration,
 * tried again; descriptors freed, the next connect loads it. */
static void transient(void)
{
    conf(6, true);
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = 64;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    int fds[64], n = 0, fd;
    while (n < 64 && (fd = open("/dev/null", O_RDONLY)) >= 0)
        fds[n++] = fd;
    boot();
    CHECK(!ccap_rt_config());
    CHECK(!ccap_rt_config());
    while (n > 0)
        close(fds[--n]);
    const struct ccap_config *cfg = ccap_rt_config();
    CHECK(cfg && cfg->sems[0].limit == 6 && !strcmp(cfg->redis.password, "sekrit"));
}

static void test_read_at_load(void **state)
{
    (void)state;
    in_child(read_at_load);
    in_child(parsed_later);
    in_child(missing_at_load);
    in_child(missing_for_good);
}

static void test_handover(void **state)
{
    (void)state;
    in_child(handed_over);
    in_child(unsealed);
}

static void test_transient(void **state)
{
    (void)state;
    in_child(transient);
}

int main(void)
{
    strcpy(dir, "/tmp/ccap-test-boot.XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_at_load),
        cmocka_unit_test(test_handover),
        cmocka_unit_test(test_transient),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? rc : 1;
}
