/* access.c -- who may open the Redis Unix socket: the modes along its path, and a try as another user. */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"

/* "drwxr-x--- redis:redis" for ST into OUT. */
static void mode_owner(const struct stat *st, char *out, size_t n)
{
    static const char bits[] = "rwxrwxrwx";
    char m[11];
    m[0] = S_ISDIR(st->st_mode) ? 'd' : S_ISSOCK(st->st_mode) ? 's' : '-';
    for (int i = 0; i < 9; i++)
        m[i + 1] = st->st_mode & (0400 >> i) ? bits[i] : '-';
    m[10] = 0;
    struct passwd *pw = getpwuid(st->st_uid);
    struct group *gr = getgrgid(st->st_gid);
    char u[16], g[16];
    snprintf(u, sizeof u, "%u", (unsigned)st->st_uid);
    snprintf(g, sizeof g, "%u", (unsigned)st->st_gid);
    snprintf(out, n, "%s %s:%s", m, pw ? pw->pw_name : u, gr ? gr->gr_name : g);
}

int ccap_access_others(const char *path, char *why, size_t n)
{
    char part[sizeof((struct sockaddr_un *)0)->sun_path];
    struct stat st;
    if (strlen(path) >= sizeof part)
        return -ENAMETOOLONG;
    /* every directory on the way needs x for others, the socket itself w */
    for (const char *p = path;; p++) {
        if (*p != '/' && *p)
            continue;
        size_t len = p == path ? 1 : (size_t)(p - path);
        memcpy(part, path, len);
        part[len] = 0;
        if (stat(part, &st) < 0)
            return -errno;
        bool last = !*p;
        if (!(st.st_mode & (last ? S_IWOTH : S_IXOTH))) {
            char mo[96];
            mode_owner(&st, mo, sizeof mo);
            snprintf(why, n, "%s is %s", part, mo);
            return 0;
        }
        if (last)
            return 1;
    }
}

int ccap_access_try_as(const char *path, const char *user)
{
    struct passwd *pw = getpwnam(user);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (!pw)
        return -ESRCH;
    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    if (geteuid() != 0 && geteuid() != pw->pw_uid)
        return -EPERM;
    fflush(NULL); /* the child exits with _exit: nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* the user's own rights: its groups, its gid, its uid (in that order:
         * each step needs the rights the next one gives up) */
        if (geteuid() == 0 &&
            (initgroups(pw->pw_name, pw->pw_gid) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0))
            _exit(EPERM);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
            _exit(errno); /* every errno value fits an exit status */
        _exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    if (!WIFEXITED(status))
        return -EIO;
    return -WEXITSTATUS(status);
}
