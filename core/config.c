/* config.c -- loads and validates the conncap configuration (libconfig) and matches destinations. */
#include "config.h"

#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conftext.h"
#include "env.h"
#include "fileset.h"
#include "lcalloc.h"
#include "log.h"

/* What a loader needs to hand out messages and look semaphores up. */
struct ctx {
    const char *path;
    struct ccap_fileset *fs;           /* where files are read from (NULL: the disk) */
    int flags;                         /* CCAP_LOAD_*, CCAP_CONF_* */
    const struct ccap_conf_text *text; /* maps libconfig's lines back to files */
    const config_setting_t *sems;      /* the semaphores list, or NULL */
    size_t *sem_order;                 /* indices of cfg->sems sorted by name, or NULL */
    char **note;                       /* where a password_file warning goes, or NULL */
    char **secret_note;                /* where "the password is not checked" goes, or NULL */
    size_t n_pats;                     /* match patterns so far, in all rules */
    char *err;
    size_t errlen;
};

static const char *const top_keys[] = { "redis",
                                        "semaphores",
                                        "rules",
                                        "on_timeout",
                                        "on_redis_down",
                                        "nonblocking",
                                        "nonblocking_errno",
                                        "log_level",
                                        "log",
                                        "audit",
                                        "audit_maxlen",
                                        NULL };
static const char *const redis_keys[] = { "host",
                                          "port",
                                          "socket",
                                          "db",
                                          "connect_timeout_ms",
                                          "command_timeout_ms",
                                          "key_prefix",
                                          "username",
                                          "password_file",
                                          "password_env",
                                          "sentinels",
                                          "master",
                                          "cluster",
                                          "url",
                                          "tls",
                                          NULL };
static const char *const tls_keys[] = { "ca_file",     "ca_dir", "cert_file", "key_file",
                                        "server_name", "verify", "sentinels", NULL };
static const char *const sem_keys[] = { "name",  "limit",       "lease_ms",         "wait_timeout_ms", "rate",
                                        "burst", "local_limit", "restart_grace_ms", "max_waiters",     NULL };
static const char *const rule_keys[] = { "semaphore", "match", "resolve", "resolve_interval_s", NULL };

#define KEY_PREFIX_MAX 64
#define PASSWORD_MAX 1024
/* Text buffers for messages: a setting's path ("rules[N].match[M]"), the
 * reason a parser gives, a URL as shown (password masked), a whole note. */
#define CONF_PRE_LEN 32 /* a list element's path: "rules[N]" */
#define CONF_PATH_LEN 160
#define CONF_WHY_LEN 160
#define CONF_SHOWN_LEN 300
#define CONF_MSG_LEN 512

/* ---- messages ---- */

/* The file and line (0 when unknown) that setting S came from. */
static const char *where(const struct ctx *c, const config_setting_t *s, unsigned *line)
{
    *line = 0;
    if (!s || !c->text)
        return c->path;
    return ccap_conf_text_where(c->text, config_setting_source_line(s), line);
}

static int vfail(struct ctx *c, const config_setting_t *s, const char *setting, const char *fmt, va_list ap)
{
    if (!c->err || !c->errlen)
        return -EINVAL;
    unsigned line = 0;
    const char *file = where(c, s, &line);
    int n = line ? snprintf(c->err, c->errlen, "%s:%u: ", file, line) : snprintf(c->err, c->errlen, "%s: ", file);
    if (n >= 0 && (size_t)n < c->errlen && setting && *setting) {
        int m = snprintf(c->err + n, c->errlen - (size_t)n, "%s: ", setting);
        n = m < 0 ? n : n + m;
    }
    if (n >= 0 && (size_t)n < c->errlen)
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    return -EINVAL;
}

/* Writes "FILE:LINE: SETTING: message" (LINE of S) and returns -EINVAL. */
static int fail(struct ctx *c, const config_setting_t *s, const char *setting, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct ctx *c, const config_setting_t *s, const char *setting, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, s, setting, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static const char *type_name(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    default: return "nothing";
    }
}

/* "PREFIX.NAME" (or NAME at top level) into OUT. */
static const char *join(char *out, size_t outlen, const char *prefix, const char *name)
{
    if (prefix && *prefix)
        snprintf(out, outlen, "%s.%s", prefix, name);
    else
        snprintf(out, outlen, "%s", name);
    return out;
}

/* ---- "did you mean" ---- */

/* Case-insensitive edit distance counting a swap of two neighbours as one
 * edit (optimal string alignment: "prot" is 1 from "port"). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            char ai = a[i - 1] | 0x20, bj = b[j - 1] | 0x20;
            size_t best = d[i - 1][j - 1] + (ai != bj);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ai == (b[j - 2] | 0x20) && (a[i - 2] | 0x20) == bj && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* The candidate closest to WORD when it is close enough to be a typo, or NULL.
 * CANDS is read through GET(i) until it returns NULL. */
static const char *closest(const char *word, const char *(*get)(const void *, size_t), const void *arg)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1, wl = strlen(word);
    for (size_t i = 0;; i++) {
        const char *cand = get(arg, i);
        if (!cand)
            break;
        size_t cl = strlen(cand), d = edit_distance(word, cand);
        size_t ok = cl / 3 > 1 ? cl / 3 : 1;
        /* "lease" for "lease_ms", "matches" for "match": one a prefix of the
         * other (3+ characters) also counts */
        size_t shorter = wl < cl ? wl : cl;
        if (d > ok && !(shorter >= 3 && !strncasecmp(word, cand, shorter)))
            continue;
        if (d < best_d)
            best = cand, best_d = d;
    }
    return best;
}

static const char *get_strv(const void *arg, size_t i)
{
    return ((const char *const *)arg)[i];
}

static const char *get_errname(const void *arg, size_t i)
{
    (void)arg;
    return ccap_errno_name_at(i);
}

static const char *get_semname(const void *arg, size_t i)
{
    const struct ccap_config *cfg = arg;
    return i < cfg->n_sems ? cfg->sems[i].name : NULL;
}

/* Fails for the first child of GROUP whose name is not in KNOWN. */
static int check_known(struct ctx *c, const config_setting_t *group, const char *prefix, const char *const *known)
{
    char path[CONF_PATH_LEN];
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(s);
        size_t k = 0;
        while (known[k] && strcmp(known[k], name))
            k++;
        if (known[k])
            continue;
        const char *hint = closest(name, get_strv, known);
        join(path, sizeof path, prefix, name);
        if (hint)
            return fail(c, s, path, "unknown setting; did you mean \"%s\"?", hint);
        return fail(c, s, path, "unknown setting");
    }
    return 0;
}

/* ---- typed getters: a missing setting leaves *OUT (the default) alone ---- */

/* Integer NAME of GROUP within [LO, HI]; DESC says so in words. */
static int get_int(struct ctx *c, const config_setting_t *group, const char *prefix, const char *name, long long lo,
                   long long hi, const char *desc, int *out)
{
    const config_setting_t *s = config_setting_get_member(group, name);
    char path[CONF_PATH_LEN];
    if (!s)
        return 0;
    join(path, sizeof path, prefix, name);
    long long v;
    if (config_setting_type(s) == CONFIG_TYPE_INT)
        v = config_setting_get_int(s);
    else if (config_setting_type(s) == CONFIG_TYPE_INT64)
        v = config_setting_get_int64(s);
    else
        return fail(c, s, path, "must be %s, not %s", desc, type_name(s));
    if (v < lo || v > hi)
        return fail(c, s, path, "must be %s, not %lld", desc, v);
    *out = (int)v;
    return 0;
}

static int get_bool(struct ctx *c, const config_setting_t *group, const char *prefix, const char *name, bool *out)
{
    const config_setting_t *s = config_setting_get_member(group, name);
    char path[CONF_PATH_LEN];
    if (!s)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL)
        return fail(c, s, join(path, sizeof path, prefix, name), "must be true or false, not %s", type_name(s));
    *out = config_setting_get_bool(s) != 0;
    return 0;
}

