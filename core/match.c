/* match.c -- parses destination patterns and matches them against addresses and host names. */
#include "match.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const uint8_t v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static inline char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static inline int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Parses a decimal number of at most MAXDIGITS digits spanning [S, E).
 * Returns the value, or -1 when it is empty or not all digits. */
static long parse_dec(const char *s, const char *e, int maxdigits)
{
    long v = 0;
    if (s == e || e - s > maxdigits)
        return -1;
    for (; s < e; s++) {
        if (!is_digit(*s))
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/* Normalises NAME (LEN bytes) into OUT; on error writes a reason into ERR. */
static int name_normalize(const char *name, size_t len, char *out, size_t outlen, char *err, size_t errlen)
{
    if (len && name[len - 1] == '.')
        len--;
    if (len == 0)
        return fail(err, errlen, "empty host name");
    if (len > 253)
        return fail(err, errlen, "host name longer than 253 characters");
    if (len + 1 > outlen)
        return -ENOSPC;
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (c == '.') {
            if (label == 0)
                return fail(err, errlen, "empty label in host name \"%.*s\"", (int)len, name);
            label = 0;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '_') {
            if (++label > 63)
                return fail(err, errlen, "label longer than 63 characters in host name");
        } else if (c == '*') {
            return fail(err, errlen, "\"*\" is only allowed as the whole first label, as in \"*.example.com\"");
        } else if ((unsigned char)c < 0x21 || (unsigned char)c >= 0x7f) {
            return fail(err, errlen, "bad character (code %d) in host name", (unsigned char)c);
        } else {
            return fail(err, errlen, "bad character '%c' in host name \"%.*s\"", c, (int)len, name);
        }
        out[i] = ascii_lower(c);
    }
    out[len] = '\0';
    return (int)len;
}

int ccap_name_normalize(const char *name, char *out, size_t outlen)
{
    if (!name || !out)
        return -EINVAL;
    return name_normalize(name, strlen(name), out, outlen, NULL, 0);
}

/* Parses the port part "*" | N | N-M in [S, E) into P. */
static int parse_ports(const char *s, const char *e, struct ccap_pattern *p, char *err, size_t errlen)
{
    const char *t = p->text;
    if (s == e)
        return fail(err, errlen, "empty port after \":\" in \"%s\"", t);
    if (e - s == 1 && *s == '*') {
        p->port_lo = 0, p->port_hi = CCAP_PORT_MAX;
        return 0;
    }
    const char *dash = memchr(s, '-', (size_t)(e - s));
    const char *e1 = dash ? dash : e;
    long lo = parse_dec(s, e1, 6), hi = lo;
    if (dash)
        hi = parse_dec(dash + 1, e, 6);
    if (lo < 0 || hi < 0)
        return fail(err, errlen, "bad port \"%.*s\" in \"%s\" (want N, N-M or *, with 1 <= N <= 65535)",
                    (int)(e - s), s, t);
    if (lo == 0 || hi == 0)
        return fail(err, errlen, "port 0 is not allowed in \"%s\" (ports are 1-65535)", t);
    if (lo > CCAP_PORT_MAX || hi > CCAP_PORT_MAX)
        return fail(err, errlen, "port %ld out of range 1-65535 in \"%s\"", lo > CCAP_PORT_MAX ? lo : hi, t);
    if (lo > hi)
        return fail(err, errlen, "port range %ld-%ld is reversed in \"%s\" (did you mean %ld-%ld?)", lo, hi, t, hi,
                    lo);
    p->port_lo = (uint16_t)lo, p->port_hi = (uint16_t)hi;
    return 0;
}

/* True when ADDR (LEN bytes) has a bit set after the first PREFIX bits. */
static int host_bits_set(const uint8_t *addr, int len, int prefix)
{
    for (int i = 0; i < len; i++) {
        int keep = prefix - i * 8;
        uint8_t mask = keep >= 8 ? 0xff : keep <= 0 ? 0 : (uint8_t)(0xff << (8 - keep));
        if (addr[i] & (uint8_t)~mask)
            return 1;
    }
    return 0;
}

/* Parses an IPv4/IPv6 address with an optional "/len" ([S, E)) into P. */
static int parse_ip(const char *s, const char *e, int family, struct ccap_pattern *p, char *err, size_t errlen)
{
    const char *t = p->text;
    char buf[INET6_ADDRSTRLEN + 8];
    const char *slash = memchr(s, '/', (size_t)(e - s));
    const char *ae = slash ? slash : e;
    int max = family == AF_INET ? 32 : 128;
    const char *fam = family == AF_INET ? "IPv4" : "IPv6";

    if ((size_t)(ae - s) >= sizeof buf || ae == s)
        return fail(err, errlen, "bad %s address \"%.*s\" in \"%s\"", fam, (int)(ae - s), s, t);
    memcpy(buf, s, (size_t)(ae - s));
    buf[ae - s] = '\0';
    if (inet_pton(family, buf, p->addr) != 1) {
        if (family == AF_INET6)
            return fail(err, errlen, "bad IPv6 address \"%s\" in \"%s\" (write a port as \"[addr]:port\")", buf, t);
        return fail(err, errlen, "bad IPv4 address \"%s\" in \"%s\"", buf, t);
    }
    p->family = family;
    p->prefix = max;
    if (slash) {
        long len = parse_dec(slash + 1, e, 4);
        if (len < 0)
            return fail(err, errlen, "bad CIDR length \"%.*s\" in \"%s\" (want 0-%d)", (int)(e - slash - 1),
                        slash + 1, t, max);
        if (len > max)
            return fail(err, errlen, "bad CIDR length %ld in \"%s\" (want 0-%d for %s)", len, t, max, fam);
        p->prefix = (int)len;
        if (host_bits_set(p->addr, max / 8, p->prefix)) {
            uint8_t net[16];
            char nbuf[INET6_ADDRSTRLEN];
            memcpy(net, p->addr, sizeof net);
            for (int i = 0; i < max / 8; i++) {
                int keep = p->prefix - i * 8;
                net[i] &= keep >= 8 ? 0xff : keep <= 0 ? 0 : (uint8_t)(0xff << (8 - keep));
            }
            inet_ntop(family, net, nbuf, sizeof nbuf);
            return fail(err, errlen, "%s/%d has host bits set; did you mean %s/%d?", buf, p->prefix, nbuf,
                        p->prefix);
        }
    }
    /* "::ffff:a.b.c.d[/n>=96]" is the IPv4 pattern a.b.c.d[/n-96]. */
    if (family == AF_INET6 && p->prefix >= 96 && !memcmp(p->addr, v4mapped_prefix, 12)) {
        memmove(p->addr, p->addr + 12, 4);
        memset(p->addr + 4, 0, 12);
        p->family = AF_INET;
        p->prefix -= 96;
    }
    p->kind = CCAP_PAT_ADDR;
    return 0;
}

/* True when [S, E) is only digits, dots and slashes (so meant as IPv4). */
static int looks_ipv4(const char *s, const char *e)
{
    int digit = 0;
    for (; s < e; s++) {
        if (is_digit(*s))
            digit = 1;
        else if (*s != '.' && *s != '/')
            return 0;
    }
    return digit;
}

/* Parses a host part without brackets (IPv4[/n], name, *.name) from [S, E). */
static int parse_host(const char *s, const char *e, struct ccap_pattern *p, char *err, size_t errlen)
{
    const char *t = p->text;
    char why[200];
    size_t len = (size_t)(e - s);

    if (len == 0)
        return fail(err, errlen, "empty host in \"%s\"", t);
    if (looks_ipv4(s, e))
        return parse_ip(s, e, AF_INET, p, err, errlen);
    if (memchr(s, '/', len))
        return fail(err, errlen, "a \"/len\" CIDR suffix needs an IP address, not \"%.*s\", in \"%s\"", (int)len, s,
                    t);
    if (len == 1 && *s == '*')
        return fail(err, errlen,
                    "\"*\" alone is not a pattern; to match every address use \"0.0.0.0/0\" and \"::/0\"");
    if (*s == '*') {
        if (len < 3 || s[1] != '.')
            return fail(err, errlen,
                        "bad wildcard in \"%s\": \"*\" must be followed by \".\" and a "
                        "domain, as in \"*.example.com\"",
                        t);
        /* name holds ".suffix" */
        p->name[0] = '.';
        int n = name_normalize(s + 2, len - 2, p->name + 1, sizeof p->name - 1, why, sizeof why);
        if (n < 0)
            return fail(err, errlen, "%s (in \"%s\")", n == -ENOSPC ? "host name too long" : why, t);
        p->kind = CCAP_PAT_WILDCARD;
        return 0;
    }
    int n = name_normalize(s, len, p->name, sizeof p->name, why, sizeof why);
    if (n < 0)
        return fail(err, errlen, "%s (in \"%s\")", n == -ENOSPC ? "host name too long" : why, t);
    p->kind = CCAP_PAT_HOST;
    return 0;
}

/* "[v6]" "[v6/n]" "[v6]/n", each optionally followed by ":ports": the
 * pattern P->text of LEN bytes, starting with '['. */
static int parse_bracketed(struct ccap_pattern *p, size_t len, char *err, size_t errlen)
{
    const char *text = p->text, *s = text, *e = s + len;
    const char *rb = memchr(s, ']', len);
    if (!rb)
        return fail(err, errlen, "missing \"]\" in \"%s\"", text);
    const char *after = rb + 1;
    const char *colon = memchr(after, ':', (size_t)(e - after));
    const char *hostend = colon ? colon : e;
    char ip[INET6_ADDRSTRLEN + 8];
    size_t in = (size_t)(rb - s - 1), tail = (size_t)(hostend - after);
    if (tail && *after != '/')
        return fail(err, errlen,
                    "unexpected \"%.*s\" after \"]\" in \"%s\" (want \":port\" or "
                    "\"/len\")",
                    (int)tail, after, text);
    if (tail && memchr(s + 1, '/', in))
        return fail(err, errlen, "two CIDR lengths in \"%s\"", text);
    if (in + tail >= sizeof ip)
        return fail(err, errlen, "bad IPv6 address in \"%s\"", text);
    if (in == 0)
        return fail(err, errlen, "empty address in brackets in \"%s\"", text);
    memcpy(ip, s + 1, in);
    memcpy(ip + in, after, tail);
    ip[in + tail] = '\0';
    if (!memchr(ip, ':', in))
        return fail(err, errlen, "brackets are only for IPv6 addresses, in \"%s\"", text);
    int rc = parse_ip(ip, ip + in + tail, AF_INET6, p, err, errlen);
    if (rc == 0 && colon)
        rc = parse_ports(colon + 1, e, p, err, errlen);
    return rc;
}

int ccap_pattern_parse(const char *text, struct ccap_pattern *out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!text || !out)
        return fail(err, errlen, "no pattern");
    memset(out, 0, sizeof *out);
    out->port_lo = 0, out->port_hi = CCAP_PORT_MAX;
    size_t len = strlen(text);
    if (len == 0)
        return fail(err, errlen, "empty pattern");
    if (len >= sizeof out->text)
        return fail(err, errlen, "pattern too long (%zu characters, at most %zu)", len, sizeof out->text - 1);
    memcpy(out->text, text, len + 1);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] <= ' ' || (unsigned char)text[i] >= 0x7f)
            return fail(err, errlen, "bad character (code %d) at offset %zu in \"%s\"", (unsigned char)text[i], i,
                        text);

    const char *s = out->text, *e = s + len;
    int rc;
    if (*s == '[')
        return parse_bracketed(out, len, err, errlen);
    const char *colon = memchr(s, ':', len);
    if (colon && memchr(colon + 1, ':', (size_t)(e - colon - 1))) {
        /* IPv6 has only hex digits before its first ':'; a '.' or another
         * letter there means a name (or IPv4) with more than one ":port" */
        for (const char *q = s; q < colon; q++)
            if (*q == '.' || (ascii_lower(*q) >= 'g' && ascii_lower(*q) <= 'z'))
                return fail(err, errlen,
                            "more than one \":\" in \"%s\" (a host takes one \":port\"; "
                            "IPv6 with a port is written \"[addr]:port\")",
                            text);
        return parse_ip(s, e, AF_INET6, out, err, errlen); /* bare IPv6, no port */
    }
    rc = parse_host(s, colon ? colon : e, out, err, errlen);
    if (rc == 0 && colon)
        rc = parse_ports(colon + 1, e, out, err, errlen);
    return rc;
}

