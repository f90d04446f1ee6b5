/* ops.c -- shared by the ops subcommands: options, a semaphore's state from Redis, wait percentiles. */
#include "holder.h"
#include "log.h"
#include "ops.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const struct ccap_ops_counter ccap_ops_counters[CCAP_OPS_N_COUNTERS] = {
    { CCAP_STAT_ACQUIRED, "conncap_acquired_total", "Permits granted (by Redis) to connect." },
    { CCAP_STAT_RELEASED, "conncap_released_total", "Permits given back when a connection ended." },
    { CCAP_STAT_TIMED_OUT, "conncap_timed_out_total", "Waits for a permit that gave up (connect failed)." },
    { CCAP_STAT_DENIED, "conncap_denied_total",
      "Acquire attempts refused because no permit was free (every retry counts)." },
    { CCAP_STAT_RECLAIMED, "conncap_reclaimed_total",
      "Holders dropped when their lease ended (crashed or stuck processes), or not re-registered after a failover." },
    { CCAP_STAT_REREGISTERED, "conncap_reregistered_total",
      "Holders Redis had lost, registered again by their heartbeat." },
    { CCAP_STAT_FALLBACK, "conncap_fallback_granted_total",
      "Permits granted while Redis was down, counted once registered." },
    { CCAP_STAT_RESET_DROPPED, "conncap_reset_dropped_total", "Holders dropped by conncap reset." },
    { CCAP_STAT_QUEUE_FULL, "conncap_queue_full_total",
      "Connects refused at once: max_waiters were queued already." },
};

const int ccap_ops_bounds_ms[CCAP_WAIT_N_BOUNDS] = CCAP_WAIT_BOUNDS_MS;

volatile sig_atomic_t ccap_ops_stop;

static void on_stop(int sig)
{
    (void)sig;
    ccap_ops_stop = 1;
}

void ccap_ops_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Stores the text VAL of option OP; returns 0 or -1 (message printed). */
static int set_opt(const char *cmd, const struct ccap_opt *op, const char *val)
{
    char *end;
    switch (op->kind) {
    case CCAP_OPT_FLAG: *(bool *)op->dst = true; return 0;
    case CCAP_OPT_STR: *(const char **)op->dst = val; return 0;
    case CCAP_OPT_INT: {
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (errno || end == val || *end || v < op->min || v > op->max) {
            fprintf(stderr, "conncap %s: --%s: want an integer from %.0f to %.0f, not '%s'\n", cmd, op->name,
                    op->min, op->max, val);
            return -1;
        }
        *(long long *)op->dst = v;
        return 0;
    }
    case CCAP_OPT_NUM: {
        errno = 0;
        double v = strtod(val, &end);
        if (errno || end == val || *end || !(v >= op->min && v <= op->max)) {
            fprintf(stderr, "conncap %s: --%s: want a number from %g to %g, not '%s'\n", cmd, op->name, op->min,
                    op->max, val);
            return -1;
        }
        *(double *)op->dst = v;
        return 0;
    }
    }
    return -1;
}

/* Handles argv[*I] if it is one of OPTS; returns 1 handled, 0 not, -1 error. */
static int one_opt(int argc, char **argv, int *i, const struct ccap_opt *opts)
{
    const char *a = argv[*i] + 2;
    for (const struct ccap_opt *op = opts; op && op->name; op++) {
        size_t n = strlen(op->name);
        if (strncmp(a, op->name, n) || (a[n] && a[n] != '='))
            continue;
        if (op->kind == CCAP_OPT_FLAG) {
            if (a[n] == '=') {
                fprintf(stderr, "conncap %s: --%s takes no value\n", argv[0], op->name);
                return -1;
            }
            return set_opt(argv[0], op, NULL) < 0 ? -1 : 1;
        }
        const char *val = a[n] == '=' ? a + n + 1 : NULL;
        if (!val) {
            if (*i + 1 >= argc) {
                fprintf(stderr, "conncap %s: --%s needs a value\n", argv[0], op->name);
                return -1;
            }
            val = argv[++*i];
        }
        return set_opt(argv[0], op, val) < 0 ? -1 : 1;
    }
    return 0;
}

