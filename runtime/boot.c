/* boot.c -- the configuration read when the library is loaded (or handed over by conncap run), kept for the first connect; transient failures retried. */
#include "boot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conftext.h"
#include "env.h"
#include "fileset.h"
#include "log.h"

/* What the constructor read, for the first connect. Written by the
 * constructor before main; afterwards only by the thread that holds the
 * load (state.c serialises it). */
static struct {
    bool ran;                /* ccap_rt_boot ran */
    struct ccap_fileset fs;  /* the files read (or handed over), until the first load used them */
    struct ccap_config *cfg; /* loaded already (the text names other files), not in force yet */
    int rc;                  /* the constructor's load: 0, or -errno (err says why) */
    char err[512];
    char abs[PATH_MAX]; /* the file's absolute path, when it was given relative; else "" */
    struct stat st;     /* the top file as read: the hot reload's first signature */
    bool st_ok;
    char note[256]; /* about CONNCAP_CONFIG_FD, logged at the first load */
    int fd;         /* the hand-over descriptor kept for exec, or -1 */
    dev_t fd_dev;
    ino_t fd_ino;
} boot = { .fd = -1 };

bool ccap_boot_transient(int rc)
{
    return rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM || rc == -EINTR || rc == -EAGAIN || rc == -ENOBUFS;
}

/* ---- conncap run's hand-over: a sealed memfd named by CONNCAP_CONFIG_FD ---- */

static int read_fd(int fd, struct ccap_fileset *out)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS), want = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;
    if (fstat(fd, &st) != 0)
        return -errno;
    /* sealed: nobody can have changed it since conncap run checked it */
    if (!S_ISREG(st.st_mode) || seals < 0 || (seals & want) != want)
        return -EPERM;
    if (st.st_size <= 0 || st.st_size > CCAP_FILESET_MAX_BYTES)
        return -EFBIG;
    char *buf = malloc((size_t)st.st_size);
    size_t got = 0;
    int rc = buf ? 0 : -ENOMEM;
    while (rc == 0 && got < (size_t)st.st_size) {
        ssize_t r = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        rc = r > 0 ? 0 : r == 0 ? -EIO : errno == EINTR ? 0 : -errno;
        got += r > 0 ? (size_t)r : 0;
    }
    if (rc == 0)
        rc = ccap_fileset_decode(buf, got, out);
    if (buf)
        explicit_bzero(buf, got);
    free(buf);
    if (rc == 0) {
        boot.fd = fd;
        boot.fd_dev = st.st_dev;
        boot.fd_ino = st.st_ino;
    }
    return rc;
}

/* The set conncap run handed over, into boot.fs; a bad one is noted and
 * ignored (the files are read from disk instead). The descriptor is made
 * close-on-exec: it goes on only to an image that loads the shim too
 * (ccap_boot_exec_pre). */
static void take_handover(void)
{
    const char *v = ccap_env_get(CCAP_CONFIG_FD_ENV);
    char *end;
    if (!v || !*v)
        return;
    long fd = strtol(v, &end, 10);
    int rc = *end || fd < 0 || fd > INT_MAX ? -EBADF : read_fd((int)fd, &boot.fs);
    if (rc < 0) {
        ccap_fileset_free(&boot.fs);
        snprintf(boot.note, sizeof boot.note,
                 "%s=%s is not a configuration conncap run handed over (%s): the file is read instead",
                 CCAP_CONFIG_FD_ENV, v, rc == -EPERM ? "not a sealed memfd" : strerror(-rc));
        return;
    }
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
}

/* ---- the constructor ---- */

/* Whether TEXT names other files (an @include, a password_file, TLS
 * files) or environment variables (password_env): then it is loaded now,
 * while the process can still read them and before it can change its
 * environment. A false alarm (a comment) costs only the parse. */
static bool names_more(const char *text, size_t len)
{
    return memmem(text, len, "@include", 8) || memmem(text, len, "_file", 5) || memmem(text, len, "_env", 4) ||
           ccap_env_get("CONNCAP_REDIS_TLS_CA_FILE") || ccap_env_get("CONNCAP_REDIS_TLS_CERT_FILE") ||
           ccap_env_get("CONNCAP_REDIS_TLS_KEY_FILE");
}

