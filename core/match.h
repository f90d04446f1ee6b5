/* match.h -- destination patterns: host names, wildcards, IP/CIDR, ports. */
#ifndef CCAP_MATCH_H
#define CCAP_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The highest TCP port number (ports are 1..CCAP_PORT_MAX; 0 is never connectable). */
#define CCAP_PORT_MAX 65535

enum ccap_pat_kind {
    CCAP_PAT_ADDR = 1, /* IPv4 or IPv6 address or CIDR: "10.0.0.0/8", "[::1]" */
    CCAP_PAT_HOST,     /* exact host name: "api.partner.com" */
    CCAP_PAT_WILDCARD, /* "*.partner.com": one or more labels before the suffix */
};

/* One parsed pattern. Grammar (see conf/conncap.conf):
 *   pattern := host [":" ports]
 *   host    := IPv4 ["/" len] | "[" IPv6 "]" ["/" len] | IPv6-without-port ["/" len]
 *            | name | "*." name
 *   ports   := "*" | N | N "-" M            (1..65535; none means any)
 * Names are stored lower-case without a trailing dot. An IPv4 pattern also
 * matches the IPv4-mapped IPv6 form (::ffff:a.b.c.d).
 * IPv6 with a port needs brackets; the canonical CIDR-with-port form is
 * "[2001:db8::/32]:443", and "[2001:db8::]/32:443" is accepted too. A bare
 * IPv6 pattern ("::1", "2001:db8::/32") has no port. A CIDR with host bits
 * set ("10.0.0.1/8") is rejected. "*.name" needs at least one label before
 * ".name" (it does not match "name"); "*" anywhere else is rejected.
 * IPv4 addresses (native or ::ffff:-mapped) are matched only by IPv4
 * patterns; an IPv6 pattern "::ffff:a.b.c.d[/n]" with n >= 96 is stored as
 * the IPv4 pattern a.b.c.d[/n-96], and other IPv6 patterns (even "::/0")
 * never match IPv4 traffic. */
struct ccap_pattern {
    enum ccap_pat_kind kind;
    int family;       /* AF_INET or AF_INET6, for CCAP_PAT_ADDR */
    uint8_t addr[16]; /* network order; 4 bytes used for AF_INET */
    int prefix;       /* CIDR length in bits; 32/128 for a single address */
    char name[256];   /* for HOST: the name; for WILDCARD: the suffix with its dot (".partner.com") */
    uint16_t port_lo; /* 0 with port_hi 65535 means any port */
    uint16_t port_hi;
    char text[300]; /* the pattern as written, for messages */
};

/* Parses TEXT into *OUT. Returns 0, or -EINVAL with a one-line reason in
 * ERR (ERRLEN bytes, always NUL-terminated), e.g. "bad CIDR length 33 in
 * \"10.0.0.0/33\"". Pure function; thread-safe. */
int ccap_pattern_parse(const char *text, struct ccap_pattern *out, char *err, size_t errlen);

/* A destination address, normalised for matching: an IPv4-mapped IPv6
 * address becomes AF_INET. PORT is in host order. */
struct ccap_addr {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* network order; 4 bytes used for AF_INET */
    uint16_t port;
};

/* Fills *OUT from SA (AF_INET or AF_INET6, LEN at least the size of its
 * sockaddr_in/sockaddr_in6). Returns 0, -EINVAL for a short or NULL SA, or
 * -EAFNOSUPPORT for another family. Pure; no allocation. */
int ccap_addr_from_sa(const struct sockaddr *sa, socklen_t len, struct ccap_addr *out);

/* True when the address pattern P matches A (address and port). Host-name
 * patterns never match. Lets a caller normalise SA once and try many
 * patterns. Pure; thread-safe; no allocation. */
bool ccap_pattern_match_ccap_addr(const struct ccap_pattern *p, const struct ccap_addr *a);

/* True when an address pattern P matches SA (AF_INET/AF_INET6, port taken
 * from SA). Host-name patterns never match here. Pure; thread-safe. */
bool ccap_pattern_match_addr(const struct ccap_pattern *p, const struct sockaddr *sa, socklen_t len);

/* True when a host-name pattern P matches NAME (any case, trailing dot
 * ignored) and PORT (host order). Address patterns never match here; a
 * NULL P or NAME matches nothing. Pure; thread-safe; no allocation. */
bool ccap_pattern_match_name(const struct ccap_pattern *p, const char *name, uint16_t port);

/* Normalises a host name into OUT (lower case, no trailing dot). Returns the
 * length, or -EINVAL if it is empty, too long (>253) or has bad characters.
 * Allowed: letters, digits, '-', '_' in labels of 1..63 separated by '.'.
 * Returns -ENOSPC when OUTLEN is too small for the result and its NUL. */
int ccap_name_normalize(const char *name, char *out, size_t outlen);

#endif
