/* metrics.c -- `conncap metrics`: Prometheus text exposition, printed or served over HTTP/1.0. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "ops.h"

#define USAGE "metrics [-c FILE] [--json | --listen ADDR:PORT]"
#define REQ_MAX 8192          /* bytes of request line + headers we accept */
#define IO_TIMEOUT_MS 5000    /* per connection, to read the request and to send the reply */

const char ccap_help_metrics[] =
    "Prints every configured semaphore's state in the Prometheus text exposition\n"
    "format 0.0.4 (# HELP, # TYPE, samples labelled semaphore=\"NAME\"):\n"
    "  conncap_redis_up, conncap_holders, conncap_limit, conncap_configured_limit,\n"
    "  conncap_waiters, conncap_full_seconds (gauges), conncap_acquired_total,\n"
    "  conncap_released_total, conncap_timed_out_total, conncap_denied_total,\n"
    "  conncap_reclaimed_total, conncap_reregistered_total,\n"
    "  conncap_fallback_granted_total, conncap_reset_dropped_total (counters),\n"
    "  conncap_wait_seconds (histogram: _bucket{le=...}, _sum, _count).\n"
    "For the node_exporter textfile collector:\n"
    "  conncap metrics > DIR/conncap.prom.tmp && mv DIR/conncap.prom.tmp DIR/conncap.prom\n"
    "  --listen ADDR:PORT  serve GET /metrics over HTTP/1.0 instead (one request at\n"
    "           a time, requests up to 8 KiB, 5 s to send one); ADDR may be a name,\n"
    "           an IPv4 address, [IPv6] or empty (all interfaces); PORT 0 picks a\n"
    "           free port. The address is printed on stderr. A scrape while Redis\n"
    "           is unreachable gets conncap_redis_up 0 and no other samples.\n"
    "           Stops on SIGINT or SIGTERM (exit 0).\n"
    "  --json   print the same figures as one JSON object instead: {redis_up,\n"
    "           now_ms, semaphores: [...]} with each semaphore as stats --json\n"
    "           gives it (not with --listen: a scrape gets the text format)\n"
    "Exit: 0 ok, 2 usage, config or Redis error (printing: nothing on stdout).";

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: \, " and newline escaped as the format asks. */
static void label(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"') fprintf(f, "\\%c", *v);
        else if (*v == '\n') fputs("\\n", f);
        else fputc(*v, f);
    }
}

static void sample(FILE *f, const char *name, const struct ccap_ops_sem *s, long long v)
{
    fprintf(f, "%s{semaphore=\"", name);
    label(f, s->conf->name);
    fprintf(f, "\"} %lld\n", v);
}

static void histogram(FILE *f, const struct ccap_ops_sem *st, size_t n)
{
    family(f, "conncap_wait_seconds", "histogram",
           "Wait from the first acquire attempt to a permit or a timeout, measured by the acquirer.");
    for (size_t i = 0; i < n; i++) {
        long long cum = 0;
        for (int b = 0; b <= CCAP_WAIT_N_BOUNDS; b++) {
            cum += st[i].bucket[b];
            fputs("conncap_wait_seconds_bucket{semaphore=\"", f);
            label(f, st[i].conf->name);
            if (b < CCAP_WAIT_N_BOUNDS) fprintf(f, "\",le=\"%g\"} %lld\n", ccap_ops_bounds_ms[b] / 1000.0, cum);
            else fprintf(f, "\",le=\"+Inf\"} %lld\n", cum);
        }
        fputs("conncap_wait_seconds_sum{semaphore=\"", f);
        label(f, st[i].conf->name);
        fprintf(f, "\"} %.3f\n", st[i].wait_sum_ms / 1000.0);
        /* _count equals the +Inf bucket, as the format requires */
        sample(f, "conncap_wait_seconds_count", &st[i], cum);
    }
}

/* Writes the exposition to F. Returns 0, or -1 when Redis could not be
 * read (then only conncap_redis_up 0 is written). */
