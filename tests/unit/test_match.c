/* test_match.c -- unit tests for destination patterns (core/match.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "match.h"

static struct ccap_pattern parse_ok(const char *text)
{
    struct ccap_pattern p;
    char err[256] = "";
    int rc = ccap_pattern_parse(text, &p, err, sizeof err);
    if (rc != 0)
        fail_msg("pattern \"%s\" rejected: %s", text, err);
    return p;
}

static void expect_bad(const char *text, const char *want)
{
    struct ccap_pattern p;
    char err[256] = "";
    int rc = ccap_pattern_parse(text, &p, err, sizeof err);
    if (rc != -EINVAL)
        fail_msg("pattern \"%s\" accepted (rc %d), want error containing \"%s\"", text, rc, want);
    if (!strstr(err, want))
        fail_msg("pattern \"%s\": error \"%s\" lacks \"%s\"", text, err, want);
}

static struct sockaddr_storage mk4(const char *ip, int port, socklen_t *len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, ip, &in->sin_addr), 1);
    *len = sizeof *in;
    return ss;
}

static struct sockaddr_storage mk6(const char *ip, int port, socklen_t *len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
    *len = sizeof *in6;
    return ss;
}

static bool m4(const char *pat, const char *ip, int port)
{
    struct ccap_pattern p = parse_ok(pat);
    socklen_t len;
    struct sockaddr_storage ss = mk4(ip, port, &len);
    return ccap_pattern_match_addr(&p, (struct sockaddr *)&ss, len);
}

static bool m6(const char *pat, const char *ip, int port)
{
    struct ccap_pattern p = parse_ok(pat);
    socklen_t len;
    struct sockaddr_storage ss = mk6(ip, port, &len);
    return ccap_pattern_match_addr(&p, (struct sockaddr *)&ss, len);
}

static bool mn(const char *pat, const char *name, int port)
{
    struct ccap_pattern p = parse_ok(pat);
    return ccap_pattern_match_name(&p, name, (uint16_t)port);
}

static void test_ipv4_exact(void **state)
{
    (void)state;
    struct ccap_pattern p = parse_ok("127.0.0.1:8080");
    assert_int_equal(p.kind, CCAP_PAT_ADDR);
    assert_int_equal(p.family, AF_INET);
    assert_int_equal(p.prefix, 32);
    assert_int_equal(p.port_lo, 8080);
    assert_int_equal(p.port_hi, 8080);
    assert_string_equal(p.text, "127.0.0.1:8080");
    assert_true(m4("127.0.0.1:8080", "127.0.0.1", 8080));
    assert_false(m4("127.0.0.1:8080", "127.0.0.1", 8081));
    assert_false(m4("127.0.0.1:8080", "127.0.0.2", 8080));
    assert_true(m4("127.0.0.1", "127.0.0.1", 1));
    assert_true(m4("127.0.0.1", "127.0.0.1", 65535));
}

static void test_ipv4_cidr(void **state)
{
    (void)state;
    assert_true(m4("10.0.0.0/8:443", "10.255.3.4", 443));
    assert_false(m4("10.0.0.0/8:443", "11.0.0.0", 443));
    assert_false(m4("10.0.0.0/8:443", "9.255.255.255", 443));
    assert_false(m4("10.0.0.0/8:443", "10.0.0.1", 444));
    /* /0 matches all IPv4 */
    assert_true(m4("0.0.0.0/0", "1.2.3.4", 80));
    assert_true(m4("0.0.0.0/0", "255.255.255.255", 80));
    /* /32 is one address */
    assert_true(m4("192.168.1.7/32", "192.168.1.7", 80));
    assert_false(m4("192.168.1.7/32", "192.168.1.6", 80));
    /* /31: two addresses */
    assert_true(m4("192.168.1.6/31", "192.168.1.6", 80));
    assert_true(m4("192.168.1.6/31", "192.168.1.7", 80));
    assert_false(m4("192.168.1.6/31", "192.168.1.8", 80));
    assert_false(m4("192.168.1.6/31", "192.168.1.5", 80));
    /* non-octet boundary */
    assert_true(m4("172.16.0.0/12", "172.31.255.255", 80));
    assert_false(m4("172.16.0.0/12", "172.32.0.0", 80));
}

