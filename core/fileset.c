/* fileset.c -- the files a configuration is made of, kept by path; the hand-over format conncap run writes and the shim reads. */
#include "fileset.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conftext.h"

#define MAGIC "conncap-files 1\n"

const struct ccap_file *ccap_fileset_find(const struct ccap_fileset *fs, const char *path)
{
    for (size_t i = 0; fs && i < fs->n; i++)
        if (!strcmp(fs->v[i].path, path))
            return &fs->v[i];
    return NULL;
}

static char *memdup0(const char *p, size_t n)
{
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, p, n);
        c[n] = '\0';
    }
    return c;
}

static void wipe_free(char *p, size_t n)
{
    if (p)
        explicit_bzero(p, n);
    free(p);
}

/* Appends a copy of PATH and DATA to FS. */
static int keep(struct ccap_fileset *fs, const char *path, const char *data, size_t len, const struct stat *st)
{
    if (fs->n >= CCAP_FILESET_MAX_FILES)
        return -EFBIG;
    struct ccap_file *v = realloc(fs->v, (fs->n + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    fs->v = v;
    struct ccap_file *f = &v[fs->n];
    f->path = strdup(path);
    f->data = memdup0(data, len);
    if (!f->path || !f->data) {
        free(f->path);
        wipe_free(f->data, len);
        return -ENOMEM;
    }
    f->len = len;
    f->st = *st;
    fs->n++;
    return 0;
}

/* The first CAP bytes of the regular file PATH (ccap_file_open). */
static int read_head(const char *path, size_t cap, char **out, size_t *len, struct stat *st, char *why,
                     size_t whylen)
{
    int fd = ccap_file_open(path, st, why, whylen);
    if (fd < 0)
        return fd;
    char *buf = malloc(cap + 1);
    size_t got = 0;
    int rc = buf ? 0 : -ENOMEM;
    while (rc == 0 && got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            if (why && whylen)
                snprintf(why, whylen, "cannot read: %s", strerror(-rc));
        } else if (r == 0) {
            break;
        } else {
            got += (size_t)r;
        }
    }
    close(fd);
    if (rc < 0) {
        wipe_free(buf, cap + 1);
        return rc;
    }
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return 0;
}

static int from_disk(const char *path, size_t cap, bool head, char **out, size_t *len, struct stat *st, char *why,
                     size_t whylen)
{
    return head ? read_head(path, cap, out, len, st, why, whylen)
                : ccap_file_read(path, cap, out, len, st, why, whylen);
}

int ccap_fileset_read(struct ccap_fileset *fs, const char *path, size_t cap, bool head, char **out, size_t *len,
                      struct stat *st, char *why, size_t whylen)
{
    struct stat st_local;
    const struct ccap_file *f = ccap_fileset_find(fs, path);
    *out = NULL;
    *len = 0;
    st = st ? st : &st_local;
    if (f) {
        if (f->len > cap && !head) {
            if (why && whylen)
                snprintf(why, whylen, "is larger than %zu bytes", cap);
            return -EFBIG;
        }
        size_t n = f->len > cap ? cap : f->len;
        if (!(*out = memdup0(f->data, n)))
            return -ENOMEM;
        *len = n;
        *st = f->st;
        return 0;
    }
    int rc = from_disk(path, cap, head, out, len, st, why, whylen);
    if (rc == 0 && fs && fs->record && (rc = keep(fs, path, *out, *len, st)) < 0) {
        wipe_free(*out, *len);
        *out = NULL;
        *len = 0;
        if (why && whylen)
            snprintf(why, whylen, "cannot keep it: %s", strerror(-rc));
    }
    return rc;
}

void ccap_fileset_free(struct ccap_fileset *fs)
{
    for (size_t i = 0; i < fs->n; i++) {
        free(fs->v[i].path);
        wipe_free(fs->v[i].data, fs->v[i].len);
    }
    free(fs->v);
    fs->v = NULL;
    fs->n = 0;
}

/* ---- the hand-over format ----
 *   "conncap-files 1\n"
 *   per file: "F PATHLEN LEN DEV INO MODE SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS\n" PATH DATA "\n"
 *   "E\n"
 * Decimal numbers; PATH and DATA raw, exactly as long as said. */

#define HEAD_FMT "F %zu %zu %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %" PRId64 " %ld %" PRId64 " %ld\n"

int ccap_fileset_encode(const struct ccap_fileset *fs, char **out, size_t *len)
{
    size_t cap = sizeof MAGIC + 3;
    *out = NULL;
    *len = 0;
    if (fs->n > CCAP_FILESET_MAX_FILES)
        return -EFBIG;
    for (size_t i = 0; i < fs->n; i++) {
        cap += 256 + strlen(fs->v[i].path) + fs->v[i].len;
        if (cap > CCAP_FILESET_MAX_BYTES)
            return -EFBIG;
    }
    char *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    size_t n = (size_t)snprintf(buf, cap, "%s", MAGIC);
    for (size_t i = 0; i < fs->n; i++) {
        const struct ccap_file *f = &fs->v[i];
        const struct stat *s = &f->st;
        size_t pl = strlen(f->path);
        n += (size_t)snprintf(buf + n, cap - n, HEAD_FMT, pl, f->len, (uint64_t)s->st_dev, (uint64_t)s->st_ino,
                              (uint64_t)s->st_mode, (int64_t)s->st_size, (int64_t)s->st_mtim.tv_sec,
                              s->st_mtim.tv_nsec, (int64_t)s->st_ctim.tv_sec, s->st_ctim.tv_nsec);
        memcpy(buf + n, f->path, pl);
        memcpy(buf + n + pl, f->data, f->len);
        n += pl + f->len;
        buf[n++] = '\n';
    }
    memcpy(buf + n, "E\n", 2);
    *out = buf;
    *len = n + 2;
    return 0;
}

/* One decimal number of the header line at *P (before END), then a blank
 * or the newline; *P moves past both. */
static int num(const char **p, const char *end, unsigned long long max, unsigned long long *out)
{
    const char *s = *p;
    unsigned long long v = 0;
    if (s >= end || *s < '0' || *s > '9')
        return -EINVAL;
    for (; s < end && *s >= '0' && *s <= '9'; s++) {
        if (v > (max - (unsigned)(*s - '0')) / 10)
            return -EINVAL;
        v = v * 10 + (unsigned)(*s - '0');
    }
    if (s >= end || (*s != ' ' && *s != '\n'))
        return -EINVAL;
    *p = s + 1;
    *out = v;
    return 0;
}

/* One "F ..." entry at *P into FS. */
static int decode_one(const char **p, const char *end, struct ccap_fileset *fs)
{
    unsigned long long v[10];
    const char *s = *p + 2;
    static const unsigned long long max[10] = { 4096,       CCAP_FILESET_MAX_BYTES,
                                                UINT64_MAX, UINT64_MAX,
                                                UINT32_MAX, INT64_MAX,
                                                INT64_MAX,  999999999,
                                                INT64_MAX,  999999999 };
    if (end - *p < 2 || memcmp(*p, "F ", 2))
        return -EINVAL;
    for (int i = 0; i < 10; i++)
        if (num(&s, end, max[i], &v[i]) < 0 || (s[-1] == '\n') != (i == 9))
            return -EINVAL;
    if (v[0] == 0 || (size_t)(end - s) < v[0] + v[1] + 1 || s[v[0] + v[1]] != '\n' || memchr(s, '\0', v[0]))
        return -EINVAL;
    struct stat st = {
        .st_dev = (dev_t)v[2], .st_ino = (ino_t)v[3], .st_mode = (mode_t)v[4], .st_size = (off_t)v[5]
    };
    st.st_mtim.tv_sec = (time_t)v[6];
    st.st_mtim.tv_nsec = (long)v[7];
    st.st_ctim.tv_sec = (time_t)v[8];
    st.st_ctim.tv_nsec = (long)v[9];
    char *path = memdup0(s, v[0]);
    if (!path)
        return -ENOMEM;
    int rc = ccap_fileset_find(fs, path) ? -EINVAL : keep(fs, path, s + v[0], v[1], &st);
    free(path);
    *p = s + v[0] + v[1] + 1;
    return rc == -EFBIG ? -EINVAL : rc;
}

int ccap_fileset_decode(const char *buf, size_t len, struct ccap_fileset *out)
{
    const char *p = buf, *end = buf + len;
    memset(out, 0, sizeof *out);
    if (len > CCAP_FILESET_MAX_BYTES || len < sizeof MAGIC - 1 || memcmp(buf, MAGIC, sizeof MAGIC - 1))
        return -EINVAL;
    p += sizeof MAGIC - 1;
    while (end - p >= 2 && memcmp(p, "E\n", 2)) {
        int rc = decode_one(&p, end, out);
        if (rc < 0)
            return rc;
    }
    return end - p == 2 ? 0 : -EINVAL;
}
