/* explain.c -- `conncap explain`: which rule and semaphore a destination gets, and why. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "names.h"
#include "ops.h"

#define MAX_ADDRS 64
#define MAX_KNOWN 64

static const char *usage = "explain [-c FILE] [--json] HOST[:PORT]";

const char ccap_help_explain[] = "Says which rule and semaphore a connect to HOST[:PORT] gets, and why. HOST\n"
                                 "is resolved as a program's getaddrinfo() would, and the names of\n"
                                 "resolve = true rules as the shim would; then for each address: the first\n"
                                 "rule that matches (by the address, or by a name recorded for it), its\n"
                                 "semaphore and limits, and the pattern and name that matched. Without a\n"
                                 "PORT, patterns limited to ports count as matching (it says so). A name that\n"
                                 "does not resolve is matched by name alone. HOST may be an address\n"
                                 "(10.0.0.5:443, [2001:db8::1]:443, ::1). No Redis is contacted.\n"
                                 "  --json   one JSON object: {destination, host, port (null: any),\n"
                                 "           literal, resolves, resolve_error, addresses: [{address, port,\n"
                                 "           rule, line, semaphore, limit, lease_ms, wait_timeout_ms,\n"
                                 "           because, ports_assumed}] (rule null: no rule matches),\n"
                                 "           by_name (the same for the name alone, when it does not\n"
                                 "           resolve), matched, rule, semaphore}; notes go to stderr\n"
                                 "Exit: 0 matched, 1 not matched, 2 usage or configuration error.";

/* What one address (or the name alone) gets. */
struct verdict {
    char addr[INET6_ADDRSTRLEN + 8]; /* "" for the name alone */
    int port;
    const struct ccap_rule *rule; /* NULL: no rule matches */
    char why[1024];
    bool ports_assumed; /* no port given, the rule names ports */
};

struct target {
    char host[256]; /* normalised name, or the address as given */
    bool literal;   /* an IP address, not a name */
    int port;       /* 0: not given (any port) */
};

/* A name the shim would know, and who looked it up. */
struct known {
    char name[256];
    char origin[96];
};

struct ctx {
    const struct ccap_config *cfg;
    struct ccap_names *map;
    struct known known[MAX_KNOWN];
    size_t n_known;
    FILE *out;   /* the text: stdout, or a sink with --json */
    FILE *notes; /* stdout, or stderr with --json */
    struct verdict v[MAX_ADDRS + 1];
    size_t n_v;
};

static int bad_target(const char *text, const char *why)
{
    fprintf(stderr, "conncap explain: bad destination \"%s\": %s\nusage: conncap %s\n", text, why, usage);
    return -1;
}

/* HOST, HOST:PORT, [IPv6], [IPv6]:PORT, or a bare IPv6 address (no port). */
static int parse_target(const char *text, struct target *t)
{
    char host[256];
    const char *port = NULL;
    memset(t, 0, sizeof *t);
    if (text[0] == '[') {
        const char *rb = strchr(text, ']');
        if (!rb || (size_t)(rb - text - 1) >= sizeof host)
            return bad_target(text, "missing \"]\"");
        memcpy(host, text + 1, (size_t)(rb - text - 1));
        host[rb - text - 1] = '\0';
        if (rb[1] == ':')
            port = rb + 2;
        else if (rb[1])
            return bad_target(text, "want [IPv6]:PORT");
    } else {
        const char *c = strchr(text, ':');
        size_t n = c && !strchr(c + 1, ':') ? (size_t)(c - text) : strlen(text);
        if (n >= sizeof host)
            return bad_target(text, "too long");
        memcpy(host, text, n);
        host[n] = '\0';
        if (c && !strchr(c + 1, ':'))
            port = c + 1;
    }
    if (port) {
        char *end;
        long v = strtol(port, &end, 10);
        if (!*port || *end || v < 1 || v > 65535 || *port == '+' || *port == '-')
            return bad_target(text, "the port must be 1-65535");
        t->port = (int)v;
    }
    unsigned char buf[16];
    if (inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1) {
        t->literal = true;
        snprintf(t->host, sizeof t->host, "%s", host);
        return 0;
    }
    if (ccap_name_normalize(host, t->host, sizeof t->host) < 0)
        return bad_target(text, "not an IP address or a valid host name");
    return 0;
}

static void addr_text(const struct ccap_addr *a, char *out, size_t n)
{
    char ip[INET6_ADDRSTRLEN];
    inet_ntop(a->family, a->addr, ip, sizeof ip);
    snprintf(out, n, a->family == AF_INET6 ? "[%s]" : "%s", ip);
}

/* getaddrinfo(NAME) as the shim and most programs call it: every address,
 * IPv4-mapped ones as IPv4, each once. Returns the count or -EAI code. */
