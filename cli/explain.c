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

#define MAX_ADDRS 64
#define MAX_KNOWN 64

static const char *usage = "explain [-c FILE] HOST[:PORT]";

struct target {
    char host[256];          /* normalised name, or the address as given */
    bool literal;            /* an IP address, not a name */
    int port;                /* 0: not given (any port) */
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
                printf("note: rule %zu has resolve = true; the wildcard \"%s\" cannot be looked up (it matches only "
                       "names the program resolves)\n", i + 1, p->text);
                continue;
            }
            if (p->kind != CCAP_PAT_HOST)
                continue;
            int n = lookup(p->name, addrs, MAX_ADDRS, &why);
            char origin[96];
            snprintf(origin, sizeof origin, "looked up by the shim: resolve = true in rule %zu", i + 1);
            if (n < 0)
                printf("note: rule %zu has resolve = true, but %s does not resolve now (%s)\n", i + 1, p->name, why);
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
                snprintf(why, n, "the name %s (%s) matches pattern \"%s\"", names->v[i],
                         origin_of(c, names->v[i]), r->pats[k].text);
                return true;
            }
    }
    return false;
}

static void print_rule(const struct ccap_config *cfg, const struct ccap_rule *r)
{
    const struct ccap_sem_conf *s = &cfg->sems[r->sem];
    printf("rule %zu (%s:%d) -> semaphore \"%s\" (limit %d, lease %d ms, wait %d ms)", (size_t)(r - cfg->rules) + 1,
           r->file ? r->file : cfg->path, r->line, s->name, s->limit, s->lease_ms, s->wait_timeout_ms);
}

/* Explains one address; returns the rule that applies, or NULL. */
static const struct ccap_rule *explain_addr(struct ctx *c, const struct ccap_addr *a, int port)
{
    char at[INET6_ADDRSTRLEN + 8], why[512];
    struct names_buf names = { .n = 0 };
    addr_text(a, at, sizeof at);
    ccap_names_each(c->map, a, 0, collect, &names);
    if (port)
        printf("%s:%d: ", at, port);
    else
        printf("%s (any port): ", at);
    for (size_t i = 0; i < c->cfg->n_rules; i++) {
        const struct ccap_rule *r = &c->cfg->rules[i];
        if (rule_matches(c, r, a, port, &names, why, sizeof why)) {
            print_rule(c->cfg, r);
            printf("\n    because %s\n", why);
            if (!port) {
                bool ports = false;
                for (size_t k = 0; k < r->n_pats; k++)
                    ports |= r->pats[k].port_lo != 0 || r->pats[k].port_hi != 65535;
                if (ports)
                    printf("    (no port given: patterns limited to ports were taken as matching)\n");
            }
            return r;
        }
    }
    printf("no rule matches: not capped (no Redis call)\n");
    return NULL;
}

/* The destination does not resolve: which rule its name alone would take. */
static const struct ccap_rule *explain_name_only(const struct ctx *c, const struct target *t)
{
    for (size_t i = 0; i < c->cfg->n_rules; i++) {
        const struct ccap_rule *r = &c->cfg->rules[i];
        for (size_t k = 0; k < r->n_pats; k++) {
            struct ccap_pattern p = widen(&r->pats[k], t->port);
            if (p.kind != CCAP_PAT_ADDR && ccap_pattern_match_name(&p, t->host, (uint16_t)t->port)) {
                printf("by name alone: ");
                print_rule(c->cfg, r);
                printf("\n    because the name %s matches pattern \"%s\" (the shim sees it once it resolves)\n",
                       t->host, r->pats[k].text);
                return r;
            }
        }
    }
    printf("by name alone: no rule matches\n");
    return NULL;
}

int ccap_cmd_explain(int argc, char **argv)
{
    struct ccap_cli_opts o;
    struct target t;
    if (ccap_cli_parse(argc, argv, &o, usage) < 0)
        return CCAP_EXIT_USAGE;
    if (o.json || o.first != argc - 1) {
        fprintf(stderr, "conncap explain: %s\nusage: conncap %s\n",
                o.json ? "--json is not supported" : "want exactly one destination", usage);
        return CCAP_EXIT_USAGE;
    }
    if (parse_target(argv[o.first], &t) < 0)
        return CCAP_EXIT_USAGE;
    struct ccap_config *cfg = ccap_cli_config(&o);
    if (!cfg)
        return CCAP_EXIT_USAGE;
    struct ctx c = { .cfg = cfg, .map = ccap_names_new(CCAP_NAMES_MAX) };
    if (!c.map) {
        fprintf(stderr, "conncap explain: out of memory\n");
        ccap_config_free(cfg);
        return CCAP_EXIT_USAGE;
    }
    struct ccap_addr addrs[MAX_ADDRS];
    int n = 0;
    const struct ccap_rule *first = NULL;
    learn_resolve_names(&c);
    if (t.literal) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, t.host, &s4->sin_addr) == 1)
            s4->sin_family = AF_INET;
        else if (inet_pton(AF_INET6, t.host, &s6->sin6_addr) == 1)
            s6->sin6_family = AF_INET6;
        n = ccap_addr_from_sa((struct sockaddr *)&ss, sizeof ss, &addrs[0]) == 0;
        printf("%s is an address: the shim matches it by address and by the names it saw resolve to it\n", t.host);
    } else {
        const char *why = NULL;
        n = lookup(t.host, addrs, MAX_ADDRS, &why);
        if (n < 0) {
            printf("%s does not resolve: %s\n", t.host, why);
            first = explain_name_only(&c, &t);
        } else {
            learn(&c, t.host, "looked up by the program", addrs, (size_t)n);
            printf("%s resolves to %d address%s (as a program's getaddrinfo() sees it)\n", t.host, n,
                   n == 1 ? "" : "es");
        }
    }
    for (int i = 0; i < n; i++) {
        const struct ccap_rule *r = explain_addr(&c, &addrs[i], t.port);
        if (r && !first)
            first = r;
    }
    if (first)
        printf("matched: rule %zu, semaphore \"%s\"\n", (size_t)(first - cfg->rules) + 1, cfg->sems[first->sem].name);
    else if (cfg->has_names)
        printf("not matched (a program that resolved other names to the same address may still match by them: "
               "the first rule in file order that the address or any of its names matches wins)\n");
    else
        printf("not matched\n");
    ccap_names_free(c.map);
    ccap_config_free(cfg);
    return first ? CCAP_EXIT_OK : CCAP_EXIT_ALERT;
}
