/* watch.c -- `conncap watch [NAME]`: a refreshing view (like top) of counts, waiters and wait times. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "clock.h"
#include "ops.h"

#define USAGE "watch [-c FILE] [--json] [--interval SECONDS] [--iterations N] [NAME]"

const char ccap_help_watch[] = "Redraws every --interval SECONDS (default 1) a table of every semaphore (or\n"
                               "only NAME, then with its holders below): holders / limit, waiters, grants\n"
                               "and timeouts per second, the 50th/90th/99th percentile of the wait for a\n"
                               "permit (estimated from the histogram, over the last interval; the first\n"
                               "frame: over all time), and for how long no permit has been free.\n"
                               "Quits on q or Ctrl-C. When stdout is not a terminal it prints one snapshot\n"
                               "per interval, separated by blank lines, with no escape codes.\n"
                               "  --iterations N   stop after N frames (default 0: until q, Ctrl-C or SIGTERM)\n"
                               "  --json   one JSON object per frame and line: {time_ms, redis_ok, error,\n"
                               "           semaphores: [{name, holders, limit, override, waiters,\n"
                               "           acquired_per_s, timed_out_per_s (null on the first frame),\n"
                               "           p50_ms, p90_ms, p99_ms (null without waits), full_for_ms}]}\n"
                               "           (holders of NAME: conncap holders --json)\n"
                               "A Redis error shows in the frame and is retried at the next one (also when\n"
                               "Redis is down as watch starts).\n"
                               "Exit: 0 on q, Ctrl-C, SIGTERM or after N frames; 2 usage or config error, or\n"
                               "Redis down at the last frame.";

struct frame {
    struct ccap_ops_sem *st;
    bool ok;
};

static struct termios saved_tty;
static bool raw_tty;

static void tty_raw(void)
{
    struct termios t;
    if (!isatty(0) || tcgetattr(0, &saved_tty) < 0)
        return;
    t = saved_tty;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    raw_tty = tcsetattr(0, TCSANOW, &t) == 0;
}

static void tty_restore(void)
{
    if (raw_tty)
        tcsetattr(0, TCSANOW, &saved_tty);
    raw_tty = false;
}

/* Waits MS or until q is pressed or a signal stops us. Returns true to quit. */
static bool pause_or_quit(long long ms)
{
    long long end = ccap_now_ms() + ms;
    for (;;) {
        long long left = end - ccap_now_ms();
        if (ccap_ops_stop)
            return true;
        if (left <= 0)
            return false;
        struct pollfd p = { 0, POLLIN, 0 };
        int n = poll(&p, raw_tty ? 1 : 0, (int)left);
        if (n > 0) {
            char c;
            if (read(0, &c, 1) == 1 && (c == 'q' || c == 'Q'))
                return true;
        }
    }
}

static void pctl(FILE *f, const long long *bucket, long long n, double q)
{
    double v = ccap_ops_quantile(bucket, n, q);
    if (v < 0)
        fprintf(f, " %8s", "-");
    else
        fprintf(f, " %5.0f ms", v);
}

/* One row: CUR against PREV (NULL on the first frame). */
static void row(FILE *f, const struct ccap_ops_sem *cur, const struct ccap_ops_sem *prev)
{
    char hl[48], d[32];
    long long delta[CCAP_WAIT_N_BOUNDS + 1], n = 0;
    for (int i = 0; i <= CCAP_WAIT_N_BOUNDS; i++) {
        delta[i] = cur->bucket[i] - (prev ? prev->bucket[i] : 0);
        if (delta[i] < 0)
            delta[i] = 0;
        n += delta[i];
    }
    snprintf(hl, sizeof hl, "%lld/%lld%s", cur->holders, cur->limit, cur->override ? "*" : "");
    fprintf(f, "%-22s %12s %8lld", ccap_ops_esc(cur->conf->name), hl, cur->waiters);
    double secs = prev ? (double)(cur->now_ms - prev->now_ms) / 1000.0 : 0;
    if (prev && secs > 0) {
        long long acq = cur->counter[0] - prev->counter[0], tmo = cur->counter[2] - prev->counter[2];
        fprintf(f, " %7.1f %7.1f", (acq > 0 ? acq : 0) / secs, (tmo > 0 ? tmo : 0) / secs);
    } else {
        fprintf(f, " %7s %7s", "-", "-");
    }
    pctl(f, delta, n, 0.5);
    pctl(f, delta, n, 0.9);
    pctl(f, delta, n, 0.99);
    long long full = ccap_ops_full_for_ms(cur);
    fprintf(f, " %10s%s\n", full ? ccap_ops_duration(full, d, sizeof d) : "-",
            cur->holders > cur->limit ? "  OVER LIMIT" : "");
}