static int lookup(const char *name, struct ccap_addr *out, size_t max, const char **why)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    int rc = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0) {
        *why = rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc);
        return -1;
    }
    size_t n = 0;
    for (struct addrinfo *ai = res; ai && n < max; ai = ai->ai_next) {
        struct ccap_addr a;
        memset(&a, 0, sizeof a);
        if (ccap_addr_from_sa(ai->ai_addr, ai->ai_addrlen, &a) < 0)
            continue;
        size_t i = 0;
        while (i < n && !(out[i].family == a.family && !memcmp(out[i].addr, a.addr, 16)))
            i++;
        if (i == n)
            out[n++] = a;
    }
    freeaddrinfo(res);
    return (int)n;
}

static void learn(struct ctx *c, const char *name, const char *origin, const struct ccap_addr *addrs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ccap_names_add(c->map, &addrs[i], name, 0, CCAP_NAMES_TTL_MS);
    for (size_t i = 0; i < c->n_known; i++)
        if (!strcmp(c->known[i].name, name))
            return;
    if (c->n_known < MAX_KNOWN) {
        snprintf(c->known[c->n_known].name, sizeof c->known[0].name, "%s", name);
        snprintf(c->known[c->n_known++].origin, sizeof c->known[0].origin, "%s", origin);
    }
}

/* The names of resolve = true rules, looked up as the shim would. */
static void learn_resolve_names(struct ctx *c)
{
    for (size_t i = 0; i < c->cfg->n_rules; i++) {
        const struct ccap_rule *r = &c->cfg->rules[i];
        for (size_t k = 0; r->resolve && k < r->n_pats; k++) {
            const struct ccap_pattern *p = &r->pats[k];
            struct ccap_addr addrs[MAX_ADDRS];
            const char *why = NULL;
            if (p->kind == CCAP_PAT_WILDCARD) {
                fprintf(
                    c->notes,
                    "note: rule %zu has resolve = true; the wildcard \"%s\" cannot be looked up (it matches only "
                    "names the program resolves)\n",
                    i + 1, p->text);
                continue;
            }
            if (p->kind != CCAP_PAT_HOST)
                continue;
            int n = lookup(p->name, addrs, MAX_ADDRS, &why);
            char origin[96];
            snprintf(origin, sizeof origin, "looked up by the shim: resolve = true in rule %zu", i + 1);
            if (n < 0)
                fprintf(c->notes, "note: rule %zu has resolve = true, but %s does not resolve now (%s)\n", i + 1,
                        p->name, why);
            else
                learn(c, p->name, origin, addrs, (size_t)n);
        }
    }
}

static const char *origin_of(const struct ctx *c, const char *name)
{
    for (size_t i = 0; i < c->n_known; i++)
        if (!strcmp(c->known[i].name, name))
            return c->known[i].origin;
    return "?";
}

/* PAT, with any port when the destination has none. */
static struct ccap_pattern widen(const struct ccap_pattern *pat, int port)
{
    struct ccap_pattern p = *pat;
    if (!port)
        p.port_lo = 0, p.port_hi = 65535;
    return p;
}

struct names_buf {
    const char *v[MAX_KNOWN];
    size_t n;
};

static bool collect(const char *name, void *arg)
{
    struct names_buf *b = arg;
    if (b->n < MAX_KNOWN)
        b->v[b->n++] = name; /* the map outlives this command's use of it */
    return false;
}

/* Why rule R matches A: writes the reason into WHY and returns true. */
static bool rule_matches(const struct ctx *c, const struct ccap_rule *r, const struct ccap_addr *a, int port,
                         const struct names_buf *names, char *why, size_t n)
{
    struct ccap_addr ap = *a;
    ap.port = (uint16_t)port;
    for (size_t k = 0; k < r->n_pats; k++) {
        struct ccap_pattern p = widen(&r->pats[k], port);
        if (p.kind == CCAP_PAT_ADDR) {
            if (ccap_pattern_match_ccap_addr(&p, &ap)) {
                snprintf(why, n, "the address matches pattern \"%s\"", r->pats[k].text);
                return true;
            }
            continue;
        }
        for (size_t i = 0; i < names->n; i++)
            if (ccap_pattern_match_name(&p, names->v[i], (uint16_t)port)) {
                snprintf(why, n, "the name %s (%s) matches pattern \"%s\"", names->v[i], origin_of(c, names->v[i]),
                         r->pats[k].text);
                return true;
            }
    }
    return false;
}

