/* exec.c -- the exec family: release CLOEXEC sockets' permits, hand the others to the new image. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>
#include "runtime.h"
#include "handoff.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))

extern char **environ;

/* One exec call, whatever its flavour. */
enum how { BY_PATH, BY_FILE, BY_FD, BY_AT };
struct call {
    enum how how;
    int fd, flags;
    const char *path;
    char *const *argv;
};

#define LOAD CCAP_REAL_LOAD

static int run(const struct call *c, char *const *envp)
{
    if (!LOAD(execve))
        ccap_real_resolve();
    switch (c->how) {
    case BY_PATH: return LOAD(execve)(c->path, c->argv, envp);
    case BY_FILE: return LOAD(execvpe)(c->path, c->argv, envp);
    case BY_FD: return LOAD(fexecve)(c->fd, c->argv, envp);
    case BY_AT:
        if (LOAD(execveat))
            return LOAD(execveat)(c->fd, c->path, c->argv, envp, c->flags);
        errno = ENOSYS;
        return -1;
    }
    errno = EINVAL;
    return -1;
}

/* Hand over or release the permits, exec, restore if it failed: the
 * runtime's part is routed through shim/lifecycle.c. A child sharing its
 * parent's memory (vfork) passes straight through: the permits stay the
 * parent's. */
static int exec_with(const struct call *c, char *const *envp)
{
    if (ccap_guard || !ccap_rt_owner())
        return run(c, envp);
    struct ccap_exec x;
    char *const *env = ccap_shim_exec_begin(envp, &x), *const * retry;
    int rc = run(c, env);
    if (rc < 0 && errno == E2BIG && (retry = ccap_shim_exec_e2big(&x)) != NULL)
        rc = run(c, retry);
    ccap_shim_exec_end(&x);
    return rc;
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    return exec_with(&(struct call){ .how = BY_PATH, .path = path, .argv = argv }, envp);
}

EXPORT int execv(const char *path, char *const argv[])
{
    return exec_with(&(struct call){ .how = BY_PATH, .path = path, .argv = argv }, environ);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    return exec_with(&(struct call){ .how = BY_FILE, .path = file, .argv = argv }, envp);
}

EXPORT int execvp(const char *file, char *const argv[])
{
    return exec_with(&(struct call){ .how = BY_FILE, .path = file, .argv = argv }, environ);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    return exec_with(&(struct call){ .how = BY_FD, .fd = fd, .argv = argv }, envp);
}

EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
    return exec_with(&(struct call){ .how = BY_AT, .fd = dirfd, .path = path, .argv = argv, .flags = flags }, envp);
}

/* execl, execlp, execle: the arguments into an array on the stack, as glibc
 * does (a vfork child may call them: no allocation). */
#define COLLECT(arg0, ap, argv, n)                                                                                  \
    size_t n = 1;                                                                                                   \
    va_start(ap, arg0);                                                                                             \
    while (va_arg(ap, const char *))                                                                                \
        n++;                                                                                                        \
    va_end(ap);                                                                                                     \
    const char *argv[n + 1];                                                                                        \
    argv[0] = arg0;                                                                                                 \
    va_start(ap, arg0);                                                                                             \
    for (size_t i_ = 1; i_ <= n; i_++)                                                                              \
    argv[i_] = va_arg(ap, const char *)

EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    COLLECT(arg, ap, argv, n);
    va_end(ap);
    return exec_with(&(struct call){ .how = BY_PATH, .path = path, .argv = (char *const *)argv }, environ);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    COLLECT(arg, ap, argv, n);
    va_end(ap);
    return exec_with(&(struct call){ .how = BY_FILE, .path = file, .argv = (char *const *)argv }, environ);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    COLLECT(arg, ap, argv, n);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return exec_with(&(struct call){ .how = BY_PATH, .path = path, .argv = (char *const *)argv }, envp);
}