int ccap_ops_parse(int argc, char **argv, const char *usage, struct ccap_cli_opts *o, const struct ccap_opt *opts,
                   char **operands, int max)
{
    int n = 0;
    bool dashdash = false;
    memset(o, 0, sizeof(*o));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (dashdash || a[0] != '-' || !a[1]) {
            if (n >= max) {
                fprintf(stderr, "conncap %s: unexpected argument '%s'\n", argv[0], a);
                goto bad;
            }
            operands[n++] = argv[i];
        } else if (!strcmp(a, "--")) {
            dashdash = true;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
            if (++i >= argc) {
                fprintf(stderr, "conncap %s: %s needs a file\n", argv[0], a);
                goto bad;
            }
            o->config = argv[i];
        } else if (!strncmp(a, "--config=", 9)) {
            o->config = a + 9;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            int rc = a[1] == '-' ? one_opt(argc, argv, &i, opts) : 0;
            if (rc < 0)
                goto bad;
            if (rc == 0) {
                fprintf(stderr, "conncap %s: unknown option '%s'\n", argv[0], a);
                goto bad;
            }
        }
    }
    return n;
bad:
    fprintf(stderr, "usage: conncap %s\n", usage);
    return -1;
}

const struct ccap_sem_conf *ccap_ops_sem(const struct ccap_config *cfg, const char *cmd, const char *name)
{
    int i = ccap_config_sem_index(cfg, name);
    if (i >= 0)
        return &cfg->sems[i];
    fprintf(stderr, "conncap %s: no semaphore '%s' in %s (known:", cmd, ccap_ops_esc(name), ccap_ops_esc(cfg->path));
    for (size_t j = 0; j < cfg->n_sems; j++)
        fprintf(stderr, " %s", cfg->sems[j].name);
    fprintf(stderr, "%s)\n", cfg->n_sems ? "" : " none");
    return NULL;
}

int ccap_ops_open(const struct ccap_cli_opts *o, int command_timeout_ms, struct ccap_config **cfg,
                  struct ccap_redis **r)
{
    *r = NULL;
    *cfg = ccap_cli_config(o);
    if (!*cfg)
        return -EINVAL;
    if (command_timeout_ms > (*cfg)->redis.command_timeout_ms)
        (*cfg)->redis.command_timeout_ms = command_timeout_ms;
    *r = ccap_cli_redis(*cfg);
    if (!*r) {
        ccap_config_free(*cfg);
        *cfg = NULL;
        return -ECONNREFUSED;
    }
    return 0;
}

void ccap_ops_close(struct ccap_config *cfg, struct ccap_redis *r)
{
    ccap_redis_free(r);
    ccap_config_free(cfg);
}

long long ccap_ops_server_ms(struct ccap_redis *r)
{
    const char *a[] = { "TIME" };
    redisReply *rep = NULL;
    long long ms = -1;
    if (ccap_redis_command(r, 1, a, &rep) == 0 && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[0]->type == REDIS_REPLY_STRING && rep->element[1]->type == REDIS_REPLY_STRING)
        ms = atoll(rep->element[0]->str) * 1000 + atoll(rep->element[1]->str) / 1000;
    if (rep)
        freeReplyObject(rep);
    return ms;
}

/* Runs ARGV and returns its reply, or NULL (error text in R). */
static redisReply *cmd(struct ccap_redis *r, int argc, const char **argv)
{
    redisReply *rep = NULL;
    return ccap_redis_command(r, argc, argv, &rep) < 0 ? NULL : rep;
}

/* An integer reply (or a number in a string), or -1. */
static long long int_of(const redisReply *rep)
{
    if (rep->type == REDIS_REPLY_INTEGER)
        return rep->integer;
    if (rep->type == REDIS_REPLY_STRING)
        return atoll(rep->str);
    return -1;
}

/* Stores one field of the stats hash into OUT. */
static void stat_field(struct ccap_ops_sem *out, const char *f, long long v)
{
    for (int i = 0; i < CCAP_OPS_N_COUNTERS; i++)
        if (!strcmp(f, ccap_ops_counters[i].field)) {
            out->counter[i] = v;
            return;
        }
    if (!strcmp(f, CCAP_STAT_WAIT_COUNT))
        out->wait_count = v;
    else if (!strcmp(f, CCAP_STAT_WAIT_SUM))
        out->wait_sum_ms = v;
    else if (!strcmp(f, CCAP_STAT_FULL_SINCE))
        out->full_since_ms = v;
    else if (!strcmp(f, CCAP_STAT_FULL_LIMIT))
        out->full_limit = v;
    else if (!strcmp(f, "wait_le_inf"))
        out->bucket[CCAP_WAIT_N_BOUNDS] = v;
    else if (!strncmp(f, "wait_le_", 8))
        for (int i = 0; i < CCAP_WAIT_N_BOUNDS; i++)
            if (atoi(f + 8) == ccap_ops_bounds_ms[i])
                out->bucket[i] = v;
}

