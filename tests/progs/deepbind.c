/* deepbind.c -- libraries loaded with RTLD_DEEPBIND under the shim; steps checked by tests/lib/lifecycle.sh.
 *
 * Usage: deepbind MODE LIBDIR PORT
 * LIBDIR holds the libraries tests/deeplib/deeplib.c builds (tests/integration/deepbind_libs.sh),
 * PORT is the countserver, matched by the test's rule. At each step it prints "@NAME N" (N live
 * holders expected) and waits for "ok" on stdin; other lines are "key value" facts. A failed
 * expectation prints "FAIL: ..." on stderr and exits 1.
 * Modes:
 *   now, lazy  libdeep{now,lazy}.so loaded with RTLD_DEEPBIND (bound at load / lazily): its
 *              connects and its dependency's are capped, its close gives the permit back
 *   queued     the cap (1) held by the program: the library's non-blocking connect is queued, its
 *              poll and getsockopt see it connect once the program's socket is closed
 *   own        libdeepown.so defines connect() itself: DEEPBIND keeps it its own
 *   sub        libdeepnow.so loads libdeepsub.so (RTLD_DEEPBIND) by a bare name from its RUNPATH,
 *              and by "$ORIGIN/sub/...": found as from the library, capped
 *   plain      libdeepplain.so, loaded without RTLD_DEEPBIND, loads libdeepsub.so by a bare name
 *              from its RUNPATH: the loader still sees the library as the caller
 *   fail       a DEEPBIND load that fails leaves the loader's message to dlerror(); one that
 *              succeeds leaves none
 * With DEEP_DIRECT=1 the program's own DEEPBIND loads call the shim's dlopen directly (a
 * sanitizer's dlopen refuses RTLD_DEEPBIND before the shim would see it). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *dir;
static int port;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void step(const char *name, int n)
{
    char line[64];
    printf("@%s %d\n", name, n);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin) || strncmp(line, "ok", 2) != 0)
        die("step %s: driver said no", name);
}

static void fact(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fact(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* dl_iterate_phdr: the path of the loaded libconncap.so, into ARG. */
static int find_shim(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    const char *slash = strrchr(info->dlpi_name, '/');
    if (!slash || strcmp(slash, "/libconncap.so"))
        return 0;
    snprintf(arg, 4096, "%s", info->dlpi_name);
    return 1;
}

/* dlopen as the program calls it, or (DEEP_DIRECT=1) the shim's own. */
static void *open_lib(const char *name, int flags)
{
    char path[4096], shim_path[4096] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const char *direct = getenv("DEEP_DIRECT");
    if (direct && !strcmp(direct, "1")) {
        dl_iterate_phdr(find_shim, shim_path);
        void *shim = shim_path[0] ? dlopen(shim_path, RTLD_LAZY | RTLD_NOLOAD) : NULL;
        void *(*shim_open)(const char *, int) = shim ? (void *(*)(const char *, int))dlsym(shim, "dlopen") : NULL;
        if (!shim_open)
            die("DEEP_DIRECT: the shim's dlopen not found");
        return shim_open(path, flags);
    }
    return dlopen(path, flags);
}

static void *need(void *h, const char *name)
{
    void *f = dlsym(h, name);
    if (!f)
        die("dlsym %s: %s", name, dlerror());
    return f;
}

static int blocking_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("the program's connect: %s", strerror(errno));
    return fd;
}

static int mode_bound(const char *lib, int flags)
{
    void *h = open_lib(lib, flags | RTLD_DEEPBIND);
    if (!h)
        die("dlopen %s: %s", lib, dlerror());
    const char *err = dlerror();
    if (err)
        die("dlerror() after a successful DEEPBIND load: %s", err);
    int (*dt_connect)(int) = need(h, "dt_connect"), (*dt_dep_connect)(int) = need(h, "dt_dep_connect");
    int (*dt_close)(int) = need(h, "dt_close");
    int a = dt_connect(port);
    if (a < 0)
        die("dt_connect: %s", strerror(-a));
    step("lib-connect", 1);
    int b = dt_dep_connect(port);
    if (b < 0)
        die("dt_dep_connect: %s", strerror(-b));
    step("dep-connect", 2);
    dt_close(a);
    step("lib-close", 1);
    dt_close(b);
    step("dep-close", 0);
    dlclose(h);
    return 0;
}