static void test_ipv4_mapped(void **state)
{
    (void)state;
    assert_true(m6("10.0.0.0/8", "::ffff:10.1.2.3", 80));
    assert_false(m6("10.0.0.0/8", "::ffff:11.1.2.3", 80));
    assert_true(m6("127.0.0.1:8080", "::ffff:127.0.0.1", 8080));
    assert_false(m6("127.0.0.1:8080", "::ffff:127.0.0.1", 8081));
    /* an IPv4 pattern does not match a plain IPv6 address with the same low bits */
    assert_false(m6("0.0.0.0/0", "::1", 80));
    assert_false(m6("0.0.0.0/0", "::a00:1", 80)); /* IPv4-compatible, not mapped */
    /* mapped-form patterns act as IPv4 patterns */
    struct ccap_pattern p = parse_ok("[::ffff:10.0.0.0/104]:80");
    assert_int_equal(p.family, AF_INET);
    assert_int_equal(p.prefix, 8);
    assert_true(m4("[::ffff:10.0.0.0/104]:80", "10.9.9.9", 80));
    assert_true(m6("::ffff:10.0.0.1", "::ffff:10.0.0.1", 80));
    /* other IPv6 patterns never match IPv4 traffic */
    assert_false(m4("::/0", "10.0.0.1", 80));
    assert_false(m6("::/0", "::ffff:10.0.0.1", 80));
}

static void test_ipv6(void **state)
{
    (void)state;
    struct ccap_pattern p = parse_ok("[::1]:8080");
    assert_int_equal(p.kind, CCAP_PAT_ADDR);
    assert_int_equal(p.family, AF_INET6);
    assert_int_equal(p.prefix, 128);
    assert_int_equal(p.port_lo, 8080);
    assert_true(m6("[::1]:8080", "::1", 8080));
    assert_false(m6("[::1]:8080", "::1", 8081));
    assert_false(m6("[::1]:8080", "::2", 8080));
    assert_true(m6("::1", "::1", 1234));
    assert_true(m6("[::1]", "::1", 1234));
    /* bare IPv6 CIDR, no port */
    p = parse_ok("2001:db8::/32");
    assert_int_equal(p.prefix, 32);
    assert_int_equal(p.port_lo, 0);
    assert_int_equal(p.port_hi, 65535);
    assert_true(m6("2001:db8::/32", "2001:db8:ffff::1", 9));
    assert_false(m6("2001:db8::/32", "2001:db9::1", 9));
    /* both bracket forms for CIDR + port */
    for (int i = 0; i < 2; i++) {
        const char *pat = i ? "[2001:db8::]/32:443" : "[2001:db8::/32]:443";
        p = parse_ok(pat);
        assert_int_equal(p.prefix, 32);
        assert_int_equal(p.port_lo, 443);
        assert_true(m6(pat, "2001:db8::7", 443));
        assert_false(m6(pat, "2001:db8::7", 80));
        assert_false(m6(pat, "2001:db7::7", 443));
    }
    /* /128, /0, and a prefix that is not a multiple of 8 */
    assert_true(m6("[2001:db8::1/128]", "2001:db8::1", 1));
    assert_false(m6("[2001:db8::1/128]", "2001:db8::2", 1));
    assert_true(m6("::/0", "fe80::1", 1));
    assert_true(m6("2001:db8:8000::/33", "2001:db8:ffff::1", 1));
    assert_false(m6("2001:db8:8000::/33", "2001:db8:7fff::1", 1));
    assert_true(m6("[fe80::/10]:*", "febf::1", 5));
    assert_false(m6("[fe80::/10]:*", "fec0::1", 5));
    /* IPv6 patterns never match IPv4 sockaddrs */
    assert_false(m4("::1", "127.0.0.1", 80));
}