int ccap_addr_from_sa(const struct sockaddr *sa, socklen_t len, struct ccap_addr *out)
{
    sa_family_t fam;
    if (!sa || len < (socklen_t)sizeof(sa_family_t))
        return -EINVAL;
    memcpy(&fam, &sa->sa_family, sizeof fam);
    if (fam == AF_INET) {
        struct sockaddr_in in;
        if (len < (socklen_t)sizeof in)
            return -EINVAL;
        memcpy(&in, sa, sizeof in);
        out->family = AF_INET;
        memcpy(out->addr, &in.sin_addr, 4);
        out->port = ntohs(in.sin_port);
        return 0;
    }
    if (fam == AF_INET6) {
        struct sockaddr_in6 in6;
        if (len < (socklen_t)sizeof in6)
            return -EINVAL;
        memcpy(&in6, sa, sizeof in6);
        out->port = ntohs(in6.sin6_port);
        if (!memcmp(in6.sin6_addr.s6_addr, v4mapped_prefix, 12)) {
            out->family = AF_INET;
            memcpy(out->addr, in6.sin6_addr.s6_addr + 12, 4);
        } else {
            out->family = AF_INET6;
            memcpy(out->addr, in6.sin6_addr.s6_addr, 16);
        }
        return 0;
    }
    return -EAFNOSUPPORT;
}