/* Reads every wanted semaphore into FR; returns the server time or -1. */
static long long read_frame(struct ccap_redis *r, const struct ccap_config *cfg, const char *only, struct frame *fr)
{
    long long now = ccap_ops_server_ms(r);
    fr->ok = now >= 0;
    for (size_t i = 0; fr->ok && i < cfg->n_sems; i++)
        if (!only || !strcmp(only, cfg->sems[i].name))
            fr->ok = ccap_ops_read(r, cfg, &cfg->sems[i], now, &fr->st[i]) == 0;
    return now;
}

static void json_ms(FILE *f, const char *key, double v)
{
    if (v < 0)
        fprintf(f, ",\"%s\":null", key);
    else
        fprintf(f, ",\"%s\":%.3f", key, v);
}

/* One semaphore of a --json frame: CUR against PREV (NULL on the first). */
static void json_row(FILE *f, const struct ccap_ops_sem *cur, const struct ccap_ops_sem *prev)
{
    long long delta[CCAP_WAIT_N_BOUNDS + 1], n = 0;
    for (int i = 0; i <= CCAP_WAIT_N_BOUNDS; i++) {
        delta[i] = cur->bucket[i] - (prev ? prev->bucket[i] : 0);
        if (delta[i] < 0)
            delta[i] = 0;
        n += delta[i];
    }
    fputs("{\"name\":", f);
    ccap_ops_json_str(f, cur->conf->name);
    fprintf(f, ",\"holders\":%lld,\"limit\":%lld,\"override\":%s,\"waiters\":%lld", cur->holders, cur->limit,
            cur->override ? "true" : "false", cur->waiters);
    double secs = prev ? (double)(cur->now_ms - prev->now_ms) / 1000.0 : 0;
    long long acq = prev ? cur->counter[0] - prev->counter[0] : 0,
              tmo = prev ? cur->counter[2] - prev->counter[2] : 0;
    json_ms(f, "acquired_per_s", secs > 0 ? (acq > 0 ? acq : 0) / secs : -1);
    json_ms(f, "timed_out_per_s", secs > 0 ? (tmo > 0 ? tmo : 0) / secs : -1);
    json_ms(f, "p50_ms", ccap_ops_quantile(delta, n, 0.5));
    json_ms(f, "p90_ms", ccap_ops_quantile(delta, n, 0.9));
    json_ms(f, "p99_ms", ccap_ops_quantile(delta, n, 0.99));
    fprintf(f, ",\"full_for_ms\":%lld}", ccap_ops_full_for_ms(cur));
}

/* Reads a frame into FR and writes it as one JSON line to F. */
static void draw_json(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg, const char *only,
                      struct frame *fr, const struct frame *prev)
{
    long long now = read_frame(r, cfg, only, fr);
    fprintf(f, "{\"time_ms\":%lld,\"redis_ok\":%s,\"error\":", fr->ok ? now : (long long)time(NULL) * 1000,
            fr->ok ? "true" : "false");
    if (fr->ok)
        fputs("null", f);
    else
        ccap_ops_json_str(f, ccap_redis_errstr(r)[0] ? ccap_redis_errstr(r) : "no answer");
    fputs(",\"semaphores\":[", f);
    bool first = true;
    for (size_t i = 0; fr->ok && i < cfg->n_sems; i++) {
        if (only && strcmp(only, cfg->sems[i].name))
            continue;
        fputs(first ? "" : ",", f);
        json_row(f, &fr->st[i], prev && prev->ok ? &prev->st[i] : NULL);
        first = false;
    }
    fputs("]}\n", f);
}