static void test_ports(void **state)
{
    (void)state;
    struct ccap_pattern p = parse_ok("10.0.0.1:8000-8099");
    assert_int_equal(p.port_lo, 8000);
    assert_int_equal(p.port_hi, 8099);
    assert_true(m4("10.0.0.1:8000-8099", "10.0.0.1", 8000));
    assert_true(m4("10.0.0.1:8000-8099", "10.0.0.1", 8099));
    assert_false(m4("10.0.0.1:8000-8099", "10.0.0.1", 7999));
    assert_false(m4("10.0.0.1:8000-8099", "10.0.0.1", 8100));
    p = parse_ok("10.0.0.1:*");
    assert_int_equal(p.port_lo, 0);
    assert_int_equal(p.port_hi, 65535);
    assert_true(m4("10.0.0.1:*", "10.0.0.1", 1));
    assert_true(m4("10.0.0.1:*", "10.0.0.1", 65535));
    p = parse_ok("a.example:1-65535");
    assert_int_equal(p.port_lo, 1);
    assert_int_equal(p.port_hi, 65535);
    assert_true(mn("a.example:5-5", "a.example", 5));
    assert_false(mn("a.example:5-5", "a.example", 6));
    assert_true(mn("a.example:65535", "a.example", 65535));
}

static void test_names(void **state)
{
    (void)state;
    struct ccap_pattern p = parse_ok("API.Partner.COM.:443");
    assert_int_equal(p.kind, CCAP_PAT_HOST);
    assert_string_equal(p.name, "api.partner.com");
    assert_true(mn("api.partner.com:443", "api.partner.com", 443));
    assert_true(mn("api.partner.com:443", "API.PARTNER.COM", 443));
    assert_true(mn("api.partner.com:443", "api.partner.com.", 443));
    assert_true(mn("API.Partner.COM.:443", "Api.partner.com", 443));
    assert_false(mn("api.partner.com:443", "api.partner.com", 80));
    assert_false(mn("api.partner.com:443", "api.partner.co", 443));
    assert_false(mn("api.partner.com:443", "xapi.partner.com", 443));
    assert_false(mn("api.partner.com:443", "www.api.partner.com", 443));
    assert_false(mn("api.partner.com", "", 443));
    assert_false(mn("api.partner.com", ".", 443));
    assert_true(mn("localhost", "localhost", 1));
    assert_true(mn("my_host-1.internal", "MY_HOST-1.internal", 1));
    /* host patterns never match addresses, address patterns never match names */
    p = parse_ok("api.partner.com");
    socklen_t len;
    struct sockaddr_storage ss = mk4("10.0.0.1", 80, &len);
    assert_false(ccap_pattern_match_addr(&p, (struct sockaddr *)&ss, len));
    p = parse_ok("10.0.0.1");
    assert_false(ccap_pattern_match_name(&p, "10.0.0.1", 80));
}

static void test_wildcards(void **state)
{
    (void)state;
    struct ccap_pattern p = parse_ok("*.Partner.com");
    assert_int_equal(p.kind, CCAP_PAT_WILDCARD);
    assert_string_equal(p.name, ".partner.com");
    assert_true(mn("*.partner.com", "api.partner.com", 443));
    assert_true(mn("*.partner.com", "a.b.c.partner.com", 443));
    assert_true(mn("*.partner.com", "A.PARTNER.COM.", 443));
    assert_false(mn("*.partner.com", "partner.com", 443));
    assert_false(mn("*.partner.com", "partner.com.", 443));
    assert_false(mn("*.partner.com", ".partner.com", 443));
    assert_false(mn("*.partner.com", "evilpartner.com", 443));
    assert_false(mn("*.partner.com", "api.partner.com.evil", 443));
    assert_true(mn("*.partner.com:443", "x.partner.com", 443));
    assert_false(mn("*.partner.com:443", "x.partner.com", 80));
    /* single-label suffix is allowed */
    assert_true(mn("*.com", "example.com", 1));
    assert_false(mn("*.com", "com", 1));
}

