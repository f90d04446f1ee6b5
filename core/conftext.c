/* conftext.c -- reads configuration files safely and expands @include, keeping the way back to each file's lines. */
#include "conftext.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileset.h"

/* ---- reading one file ---- */

static const char *kind_name(mode_t m)
{
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "of an unknown kind";
}

/* -EISDIR or -EINVAL for a non-regular M, with WHY; 0 for a regular file. */
static int check_kind(mode_t m, char *why, size_t whylen)
{
    char e[64];
    if (S_ISREG(m))
        return 0;
    if (S_ISDIR(m)) {
        if (why && whylen)
            snprintf(why, whylen, "cannot open: %s", strerror_r(EISDIR, e, sizeof e));
        return -EISDIR;
    }
    if (why && whylen)
        snprintf(why, whylen, "is %s, not a regular file", kind_name(m));
    return -EINVAL;
}

int ccap_file_open(const char *path, struct stat *st, char *why, size_t whylen)
{
    char e[128];
    int rc;
    /* stat first: a device is never opened (opening one may act), then
     * fstat what was opened: the path may have changed in between */
    if (stat(path, st) == 0 && (rc = check_kind(st->st_mode, why, whylen)) < 0)
        return rc;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        rc = -errno;
        if (why && whylen)
            snprintf(why, whylen, "cannot open: %s", strerror_r(-rc, e, sizeof e));
        return rc;
    }
    if (fstat(fd, st) < 0) {
        rc = -errno;
        if (why && whylen)
            snprintf(why, whylen, "cannot stat: %s", strerror_r(-rc, e, sizeof e));
        close(fd);
        return rc;
    }
    if ((rc = check_kind(st->st_mode, why, whylen)) < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

static int too_big(size_t cap, char *why, size_t whylen)
{
    if (why && whylen)
        snprintf(why, whylen, "is larger than %zu bytes", cap);
    return -EFBIG;
}

/* Reads FD until EOF into *BUF (SIZE bytes allocated, grown up to CAP + 1). */
static int read_all(int fd, size_t cap, char **buf, size_t size, size_t *len, char *why, size_t whylen)
{
    char e[128];
    size_t n = 0;
    for (;;) {
        if (n == size) {
            if (size >= cap + 1)
                return too_big(cap, why, whylen);
            size_t ns = size * 2 < cap + 1 ? size * 2 : cap + 1;
            char *nb = realloc(*buf, ns + 1);
            if (!nb)
                return -ENOMEM;
            *buf = nb;
            size = ns;
        }
        ssize_t r = read(fd, *buf + n, size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int rc = -errno;
            if (why && whylen)
                snprintf(why, whylen, "cannot read: %s", strerror_r(-rc, e, sizeof e));
            return rc;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    (*buf)[n] = '\0';
    *len = n;
    return 0;
}

int ccap_file_read(const char *path, size_t cap, char **out, size_t *len, struct stat *st, char *why, size_t whylen)
{
    struct stat own;
    st = st ? st : &own;
    *out = NULL;
    *len = 0;
    int fd = ccap_file_open(path, st, why, whylen);
    if (fd < 0)
        return fd;
    if (st->st_size < 0 || (unsigned long long)st->st_size > cap) {
        close(fd);
        return too_big(cap, why, whylen);
    }
    /* st_size may be 0 for a file of /proc that has content */
    size_t size = st->st_size ? (size_t)st->st_size + 1 : 4096;
    if (size > cap + 1)
        size = cap + 1;
    char *buf = malloc(size + 1);
    int rc = buf ? read_all(fd, cap, &buf, size, len, why, whylen) : -ENOMEM;
    if (rc == -ENOMEM && why && whylen)
        snprintf(why, whylen, "out of memory");
    close(fd);
    if (rc < 0) {
        free(buf);
        *len = 0;
        return rc;
    }
    *out = buf;
    return 0;
}

/* ---- expanding @include ---- */

enum scan_state { S_CODE, S_STRING, S_COMMENT, S_LINE };

struct builder {
    struct ccap_conf_text *t;
    struct ccap_fileset *fs; /* where included files are read from (NULL: the disk) */
    size_t out_cap;          /* bytes allocated for t->text */
    size_t bytes;            /* of all files read so far */
    unsigned out_line;       /* line of t->text being written */
    struct {
        char open;
        unsigned members;
    } nest[CCAP_CONF_MAX_NEST + 1];
    size_t depth; /* nest[0] is the root group */
    char *err;
    size_t errlen;
};

static int bfail(struct builder *b, unsigned file, unsigned line, int rc, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bfail(struct builder *b, unsigned file, unsigned line, int rc, const char *fmt, ...)
{
    if (!b->err || !b->errlen)
        return rc;
    int n = line ? snprintf(b->err, b->errlen, "%s:%u: ", b->t->files[file], line)
                 : snprintf(b->err, b->errlen, "%s: ", b->t->files[file]);
    if (n >= 0 && (size_t)n < b->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err + n, b->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static int put(struct builder *b, char c)
{
    struct ccap_conf_text *t = b->t;
    if (t->len + 1 >= b->out_cap) {
        size_t nc = b->out_cap ? b->out_cap * 2 : 4096;
        char *nt = realloc(t->text, nc);
        if (!nt)
            return -ENOMEM;
        t->text = nt;
        b->out_cap = nc;
    }
    t->text[t->len++] = c;
    t->text[t->len] = '\0';
    if (c == '\n')
        b->out_line++;
    return 0;
}

/* The lines written from now on come from FILE, starting at SRC_LINE. */
static int span(struct builder *b, unsigned file, unsigned src_line)
{
    struct ccap_conf_text *t = b->t;
    struct ccap_conf_span *last = t->n_spans ? &t->spans[t->n_spans - 1] : NULL;
    if (!last || last->first != b->out_line) {
        struct ccap_conf_span *ns = realloc(t->spans, (t->n_spans + 1) * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        t->spans = ns;
        last = &ns[t->n_spans++];
    }
    *last = (struct ccap_conf_span){ .first = b->out_line, .src_line = src_line, .file = file };
    return 0;
}

static int add_file(struct builder *b, char *path)
{
    struct ccap_conf_text *t = b->t;
    char **nf = realloc(t->files, (t->n_files + 1) * sizeof *nf);
    if (!nf) {
        free(path);
        return -ENOMEM;
    }
    t->files = nf;
    t->files[t->n_files] = path;
    return (int)t->n_files++;
}

static int scan_file(struct builder *b, unsigned file, const char *text, size_t len, unsigned depth);

/* The path NAME names when FILE includes it: NAME itself when absolute,
 * else relative to FILE's directory. A heap string, or NULL. */
static char *include_path(const char *file, const char *name)
{
    const char *slash = strrchr(file, '/');
    size_t dl = name[0] == '/' || !slash ? 0 : (size_t)(slash - file) + 1;
    char *p = malloc(dl + strlen(name) + 1);
    if (p) {
        memcpy(p, file, dl);
        strcpy(p + dl, name);
    }
    return p;
}

/* Reads the file NAME that FILE includes at LINE and expands it. */
static int include_file(struct builder *b, unsigned file, unsigned line, const char *name, unsigned depth)
{
    char why[160];
    if (depth > CCAP_CONF_MAX_DEPTH)
        return bfail(b, file, line, -ELOOP,
                     "@include \"%s\": includes nested deeper than %d (does a file "
                     "include itself?)",
                     name, CCAP_CONF_MAX_DEPTH);
    if (b->t->n_files >= CCAP_CONF_MAX_FILES)
        return bfail(b, file, line, -EINVAL, "@include \"%s\": more than %d files in one configuration", name,
                     CCAP_CONF_MAX_FILES);
    if (!*name)
        return bfail(b, file, line, -EINVAL, "@include \"\": the file name is empty");
    char *path = include_path(b->t->files[file], name), *buf = NULL;
    size_t len = 0;
    if (!path)
        return -ENOMEM;
    int rc =
        ccap_fileset_read(b->fs, path, CCAP_CONF_MAX_BYTES - b->bytes, false, &buf, &len, NULL, why, sizeof why);
    if (rc == -EFBIG)
        rc = bfail(b, file, line, rc,
                   "@include \"%s\": %s: the configuration with its includes is larger "
                   "than %d bytes",
                   name, path, CCAP_CONF_MAX_BYTES);
    else if (rc < 0)
        rc = bfail(b, file, line, rc, "@include \"%s\": %s: %s", name, path, why);
    if (rc < 0) {
        free(path);
        return rc;
    }
    b->bytes += len;
    int idx = add_file(b, path);
    rc = idx < 0 ? idx : scan_file(b, (unsigned)idx, buf, len, depth);
    free(buf);
    return rc;
}

/* The quoted name of an @include at P[*I] into a heap string *NAME. */
static int include_name(struct builder *b, unsigned file, unsigned line, const char *p, size_t n, size_t *i,
                        char **name)
{
    size_t start = *i, k = 0;
    char *s = malloc(n - start + 1);
    if (!s)
        return -ENOMEM;
    for (; *i < n && p[*i] != '"'; (*i)++) {
        char c = p[*i];
        if (c == '\\' && *i + 1 < n && (p[*i + 1] == '\\' || p[*i + 1] == '"'))
            c = p[++*i];
        if (c == '\n' || c == '\0')
            break;
        s[k++] = c;
    }
    if (*i >= n || p[*i] != '"') {
        free(s);
        return bfail(b, file, line, -EINVAL, "@include: the file name must be in double quotes on one line");
    }
    (*i)++;
    s[k] = '\0';
    *name = s;
    return 0;
}

/* If the line at P (N bytes to the end of the file) is an @include, sets
 * *SKIP to its length with the newline and expands the file it names;
 * otherwise *SKIP = 0. */
static int include_at(struct builder *b, unsigned file, unsigned line, const char *p, size_t n, unsigned depth,
                      size_t *skip)
{
    size_t i = 0;
    *skip = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (n - i < 8 || memcmp(p + i, "@include", 8))
        return 0;
    i += 8;
    size_t ws = i;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (i == ws || i >= n || p[i] != '"')
        return bfail(b, file, line, -EINVAL, "@include: the file name must be in double quotes on one line");
    i++;
    char *name = NULL;
    int rc = include_name(b, file, line, p, n, &i, &name);
    if (rc < 0)
        return rc;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
        i++;
    if (i < n && p[i] != '\n' && p[i] != '#' && !(p[i] == '/' && i + 1 < n && p[i + 1] == '/'))
        rc =
            bfail(b, file, line, -EINVAL, "@include \"%s\": only a # or // comment may follow it on its line", name);
    else
        rc = include_file(b, file, line, name, depth + 1);
    free(name);
    while (i < n && p[i] != '\n')
        i++;
    *skip = i < n ? i + 1 : n;
    return rc;
}

/* Tracks nesting and counts the settings of each group, at C in code. */
static int count(struct builder *b, unsigned file, unsigned line, char c)
{
    if (c == '{' || c == '(' || c == '[') {
        if (b->depth >= CCAP_CONF_MAX_NEST)
            return bfail(b, file, line, -EINVAL, "groups and lists nested deeper than %d", CCAP_CONF_MAX_NEST);
        b->depth++;
        b->nest[b->depth].open = c;
        b->nest[b->depth].members = 0;
    } else if (c == '}' || c == ')' || c == ']') {
        if (b->depth > 0) /* a stray one is libconfig's syntax error */
            b->depth--;
    } else if ((c == '=' || c == ':') && b->nest[b->depth].open == '{') {
        if (++b->nest[b->depth].members > CCAP_CONF_MAX_GROUP)
            return bfail(b, file, line, -EINVAL, "more than %d settings in one group", CCAP_CONF_MAX_GROUP);
    }
    return 0;
}

/* The state after character C (NEXT follows it, or '\0') in state ST;
 * *TWO is set when C and NEXT form one token ("/ *", "* /", an escape). */
static enum scan_state step(enum scan_state st, char c, char next, bool *two)
{
    *two = false;
    switch (st) {
    case S_CODE:
        if (c == '"')
            return S_STRING;
        if (c == '#')
            return S_LINE;
        if (c == '/' && (next == '/' || next == '*'))
            return *two = true, next == '/' ? S_LINE : S_COMMENT;
        return S_CODE;
    case S_STRING:
        if (c == '\\' && next)
            return *two = true, S_STRING;
        return c == '"' ? S_CODE : S_STRING;
    case S_COMMENT:
        if (c == '*' && next == '/')
            return *two = true, S_CODE;
        return S_COMMENT;
    case S_LINE:
    default: return c == '\n' ? S_CODE : S_LINE;
    }
}

static int scan_file(struct builder *b, unsigned file, const char *text, size_t len, unsigned depth)
{
    enum scan_state st = S_CODE;
    unsigned line = 1, st_line = 0;
    bool bol = true;
    int rc = span(b, file, 1);
    for (size_t i = 0; rc == 0 && i < len;) {
        size_t skip = 0;
        if (bol && st == S_CODE && (rc = include_at(b, file, line, text + i, len - i, depth, &skip)) == 0 && skip) {
            i += skip;
            rc = span(b, file, ++line);
            continue;
        }
        if (rc < 0)
            break;
        if (st == S_LINE && text[i] != '\n') {
            /* the rest of a # or // comment is not copied: libconfig would
             * only scan it again (a commented reference file is mostly that) */
            const char *nl = memchr(text + i, '\n', len - i);
            size_t end = nl ? (size_t)(nl - text) : len;
            if (memchr(text + i, '\0', end - i))
                return bfail(b, file, line, -EINVAL, "contains a NUL byte");
            i = end;
            continue;
        }
        if (text[i] == '\0')
            return bfail(b, file, line, -EINVAL, "contains a NUL byte");
        bool two;
        enum scan_state next = step(st, text[i], i + 1 < len ? text[i + 1] : '\0', &two);
        if (st == S_CODE && next == S_CODE)
            rc = count(b, file, line, text[i]);
        if (st != next && next != S_CODE)
            st_line = line;
        st = next;
        for (size_t k = 0; rc == 0 && k < (two ? 2u : 1u); k++, i++) {
            line += text[i] == '\n';
            bol = text[i] == '\n';
            rc = put(b, text[i]);
        }
    }
    if (rc < 0)
        return rc;
    if (st == S_STRING || st == S_COMMENT)
        return bfail(b, file, st_line, -EINVAL, "%s is never closed", st == S_STRING ? "a string" : "a /* comment");
    if (len && text[len - 1] != '\n')
        rc = put(b, '\n');
    return rc;
}

int ccap_conf_text_build(const char *path, const char *text, size_t len, struct ccap_fileset *fs,
                         struct ccap_conf_text *out, char *err, size_t errlen)
{
    struct builder b = { .t = out, .fs = fs, .out_line = 1, .err = err, .errlen = errlen, .bytes = len };
    char *top = strdup(path);
    memset(out, 0, sizeof *out);
    if (err && errlen)
        err[0] = '\0';
    b.nest[0].open = '{';
    int rc = top ? add_file(&b, top) : -ENOMEM;
    if (rc >= 0 && len > CCAP_CONF_MAX_BYTES)
        rc = bfail(&b, 0, 0, -EFBIG, "is larger than %d bytes", CCAP_CONF_MAX_BYTES);
    if (rc >= 0)
        rc = scan_file(&b, 0, text, len, 0);
    if (rc >= 0 && !out->text && !(out->text = calloc(1, 1)))
        rc = -ENOMEM;
    if (rc == -ENOMEM && err && errlen)
        snprintf(err, errlen, "%s: out of memory", path);
    if (rc < 0) {
        ccap_conf_text_free(out);
        return rc;
    }
    return 0;
}

const char *ccap_conf_text_where(const struct ccap_conf_text *t, unsigned line, unsigned *src_line)
{
    size_t lo = 0, hi = t->n_spans;
    *src_line = 0;
    if (!t->n_spans || !line)
        return t->n_files ? t->files[0] : "";
    while (hi - lo > 1) { /* the last span with first <= line */
        size_t mid = lo + (hi - lo) / 2;
        if (t->spans[mid].first <= line)
            lo = mid;
        else
            hi = mid;
    }
    const struct ccap_conf_span *s = &t->spans[lo];
    *src_line = line >= s->first ? s->src_line + (line - s->first) : line;
    return t->files[s->file];
}

void ccap_conf_text_free(struct ccap_conf_text *t)
{
    for (size_t i = 0; i < t->n_files; i++)
        free(t->files[i]);
    free(t->files);
    free(t->text);
    free(t->spans);
    memset(t, 0, sizeof *t);
}