static void print_rule(FILE *f, const struct ccap_config *cfg, const struct ccap_rule *r)
{
    const struct ccap_sem_conf *s = &cfg->sems[r->sem];
    fprintf(
        f, "rule %zu (%s:%d) -> semaphore \"%s\" (limit %d, lease %d ms, wait %d ms; non-blocking: %s %s)",
        (size_t)(r - cfg->rules) + 1, r->file ? r->file : cfg->path, r->line, s->name, s->limit, s->lease_ms,
        s->wait_timeout_ms,
        cfg->nonblocking == CCAP_NONBLOCK_FAIL   ? "fail at once with"
        : cfg->nonblocking == CCAP_NONBLOCK_WAIT ? "the thread waits, then fails with"
                                                 : "queued until its turn, then fails with",
        ccap_errno_name(cfg->nonblocking == CCAP_NONBLOCK_QUEUE ? cfg->on_timeout_errno : cfg->nonblocking_errno));
}

/* Explains one address (recorded in C's verdicts); returns the rule that
 * applies, or NULL. */
static const struct ccap_rule *explain_addr(struct ctx *c, const struct ccap_addr *a, int port)
{
    struct verdict *v = &c->v[c->n_v++];
    struct names_buf names = { .n = 0 };
    memset(v, 0, sizeof *v);
    addr_text(a, v->addr, sizeof v->addr);
    v->port = port;
    ccap_names_each(c->map, a, 0, collect, &names);
    if (port)
        fprintf(c->out, "%s:%d: ", v->addr, port);
    else
        fprintf(c->out, "%s (any port): ", v->addr);
    for (size_t i = 0; i < c->cfg->n_rules && !v->rule; i++)
        if (rule_matches(c, &c->cfg->rules[i], a, port, &names, v->why, sizeof v->why))
            v->rule = &c->cfg->rules[i];
    if (!v->rule) {
        fprintf(c->out, "no rule matches: not capped (no Redis call)\n");
        return NULL;
    }
    print_rule(c->out, c->cfg, v->rule);
    fprintf(c->out, "\n    because %s\n", v->why);
    for (size_t k = 0; !port && k < v->rule->n_pats; k++)
        v->ports_assumed |= v->rule->pats[k].port_lo != 0 || v->rule->pats[k].port_hi != 65535;
    if (v->ports_assumed)
        fprintf(c->out, "    (no port given: patterns limited to ports were taken as matching)\n");
    return v->rule;
}

/* The destination does not resolve: which rule its name alone would take
 * (recorded in C's verdicts). */
static const struct ccap_rule *explain_name_only(struct ctx *c, const struct target *t)
{
    struct verdict *v = &c->v[c->n_v++];
    memset(v, 0, sizeof *v);
    v->port = t->port;
    for (size_t i = 0; i < c->cfg->n_rules; i++) {
        const struct ccap_rule *r = &c->cfg->rules[i];
        for (size_t k = 0; k < r->n_pats; k++) {
            struct ccap_pattern p = widen(&r->pats[k], t->port);
            if (p.kind != CCAP_PAT_ADDR && ccap_pattern_match_name(&p, t->host, (uint16_t)t->port)) {
                v->rule = r;
                snprintf(v->why, sizeof v->why,
                         "the name %s matches pattern \"%s\" (the shim sees it once it "
                         "resolves)",
                         t->host, r->pats[k].text);
                fprintf(c->out, "by name alone: ");
                print_rule(c->out, c->cfg, r);
                fprintf(c->out, "\n    because %s\n", v->why);
                return r;
            }
        }
    }
    fprintf(c->out, "by name alone: no rule matches\n");
    return NULL;
}

static void json_verdict(const struct ccap_config *cfg, const struct verdict *v)
{
    printf("{\"address\":");
    if (v->addr[0])
        ccap_ops_json_str(stdout, v->addr);
    else
        printf("null");
    printf(v->port ? ",\"port\":%d" : ",\"port\":null", v->port);
    if (!v->rule) {
        printf(",\"rule\":null}");
        return;
    }
    const struct ccap_sem_conf *s = &cfg->sems[v->rule->sem];
    printf(",\"rule\":%zu,\"line\":%d,\"semaphore\":", (size_t)(v->rule - cfg->rules) + 1, v->rule->line);
    ccap_ops_json_str(stdout, s->name);
    printf(",\"limit\":%d,\"lease_ms\":%d,\"wait_timeout_ms\":%d,\"because\":", s->limit, s->lease_ms,
           s->wait_timeout_ms);
    ccap_ops_json_str(stdout, v->why);
    printf(",\"ports_assumed\":%s}", v->ports_assumed ? "true" : "false");
}