static void test_bad_patterns(void **state)
{
    (void)state;
    expect_bad("", "empty pattern");
    expect_bad("*", "\"*\" alone");
    expect_bad("*:443", "\"*\" alone");
    expect_bad("foo.*.com", "only allowed as the whole first label");
    expect_bad("*.*.com", "only allowed as the whole first label");
    expect_bad("*foo.com", "bad wildcard");
    expect_bad("*.", "bad wildcard");
    expect_bad("a.example:0", "port 0 is not allowed");
    expect_bad("a.example:65536", "port 65536 out of range 1-65535");
    expect_bad("a.example:99999999", "bad port \"99999999\"");
    expect_bad("a.example:http", "bad port \"http\"");
    expect_bad("a.example:-5", "bad port");
    expect_bad("a.example:5-", "bad port");
    expect_bad("a.example:", "empty port");
    expect_bad("a.example:9000-8000", "port range 9000-8000 is reversed");
    expect_bad("a.example:0-80", "port 0 is not allowed");
    expect_bad("10.0.0.0/33", "bad CIDR length 33");
    expect_bad("10.0.0.0/", "bad CIDR length \"\"");
    expect_bad("10.0.0.0/x", "\"/len\" CIDR suffix needs an IP address");
    expect_bad("2001:db8::/129", "bad CIDR length 129");
    expect_bad("[::1/200]:80", "bad CIDR length 200");
    expect_bad("10.0.0.1/8", "10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?");
    expect_bad("[2001:db8::1/32]:443", "has host bits set; did you mean 2001:db8::/32?");
    expect_bad("10.0.0", "bad IPv4 address \"10.0.0\"");
    expect_bad("10.0.0.256", "bad IPv4 address");
    expect_bad("1.2.3.4.5:80", "bad IPv4 address");
    expect_bad("::1::2", "bad IPv6 address");
    expect_bad("::1:99999", "write a port as \"[addr]:port\"");
    expect_bad("[::1", "missing \"]\"");
    expect_bad("[::1]x", "unexpected \"x\" after \"]\"");
    expect_bad("[::1/64]/64", "two CIDR lengths");
    expect_bad("[10.0.0.1]:80", "brackets are only for IPv6");
    expect_bad("[]:80", "empty address in brackets");
    expect_bad("[::1]:", "empty port");
    expect_bad("a b.com", "bad character (code 32)");
    expect_bad("api.partner.com/24", "CIDR suffix needs an IP address");
    expect_bad("a!b.com", "bad character '!'");
    expect_bad("a..b.com", "empty label");
    expect_bad(".a.com", "empty label");
    expect_bad(":443", "empty host");
    expect_bad("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", "label longer than 63");
    char big[299];
    memset(big, 'a', sizeof big);
    for (int i = 60; i < 298; i += 61)
        big[i] = '.';
    big[298] = '\0';
    expect_bad(big, "longer than 253");
    char huge[400];
    memset(huge, 'a', sizeof huge);
    huge[399] = '\0';
    expect_bad(huge, "pattern too long");
    /* ERR is always terminated and bounded */
    struct ccap_pattern p;
    char small[8];
    memset(small, 'x', sizeof small);
    assert_int_equal(ccap_pattern_parse("10.0.0.1/8", &p, small, sizeof small), -EINVAL);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(ccap_pattern_parse("10.0.0.1/8", &p, NULL, 0), -EINVAL);
}