/* Grants that never waited count in acquired only (lua/acquire.lua): adds
 * them to OUT's waits as waits of 0 ms. wait_count counts the other grants
 * and the timeouts; a stats hash of an older format, where every grant was
 * in wait_count, gives none here. */
static void add_instant_grants(struct ccap_ops_sem *out)
{
    long long waited = out->wait_count - out->counter[2]; /* grants after a wait (timed_out is counter 2) */
    long long instant = out->counter[0] - (waited > 0 ? waited : 0);
    if (instant > 0) {
        out->wait_count += instant;
        out->bucket[0] += instant;
    }
}

/* restart_grace_ms (see acquire.lua): ms left before NAME grants new
 * permits again, 0 when none, -1 when its epoch key is gone (Redis lost
 * the semaphore, or never saw it: the next acquire starts a grace). */
static int read_grace(struct ccap_redis *r, const char *pfx, const char *name, long long now_ms, long long *left)
{
    char ek[600];
    if (ccap_sem_key(ek, sizeof ek, pfx, name, CCAP_KEY_EPOCH) < 0)
        return -ENAMETOOLONG;
    const char *get[] = { "GET", ek };
    redisReply *e = cmd(r, 2, get);
    if (!e)
        return -EIO;
    long long opens = e->type == REDIS_REPLY_STRING ? atoll(e->str) : -1;
    *left = e->type != REDIS_REPLY_STRING ? -1 : opens > now_ms ? opens - now_ms : 0;
    freeReplyObject(e);
    return 0;
}

int ccap_ops_read(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s,
                  long long now_ms, struct ccap_ops_sem *out)
{
    char lk[600], hk[600], wk[600], sk[600], nowx[32];
    const char *pfx = cfg->redis.key_prefix;
    memset(out, 0, sizeof(*out));
    out->conf = s;
    out->now_ms = now_ms;
    out->full_since_ms = -1;
    out->full_limit = -1;
    if (ccap_sem_key(lk, sizeof lk, pfx, s->name, CCAP_KEY_LIMIT) < 0 ||
        ccap_sem_key(hk, sizeof hk, pfx, s->name, CCAP_KEY_HOLDERS) < 0 ||
        ccap_sem_key(wk, sizeof wk, pfx, s->name, CCAP_KEY_WAITERS) < 0 ||
        ccap_sem_key(sk, sizeof sk, pfx, s->name, CCAP_KEY_STATS) < 0)
        return -ENAMETOOLONG;
    snprintf(nowx, sizeof nowx, "(%lld", now_ms);
    const char *get[] = { "GET", lk }, *zh[] = { "ZCOUNT", hk, nowx, "+inf" },
               *zw[] = { "ZCOUNT", wk, nowx, "+inf" }, *hg[] = { "HGETALL", sk };
    redisReply *a = cmd(r, 2, get), *b = a ? cmd(r, 4, zh) : NULL, *c = b ? cmd(r, 4, zw) : NULL,
               *d = c ? cmd(r, 2, hg) : NULL;
    int rc = d ? 0 : -EIO;
    if (d && (b->type != REDIS_REPLY_INTEGER || c->type != REDIS_REPLY_INTEGER || d->type != REDIS_REPLY_ARRAY))
        rc = -EPROTO;
    if (rc == 0) {
        char *end = NULL;
        long long v = a->type == REDIS_REPLY_STRING ? strtoll(a->str, &end, 10) : 0;
        out->override = a->type == REDIS_REPLY_STRING && end != a->str && !*end;
        out->limit = out->override ? v : s->limit;
        out->holders = b->integer;
        out->waiters = c->integer;
        for (size_t i = 0; i + 1 < d->elements; i += 2)
            if (d->element[i]->type == REDIS_REPLY_STRING)
                stat_field(out, d->element[i]->str, int_of(d->element[i + 1]));
        add_instant_grants(out);
    }
    redisReply *all[] = { a, b, c, d };
    for (int i = 0; i < 4; i++)
        if (all[i])
            freeReplyObject(all[i]);
    if (rc == 0 && s->restart_grace_ms > 0)
        rc = read_grace(r, pfx, s->name, now_ms, &out->grace_left_ms);
    return rc;
}