static int mode_queued(void)
{
    void *h = open_lib("libdeepnow.so", RTLD_NOW | RTLD_DEEPBIND);
    if (!h)
        die("dlopen: %s", dlerror());
    int (*dt_start)(int) = need(h, "dt_start"), (*dt_wait)(int, int) = need(h, "dt_wait");
    int (*dt_close)(int) = need(h, "dt_close");
    int mine = blocking_connect();
    step("program-holds", 1);
    int fd = dt_start(port);
    if (fd < 0)
        die("dt_start: %s", strerror(-fd));
    int early = dt_wait(fd, 300);
    fact("while-full %s", early == -ETIME ? "in-progress" : early == 0 ? "connected" : strerror(-early));
    step("lib-queued", 1);
    close(mine);
    int rc = dt_wait(fd, 10000);
    fact("after-release %s", rc == 0 ? "connected" : strerror(-rc));
    step("lib-granted", 1);
    dt_close(fd);
    step("lib-closed", 0);
    return 0;
}

static int mode_own(void)
{
    void *h = open_lib("libdeepown.so", RTLD_NOW | RTLD_DEEPBIND);
    if (!h)
        die("dlopen: %s", dlerror());
    int (*do_own_connect)(int) = need(h, "do_own_connect");
    int *own_calls = need(h, "own_calls");
    int fd = do_own_connect(port);
    fact("own-connect %s calls %d", fd >= 0 ? "ok" : strerror(-fd), *own_calls);
    step("own-connect", 0);
    close(fd);
    return 0;
}

static int mode_sub(void)
{
    void *h = open_lib("libdeepnow.so", RTLD_NOW | RTLD_DEEPBIND);
    if (!h)
        die("dlopen: %s", dlerror());
    void *(*dt_open)(const char *, int) = need(h, "dt_open");
    const char *names[] = { "libdeepsub.so", "$ORIGIN/sub/libdeepsub.so" };
    for (int i = 0; i < 2; i++) {
        void *s = dt_open(names[i], RTLD_NOW | RTLD_DEEPBIND);
        fact("sub-open %s %s", names[i], s ? "ok" : dlerror());
        if (!s)
            die("the library's dlopen(\"%s\", RTLD_DEEPBIND) failed", names[i]);
        int (*ds_connect)(int) = need(s, "ds_connect");
        int fd = ds_connect(port);
        if (fd < 0)
            die("ds_connect: %s", strerror(-fd));
        step("sub-connect", 1);
        close(fd);
        step("sub-close", 0);
        dlclose(s);
    }
    return 0;
}

static int mode_plain(void)
{
    void *h = open_lib("libdeepplain.so", RTLD_NOW);
    if (!h)
        die("dlopen: %s", dlerror());
    void *(*dt_open)(const char *, int) = need(h, "dt_open");
    void *s = dt_open("libdeepsub.so", RTLD_NOW);
    fact("plain-open %s", s ? "ok" : dlerror());
    if (!s)
        die("the library's dlopen(\"libdeepsub.so\") failed: the loader did not see it as the caller");
    return 0;
}

static int mode_fail(void)
{
    void *h = open_lib("no-such-lib.so", RTLD_NOW | RTLD_DEEPBIND);
    const char *err = dlerror();
    fact("fail %s", h ? "loaded?" : err ? err : "(no message)");
    if (h || !err || !strstr(err, "no-such-lib.so"))
        die("a failed DEEPBIND load: want NULL and the loader's message, got %p, %s", h, err ? err : "none");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4) {
        fprintf(stderr, "usage: deepbind MODE LIBDIR PORT\n");
        return 2;
    }
    const char *m = argv[1];
    dir = argv[2];
    port = atoi(argv[3]);
    if (!strcmp(m, "now"))
        return mode_bound("libdeepnow.so", RTLD_NOW);
    if (!strcmp(m, "lazy"))
        return mode_bound("libdeeplazy.so", RTLD_LAZY);
    if (!strcmp(m, "queued"))
        return mode_queued();
    if (!strcmp(m, "own"))
        return mode_own();
    if (!strcmp(m, "sub"))
        return mode_sub();
    if (!strcmp(m, "plain"))
        return mode_plain();
    if (!strcmp(m, "fail"))
        return mode_fail();
    fprintf(stderr, "deepbind: unknown mode %s\n", m);
    return 2;
}