static void test_name_normalize(void **state)
{
    (void)state;
    char out[256];
    assert_int_equal(ccap_name_normalize("Api.Partner.COM.", out, sizeof out), 15);
    assert_string_equal(out, "api.partner.com");
    assert_int_equal(ccap_name_normalize("", out, sizeof out), -EINVAL);
    assert_int_equal(ccap_name_normalize(".", out, sizeof out), -EINVAL);
    assert_int_equal(ccap_name_normalize("a b", out, sizeof out), -EINVAL);
    assert_int_equal(ccap_name_normalize("a..b", out, sizeof out), -EINVAL);
    assert_int_equal(ccap_name_normalize("*.a", out, sizeof out), -EINVAL);
    char longname[260];
    memset(longname, 'a', sizeof longname);
    for (int i = 50; i < 259; i += 51)
        longname[i] = '.';
    longname[254] = '\0'; /* 254 characters */
    assert_int_equal(ccap_name_normalize(longname, out, sizeof out), -EINVAL);
    longname[253] = '\0'; /* 253 characters: fine */
    if (longname[252] == '.')
        longname[252] = 'a';
    assert_int_equal(ccap_name_normalize(longname, out, sizeof out), 253);
    assert_int_equal(ccap_name_normalize("abcdef", out, 4), -ENOSPC);
}

static void test_addr_edge_cases(void **state)
{
    (void)state;
    struct ccap_pattern p = parse_ok("0.0.0.0/0");
    socklen_t len;
    struct sockaddr_storage ss = mk4("1.2.3.4", 80, &len);
    /* short length, NULL, unknown family */
    assert_false(ccap_pattern_match_addr(&p, (struct sockaddr *)&ss, len - 1));
    assert_false(ccap_pattern_match_addr(&p, NULL, len));
    ((struct sockaddr *)&ss)->sa_family = AF_UNIX;
    assert_false(ccap_pattern_match_addr(&p, (struct sockaddr *)&ss, sizeof ss));
    p = parse_ok("::/0");
    ss = mk6("::1", 80, &len);
    assert_false(ccap_pattern_match_addr(&p, (struct sockaddr *)&ss, len - 1));
    assert_true(ccap_pattern_match_addr(&p, (struct sockaddr *)&ss, len));
    /* ccap_addr_from_sa normalises the mapped form */
    struct ccap_addr a;
    ss = mk6("::ffff:1.2.3.4", 99, &len);
    assert_int_equal(ccap_addr_from_sa((struct sockaddr *)&ss, len, &a), 0);
    assert_int_equal(a.family, AF_INET);
    assert_int_equal(a.port, 99);
    assert_memory_equal(a.addr, "\x01\x02\x03\x04", 4);
    ((struct sockaddr *)&ss)->sa_family = AF_UNIX;
    assert_int_equal(ccap_addr_from_sa((struct sockaddr *)&ss, len, &a), -EAFNOSUPPORT);
}