long long ccap_ops_full_for_ms(const struct ccap_ops_sem *s)
{
    if (s->holders < s->limit || s->full_since_ms < 0 || (s->full_limit >= 0 && s->full_limit != s->limit))
        return 0;
    return s->now_ms > s->full_since_ms ? s->now_ms - s->full_since_ms : 0;
}

double ccap_ops_quantile(const long long *bucket, long long n, double q)
{
    if (n <= 0)
        return -1;
    double rank = q * (double)n, cum = 0;
    for (int i = 0; i < CCAP_WAIT_N_BOUNDS; i++) {
        double lo = i ? ccap_ops_bounds_ms[i - 1] : 0, hi = ccap_ops_bounds_ms[i];
        if (bucket[i] > 0 && cum + (double)bucket[i] >= rank)
            return lo + (hi - lo) * (rank - cum) / (double)bucket[i];
        cum += (double)bucket[i];
    }
    return ccap_ops_bounds_ms[CCAP_WAIT_N_BOUNDS - 1];
}

void ccap_ops_json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        size_t k = ccap_text_char_len(p + i, n - i);
        if (k == 1 && (p[i] == '"' || p[i] == '\\')) {
            fprintf(f, "\\%c", p[i]);
        } else if (k) {
            fwrite(p + i, 1, k, f);
        } else if (p[i] < 0x20 || p[i] == 0x7f) {
            fprintf(f, "\\u%04x", p[i]); /* a control character */
            k = 1;
        } else if (p[i] == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) {
            fprintf(f, "\\u%04x", p[i + 1]); /* a C1 control character */
            k = 2;
        } else {
            fprintf(f, "\\\\x%02x", p[i]); /* not UTF-8: the byte, as the text \xHH */
            k = 1;
        }
        i += k;
    }
    fputc('"', f);
}

#define ESC_BUFS 8
#define ESC_LEN 1024

const char *ccap_ops_esc(const char *s)
{
    static __thread char bufs[ESC_BUFS][ESC_LEN];
    static __thread unsigned next;
    char *out = bufs[next++ % ESC_BUFS];
    int cut = 0;
    if (!s)
        return "";
    size_t w = ccap_text_escape(out, ESC_LEN - 4, s, strlen(s), CCAP_ESC_BACKSLASH, &cut);
    if (cut)
        memcpy(out + w, "...", 3), w += 3;
    out[w] = '\0';
    return out;
}

/* The format and its parser live in core/holder.c (the one owner, shared
 * with the shim that builds the ids); this keeps the CLI's struct. */
int ccap_ops_parse_holder(const char *id, struct ccap_ops_holder *h)
{
    struct ccap_holder p;
    int rc = ccap_holder_parse(id, &p);
    _Static_assert(sizeof h->host == sizeof p.host && sizeof h->dest == sizeof p.dest &&
                       sizeof h->nonce == sizeof p.nonce && sizeof h->prog == sizeof p.prog,
                   "holder part sizes");
    memcpy(h->host, p.host, sizeof h->host);
    memcpy(h->prog, p.prog, sizeof h->prog);
    memcpy(h->dest, p.dest, sizeof h->dest);
    memcpy(h->nonce, p.nonce, sizeof h->nonce);
    h->pid = p.pid;
    h->fd = p.fd;
    return rc;
}

const char *ccap_ops_duration(long long ms, char *buf, size_t n)
{
    if (ms < 0)
        snprintf(buf, n, "-");
    else if (ms < 1000)
        snprintf(buf, n, "%lld ms", ms);
    else if (ms < 60000)
        snprintf(buf, n, "%.1f s", ms / 1000.0);
    else if (ms < 3600000)
        snprintf(buf, n, "%lld min %lld s", ms / 60000, ms / 1000 % 60);
    else
        snprintf(buf, n, "%lld h %lld min", ms / 3600000, ms / 60000 % 60);
    return buf;
}