bool ccap_pattern_match_ccap_addr(const struct ccap_pattern *p, const struct ccap_addr *a)
{
    if (p->kind != CCAP_PAT_ADDR || p->family != a->family)
        return false;
    if (a->port < p->port_lo || a->port > p->port_hi)
        return false;
    if (a->family == AF_INET) {
        uint32_t x, y;
        memcpy(&x, a->addr, 4);
        memcpy(&y, p->addr, 4);
        uint32_t mask = p->prefix ? 0xffffffffu << (32 - p->prefix) : 0;
        return ((ntohl(x) ^ ntohl(y)) & mask) == 0;
    }
    int full = p->prefix / 8, rest = p->prefix % 8;
    if (memcmp(a->addr, p->addr, (size_t)full))
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return ((a->addr[full] ^ p->addr[full]) & mask) == 0;
}

bool ccap_pattern_match_addr(const struct ccap_pattern *p, const struct sockaddr *sa, socklen_t len)
{
    struct ccap_addr a;
    if (!p || p->kind != CCAP_PAT_ADDR || ccap_addr_from_sa(sa, len, &a) < 0)
        return false;
    return ccap_pattern_match_ccap_addr(p, &a);
}

/* ASCII case-insensitive equality of N bytes; A is any case, B lower case. */
static bool eq_lower(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ascii_lower(a[i]) != b[i])
            return false;
    return true;
}

bool ccap_pattern_match_name(const struct ccap_pattern *p, const char *name, uint16_t port)
{
    if (!p || !name || (p->kind != CCAP_PAT_HOST && p->kind != CCAP_PAT_WILDCARD))
        return false;
    if (port < p->port_lo || port > p->port_hi)
        return false;
    size_t n = strlen(name);
    if (n && name[n - 1] == '.')
        n--;
    if (n == 0)
        return false;
    size_t pn = strlen(p->name);
    if (p->kind == CCAP_PAT_HOST)
        return n == pn && eq_lower(name, p->name, n);
    /* WILDCARD: p->name is ".suffix"; at least one non-empty label before it. */
    return n > pn && name[0] != '.' && name[n - pn - 1] != '.' && eq_lower(name + n - pn, p->name, pn);
}