/* The whole answer as one JSON object (see ccap_help_explain). */
static void print_json(const struct ctx *c, const char *text, const struct target *t, const char *unresolved,
                       const struct ccap_rule *first)
{
    printf("{\"destination\":");
    ccap_ops_json_str(stdout, text);
    printf(",\"host\":");
    ccap_ops_json_str(stdout, t->host);
    printf(t->port ? ",\"port\":%d" : ",\"port\":null", t->port);
    printf(",\"literal\":%s,\"resolves\":%s,\"resolve_error\":", t->literal ? "true" : "false",
           unresolved ? "false" : "true");
    if (unresolved)
        ccap_ops_json_str(stdout, unresolved);
    else
        printf("null");
    printf(",\"addresses\":[");
    size_t from = unresolved ? 1 : 0;
    for (size_t i = from; i < c->n_v; i++) {
        printf("%s", i > from ? "," : "");
        json_verdict(c->cfg, &c->v[i]);
    }
    printf("],\"by_name\":");
    if (unresolved)
        json_verdict(c->cfg, &c->v[0]);
    else
        printf("null");
    printf(",\"matched\":%s,\"rule\":", first ? "true" : "false");
    if (first) {
        printf("%zu,\"semaphore\":", (size_t)(first - c->cfg->rules) + 1);
        ccap_ops_json_str(stdout, c->cfg->sems[first->sem].name);
    } else {
        printf("null,\"semaphore\":null");
    }
    printf("}\n");
}

/* Resolves T as a program would and explains every address (or the name
 * alone, then *UNRESOLVED says why); returns the first rule that applies. */
static const struct ccap_rule *explain_target(struct ctx *c, const struct target *t, const char **unresolved)
{
    struct ccap_addr addrs[MAX_ADDRS];
    const struct ccap_rule *first = NULL;
    int n = 0;
    *unresolved = NULL;
    if (t->literal) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, t->host, &s4->sin_addr) == 1)
            s4->sin_family = AF_INET;
        else if (inet_pton(AF_INET6, t->host, &s6->sin6_addr) == 1)
            s6->sin6_family = AF_INET6;
        n = ccap_addr_from_sa((struct sockaddr *)&ss, sizeof ss, &addrs[0]) == 0;
        fprintf(c->out, "%s is an address: the shim matches it by address and by the names it saw resolve to it\n",
                t->host);
    } else {
        n = lookup(t->host, addrs, MAX_ADDRS, unresolved);
        if (n < 0) {
            fprintf(c->out, "%s does not resolve: %s\n", t->host, *unresolved);
            first = explain_name_only(c, t);
        } else {
            learn(c, t->host, "looked up by the program", addrs, (size_t)n);
            fprintf(c->out, "%s resolves to %d address%s (as a program's getaddrinfo() sees it)\n", t->host, n,
                    n == 1 ? "" : "es");
        }
    }
    for (int i = 0; i < n; i++) {
        const struct ccap_rule *r = explain_addr(c, &addrs[i], t->port);
        if (r && !first)
            first = r;
    }
    return first;
}

int ccap_cmd_explain(int argc, char **argv)
{
    struct ccap_cli_opts o;
    struct target t;
    char *dest[1];
    int n = ccap_ops_parse(argc, argv, usage, &o, NULL, dest, 1);
    if (n < 0)
        return CCAP_EXIT_USAGE;
    if (n != 1) {
        fprintf(stderr, "conncap explain: want exactly one destination\nusage: conncap %s\n", usage);
        return CCAP_EXIT_USAGE;
    }
    if (parse_target(dest[0], &t) < 0)
        return CCAP_EXIT_USAGE;
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg)
        return CCAP_EXIT_USAGE;
    static struct ctx c; /* large: the verdicts */
    c = (struct ctx){ .cfg = cfg, .map = ccap_names_new(CCAP_NAMES_MAX), .out = stdout, .notes = stdout };
    if (o.json) {
        c.out = fopen("/dev/null", "we");
        c.notes = stderr;
    }
    if (!c.map || !c.out) {
        fprintf(stderr, "conncap explain: %s\n", c.map ? strerror(errno) : "out of memory");
        ccap_names_free(c.map);
        ccap_config_free(cfg);
        return CCAP_EXIT_USAGE;
    }
    learn_resolve_names(&c);
    const char *unresolved;
    const struct ccap_rule *first = explain_target(&c, &t, &unresolved);
    if (o.json)
        print_json(&c, dest[0], &t, unresolved, first);
    else if (first)
        printf("matched: rule %zu, semaphore \"%s\"\n", (size_t)(first - cfg->rules) + 1,
               cfg->sems[first->sem].name);
    else if (cfg->has_names)
        printf("not matched (a program that resolved other names to the same address may still match by them: "
               "the first rule in file order that the address or any of its names matches wins)\n");
    else
        printf("not matched\n");
    if (o.json)
        fclose(c.out);
    ccap_names_free(c.map);
    ccap_config_free(cfg);
    return first ? CCAP_EXIT_OK : CCAP_EXIT_ALERT;
}