/* String NAME of GROUP into *OUT (a pointer into the libconfig tree). */
static int get_str(struct ctx *c, const config_setting_t *group, const char *prefix, const char *name, bool nonempty,
                   const char **out, const config_setting_t **where)
{
    const config_setting_t *s = config_setting_get_member(group, name);
    char path[CONF_PATH_LEN];
    if (where)
        *where = s;
    if (!s)
        return 0;
    join(path, sizeof path, prefix, name);
    if (config_setting_type(s) != CONFIG_TYPE_STRING)
        return fail(c, s, path, "must be a string, not %s", type_name(s));
    const char *v = config_setting_get_string(s);
    if (nonempty && !*v)
        return fail(c, s, path, "must not be empty");
    *out = v;
    return 0;
}

/* Like get_str, but replaces the heap string *OUT with a copy. */
static int get_strdup(struct ctx *c, const config_setting_t *group, const char *prefix, const char *name,
                      bool nonempty, char **out)
{
    const char *v = NULL;
    int rc = get_str(c, group, prefix, name, nonempty, &v, NULL);
    if (rc < 0 || !v)
        return rc;
    char *copy = strdup(v);
    if (!copy)
        return -ENOMEM;
    free(*out);
    *out = copy;
    return 0;
}

/* String NAME of GROUP, one of CHOICES (NULL-terminated); its index in *OUT. */
static int get_choice(struct ctx *c, const config_setting_t *group, const char *name, const char *const *choices,
                      const char *words, int *out)
{
    const char *v = NULL;
    const config_setting_t *s;
    int rc = get_str(c, group, "", name, false, &v, &s);
    if (rc < 0 || !v)
        return rc;
    for (int i = 0; choices[i]; i++)
        if (!strcmp(v, choices[i])) {
            *out = i;
            return 0;
        }
    return fail(c, s, name, "must be %s, not \"%s\"", words, v);
}

/* A list or array of strings at NAME of GROUP; NULL in *OUT when absent. */
static int get_str_list(struct ctx *c, const config_setting_t *group, const char *prefix, const char *name,
                        const char *example, const config_setting_t **out)
{
    const config_setting_t *s = config_setting_get_member(group, name);
    char path[CONF_PATH_LEN], ep[CONF_PATH_LEN + 16];
    *out = NULL;
    if (!s)
        return 0;
    join(path, sizeof path, prefix, name);
    if (config_setting_type(s) != CONFIG_TYPE_LIST && config_setting_type(s) != CONFIG_TYPE_ARRAY)
        return fail(c, s, path, "must be a list of strings, as in %s, not %s", example, type_name(s));
    if (config_setting_length(s) == 0)
        return fail(c, s, path, "must not be empty (a list of strings, as in %s)", example);
    for (int i = 0; i < config_setting_length(s); i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            snprintf(ep, sizeof ep, "%s[%d]", path, i);
            return fail(c, config_setting_source_line(e) ? e : s, ep, "must be a string, not %s", type_name(e));
        }
    }
    *out = s;
    return 0;
}

/* ---- redis ---- */

/* Checks "host:port" / "[v6]:port". */
static bool valid_hostport(const char *v)
{
    const char *colon;
    if (v[0] == '[') {
        const char *rb = strchr(v, ']');
        if (!rb || rb == v + 1 || rb[1] != ':')
            return false;
        colon = rb + 1;
    } else {
        colon = strrchr(v, ':');
        if (!colon || colon == v || memchr(v, ':', (size_t)(colon - v)))
            return false;
    }
    const char *p = colon + 1;
    long port = 0;
    if (!*p || strlen(p) > 5)
        return false;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        port = port * 10 + (*p - '0');
    }
    return port >= 1 && port <= CCAP_PORT_MAX;
}

static int get_hostports(struct ctx *c, const config_setting_t *r, const char *name, char ***out, size_t *n_out,
                         const config_setting_t **where)
{
    const config_setting_t *s;
    char path[CONF_PATH_LEN];
    int rc = get_str_list(c, r, "redis", name, "( \"10.0.0.1:26379\", \"[::1]:26379\" )", &s);
    *where = s;
    if (rc < 0 || !s)
        return rc;
    size_t n = (size_t)config_setting_length(s);
    *out = calloc(n, sizeof **out);
    if (!*out)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        const char *v = config_setting_get_string(e);
        if (!valid_hostport(v)) {
            snprintf(path, sizeof path, "redis.%s[%zu]", name, i);
            return fail(c, config_setting_source_line(e) ? e : s, path,
                        "\"%s\" is not \"host:port\" (port 1-65535; IPv6 as \"[addr]:port\")", v);
        }
        if (!((*out)[i] = strdup(v)))
            return -ENOMEM;
        (*n_out)++;
    }
    return 0;
}

/* A warning when group or others may read the password file (mode ST). */
static int note_mode(struct ctx *c, const config_setting_t *s, const char *file, const struct stat *st)
{
    char msg[CONF_MSG_LEN];
    if (!(st->st_mode & (S_IRGRP | S_IROTH)) || !c->note)
        return 0;
    struct ctx w = *c;
    w.err = msg;
    w.errlen = sizeof msg;
    fail(&w, s, "redis.password_file", "%s is readable by %s (mode %04o): chmod 600 it", file,
         (st->st_mode & S_IRGRP) && (st->st_mode & S_IROTH) ? "group and others"
         : st->st_mode & S_IRGRP                            ? "its group"
                                                            : "others",
         (unsigned)(st->st_mode & 07777));
    free(*c->note);
    return (*c->note = strdup(msg)) ? 0 : -ENOMEM;
}

/* Under CCAP_CONF_SECRETS_UNCHECKED, a secret that is not there to read
 * (a password_env not set, a password_file missing): "FILE:LINE: SETTING:
 * ...: not checked" into c->secret_note instead of an error. Returns 0 or
 * -ENOMEM. */
