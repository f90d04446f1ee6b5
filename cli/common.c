/* common.c -- what every conncap subcommand shares: options, config, Redis. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "ops.h"

#define STDIN_NAME "<stdin>"
#define STDIN_MAX (4 << 20) /* bytes of configuration read from standard input */

int ccap_cli_parse(int argc, char **argv, struct ccap_cli_opts *o, const char *usage)
{
    memset(o, 0, sizeof(*o));
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) {
            if (++i >= argc)
                goto bad;
            o->config = argv[i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            o->config = argv[i] + 9;
        } else if (!strcmp(argv[i], "--json")) {
            o->json = true;
        } else if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "conncap %s: unknown option '%s'\n", argv[0], argv[i]);
            goto bad;
        } else {
            break;
        }
    }
    o->first = i;
    return 0;
bad:
    fprintf(stderr, "usage: conncap %s\n", usage);
    return -1;
}

/* Copies standard input (at most STDIN_MAX bytes) into a new private file
 * (mode 0600) named in PATH (size N); the caller unlinks it. 0 or -errno. */
static int stdin_to_file(char *path, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, n, "%s/conncap-stdin.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkostemp(path, O_CLOEXEC), e = 0;
    if (fd < 0)
        return -errno;
    char buf[16384];
    size_t total = 0;
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            e = r < 0 ? errno : 0;
            break;
        }
        total += (size_t)r;
        if (total > STDIN_MAX) {
            e = EFBIG;
            break;
        }
        for (ssize_t off = 0, w; off < r; off += w)
            if ((w = write(fd, buf + off, (size_t)(r - off))) < 0) {
                if (errno == EINTR) {
                    w = 0;
                    continue;
                }
                e = errno;
                break;
            }
        if (e)
            break;
    }
    close(fd);
    if (e)
        unlink(path);
    return -e;
}

/* Replaces every FROM in S with TO (not longer than FROM), in place. */
static void replace_all(char *s, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    for (char *p = strstr(s, from); p && fl >= tl; p = strstr(p + tl, from)) {
        memcpy(p, to, tl);
        memmove(p + tl, p + fl, strlen(p + fl) + 1);
    }
}

/* Loads the configuration from standard input ("-c -"): through a private
 * temporary file, named "<stdin>" in messages and in cfg->path. */
static struct ccap_config *config_from_stdin(unsigned flags)
{
    char tmp[4096], err[512];
    struct ccap_config *cfg = NULL;
    int e = stdin_to_file(tmp, sizeof tmp);
    if (e < 0) {
        fprintf(stderr, "conncap: reading the configuration from standard input: %s\n",
                e == -EFBIG ? "more than 4 MiB" : strerror(-e));
        return NULL;
    }
    e = ccap_config_load_flags(tmp, flags, &cfg, err, sizeof(err));
    unlink(tmp);
    char *name = e < 0 ? NULL : strdup(STDIN_NAME);
    if (e < 0 || !name) {
        replace_all(err, tmp, STDIN_NAME);
        fprintf(stderr, "conncap: %s\n", e < 0 ? err : "out of memory");
        ccap_config_free(cfg);
        return NULL;
    }
    free(cfg->path);
    cfg->path = name;
    return cfg;
}

struct ccap_config *ccap_cli_config(const struct ccap_cli_opts *o)
{
    char err[512];
    struct ccap_config *cfg = NULL;
    const char *path = o->config ? o->config : ccap_config_path();
    if (!strcmp(path, "-"))
        return config_from_stdin(o->load_flags);
    if (ccap_config_load_flags(path, o->load_flags, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "conncap: %s\n", err);
        return NULL;
    }
    return cfg;
}

struct ccap_redis *ccap_cli_redis_new(const struct ccap_config *cfg)
{
    struct ccap_redis *r = ccap_redis_new(&cfg->redis);
    if (r)
        ccap_redis_set_caps(r, &ccap_resp_caps_cli);
    return r;
}

struct ccap_redis *ccap_cli_redis(const struct ccap_config *cfg)
{
    struct ccap_redis *r = ccap_cli_redis_new(cfg);
    if (!r) {
        fprintf(stderr, "conncap: out of memory\n");
        return NULL;
    }
    int rc = ccap_redis_connect(r);
    if (rc < 0) {
        ccap_cli_redis_error(cfg, r);
        ccap_redis_free(r);
        return NULL;
    }
    return r;
}

void ccap_cli_redis_error(const struct ccap_config *cfg, const struct ccap_redis *r)
{
    const struct ccap_redis_conf *c = &cfg->redis;
    const char *e = ccap_redis_errstr(r)[0] ? ccap_ops_esc(ccap_redis_errstr(r)) : "no answer",
               *why = strstr(e, ": ");
    if (!strncmp(e, "redis connect to ", 17) && why)
        e = why + 2; /* the address is said once */
    if (c->n_sentinels || c->n_cluster)
        fprintf(stderr, "conncap: redis: %s\n", e);
    else if (c->socket)
        fprintf(stderr, "conncap: redis at %s: %s\n", c->socket, e);
    else
        fprintf(stderr, "conncap: redis at %s:%d: %s\n", c->host, c->port, e);
}