/* Reads every wanted semaphore into FR; renders the frame text into F. */
static void draw(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg, const char *only, struct frame *fr,
                 const struct frame *prev, double interval, size_t max_rows)
{
    long long now = read_frame(r, cfg, only, fr);
    char when[64] = "?";
    time_t t = now >= 0 ? (time_t)(now / 1000) : time(NULL);
    struct tm tm;
    if (localtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    fprintf(f, "conncap watch -- every %.1f s -- %s -- q quits\n", interval, when);
    if (!fr->ok) {
        fprintf(f, "redis: %s (retrying)\n",
                ccap_redis_errstr(r)[0] ? ccap_ops_esc(ccap_redis_errstr(r)) : "no answer");
        return;
    }
    fprintf(f, "%-22s %12s %8s %7s %7s %8s %8s %8s %10s\n", "SEMAPHORE", "HOLD/LIMIT", "WAITERS", "ACQ/s", "TMO/s",
            "WAIT p50", "p90", "p99", "FULL FOR");
    for (size_t i = 0; i < cfg->n_sems; i++)
        if (!only || !strcmp(only, cfg->sems[i].name))
            row(f, &fr->st[i], prev && prev->ok ? &prev->st[i] : NULL);
    if (only) {
        fprintf(f, "\n");
        ccap_ops_holders_table(f, r, cfg, only, max_rows);
    }
}

/* What one watch run shows: options and the two frames it alternates. */
struct view {
    const struct ccap_config *cfg;
    const char *only; /* NAME, or NULL for every semaphore */
    bool json, tty;
    double interval;      /* s */
    long long iterations; /* 0: until q, Ctrl-C or SIGTERM */
};

/* Holder rows of `watch NAME` that fit on the terminal (at least 3). */
static size_t holder_rows(const struct view *v)
{
    struct winsize ws = { 0 };
    long room = v->tty && ioctl(1, TIOCGWINSZ, &ws) == 0 ? (long)ws.ws_row - 6 - (long)v->cfg->n_sems : 1000;
    return room > 3 ? (size_t)room : 3;
}

/* Draws one frame into CUR (against PREV) and writes it to stdout at once.
 * Returns false when out of memory. */
static bool show_frame(const struct view *v, struct ccap_redis *r, struct frame *cur, const struct frame *prev)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return false;
    if (v->json)
        draw_json(f, r, v->cfg, v->only, cur, prev);
    else
        draw(f, r, v->cfg, v->only, cur, prev, v->interval, holder_rows(v));
    fclose(f);
    if (v->tty)
        fputs("\033[H\033[2J", stdout);
    fwrite(text, 1, len, stdout);
    if (!v->tty && !v->json)
        fputc('\n', stdout);
    fflush(stdout);
    free(text);
    return true;
}

/* Draws frames until the end V asks for; returns whether Redis answered
 * the last one, or -1 when out of memory. */
static int run_frames(const struct view *v, struct ccap_redis *r)
{
    size_t ns = v->cfg->n_sems ? v->cfg->n_sems : 1;
    struct frame a = { calloc(ns, sizeof(struct ccap_ops_sem)), false },
                 b = { calloc(ns, sizeof(struct ccap_ops_sem)), false };
    struct frame *cur = &a, *prev = NULL;
    int last_ok = a.st && b.st ? 0 : -1;
    for (long long it = 0; last_ok >= 0 && !ccap_ops_stop; it++) {
        if (!show_frame(v, r, cur, prev))
            break;
        last_ok = cur->ok;
        if (v->iterations && it + 1 >= v->iterations)
            break;
        if (cur->ok) { /* the next frame compares with this one */
            prev = cur;
            cur = cur == &a ? &b : &a;
        }
        if (pause_or_quit((long long)(v->interval * 1000)))
            break;
    }
    free(a.st);
    free(b.st);
    return last_ok;
}

int ccap_cmd_watch(int argc, char **argv)
{
    struct ccap_cli_opts o;
    struct view v = { .interval = 1, .iterations = 0 };
    char *ops[1];
    const struct ccap_opt opts[] = { { "interval", CCAP_OPT_NUM, &v.interval, 0.1, 3600 },
                                     { "iterations", CCAP_OPT_INT, &v.iterations, 0, 1e9 },
                                     { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, ops, 1);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    /* Not connected up front: started while Redis is down, it shows that and
     * keeps trying (each frame reconnects as needed). */
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg)
        return CCAP_EXIT_USAGE;
    struct ccap_redis *r = ccap_cli_redis_new(cfg);
    if (!r) {
        fprintf(stderr, "conncap: out of memory\n");
        ccap_config_free(cfg);
        return CCAP_EXIT_USAGE;
    }
    if (n == 1 && !ccap_ops_sem(cfg, "watch", ops[0])) {
        ccap_ops_close(cfg, r);
        return CCAP_EXIT_USAGE;
    }
    v.cfg = cfg;
    v.only = n == 1 ? ops[0] : NULL;
    v.json = o.json;
    v.tty = isatty(1) && !o.json;
    ccap_ops_catch_signals();
    if (v.tty) {
        tty_raw();
        fputs("\033[?25l", stdout); /* hide the cursor */
    }
    int last_ok = run_frames(&v, r);
    if (v.tty) {
        fputs("\033[?25h", stdout);
        fflush(stdout);
        tty_restore();
    }
    /* the last frame drawn tells: Redis unreachable to the end is an error */
    int rc = last_ok == 0 ? CCAP_EXIT_USAGE : CCAP_EXIT_OK;
    if (rc != CCAP_EXIT_OK)
        ccap_cli_redis_error(cfg, r);
    ccap_ops_close(cfg, r);
    return rc;
}
