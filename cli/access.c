/* access.c -- who may open the Redis Unix socket: the modes along its path, and a try as another user. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"

#define ACCESS_LINKS_MAX 40 /* the kernel's own bound on symlinks in one lookup (ELOOP) */

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

/* Whether the walk's subject may search (X_OK) or write (W_OK) PATH: any
 * user by the mode's "others" bits, or this process by access(). */
static bool may(bool self, const char *path, const struct stat *st, int need)
{
    if (self)
        return access(path, need) == 0;
    return st->st_mode & (need == X_OK ? S_IXOTH : S_IWOTH);
}

/* "PART is MODE OWNER:GROUP" (", not a socket" for another file), and
 * the first symlink the lookup went through (VIA, "" for none), into WHY. */
static void refused(const char *part, const struct stat *st, const char *via, char *why, size_t n)
{
    char mo[96];
    mode_owner(st, mo, sizeof mo);
    snprintf(why, n, "%s is %s%s%s%s", part, mo,
             S_ISSOCK(st->st_mode) || S_ISDIR(st->st_mode) ? "" : ", not a socket",
             via[0] ? ", reached through the symlink " : "", via);
}

/* Looks PATH up one name at a time as the kernel does -- search (x) on
 * each directory, a symlink's target put in its place (the directories it
 * goes through need x as well), write (w) on the socket at the end --
 * asking may(SELF) at each step. 1 when every step is allowed, 0 when one
 * is not (WHY names it), -ENOTSOCK when the end is not a socket (WHY gives
 * its mode), -ELOOP, -ENAMETOOLONG, or a stat's -errno. */
static int walk(const char *path, bool self, char *why, size_t n)
{
    char dir[PATH_MAX], rest[PATH_MAX], next[PATH_MAX], target[PATH_MAX], via[PATH_MAX] = "";
    struct stat st;
    int links = 0;
    if (snprintf(rest, sizeof rest, "%s", path) >= (int)sizeof rest)
        return -ENAMETOOLONG;
    snprintf(dir, sizeof dir, "%s", path[0] == '/' ? "" : "."); /* "" is the root */
    for (;;) {
        const char *p = rest + strspn(rest, "/");
        size_t len = strcspn(p, "/");
        if (!len)
            return -EISDIR; /* an empty path, or one ending in '/': no socket is named */
        const char *d = dir[0] ? dir : "/";
        if (stat(d, &st) < 0)
            return -errno;
        if (!may(self, d, &st, X_OK)) {
            refused(d, &st, via, why, n);
            return 0;
        }
        if (snprintf(next, sizeof next, "%s/%.*s", dir, (int)len, p) >= (int)sizeof next)
            return -ENAMETOOLONG;
        p += len;
        bool last = !p[strspn(p, "/")];
        memmove(rest, p, strlen(p) + 1);
        if (lstat(next, &st) < 0)
            return -errno;
        if (S_ISLNK(st.st_mode)) {
            ssize_t k = readlink(next, target, sizeof target - 1);
            if (k < 0)
                return -errno;
            target[k] = 0;
            if (++links > ACCESS_LINKS_MAX)
                return -ELOOP;
            if (!via[0])
                snprintf(via, sizeof via, "%s", next);
            if (strlen(target) + strlen(rest) + 2 > sizeof rest)
                return -ENAMETOOLONG;
            memmove(rest + k + 1, rest, strlen(rest) + 1); /* the target, then what followed the link */
            memcpy(rest, target, (size_t)k);
            rest[k] = '/';
            if (!rest[k + 1])
                rest[k] = 0;
            if (target[0] == '/')
                dir[0] = 0;
            continue;
        }
        if (!last) {
            if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;
            memcpy(dir, next, strlen(next) + 1);
            continue;
        }
        if (!S_ISSOCK(st.st_mode)) {
            refused(next, &st, via, why, n);
            return -ENOTSOCK;
        }
        if (!may(self, next, &st, W_OK)) {
            refused(next, &st, via, why, n);
            return 0;
        }
        return 1;
    }
}

int ccap_access_others(const char *path, char *why, size_t n)
{
    return walk(path, false, why, n);
}

int ccap_access_user(const char *spec, struct ccap_access_user *u)
{
    char *end;
    memset(u, 0, sizeof *u);
    if (!spec[0])
        return -EINVAL;
    struct passwd *pw = getpwnam(spec);
    if (!pw && spec[0] >= '0' && spec[0] <= '9') { /* UID or UID:GID, as a container's --user */
        errno = 0;
        unsigned long uid = strtoul(spec, &end, 10), gid = 0;
        bool with_gid = *end == ':';
        if (with_gid) {
            const char *g = end + 1;
            gid = strtoul(g, &end, 10);
            if (end == g)
                return -EINVAL;
        }
        if (*end || errno || uid >= (uid_t)-1 || gid >= (gid_t)-1)
            return -EINVAL;
        pw = getpwuid((uid_t)uid);
        u->uid = (uid_t)uid;
        u->gid = with_gid || !pw ? (gid_t)gid : pw->pw_gid;
        if (pw && !with_gid)
            snprintf(u->name, sizeof u->name, "%s", pw->pw_name);
        return 0;
    }
    if (!pw)
        return -ESRCH;
    if (strlen(pw->pw_name) >= sizeof u->name)
        return -ENAMETOOLONG;
    strcpy(u->name, pw->pw_name);
    u->uid = pw->pw_uid;
    u->gid = pw->pw_gid;
    return 0;
}

/* The child of ccap_access_try_as: takes U's rights, connects, and on
 * EACCES writes the part that refused it (or that it is no socket) to OUT. Never returns. */
_Noreturn static void try_child(const char *path, const struct ccap_access_user *u, int out)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path); /* the caller checked its length */
    /* the user's own rights: its groups, its gid, its uid (in that order:
     * each step needs the rights the next one gives up); a uid without a
     * passwd entry has no supplementary groups */
    if (geteuid() == 0 && ((u->name[0] ? initgroups(u->name, u->gid) : setgroups(0, NULL)) < 0 ||
                           setgid(u->gid) < 0 || setuid(u->uid) < 0))
        _exit(EPERM);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        _exit(0);
    int e = errno;
    char why[PATH_MAX + 192] = "";
    int w = e == EACCES ? walk(path, true, why, sizeof why) : 1;
    if ((w == 0 || w == -ENOTSOCK) && write(out, why, strlen(why)) < 0)
        _exit(e);
    _exit(e); /* every errno value fits an exit status */
}

int ccap_access_try_as(const char *path, const struct ccap_access_user *u, char *why, size_t n)
{
    int pfd[2];
    if (n)
        why[0] = 0;
    if (strlen(path) >= sizeof((struct sockaddr_un *)0)->sun_path)
        return -ENAMETOOLONG;
    if (geteuid() != 0 && (geteuid() != u->uid || getegid() != u->gid))
        return -EPERM;
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return -errno;
    fflush(NULL); /* the child exits with _exit: nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pfd[0]);
        close(pfd[1]);
        return -e;
    }
    if (pid == 0)
        try_child(path, u, pfd[1]);
    close(pfd[1]);
    size_t got = 0; /* the refusing part, when the child found it */
    while (n && got < n - 1) {
        ssize_t k = read(pfd[0], why + got, n - 1 - got);
        if (k > 0)
            got += (size_t)k;
        else if (k == 0 || errno != EINTR)
            break;
    }
    if (n)
        why[got] = 0;
    close(pfd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    if (!WIFEXITED(status))
        return -EIO;
    return -WEXITSTATUS(status);
}