static int render(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg)
{
    struct ccap_ops_sem *st = calloc(cfg->n_sems ? cfg->n_sems : 1, sizeof(*st));
    long long now = st ? ccap_ops_server_ms(r) : -1;
    int ok = now >= 0;
    for (size_t i = 0; ok && i < cfg->n_sems; i++)
        ok = ccap_ops_read(r, cfg, &cfg->sems[i], now, &st[i]) == 0;
    family(f, "conncap_redis_up", "gauge", "1 if this scrape could read the semaphores from Redis, else 0.");
    fprintf(f, "conncap_redis_up %d\n", ok);
    if (!ok) {
        free(st);
        return -1;
    }
    size_t n = cfg->n_sems;
    family(f, "conncap_holders", "gauge", "Connections holding a permit now (live leases), over the fleet.");
    for (size_t i = 0; i < n; i++) sample(f, "conncap_holders", &st[i], st[i].holders);
    family(f, "conncap_limit", "gauge", "Permits for the whole fleet: the limit in force (runtime override or configured).");
    for (size_t i = 0; i < n; i++) sample(f, "conncap_limit", &st[i], st[i].limit);
    family(f, "conncap_configured_limit", "gauge", "The limit in the configuration file.");
    for (size_t i = 0; i < n; i++) sample(f, "conncap_configured_limit", &st[i], st[i].conf->limit);
    family(f, "conncap_waiters", "gauge", "Acquirers refused and still waiting for a permit.");
    for (size_t i = 0; i < n; i++) sample(f, "conncap_waiters", &st[i], st[i].waiters);
    family(f, "conncap_full_seconds", "gauge", "Seconds since no permit has been free (0 while one is).");
    for (size_t i = 0; i < n; i++) {
        fputs("conncap_full_seconds{semaphore=\"", f);
        label(f, st[i].conf->name);
        fprintf(f, "\"} %.3f\n", ccap_ops_full_for_ms(&st[i]) / 1000.0);
    }
    for (int c = 0; c < CCAP_OPS_N_COUNTERS; c++) {
        family(f, ccap_ops_counters[c].metric, "counter", ccap_ops_counters[c].help);
        for (size_t i = 0; i < n; i++) sample(f, ccap_ops_counters[c].metric, &st[i], st[i].counter[c]);
    }
    histogram(f, st, n);
    free(st);
    return 0;
}

/* ---- the HTTP/1.0 server ---- */

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Waits until FD is ready for EV before DEADLINE; returns 1, 0 (timeout or stop) or -1. */
static int wait_fd(int fd, short ev, long long deadline)
{
    for (;;) {
        long long left = deadline - mono_ms();
        if (left <= 0 || ccap_ops_stop) return 0;
        struct pollfd p = { fd, ev, 0 };
        int n = poll(&p, 1, (int)left);
        if (n > 0) return 1;
        if (n < 0 && errno != EINTR) return -1;
    }
}

static void send_all(int fd, const char *buf, size_t len, long long deadline)
{
    while (len > 0 && wait_fd(fd, POLLOUT, deadline) == 1) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w < 0 && errno != EINTR && errno != EAGAIN) return;
        if (w > 0) {
            buf += w;
            len -= (size_t)w;
        }
    }
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t len, bool head,
                  long long deadline)
{
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, type, len);
    send_all(fd, hdr, (size_t)n, deadline);
    if (!head) send_all(fd, body, len, deadline);
}

/* Reads one request (bounded in size and time) and answers it. */
static void serve_one(int fd, struct ccap_redis *r, const struct ccap_config *cfg)
{
    static const char text[] = "text/plain; charset=utf-8";
    char req[REQ_MAX + 1], method[16], path[1024];
    size_t got = 0;
    req[0] = '\0';
    long long deadline = mono_ms() + IO_TIMEOUT_MS;
    while (!strstr(req, "\r\n\r\n") && !strstr(req, "\n\n")) {
        if (got == REQ_MAX) {
            const char m[] = "request too large\n";
            reply(fd, "431 Request Header Fields Too Large", text, m, sizeof m - 1, false, deadline);
            return;
        }
        if (wait_fd(fd, POLLIN, deadline) != 1) return;
        ssize_t n = recv(fd, req + got, REQ_MAX - got, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return;
        got += (size_t)n;
        req[got] = '\0';
    }
    /* request line: METHOD SP PATH SP HTTP/x.y */
    char *sp1 = strchr(req, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp2 || sp1 == req || (size_t)(sp1 - req) >= sizeof method || sp2 == sp1 + 1 ||
        (size_t)(sp2 - sp1 - 1) >= sizeof path || strncmp(sp2 + 1, "HTTP/", 5)) {
        const char m[] = "bad request\n";
        reply(fd, "400 Bad Request", text, m, sizeof m - 1, false, deadline);
        return;
    }
    snprintf(method, sizeof method, "%.*s", (int)(sp1 - req), req);
    snprintf(path, sizeof path, "%.*s", (int)(sp2 - sp1 - 1), sp1 + 1);
    bool head = !strcmp(method, "HEAD");
    if (!head && strcmp(method, "GET")) {
        const char m[] = "only GET and HEAD\n";
        reply(fd, "405 Method Not Allowed", text, m, sizeof m - 1, false, deadline);
        return;
    }
    if (strcmp(path, "/metrics") && strncmp(path, "/metrics?", 9)) {
        const char m[] = "not found: the metrics are at /metrics\n";
        reply(fd, "404 Not Found", text, m, sizeof m - 1, head, deadline);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&body, &len);
    if (!f) {
        reply(fd, "500 Internal Server Error", text, "", 0, head, deadline);
        return;
    }
    render(f, r, cfg);
    fclose(f);
    reply(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len, head, deadline);
    free(body);
}

/* Opens a listening socket on SPEC ("host:port", "[v6]:port", ":port"). */
static int listen_on(const char *spec)
{
    char host[256];
    const char *port;
    if (spec[0] == '[') {
        const char *e = strchr(spec, ']');
        if (!e || e[1] != ':' || (size_t)(e - spec) > sizeof host) return -EINVAL;
        snprintf(host, sizeof host, "%.*s", (int)(e - spec - 1), spec + 1);
        port = e + 2;
    } else {
        const char *c = strrchr(spec, ':');
        if (!c || (size_t)(c - spec) >= sizeof host) return -EINVAL;
        snprintf(host, sizeof host, "%.*s", (int)(c - spec), spec);
        port = c + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 0 || p > 65535) return -EINVAL;
    struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *a;
    int e = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (e) {
        fprintf(stderr, "conncap metrics: %s: %s\n", spec, gai_strerror(e));
        return -EINVAL;
    }
    int fd = -1, err = 0;
    for (a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) { err = errno; continue; }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, 16) < 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        fprintf(stderr, "conncap metrics: cannot listen on %s: %s\n", spec, strerror(err));
        return -err;
    }
    return fd;
}