const char *ccap_ops_who(char *buf, size_t n)
{
    char host[256] = "?";
    const char *user = getenv("SUDO_USER");
    struct passwd *pw = user && *user ? NULL : getpwuid(geteuid());
    if (!user || !*user)
        user = pw ? pw->pw_name : "?";
    gethostname(host, sizeof host - 1);
    snprintf(buf, n, "%s@%s", user, host);
    return buf;
}

/* The limit in force of S: the override key, else the configured one;
 * -1 on a Redis error. */
static long long limit_in_force(struct ccap_redis *r, const char *pfx, const struct ccap_sem_conf *s)
{
    char lk[600];
    if (ccap_sem_key(lk, sizeof lk, pfx, s->name, CCAP_KEY_LIMIT) < 0)
        return -1;
    redisReply *a = cmd(r, 2, (const char *[]){ "GET", lk });
    if (!a)
        return -1;
    char *end = NULL;
    long long v = a->type == REDIS_REPLY_STRING ? strtoll(a->str, &end, 10) : -1;
    bool ok = a->type == REDIS_REPLY_STRING && end != a->str && !*end && v >= 0;
    freeReplyObject(a);
    return ok ? v : s->limit;
}

/* Pushes a token to each waiter of ranks FROM..TO of queue QK of S (one
 * ZRANGE of at most OPS_WAKE_PAGE, then LPUSH/LTRIM/PEXPIRE each: every
 * call bounded). Returns the waiters woken (*READ: the members read), or
 * -errno. */
#define OPS_WAKE_PAGE 256 /* waiters read per ZRANGE: each call O(log N + 256) */

static long long wake_page(struct ccap_redis *r, const char *pfx, const struct ccap_sem_conf *s, const char *qk,
                           long long from, long long to, size_t *read)
{
    char wk[700], lo[24], hi[24], ttl[24];
    snprintf(lo, sizeof lo, "%lld", from);
    snprintf(hi, sizeof hi, "%lld", to);
    snprintf(ttl, sizeof ttl, "%d", s->lease_ms > 3000 ? s->lease_ms : 3000); /* a ticket's TTL at most */
    redisReply *q = cmd(r, 4, (const char *[]){ "ZRANGE", qk, lo, hi });
    if (!q)
        return -EIO;
    long long woken = 0;
    int rc = q->type == REDIS_REPLY_ARRAY ? 0 : -EPROTO;
    *read = rc == 0 ? q->elements : 0;
    for (size_t i = 0; rc == 0 && i < q->elements; i++) {
        if (q->element[i]->type != REDIS_REPLY_STRING ||
            ccap_sem_key(wk, sizeof wk, pfx, s->name, CCAP_KEY_WAKE) < 0 ||
            strlen(wk) + q->element[i]->len >= sizeof wk)
            continue;
        strcat(wk, q->element[i]->str);
        const char *push[] = { "LPUSH", wk, "w" }, *trim[] = { "LTRIM", wk, "0", "0" },
                   *pexp[] = { "PEXPIRE", wk, ttl };
        redisReply *a = cmd(r, 3, push), *b = a ? cmd(r, 4, trim) : NULL, *c = b ? cmd(r, 3, pexp) : NULL;
        rc = c ? 0 : -EIO;
        woken += c != NULL;
        redisReply *all[] = { a, b, c };
        for (int j = 0; j < 3; j++)
            if (all[j])
                freeReplyObject(all[j]);
    }
    freeReplyObject(q);
    return rc < 0 ? rc : woken;
}

long long ccap_ops_wake_queue(struct ccap_redis *r, const struct ccap_config *cfg, const struct ccap_sem_conf *s,
                              long long n)
{
    char qk[600];
    const char *pfx = cfg->redis.key_prefix;
    if (ccap_sem_key(qk, sizeof qk, pfx, s->name, CCAP_KEY_QUEUE) < 0)
        return -ENAMETOOLONG;
    if (n < 0 && (n = limit_in_force(r, pfx, s)) < 0)
        return -EIO;
    if (n > CCAP_OPS_WAKE_MAX)
        n = CCAP_OPS_WAKE_MAX;
    long long woken = 0;
    for (long long from = 0; from < n; from += OPS_WAKE_PAGE) {
        long long to = from + OPS_WAKE_PAGE < n ? from + OPS_WAKE_PAGE - 1 : n - 1;
        size_t read = 0;
        long long got = wake_page(r, pfx, s, qk, from, to, &read);
        if (got < 0)
            return got;
        woken += got;
        if ((long long)read < to - from + 1)
            break; /* the end of the queue */
    }
    return woken;
}