/* Edge cases of the grammar that host-name rules rely on. */
static void test_grammar_edges(void **state)
{
    (void)state;
    struct ccap_pattern p;
    /* wildcards with ports, any case, a trailing dot on the pattern */
    p = parse_ok("*.partner.test:8000-8099");
    assert_int_equal(p.kind, CCAP_PAT_WILDCARD);
    assert_int_equal(p.port_lo, 8000);
    assert_int_equal(p.port_hi, 8099);
    assert_true(mn("*.partner.test:8000-8099", "a.partner.test", 8050));
    assert_false(mn("*.partner.test:8000-8099", "a.partner.test", 8100));
    p = parse_ok("*.Partner.Test.:443");
    assert_string_equal(p.name, ".partner.test");
    assert_int_equal(p.port_lo, 443);
    assert_true(mn("*.PARTNER.test.", "X.partner.TEST.", 1));
    assert_true(mn("*.partner.test", "X.Partner.TEST.", 1));
    assert_true(mn("*.a.b:*", "c.a.b", 65535));
    /* a label before the suffix must be non-empty */
    assert_false(mn("*.partner.test", "a..partner.test", 1));
    assert_false(mn("*.partner.test", ".partner.test", 1));
    assert_false(mn("*.partner.test", "..partner.test", 1));
    assert_true(mn("*._tcp.example", "_http._tcp.example", 1));
    /* names that start with digits are names, not addresses */
    p = parse_ok("123.example");
    assert_int_equal(p.kind, CCAP_PAT_HOST);
    p = parse_ok("1.2.3.4.nip.io:80");
    assert_int_equal(p.kind, CCAP_PAT_HOST);
    assert_string_equal(p.name, "1.2.3.4.nip.io");
    p = parse_ok("*.1.2.3.4");
    assert_int_equal(p.kind, CCAP_PAT_WILDCARD);
    /* single labels, trailing dots with ports, leading zeros in ports */
    p = parse_ok("localhost:*");
    assert_int_equal(p.kind, CCAP_PAT_HOST);
    assert_int_equal(p.port_lo, 0);
    assert_int_equal(p.port_hi, 65535);
    p = parse_ok("a:1");
    assert_string_equal(p.name, "a");
    assert_int_equal(p.port_hi, 1);
    p = parse_ok("a.b.:443");
    assert_string_equal(p.name, "a.b");
    assert_int_equal(p.port_lo, 443);
    p = parse_ok("a.b:0443");
    assert_int_equal(p.port_lo, 443);
    p = parse_ok("a.b:65535-65535");
    assert_int_equal(p.port_lo, 65535);
    /* a 63-character label is fine, 64 is not; a name of exactly 253 is fine */
    char label[80];
    memset(label, 'x', 63);
    strcpy(label + 63, ".test");
    p = parse_ok(label);
    assert_int_equal(strlen(p.name), 68);
    memset(label, 'x', 64);
    strcpy(label + 64, ".test");
    expect_bad(label, "label longer than 63");
    /* mapped and unspecified IPv6 literals */
    p = parse_ok("[::ffff:10.0.0.1]:80");
    assert_int_equal(p.family, AF_INET);
    assert_int_equal(p.prefix, 32);
    p = parse_ok("::");
    assert_int_equal(p.family, AF_INET6);
    assert_int_equal(p.prefix, 128);
    p = parse_ok("0.0.0.0/0:*");
    assert_int_equal(p.prefix, 0);
    /* bad ones, each with a message that says what is wrong */
    expect_bad("a.b:80:90", "more than one \":\" in \"a.b:80:90\"");
    expect_bad("1.2.3.4:80:90", "more than one \":\"");
    expect_bad("api.partner.test:", "empty port after \":\"");
    expect_bad("a.b:+80", "bad port \"+80\"");
    expect_bad("1.2.3.4:1-", "bad port \"1-\"");
    expect_bad("[::1]:80-79", "port range 80-79 is reversed");
    expect_bad("[fe80::1]:0", "port 0 is not allowed");
    expect_bad("*..a", "empty label");
    expect_bad("*.*", "only allowed as the whole first label");
    expect_bad("a.*", "only allowed as the whole first label");
    expect_bad("a.b/24:80", "CIDR suffix needs an IP address");
    expect_bad("fe80::1%eth0", "bad IPv6 address");
    expect_bad("01.2.3.4", "bad IPv4 address");
    expect_bad("999.1.1.1", "bad IPv4 address");
    expect_bad(" a.com", "bad character (code 32) at offset 0");
    expect_bad("a\tb", "bad character (code 9) at offset 1");
    expect_bad("a.b\x80", "bad character (code 128)");
    expect_bad("a_b.c:99999", "port 99999 out of range 1-65535");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4_exact),     cmocka_unit_test(test_ipv4_cidr),
        cmocka_unit_test(test_ipv4_mapped),    cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_ports),          cmocka_unit_test(test_names),
        cmocka_unit_test(test_wildcards),      cmocka_unit_test(test_bad_patterns),
        cmocka_unit_test(test_name_normalize), cmocka_unit_test(test_addr_edge_cases),
        cmocka_unit_test(test_grammar_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