static int unchecked(struct ctx *c, const config_setting_t *s, const char *setting, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int unchecked(struct ctx *c, const config_setting_t *s, const char *setting, const char *fmt, ...)
{
    char msg[CONF_MSG_LEN], what[CONF_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!c->secret_note)
        return 0;
    struct ctx w = *c;
    w.err = msg;
    w.errlen = sizeof msg;
    fail(&w, s, setting, "%s: the password is not checked (the rest of the file is)", what);
    free(*c->secret_note);
    return (*c->secret_note = strdup(msg)) ? 0 : -ENOMEM;
}

/* WHY of ccap_fileset_read without its "cannot open: " or "cannot read: ". */
static const char *reason(const char *why)
{
    return !strncmp(why, "cannot open: ", 13) || !strncmp(why, "cannot read: ", 13) ? why + 13 : why;
}

/* Reads the first line of FILE (newline stripped) into *OUT: a regular
 * file only, never blocking (from c->fs when it has it); warns (c->note)
 * when others may read it. */
static int read_password_file(struct ctx *c, const config_setting_t *s, const char *file, char **out)
{
    char *buf = NULL, why[CONF_WHY_LEN];
    size_t n = 0;
    struct stat st;
    int rc = ccap_fileset_read(c->fs, file, PASSWORD_MAX + 1, true, &buf, &n, &st, why, sizeof why);
    if ((rc == -ENOENT || rc == -EACCES) && (c->flags & CCAP_CONF_SECRETS_UNCHECKED))
        return unchecked(c, s, "redis.password_file", "cannot read %s (%s)", file, reason(why));
    if (rc < 0)
        return rc == -ENOMEM ? rc : fail(c, s, "redis.password_file", "cannot read %s: %s", file, reason(why));
    if (note_mode(c, s, file, &st) < 0) {
        explicit_bzero(buf, n);
        free(buf);
        return -ENOMEM;
    }
    size_t got = n;
    buf[strnlen(buf, n)] = '\0'; /* cut at the first NUL */
    char *nl = strchr(buf, '\n');
    if (nl)
        nl[1] = '\0';
    n = strlen(buf);
    bool whole = n > 0 && buf[n - 1] == '\n';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    rc = 0;
    if (!whole && n > PASSWORD_MAX)
        rc = fail(c, s, "redis.password_file", "first line of %s is longer than %d bytes", file, PASSWORD_MAX);
    else if (n == 0)
        rc = fail(c, s, "redis.password_file", "first line of %s is empty", file);
    else if (!(*out = strdup(buf)))
        rc = -ENOMEM;
    explicit_bzero(buf, got);
    free(buf);
    return rc;
}

/* An absolute path setting NAME of redis.tls (or NULL) into *OUT. */
static int get_tls_path(struct ctx *c, const config_setting_t *t, const char *name, char **out)
{
    const config_setting_t *s = config_setting_get_member(t, name);
    char path[CONF_PATH_LEN];
    int rc = get_strdup(c, t, "redis.tls", name, true, out);
    if (rc == 0 && *out && (*out)[0] != '/')
        return fail(c, s, join(path, sizeof path, "redis.tls", name), "must be an absolute path, not \"%s\"", *out);
    return rc;
}

/* redis.tls = { ca_file; ca_dir; cert_file; key_file; server_name; verify; sentinels; } */
static int load_tls(struct ctx *c, const config_setting_t *t, struct ccap_tls_conf *out)
{
    int rc;
    if (config_setting_type(t) != CONFIG_TYPE_GROUP)
        return fail(c, t, "redis.tls", "must be a group, as in { ca_file = \"/etc/ssl/redis-ca.pem\"; }, not %s",
                    type_name(t));
    if ((rc = check_known(c, t, "redis.tls", tls_keys)) < 0 ||
        (rc = get_tls_path(c, t, "ca_file", &out->ca_file)) < 0 ||
        (rc = get_tls_path(c, t, "ca_dir", &out->ca_dir)) < 0 ||
        (rc = get_tls_path(c, t, "cert_file", &out->cert_file)) < 0 ||
        (rc = get_tls_path(c, t, "key_file", &out->key_file)) < 0 ||
        (rc = get_strdup(c, t, "redis.tls", "server_name", true, &out->server_name)) < 0 ||
        (rc = get_bool(c, t, "redis.tls", "verify", &out->verify)) < 0 ||
        (rc = get_bool(c, t, "redis.tls", "sentinels", &out->sentinels)) < 0)
        return rc;
    out->enabled = true;
    return 0;
}

/* Moves the connection settings of U (a parsed URL) into OUT. */
static void take_url(struct ccap_redis_conf *out, struct ccap_redis_conf *u)
{
    free(out->host);
    free(out->socket);
    out->host = u->host;
    out->port = u->port;
    out->socket = u->socket;
    out->db = u->db;
    out->tls.enabled = u->tls.enabled;
    if (!out->host && !out->socket)
        out->host = strdup("127.0.0.1");
    if (u->password) { /* a URL without credentials keeps the password_file/_env ones */
        free(out->username);
        if (out->password) {
            explicit_bzero(out->password, strlen(out->password));
            free(out->password);
        }
        out->username = u->username;
        out->password = u->password;
        u->username = u->password = NULL;
    }
    u->host = u->socket = NULL;
}

static void free_url(struct ccap_redis_conf *u)
{
    if (u->password)
        explicit_bzero(u->password, strlen(u->password));
    free(u->host);
    free(u->socket);
    free(u->username);
    free(u->password);
}

/* redis.url: parsed into RC_OUT; it excludes the settings it replaces. */
static int load_url(struct ctx *c, const config_setting_t *r, struct ccap_redis_conf *rc_out)
{
    static const char *const excl[] = { "host", "port", "socket", "db", "sentinels", "cluster", "master", NULL };
    const config_setting_t *s;
    const char *url = NULL;
    char why[CONF_WHY_LEN], shown[CONF_SHOWN_LEN];
    struct ccap_redis_conf u;
    int rc = get_str(c, r, "redis", "url", true, &url, &s);
    if (rc < 0 || !url)
        return rc;
    for (int i = 0; excl[i]; i++)
        if (config_setting_get_member(r, excl[i]))
            return fail(c, config_setting_get_member(r, excl[i]), "redis.url",
                        "cannot be combined with redis.%s (the URL names the server)", excl[i]);
    if ((rc = ccap_redis_url_parse(url, &u, why, sizeof why)) < 0) {
        free_url(&u);
        ccap_redis_url_redact(url, shown, sizeof shown);
        return rc == -ENOMEM ? rc : fail(c, s, "redis.url", "\"%s\": %s", shown, why);
    }
    if (u.password &&
        (config_setting_get_member(r, "password_file") || config_setting_get_member(r, "password_env"))) {
        free_url(&u);
        return fail(c, s, "redis.url", "has a password, and so cannot be combined with redis.password_%s",
                    config_setting_get_member(r, "password_file") ? "file" : "env");
    }
    if (u.username && config_setting_get_member(r, "username")) {
        free_url(&u);
        return fail(c, s, "redis.url", "has a user name, and so cannot be combined with redis.username");
    }
    take_url(rc_out, &u);
    free_url(&u);
    return rc_out->host || rc_out->socket ? 0 : -ENOMEM; /* the default host could not be copied */
}

/* What TLS cannot go with: a Unix socket, or redis:// with a redis.tls group. */
static int check_tls(struct ctx *c, const config_setting_t *r, const struct ccap_redis_conf *rc_out, bool plain_url)
{
    const config_setting_t *t = config_setting_get_member(r, "tls");
    if ((t || rc_out->tls.enabled) && rc_out->socket)
        return fail(c, t ? t : r, "redis.tls", "does not apply to a Unix socket (Redis serves TLS on TCP only)");
    if (t && plain_url)
        return fail(c, t, "redis.tls", "the URL says redis:// (plain TCP): use rediss:// with TLS");
    if (rc_out->tls.key_file && !rc_out->tls.cert_file)
        return fail(c, config_setting_get_member(t, "key_file"), "redis.tls.key_file", "needs redis.tls.cert_file");
    if (rc_out->tls.cert_file && !rc_out->tls.key_file)
        return fail(c, config_setting_get_member(t, "cert_file"), "redis.tls.cert_file", "needs redis.tls.key_file");
    return 0;
}

/* redis.url, then redis.tls, then what they cannot go with. */
static int load_url_tls(struct ctx *c, const config_setting_t *r, struct ccap_redis_conf *rc_out)
{
    const config_setting_t *s_tls = config_setting_get_member(r, "tls");
    int rc = load_url(c, r, rc_out);
    if (rc < 0)
        return rc;
    bool plain_url = config_setting_get_member(r, "url") && !rc_out->tls.enabled;
    if (s_tls && (rc = load_tls(c, s_tls, &rc_out->tls)) < 0)
        return rc;
    return check_tls(c, r, rc_out, plain_url);
}

/* redis.socket and redis.key_prefix, and the ways of reaching Redis that
 * exclude one another (socket, sentinels, cluster; master goes with
 * sentinels only). S_SENT and S_CLUS: the settings, or NULL. */
static int check_redis_where(struct ctx *c, const config_setting_t *r, const struct ccap_redis_conf *rc_out,
                             const config_setting_t *s_sent, const config_setting_t *s_clus)
{
    const config_setting_t *s_master = config_setting_get_member(r, "master");
    const config_setting_t *s_sock = config_setting_get_member(r, "socket");

    if (rc_out->socket && rc_out->socket[0] != '/')
        return fail(c, s_sock, "redis.socket", "must be an absolute path, not \"%s\"", rc_out->socket);
    if (strlen(rc_out->key_prefix) > KEY_PREFIX_MAX)
        return fail(c, config_setting_get_member(r, "key_prefix"), "redis.key_prefix",
                    "must be at most %d characters", KEY_PREFIX_MAX);
    if (s_sent && s_clus)
        return fail(c, s_clus, "redis.cluster", "cannot be combined with redis.sentinels");
    if (s_sock && (s_sent || s_clus))
        return fail(c, s_sock, "redis.socket", "cannot be combined with redis.%s", s_sent ? "sentinels" : "cluster");
    if (s_sent && !rc_out->master)
        return fail(c, s_sent, "redis.master", "is required with redis.sentinels");
    if (rc_out->master && !s_sent)
        return fail(c, s_master, "redis.master", "has no effect without redis.sentinels");
    return 0;
}

/* The password from redis.password_file (PW_FILE, setting S_FILE) or
 * redis.password_env (PW_ENV, setting S_ENV), either NULL, into
 * RC_OUT->password (malloc'ed); redis.username needs one of them. */
static int load_password(struct ctx *c, const config_setting_t *r, struct ccap_redis_conf *rc_out,
                         const char *pw_file, const config_setting_t *s_file, const char *pw_env,
                         const config_setting_t *s_env)
{
    int rc;

    if (pw_file && pw_env)
        return fail(c, s_env, "redis.password_env", "cannot be combined with redis.password_file");
    if (pw_file) {
        if (pw_file[0] != '/')
            return fail(c, s_file, "redis.password_file", "must be an absolute path, not \"%s\"", pw_file);
        if (c->flags & CCAP_LOAD_NO_SECRETS)
            return 0; /* not read: the user it needs is then not checked either */
        if ((rc = read_password_file(c, s_file, pw_file, &rc_out->password)) < 0)
            return rc;
    }
    if (pw_env) {
        const char *v = ccap_env_get(pw_env);
        if ((!v || !*v) && (c->flags & CCAP_CONF_SECRETS_UNCHECKED))
            return unchecked(c, s_env, "redis.password_env", "environment variable %s is %s", pw_env,
                             v ? "empty" : "not set");
        if (!v)
            return fail(c, s_env, "redis.password_env", "environment variable %s is not set%s", pw_env,
                        getauxval(AT_SECURE) ? " (or ignored: this program runs setuid/setgid)" : "");
        if (!*v)
            return fail(c, s_env, "redis.password_env", "environment variable %s is empty", pw_env);
        if (!(rc_out->password = strdup(v)))
            return -ENOMEM;
    }
    if (rc_out->username && !rc_out->password)
        return fail(c, config_setting_get_member(r, "username"), "redis.username",
                    "needs redis.password_file or redis.password_env");
    return 0;
}

/* The redis group R into RC_OUT (already holding the defaults). Returns 0,
 * or -errno with the error on C. */
static int load_redis(struct ctx *c, const config_setting_t *r, struct ccap_redis_conf *rc_out)
{
    int rc;
    const char *pw_file = NULL, *pw_env = NULL;
    const config_setting_t *s_file, *s_env, *s_sent, *s_clus;

    if (config_setting_type(r) != CONFIG_TYPE_GROUP)
        return fail(c, r, "redis", "must be a group, as in { host = \"127.0.0.1\"; }, not %s", type_name(r));
    if ((rc = check_known(c, r, "redis", redis_keys)) < 0)
        return rc;
    if ((rc = get_strdup(c, r, "redis", "host", true, &rc_out->host)) < 0 ||
        (rc = get_int(c, r, "redis", "port", 1, CCAP_PORT_MAX, "an integer 1-65535", &rc_out->port)) < 0 ||
        (rc = get_strdup(c, r, "redis", "socket", true, &rc_out->socket)) < 0 ||
        (rc = get_int(c, r, "redis", "db", 0, INT_MAX, "an integer >= 0", &rc_out->db)) < 0 ||
        (rc = get_int(c, r, "redis", "connect_timeout_ms", 1, INT_MAX, "an integer >= 1",
                      &rc_out->connect_timeout_ms)) < 0 ||
        (rc = get_int(c, r, "redis", "command_timeout_ms", 1, INT_MAX, "an integer >= 1",
                      &rc_out->command_timeout_ms)) < 0 ||
        (rc = get_strdup(c, r, "redis", "key_prefix", false, &rc_out->key_prefix)) < 0 ||
        (rc = get_strdup(c, r, "redis", "username", true, &rc_out->username)) < 0 ||
        (rc = get_str(c, r, "redis", "password_file", true, &pw_file, &s_file)) < 0 ||
        (rc = get_str(c, r, "redis", "password_env", true, &pw_env, &s_env)) < 0 ||
        (rc = get_hostports(c, r, "sentinels", &rc_out->sentinels, &rc_out->n_sentinels, &s_sent)) < 0 ||
        (rc = get_strdup(c, r, "redis", "master", true, &rc_out->master)) < 0 ||
        (rc = get_hostports(c, r, "cluster", &rc_out->cluster, &rc_out->n_cluster, &s_clus)) < 0 ||
        (rc = load_url_tls(c, r, rc_out)) < 0)
        return rc;
    if ((rc = check_redis_where(c, r, rc_out, s_sent, s_clus)) < 0)
        return rc;
    return load_password(c, r, rc_out, pw_file, s_file, pw_env, s_env);
}

/* ---- semaphores ---- */

static bool valid_sem_name(const char *v)
{
    size_t n = strlen(v);
    if (n < 1 || n > 64)
        return false;
    for (; *v; v++)
        if (!((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') || (*v >= '0' && *v <= '9') || *v == '.' ||
              *v == '_' || *v == '-'))
            return false;
    return true;
}

/* Reads semaphores[IDX]'s name from G into SC, refusing a bad or duplicate
 * name (PRE: "semaphores[IDX]", FILE: G's file). Returns 0 or -errno. */
static int load_sem_name(struct ctx *c, const config_setting_t *g, size_t idx, const char *pre, const char *file,
                         struct ccap_config *cfg)
{
    struct ccap_sem_conf *sc = &cfg->sems[idx];
    const config_setting_t *s_name;
    const char *name = NULL;
    char path[64];
    unsigned line;
    int rc;

    if ((rc = get_str(c, g, pre, "name", false, &name, &s_name)) < 0)
        return rc;
    if (!name)
        return fail(c, g, join(path, sizeof path, pre, "name"), "is required");
    if (!valid_sem_name(name))
        return fail(c, s_name, join(path, sizeof path, pre, "name"),
                    "\"%s\" is not a valid name (1-64 of A-Z a-z 0-9 . _ -)", name);
    for (size_t j = 0; j < idx; j++) /* quadratic, but CCAP_CONF_MAX_SEMS bounds it */
        if (!strcmp(cfg->sems[j].name, name)) {
            const char *first = where(c, config_setting_get_elem(c->sems, (unsigned)j), &line);
            return fail(c, s_name, join(path, sizeof path, pre, "name"), "duplicate name \"%s\" (first at %s%s%d)",
                        name, strcmp(first, file) ? first : "line", strcmp(first, file) ? ":" : " ",
                        cfg->sems[j].line);
        }
    return (sc->name = strdup(name)) ? 0 : -ENOMEM;
}

/* Reads the integer settings of semaphore group G (PRE in messages) into
 * SC, whose defaults are set. Returns 0 or -errno. */
static int load_sem_ints(struct ctx *c, const config_setting_t *g, const char *pre, struct ccap_sem_conf *sc)
{
    char path[64];
    int rc;

    if ((rc = get_int(c, g, pre, "limit", 0, INT_MAX, "an integer >= 0", &sc->limit)) < 0 ||
        (rc = get_int(c, g, pre, "lease_ms", 300, INT_MAX, "an integer >= 300", &sc->lease_ms)) < 0 ||
        (rc = get_int(c, g, pre, "wait_timeout_ms", 0, INT_MAX, "an integer >= 0", &sc->wait_timeout_ms)) < 0 ||
        (rc = get_int(c, g, pre, "burst", 1, INT_MAX, "an integer >= 1", &sc->burst)) < 0 ||
        (rc = get_int(c, g, pre, "local_limit", 0, INT_MAX, "an integer >= 0", &sc->local_limit)) < 0 ||
        (rc = get_int(c, g, pre, "restart_grace_ms", 0, INT_MAX, "an integer >= 0", &sc->restart_grace_ms)) < 0 ||
        (rc = get_int(c, g, pre, "max_waiters", 0, INT_MAX, "an integer >= 0 (0: no bound)", &sc->max_waiters)) < 0)
        return rc;
    if (sc->limit < 0)
        return fail(c, g, join(path, sizeof path, pre, "limit"), "is required");
    if (sc->restart_grace_ms > sc->lease_ms)
        return fail(c, config_setting_get_member(g, "restart_grace_ms"),
                    join(path, sizeof path, pre, "restart_grace_ms"),
                    "%d is longer than lease_ms (%d): every lease has ended by then; lease_ms / 2 is enough",
                    sc->restart_grace_ms, sc->lease_ms);
    if (sc->local_limit < 0)
        sc->local_limit = sc->limit;
    return 0;
}

/* Reads the rate and burst of semaphore group G (PRE in messages) into SC.
 * Returns 0 or -errno. */
static int load_sem_rate(struct ctx *c, const config_setting_t *g, const char *pre, struct ccap_sem_conf *sc)
{
    const config_setting_t *s;
    char path[64];

    if ((s = config_setting_get_member(g, "rate"))) {
        join(path, sizeof path, pre, "rate");
        double v;
        switch (config_setting_type(s)) {
        case CONFIG_TYPE_INT: v = config_setting_get_int(s); break;
        case CONFIG_TYPE_INT64: v = (double)config_setting_get_int64(s); break;
        case CONFIG_TYPE_FLOAT: v = config_setting_get_float(s); break;
        default: return fail(c, s, path, "must be a number >= 0 (connections per second), not %s", type_name(s));
        }
        if (!(v >= 0 && v <= 1e9))
            return fail(c, s, path, "must be a number 0-1e9 (connections per second), not %g", v);
        sc->rate = v;
    }
    if (sc->burst < 0) { /* max(1, ceil(rate)), without libm */
        sc->burst = sc->rate > 1 ? (int)sc->rate : 1;
        if (sc->burst < sc->rate)
            sc->burst++;
    } else if (sc->rate == 0)
        return fail(c, config_setting_get_member(g, "burst"), join(path, sizeof path, pre, "burst"),
                    "has no effect without a rate > 0");
    return 0;
}

/* Reads semaphores[IDX] (group G) into CFG->sems[IDX]. Returns 0 or -errno
 * (the message in C). */
static int load_sem(struct ctx *c, const config_setting_t *g, size_t idx, struct ccap_config *cfg)
{
    struct ccap_sem_conf *sc = &cfg->sems[idx];
    char pre[32];
    unsigned line;
    int rc;

    snprintf(pre, sizeof pre, "semaphores[%zu]", idx);
    if (config_setting_type(g) != CONFIG_TYPE_GROUP)
        return fail(c, g, pre, "must be a group, as in { name = \"api\"; limit = 4; }, not %s", type_name(g));
    if ((rc = check_known(c, g, pre, sem_keys)) < 0)
        return rc;
    const char *file = where(c, g, &line);
    sc->line = (int)line;
    sc->lease_ms = 30000;
    sc->wait_timeout_ms = 5000;
    sc->limit = -1;
    sc->local_limit = -1;
    sc->burst = -1;
    if ((rc = load_sem_name(c, g, idx, pre, file, cfg)) < 0 || (rc = load_sem_ints(c, g, pre, sc)) < 0)
        return rc;
    return load_sem_rate(c, g, pre, sc);
}

/* ---- rules ---- */

static int cmp_sem(const void *a, const void *b, void *arg)
{
    const struct ccap_config *cfg = arg;
    return strcmp(cfg->sems[*(const size_t *)a].name, cfg->sems[*(const size_t *)b].name);
}

/* Sorts the semaphores' indices by name into c->sem_order, so that each
 * rule finds its semaphore in log time. */
static int sem_sort(struct ctx *c, const struct ccap_config *cfg)
{
    if (!cfg->n_sems)
        return 0;
    if (!(c->sem_order = malloc(cfg->n_sems * sizeof *c->sem_order)))
        return -ENOMEM;
    for (size_t i = 0; i < cfg->n_sems; i++)
        c->sem_order[i] = i;
    qsort_r(c->sem_order, cfg->n_sems, sizeof *c->sem_order, cmp_sem, (void *)cfg);
    return 0;
}

/* Index of the semaphore NAME in CFG (names are unique), or -1. */
static int sem_find(const struct ctx *c, const struct ccap_config *cfg, const char *name)
{
    size_t lo = 0, hi = c->sem_order ? cfg->n_sems : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = strcmp(cfg->sems[c->sem_order[mid]].name, name);
        if (!d)
            return (int)c->sem_order[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* The rule's semaphore (a name in CFG's semaphores) into R->sem; PRE is
 * the rule's path ("rules[N]"). */
static int load_rule_sem(struct ctx *c, const config_setting_t *g, const char *pre, struct ccap_rule *r,
                         const struct ccap_config *cfg)
{
    char path[CONF_PATH_LEN];
    const char *semname = NULL;
    const config_setting_t *s_sem;
    int rc;

    if ((rc = get_str(c, g, pre, "semaphore", false, &semname, &s_sem)) < 0)
        return rc;
    if (!semname)
        return fail(c, g, join(path, sizeof path, pre, "semaphore"), "is required");
    int si = sem_find(c, cfg, semname);
    if (si < 0) {
        const char *hint = closest(semname, get_semname, cfg);
        join(path, sizeof path, pre, "semaphore");
        if (hint)
            return fail(c, s_sem, path, "no semaphore named \"%s\"; did you mean \"%s\"?", semname, hint);
        return fail(c, s_sem, path, "no semaphore named \"%s\" in semaphores", semname);
    }
    r->sem = (size_t)si;
    return 0;
}

/* The rule's match list into R->pats (calloc'ed, R->n_pats parsed), at
 * most CCAP_CONF_MAX_PATTERNS in all rules; PRE is the rule's path. */
static int load_rule_match(struct ctx *c, const config_setting_t *g, const char *pre, struct ccap_rule *r)
{
    char path[CONF_PATH_LEN], why[256];
    const config_setting_t *s_match;
    int rc;

    if ((rc = get_str_list(c, g, pre, "match", "( \"10.0.0.0/8:443\", \"*.example.com\" )", &s_match)) < 0)
        return rc;
    if (!s_match)
        return fail(c, g, join(path, sizeof path, pre, "match"), "is required");
    size_t n = (size_t)config_setting_length(s_match);
    if ((c->n_pats += n) > CCAP_CONF_MAX_PATTERNS)
        return fail(c, s_match, join(path, sizeof path, pre, "match"), "more than %d patterns in all rules",
                    CCAP_CONF_MAX_PATTERNS);
    if (!(r->pats = calloc(n, sizeof *r->pats)))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s_match, (unsigned)i);
        if (ccap_pattern_parse(config_setting_get_string(e), &r->pats[i], why, sizeof why) < 0) {
            snprintf(path, sizeof path, "%s.match[%zu]", pre, i);
            return fail(c, config_setting_source_line(e) ? e : s_match, path, "%s", why);
        }
        r->n_pats++;
    }
    return 0;
}

/* rules[IDX], the group G, into CFG->rules[IDX] (the semaphores already
 * loaded and sorted). Returns 0, or -errno with the error on C. */
static int load_rule(struct ctx *c, const config_setting_t *g, size_t idx, struct ccap_config *cfg)
{
    struct ccap_rule *r = &cfg->rules[idx];
    char pre[CONF_PRE_LEN];
    int rc;

    snprintf(pre, sizeof pre, "rules[%zu]", idx);
    if (config_setting_type(g) != CONFIG_TYPE_GROUP)
        return fail(c, g, pre,
                    "must be a group, as in { semaphore = \"api\"; match = ( \"10.0.0.0/8:443\" ); }, "
                    "not %s",
                    type_name(g));
    if ((rc = check_known(c, g, pre, rule_keys)) < 0)
        return rc;
    unsigned line;
    r->file = where(c, g, &line);
    r->line = (int)line;
    r->resolve_interval_s = 30;

    if ((rc = load_rule_sem(c, g, pre, r, cfg)) < 0 || (rc = load_rule_match(c, g, pre, r)) < 0)
        return rc;
    if ((rc = get_bool(c, g, pre, "resolve", &r->resolve)) < 0 ||
        (rc = get_int(c, g, pre, "resolve_interval_s", 1, INT_MAX, "an integer >= 1", &r->resolve_interval_s)) < 0)
        return rc;
    for (size_t i = 0; i < r->n_pats; i++) {
        cfg->has_names |= r->pats[i].kind != CCAP_PAT_ADDR;
        cfg->has_resolve |= r->resolve && r->pats[i].kind == CCAP_PAT_HOST;
    }
    return 0;
}

/* A list of groups at NAME of ROOT, loaded one by one with LOAD into an
 * array of N elements of SIZE at *ARR. */
static int load_list(struct ctx *c, const config_setting_t *root, const char *name, size_t size, void **arr,
                     size_t *n, const char *example, struct ccap_config *cfg,
                     int (*load)(struct ctx *, const config_setting_t *, size_t, struct ccap_config *))
{
    const config_setting_t *s = config_setting_get_member(root, name);
    if (!s)
        return 0;
    size_t len = config_setting_is_aggregate(s) ? (size_t)config_setting_length(s) : 0;
    if (config_setting_type(s) == CONFIG_TYPE_ARRAY && len == 0)
        return 0; /* "[]": empty too */
    if (config_setting_type(s) != CONFIG_TYPE_LIST)
        return fail(c, s, name, "must be a list of groups, as in %s, not %s", example, type_name(s));
    if (len == 0)
        return 0;
    if (!(*arr = calloc(len, size)))
        return -ENOMEM;
    for (size_t i = 0; i < len; i++) {
        int rc = load(c, config_setting_get_elem(s, (unsigned)i), i, cfg);
        (*n)++; /* so that ccap_config_free sees what load() allocated */
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- top level ---- */

static int set_defaults(struct ccap_config *cfg)
{
    cfg->redis.port = 6379;
    cfg->redis.tls.verify = true;
    cfg->redis.tls.sentinels = true;
    cfg->from = (struct ccap_config_sources){ "default", "default", "default", "default", "default" };
    cfg->redis.connect_timeout_ms = 200;
    cfg->redis.command_timeout_ms = 200;
    cfg->on_timeout_errno = ETIMEDOUT;
    cfg->on_redis_down = CCAP_DOWN_OPEN;
    cfg->nonblocking = CCAP_NONBLOCK_QUEUE;
    cfg->nonblocking_errno = ECONNREFUSED;
    cfg->log_level = CCAP_LOG_WARN;
    cfg->log_target = CCAP_LOG_STDERR;
    cfg->audit = false;
    cfg->audit_maxlen = 10000;
    cfg->redis.host = strdup("127.0.0.1");
    cfg->redis.key_prefix = strdup("conncap:");
    return cfg->redis.host && cfg->redis.key_prefix ? 0 : -ENOMEM;
}

/* The errno name at NAME of ROOT, if set, into *OUT. */
static int get_errno(struct ctx *c, const config_setting_t *root, const char *name, int *out)
{
    const config_setting_t *s;
    const char *v = NULL;
    int rc, e;

    if ((rc = get_str(c, root, "", name, false, &v, &s)) < 0 || !v)
        return rc;
    if ((e = ccap_errno_parse(v)) < 0) {
        const char *hint = closest(v, get_errname, NULL);
        if (hint)
            return fail(c, s, name, "unknown errno name \"%s\"; did you mean \"%s\"?", v, hint);
        return fail(c, s, name,
                    "unknown errno name \"%s\" (use e.g. \"ETIMEDOUT\", "
                    "\"ECONNREFUSED\" or \"EAGAIN\")",
                    v);
    }
    *out = e;
    return 0;
}

static int load_top(struct ctx *c, const config_setting_t *root, struct ccap_config *cfg)
{
    static const char *const down[] = { "open", "closed", "local", NULL };
    static const char *const nonblock[] = { "wait", "fail", "queue", NULL };
    static const char *const levels[] = { "error", "warn", "info", "debug", NULL };
    static const char *const targets[] = { "stderr", "syslog", NULL };
    const config_setting_t *s;
    int rc, e;

    if ((rc = check_known(c, root, "", top_keys)) < 0)
        return rc;
    if ((s = config_setting_get_member(root, "redis")) && (rc = load_redis(c, s, &cfg->redis)) < 0)
        return rc;
    if (s)
        cfg->from.address = "file";
    if (cfg->redis.tls.ca_file)
        cfg->from.ca_file = "file";
    if (cfg->redis.tls.cert_file)
        cfg->from.cert_file = cfg->from.key_file = "file";
    if (config_setting_get_member(root, "log_level"))
        cfg->from.log_level = "file";
    c->sems = config_setting_get_member(root, "semaphores");
    if (c->sems && config_setting_is_aggregate(c->sems) && config_setting_length(c->sems) > CCAP_CONF_MAX_SEMS)
        return fail(c, config_setting_get_elem(c->sems, CCAP_CONF_MAX_SEMS), "semaphores", "more than %d semaphores",
                    CCAP_CONF_MAX_SEMS);
    if ((rc = load_list(c, root, "semaphores", sizeof *cfg->sems, (void **)&cfg->sems, &cfg->n_sems,
                        "( { name = \"api\"; limit = 4; } )", cfg, load_sem)) < 0 ||
        (rc = sem_sort(c, cfg)) < 0 ||
        (rc = load_list(c, root, "rules", sizeof *cfg->rules, (void **)&cfg->rules, &cfg->n_rules,
                        "( { semaphore = \"api\"; match = ( \"10.0.0.0/8:443\" ); } )", cfg, load_rule)) < 0)
        return rc;

    if ((rc = get_errno(c, root, "on_timeout", &cfg->on_timeout_errno)) < 0 ||
        (rc = get_errno(c, root, "nonblocking_errno", &cfg->nonblocking_errno)) < 0)
        return rc;
    e = cfg->nonblocking_errno;
    if (e == EAGAIN || e == EWOULDBLOCK || e == EINPROGRESS || e == EALREADY || e == EINTR || e == EISCONN)
        return fail(c, config_setting_get_member(root, "nonblocking_errno"), "nonblocking_errno",
                    "must not say that the connect is under way or done (EAGAIN, EWOULDBLOCK, EINPROGRESS, "
                    "EALREADY, EINTR, EISCONN): an event loop would then use an unconnected socket; use e.g. "
                    "\"ECONNREFUSED\" or \"ETIMEDOUT\"");
    int down_i = (int)cfg->on_redis_down, nb_i = (int)cfg->nonblocking;
    if ((rc = get_choice(c, root, "on_redis_down", down, "\"open\", \"closed\" or \"local\"", &down_i)) < 0 ||
        (rc = get_choice(c, root, "nonblocking", nonblock, "\"queue\", \"wait\" or \"fail\"", &nb_i)) < 0 ||
        (rc = get_choice(c, root, "log_level", levels, "\"error\", \"warn\", \"info\" or \"debug\"",
                         &cfg->log_level)) < 0 ||
        (rc = get_choice(c, root, "log", targets, "\"stderr\" or \"syslog\"", &cfg->log_target)) < 0 ||
        (rc = get_bool(c, root, "", "audit", &cfg->audit)) < 0 ||
        (rc = get_int(c, root, "", "audit_maxlen", 1, INT_MAX, "an integer >= 1", &cfg->audit_maxlen)) < 0)
        return rc;
    cfg->on_redis_down = (enum ccap_down_policy)down_i;
    cfg->nonblocking = (enum ccap_nonblock_policy)nb_i;
    return 0;
}

/* libconfig's parse of T into LC; on failure ERR gets "FILE:LINE: text". */
static int parse(const struct ccap_conf_text *t, config_t *lc, char *err, size_t errlen)
{
    if (config_read_string(lc, t->text) == CONFIG_TRUE)
        return 0;
    if (err && errlen) {
        unsigned line = 0;
        const char *file = ccap_conf_text_where(t, (unsigned)config_error_line(lc), &line);
        const char *text = config_error_text(lc) ? config_error_text(lc) : "cannot parse";
        if (line)
            snprintf(err, errlen, "%s:%u: %s", file, line, text);
        else
            snprintf(err, errlen, "%s: %s", file, text);
    }
    return -EINVAL;
}

/* Validates the expanded text T into CFG, which takes T's file names.
 * libconfig's parse runs under a guard (core/lcalloc.h): in the shim, an
 * allocation of libconfig's that fails ends it with -ENOMEM, every block it
 * made freed, instead of a NULL dereference inside libconfig. */
static int load_parsed(struct ctx *c, struct ccap_conf_text *t, struct ccap_config *cfg)
{
    struct ccap_lc_guard g;
    config_t lc;
    volatile int rc; /* set after the guard's setjmp */

    c->text = t;
    c->note = &cfg->password_note;
    c->secret_note = &cfg->secret_note;
    ccap_lc_guard_begin(&g);
    if (setjmp(g.jb) == 0) {
        config_init(&lc);
        rc = parse(t, &lc, c->err, c->errlen);
        ccap_lc_guard_disarm(&g);
        if (rc == 0)
            rc = load_top(c, config_root_setting(&lc), cfg);
        config_destroy(&lc);
    } else {
        rc = g.why; /* LC is half built: never read, its blocks freed below */
        if (rc == -EIO && c->err && c->errlen)
            snprintf(c->err, c->errlen, "%s: cannot parse (libconfig's scanner failed)", c->path);
    }
    ccap_lc_guard_end(&g);
    if (rc == -ENOMEM && c->err && c->errlen)
        snprintf(c->err, c->errlen, "%s: out of memory", c->path);
    free(c->sem_order);
    c->sem_order = NULL;
    cfg->files = t->files; /* the rules point into it */
    cfg->n_files = t->n_files;
    t->files = NULL;
    t->n_files = 0;
    return rc;
}

/* One TLS file NAME (the setting's path, e.g. "redis.tls.key_file") into *PEM. */
static int read_tls_file(struct ctx *c, const char *name, const char *file, const char *from, char **pem,
                         size_t *len)
{
    char why[CONF_WHY_LEN];
    if (!file)
        return 0;
    int rc = ccap_fileset_read(c->fs, file, CCAP_TLS_FILE_MAX, false, pem, len, NULL, why, sizeof why);
    if (rc == -ENOMEM || rc == 0)
        return rc;
    if ((rc == -ENOENT || rc == -EACCES) && (c->flags & CCAP_CONF_SECRETS_UNCHECKED) && c->secret_note) {
        char msg[CONF_MSG_LEN]; /* a key the machine that checks does not have: not checked */
        snprintf(msg, sizeof msg, "%s: %s: cannot read %s (%s): not checked (the rest of the file is)", c->path,
                 name, file, reason(why));
        free(*c->secret_note);
        return (*c->secret_note = strdup(msg)) ? 0 : -ENOMEM;
    }
    if (c->err && c->errlen) /* from the environment: no line in the file to name */
        snprintf(c->err, c->errlen, "%s%s%s: cannot read %s: %s", strcmp(from, "file") ? from : c->path,
                 strcmp(from, "file") ? "" : ": ", strcmp(from, "file") ? "" : name, file, reason(why));
    return rc == -EFBIG ? -EFBIG : rc;
}

/* The TLS files CFG names, as they are now (after the environment's). */
static int read_tls_files(struct ctx *c, struct ccap_config *cfg)
{
    struct ccap_tls_conf *t = &cfg->redis.tls;
    int rc;
    if (!t->enabled || (c->flags & CCAP_LOAD_NO_SECRETS))
        return 0;
    if ((rc = read_tls_file(c, "redis.tls.ca_file", t->ca_file, cfg->from.ca_file, &t->ca_pem, &t->ca_len)) < 0 ||
        (rc = read_tls_file(c, "redis.tls.cert_file", t->cert_file, cfg->from.cert_file, &t->cert_pem,
                            &t->cert_len)) < 0 ||
        (rc = read_tls_file(c, "redis.tls.key_file", t->key_file, cfg->from.key_file, &t->key_pem, &t->key_len)) < 0)
        return rc;
    return 0;
}

/* TEXT, the content of PATH, into *OUT: @include expanded (through C's
 * fileset), parsed, validated, the environment's settings applied, the
 * TLS files read. */
static int load_text(struct ctx *c, const char *text, size_t len, struct ccap_config **out)
{
    struct ccap_conf_text t;
    int rc = ccap_conf_text_build(c->path, text, len, c->fs, &t, c->err, c->errlen);
    if (rc < 0)
        return rc;
    struct ccap_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->path = strdup(c->path)) || set_defaults(cfg) < 0)
        rc = -ENOMEM;
    else
        rc = load_parsed(c, &t, cfg);
    if (rc == 0)
        rc = ccap_config_apply_env(cfg, c->err, c->errlen);
    if (rc == 0)
        rc = read_tls_files(c, cfg);
    if (cfg)
        cfg->secrets_skipped = c->flags & CCAP_LOAD_NO_SECRETS;
    ccap_conf_text_free(&t);
    if (rc < 0) {
        ccap_config_free(cfg);
        if (rc == -ENOMEM && c->err && c->errlen)
            snprintf(c->err, c->errlen, "%s: out of memory", c->path);
        return rc;
    }
    *out = cfg;
    return 0;
}

int ccap_config_load_text(const char *path, const char *text, size_t len, struct ccap_config **out, char *err,
                          size_t errlen)
{
    struct ctx c = { .path = path, .err = err, .errlen = errlen };
    if (err && errlen)
        err[0] = '\0';
    if (out)
        *out = NULL;
    if (!path || !text || !out)
        return -EINVAL;
    return load_text(&c, text, len, out);
}

int ccap_config_load_from(const char *path, struct ccap_fileset *fs, int flags, struct ccap_config **out, char *err,
                          size_t errlen)
{
    struct ctx c = { .path = path, .fs = fs, .flags = flags, .err = err, .errlen = errlen };
    char why[CONF_WHY_LEN], *text = NULL;
    size_t len = 0;
    if (err && errlen)
        err[0] = '\0';
    if (out)
        *out = NULL;
    if (!path || !out)
        return -EINVAL;
    int rc = ccap_fileset_read(fs, path, CCAP_CONF_MAX_BYTES, false, &text, &len, NULL, why, sizeof why);
    if (rc < 0) {
        if (rc == -EFBIG)
            snprintf(why, sizeof why, "is larger than %d bytes, the limit for a configuration", CCAP_CONF_MAX_BYTES);
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", path, why);
        return rc;
    }
    rc = load_text(&c, text, len, out);
    free(text);
    return rc;
}

int ccap_config_load_flags(const char *path, unsigned flags, struct ccap_config **out, char *err, size_t errlen)
{
    return ccap_config_load_from(path, NULL, (int)flags, out, err, errlen);
}

int ccap_config_load(const char *path, struct ccap_config **out, char *err, size_t errlen)
{
    return ccap_config_load_from(path, NULL, 0, out, err, errlen);
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void ccap_config_free(struct ccap_config *cfg)
{
    if (!cfg)
        return;
    struct ccap_redis_conf *r = &cfg->redis;
    free(r->host);
    free(r->socket);
    free(r->key_prefix);
    free(r->username);
    if (r->password) {
        explicit_bzero(r->password, strlen(r->password));
        free(r->password);
    }
    free_strv(r->sentinels, r->n_sentinels);
    free(r->master);
    free_strv(r->cluster, r->n_cluster);
    free(r->tls.ca_file);
    free(r->tls.ca_dir);
    free(r->tls.cert_file);
    free(r->tls.key_file);
    free(r->tls.server_name);
    free(r->tls.ca_pem);
    free(r->tls.cert_pem);
    if (r->tls.key_pem)
        explicit_bzero(r->tls.key_pem, r->tls.key_len);
    free(r->tls.key_pem);
    for (size_t i = 0; i < cfg->n_sems; i++)
        free(cfg->sems[i].name);
    free(cfg->sems);
    for (size_t i = 0; i < cfg->n_rules; i++)
        free(cfg->rules[i].pats);
    free(cfg->rules);
    free_strv(cfg->files, cfg->n_files);
    free(cfg->password_note);
    free(cfg->secret_note);
    free(cfg->path);
    free(cfg);
}

/* An absolute path from environment variable NAME, if set, into *SLOT. */
static int env_path(struct ccap_config *cfg, const char *name, char **slot, const char **from, char *err,
                    size_t errlen)
{
    const char *v = ccap_env_get(name);
    if (!v || !*v)
        return 0;
    if (v[0] != '/') {
        snprintf(err, errlen, "%s: must be an absolute path, not \"%s\"", name, v);
        return -EINVAL;
    }
    char *d = strdup(v);
    if (!d)
        return -ENOMEM;
    free(*slot);
    *slot = d;
    *from = name;
    cfg->redis.tls.enabled = true;
    return 1;
}

/* CONNCAP_REDIS_URL into CFG's Redis address. Returns 1 (set), 0 or -errno. */
static int env_url(struct ccap_config *cfg, char *err, size_t errlen)
{
    struct ccap_redis_conf *r = &cfg->redis, u;
    const char *url = ccap_env_get("CONNCAP_REDIS_URL");
    char why[CONF_WHY_LEN], shown[CONF_SHOWN_LEN];
    int rc;
    if (!url || !*url)
        return 0;
    if ((rc = ccap_redis_url_parse(url, &u, why, sizeof why)) < 0) {
        free_url(&u);
        ccap_redis_url_redact(url, shown, sizeof shown);
        snprintf(err, errlen, "CONNCAP_REDIS_URL: \"%s\": %s", shown, rc == -ENOMEM ? "out of memory" : why);
        return rc;
    }
    free_strv(r->sentinels, r->n_sentinels);
    free_strv(r->cluster, r->n_cluster);
    free(r->master);
    r->sentinels = r->cluster = NULL;
    r->n_sentinels = r->n_cluster = 0;
    r->master = NULL;
    take_url(r, &u);
    free_url(&u);
    cfg->from.address = "CONNCAP_REDIS_URL";
    return r->host || r->socket ? 1 : -ENOMEM;
}

int ccap_config_apply_env(struct ccap_config *cfg, char *err, size_t errlen)
{
    struct ccap_redis_conf *r = &cfg->redis;
    const char *lvl = ccap_env_get("CONNCAP_LOG_LEVEL");
    int url, rc = 0, tls = 0;
    if ((url = env_url(cfg, err, errlen)) < 0)
        return url;
    if ((rc = env_path(cfg, "CONNCAP_REDIS_TLS_CA_FILE", &r->tls.ca_file, &cfg->from.ca_file, err, errlen)) < 0 ||
        (tls |= rc, rc = env_path(cfg, "CONNCAP_REDIS_TLS_CERT_FILE", &r->tls.cert_file, &cfg->from.cert_file, err,
                                  errlen)) < 0 ||
        (tls |= rc,
         rc = env_path(cfg, "CONNCAP_REDIS_TLS_KEY_FILE", &r->tls.key_file, &cfg->from.key_file, err, errlen)) < 0)
        return rc;
    tls |= rc;
    const char *why = tls && url && !strncmp(ccap_env_get("CONNCAP_REDIS_URL"), "redis://", 8)
                          ? "CONNCAP_REDIS_TLS_*: CONNCAP_REDIS_URL says redis:// (plain TCP): use rediss://"
                      : r->tls.enabled && r->socket ? "TLS does not apply to a Unix socket (the Redis address from "
                                                      "CONNCAP_REDIS_URL or the file)"
                      : !r->tls.cert_file != !r->tls.key_file ? "CONNCAP_REDIS_TLS_CERT_FILE and _KEY_FILE (or "
                                                                "redis.tls.cert_file and key_file) go together"
                                                              : NULL;
    if (why) {
        snprintf(err, errlen, "%s", why);
        return -EINVAL;
    }
    if (lvl && *lvl) {
        if ((rc = ccap_log_level_parse(lvl)) < 0) {
            snprintf(err, errlen, "CONNCAP_LOG_LEVEL: \"%s\" is not one of error, warn, info, debug", lvl);
            return -EINVAL;
        }
        cfg->log_level = rc;
        cfg->from.log_level = "CONNCAP_LOG_LEVEL";
    }
    return 0;
}

const char *ccap_config_path(void)
{
    const char *p = ccap_env_get("CONNCAP_CONFIG");
    return p && *p ? p : CCAP_DEFAULT_CONFIG;
}

const struct ccap_rule *ccap_config_match(const struct ccap_config *cfg, const struct sockaddr *sa, socklen_t len,
                                          const char *const *names, size_t n_names)
{
    struct ccap_addr a;
    if (!cfg || ccap_addr_from_sa(sa, len, &a) < 0)
        return NULL;
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct ccap_rule *r = &cfg->rules[i];
        for (size_t j = 0; j < r->n_pats; j++) {
            const struct ccap_pattern *p = &r->pats[j];
            if (p->kind == CCAP_PAT_ADDR) {
                if (ccap_pattern_match_ccap_addr(p, &a))
                    return r;
            } else {
                for (size_t k = 0; k < n_names; k++)
                    if (names[k] && ccap_pattern_match_name(p, names[k], a.port))
                        return r;
            }
        }
    }
    return NULL;
}

int ccap_config_sem_index(const struct ccap_config *cfg, const char *name)
{
    if (!cfg || !name)
        return -1;
    for (size_t i = 0; i < cfg->n_sems; i++)
        if (cfg->sems[i].name && !strcmp(cfg->sems[i].name, name))
            return (int)i;
    return -1;
}

static const char *rule_file(const struct ccap_config *cfg, const struct ccap_rule *r)
{
    return r->file ? r->file : cfg->path;
}

size_t ccap_config_notes(const struct ccap_config *cfg, void (*note)(bool warn, const char *msg, void *arg),
                         void *arg)
{
    char msg[CONF_MSG_LEN];
    size_t warned = 0;

    if (cfg->password_note) {
        note(true, cfg->password_note, arg);
        warned++;
    }
    if (cfg->secret_note)
        note(false, cfg->secret_note, arg);
    for (size_t i = 0; i < cfg->n_rules; i++) {
        const struct ccap_rule *r = &cfg->rules[i];
        size_t hosts = 0;
        for (size_t k = 0; r->resolve && k < r->n_pats; k++) {
            hosts += r->pats[k].kind == CCAP_PAT_HOST;
            if (r->pats[k].kind == CCAP_PAT_WILDCARD) {
                snprintf(msg, sizeof msg,
                         "%s:%d: rules[%zu]: resolve = true cannot look up the wildcard \"%s\"; "
                         "it matches only names the program itself resolves",
                         rule_file(cfg, r), r->line, i, r->pats[k].text);
                note(false, msg, arg);
            }
        }
        if (r->resolve && !hosts) {
            snprintf(msg, sizeof msg,
                     "%s:%d: rules[%zu]: resolve = true, but the rule has no exact host name to "
                     "look up (addresses and wildcards are never resolved): it has no effect",
                     rule_file(cfg, r), r->line, i);
            note(true, msg, arg);
            warned++;
        }
    }
    return warned;
}