/* The file to read: $CONNCAP_CONFIG (or the default), made absolute at
 * load when it was given relative (the program may chdir() later). */
static const char *config_path(void)
{
    return boot.abs[0] ? boot.abs : ccap_config_path();
}

void ccap_rt_boot(void)
{
    const char *path = ccap_config_path();
    char *text = NULL, why[160];
    size_t len = 0;
    boot.ran = true;
    take_handover();
    boot.fs.record = true;
    if (path[0] != '/' && !realpath(path, boot.abs))
        boot.abs[0] = '\0';
    path = config_path();
    int rc = ccap_fileset_read(&boot.fs, path, CCAP_CONF_MAX_BYTES, false, &text, &len, &boot.st, why, sizeof why);
    if (rc < 0) {
        boot.rc = rc;
        if (rc == -EFBIG)
            snprintf(why, sizeof why, "is larger than %d bytes, the limit for a configuration", CCAP_CONF_MAX_BYTES);
        snprintf(boot.err, sizeof boot.err, "%s: %s", path, why);
        return;
    }
    boot.st_ok = true;
    if (names_more(text, len)) {
        boot.rc = ccap_config_load_from(path, &boot.fs, 0, &boot.cfg, boot.err, sizeof boot.err);
        ccap_fileset_free(&boot.fs); /* the configuration has what it needs */
    }
    explicit_bzero(text, len);
    free(text);
}

/* ---- the first connect ---- */

int ccap_boot_take(struct ccap_config **out, struct ccap_boot_seed *seed, char *err, size_t errlen)
{
    const char *path = config_path();
    int rc;
    *out = NULL;
    seed->abs = boot.abs[0] ? boot.abs : NULL; /* else ccap_live_init resolves it */
    seed->st = boot.st_ok ? &boot.st : NULL;
    if (boot.note[0]) {
        ccap_log(CCAP_LOG_WARN, "%s", boot.note);
        boot.note[0] = '\0';
    }
    if (boot.cfg) {
        *out = boot.cfg;
        boot.cfg = NULL;
        return 0;
    }
    /* what the load found wrong, with the privileges the process had then */
    if (boot.ran && boot.rc < 0 && boot.rc != -ENOENT && !ccap_boot_transient(boot.rc)) {
        snprintf(err, errlen, "%s", boot.err);
        return boot.rc;
    }
    /* The text read at load, parsed now (it names no other file). Else
     * from disk now: after a failure at load (a transient one, or a file
     * that was not there yet: tried once more), or without a constructor
     * (the unit tests). */
    bool from_disk = !boot.ran || boot.rc < 0 || !boot.st_ok;
    rc = ccap_config_load_from(path, &boot.fs, 0, out, err, errlen);
    if (rc == 0 || !ccap_boot_transient(rc))
        ccap_fileset_free(&boot.fs);
    if (from_disk)
        seed->st = NULL; /* the hot reload stat()s it now */
    return rc;
}

void ccap_boot_put_back(struct ccap_config *cfg)
{
    boot.cfg = cfg;
}

/* ---- exec ---- */

/* The NAME=... entry of ENVP, or NULL. */
static const char *env_entry(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

bool ccap_boot_exec_pre(char *const *envp, const char *self)
{
    char num[16];
    struct stat st;
    const char *v = env_entry(envp, CCAP_CONFIG_FD_ENV), *pre = env_entry(envp, "LD_PRELOAD"), *base;
    if (boot.fd < 0 || !v || !pre || !self)
        return false;
    base = strrchr(self, '/') ? strrchr(self, '/') + 1 : self;
    snprintf(num, sizeof num, "%d", boot.fd);
    /* the image to come loads the shim, and is told this descriptor, which is still the hand-over */
    if (strcmp(v, num) || !strstr(pre, base) || fstat(boot.fd, &st) != 0 || st.st_dev != boot.fd_dev ||
        st.st_ino != boot.fd_ino)
        return false;
    return fcntl(boot.fd, F_SETFD, 0) == 0;
}

void ccap_boot_exec_post(bool passed)
{
    if (passed)
        fcntl(boot.fd, F_SETFD, FD_CLOEXEC);
}