int ccap_ops_audit(struct ccap_redis *r, const struct ccap_config *cfg, const char *name, const char *const *kv,
                   int nkv)
{
    char key[600], maxlen[16];
    const char *argv[32];
    redisReply *rep;
    if (!cfg->audit)
        return 0;
    if (nkv > 26 || ccap_sem_key(key, sizeof key, cfg->redis.key_prefix, name, CCAP_KEY_AUDIT) < 0)
        return -EINVAL;
    snprintf(maxlen, sizeof maxlen, "%d", cfg->audit_maxlen);
    int argc = 0;
    argv[argc++] = "XADD";
    argv[argc++] = key;
    argv[argc++] = "MAXLEN";
    argv[argc++] = "~";
    argv[argc++] = maxlen;
    argv[argc++] = "*";
    for (int i = 0; i < nkv; i++)
        argv[argc++] = kv[i];
    int rc = ccap_redis_command(r, argc, argv, &rep);
    if (rc == 0)
        freeReplyObject(rep);
    return rc;
}

static void json_num(FILE *f, double v)
{
    if (v < 0)
        fprintf(f, "null");
    else
        fprintf(f, "%.3f", v);
}

void ccap_ops_json_sem(FILE *f, const struct ccap_ops_sem *s, bool first)
{
    fprintf(f, "%s{\"name\":", first ? "" : ",");
    ccap_ops_json_str(f, s->conf->name);
    fprintf(f, ",\"holders\":%lld,\"limit\":%lld,\"waiters\":%lld,\"full_for_ms\":%lld,\"counters\":{", s->holders,
            s->limit, s->waiters, ccap_ops_full_for_ms(s));
    for (int i = 0; i < CCAP_OPS_N_COUNTERS; i++)
        fprintf(f, "%s\"%s\":%lld", i ? "," : "", ccap_ops_counters[i].field, s->counter[i]);
    fprintf(f, "},\"wait\":{\"count\":%lld,\"sum_ms\":%lld,\"mean_ms\":", s->wait_count, s->wait_sum_ms);
    json_num(f, s->wait_count ? (double)s->wait_sum_ms / (double)s->wait_count : -1);
    const double qs[] = { 0.5, 0.9, 0.99 };
    const char *qn[] = { "p50_ms", "p90_ms", "p99_ms" };
    for (int i = 0; i < 3; i++) {
        fprintf(f, ",\"%s\":", qn[i]);
        json_num(f, ccap_ops_quantile(s->bucket, s->wait_count, qs[i]));
    }
    fprintf(f, ",\"buckets\":[");
    long long cum = 0;
    for (int i = 0; i <= CCAP_WAIT_N_BOUNDS; i++) {
        cum += s->bucket[i];
        if (i < CCAP_WAIT_N_BOUNDS)
            fprintf(f, "{\"le_ms\":%d,\"count\":%lld},", ccap_ops_bounds_ms[i], cum);
        else
            fprintf(f, "{\"le_ms\":null,\"count\":%lld}", cum);
    }
    fprintf(f, "]}}");
}

/* Counts the servers that have this build's library and those that do not. */
static void on_version(void *ctx, const char *node, const redisReply *rep, int rc)
{
    int *n = ctx;
    (void)node;
    if (rc == 0 && rep->type == REDIS_REPLY_STRING && !strcmp(rep->str, ccap_function_version()))
        n[0]++;
    else
        n[1]++;
}

int ccap_ops_functions_loaded(struct ccap_redis *r)
{
    char fn[64];
    snprintf(fn, sizeof fn, "conncap_version_%s", ccap_function_version());
    const char *args[] = { "FCALL_RO", fn, "0" };
    int n[2] = { 0, 0 };
    ccap_redis_command_each(r, 3, args, on_version, n);
    return n[0] > 0 && n[1] == 0;
}

void ccap_ops_warn_functions(const char *cmd)
{
    fprintf(stderr,
            "conncap %s: warning: the function library conncap_%s is not loaded (on every server): the "
            "shim runs the scripts with EVALSHA, so its Redis user needs EVAL rights and can run any Lua (weaker "
            "isolation); run "
            "`conncap setup` with an administrative user\n",
            cmd, ccap_function_version());
}