static void print_bound(int fd)
{
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getsockname(fd, (struct sockaddr *)&ss, &l) == 0 &&
        getnameinfo((struct sockaddr *)&ss, l, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        fprintf(stderr, "conncap metrics: serving http://%s%s%s:%s/metrics\n", strchr(h, ':') ? "[" : "", h,
                strchr(h, ':') ? "]" : "", p);
}

static int serve(const char *spec, struct ccap_config *cfg)
{
    int lfd = listen_on(spec);
    if (lfd < 0) return CCAP_EXIT_USAGE;
    struct ccap_redis *r = ccap_cli_redis_new(cfg);
    if (!r) {
        close(lfd);
        return CCAP_EXIT_USAGE;
    }
    if (ccap_redis_connect(r) < 0)
        fprintf(stderr, "conncap metrics: redis: %s (serving conncap_redis_up 0 until it answers)\n",
                ccap_ops_esc(ccap_redis_errstr(r)));
    ccap_ops_catch_signals();
    print_bound(lfd);
    while (!ccap_ops_stop) {
        struct pollfd p = { lfd, POLLIN, 0 };
        if (poll(&p, 1, -1) <= 0) continue; /* EINTR: look at the stop flag */
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) continue;
        serve_one(c, r, cfg);
        close(c);
    }
    ccap_redis_free(r);
    close(lfd);
    return CCAP_EXIT_OK;
}

/* The figures as one JSON object to F; 0, or -1 when Redis could not be read. */
static int render_json(FILE *f, struct ccap_redis *r, const struct ccap_config *cfg)
{
    struct ccap_ops_sem *st = calloc(cfg->n_sems ? cfg->n_sems : 1, sizeof(*st));
    long long now = st ? ccap_ops_server_ms(r) : -1;
    int ok = now >= 0;
    for (size_t i = 0; ok && i < cfg->n_sems; i++)
        ok = ccap_ops_read(r, cfg, &cfg->sems[i], now, &st[i]) == 0;
    if (ok) {
        fprintf(f, "{\"redis_up\":1,\"now_ms\":%lld,\"semaphores\":[", now);
        for (size_t i = 0; i < cfg->n_sems; i++) ccap_ops_json_sem(f, &st[i], i == 0);
        fprintf(f, "]}\n");
    }
    free(st);
    return ok ? 0 : -1;
}

int ccap_cmd_metrics(int argc, char **argv)
{
    struct ccap_cli_opts o;
    const char *listen_spec = NULL;
    char *ops[1];
    const struct ccap_opt opts[] = { { "listen", CCAP_OPT_STR, &listen_spec, 0, 0 }, { NULL } };
    int n = ccap_ops_parse(argc, argv, USAGE, &o, opts, ops, 0);
    if (n < 0) return CCAP_EXIT_USAGE;
    if (o.json && listen_spec) {
        fprintf(stderr, "conncap metrics: --json does not apply to --listen (a scrape gets the text format)\n"
                        "usage: conncap %s\n", USAGE);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg) return CCAP_EXIT_USAGE;
    int rc;
    if (listen_spec) {
        rc = serve(listen_spec, cfg);
    } else {
        struct ccap_redis *r = ccap_cli_redis(cfg);
        char *body = NULL;
        size_t len = 0;
        FILE *f = r ? open_memstream(&body, &len) : NULL;
        rc = CCAP_EXIT_USAGE;
        if (f) {
            int e = o.json ? render_json(f, r, cfg) : render(f, r, cfg);
            fclose(f);
            if (e == 0) {
                fwrite(body, 1, len, stdout);
                rc = CCAP_EXIT_OK;
            } else {
                fprintf(stderr, "conncap metrics: redis: %s\n", ccap_ops_esc(ccap_redis_errstr(r)));
            }
        }
        free(body);
        ccap_redis_free(r);
    }
    ccap_config_free(cfg);
    return rc;
}
