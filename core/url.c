/* url.c -- redis://, rediss:// and unix:// URLs into a Redis connection's settings; a password-free form for messages. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define URL_PART_MAX 1024

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* The LEN bytes at S, %XX-decoded, into a new string (*OUT). Returns 0,
 * -EINVAL (a bad escape or an encoded NUL) or -ENOMEM. */
static int decode(const char *s, size_t len, char **out)
{
    char *d = malloc(len + 1), *p = d;

    if (!d)
        return -ENOMEM;
    for (size_t i = 0; i < len; i++) {
        int hi, lo;

        if (s[i] != '%') {
            *p++ = s[i];
            continue;
        }
        if (i + 2 >= len || (hi = hexval(s[i + 1])) < 0 || (lo = hexval(s[i + 2])) < 0 || !(hi | lo)) {
            free(d);
            return -EINVAL;
        }
        *p++ = (char)(hi * 16 + lo);
        i += 2;
    }
    *p = '\0';
    *out = d;
    return 0;
}

/* A decimal number in [LO, HI] of exactly LEN bytes at S, or -1. */
static long number(const char *s, size_t len, long lo, long hi)
{
    long v = 0;

    if (len == 0 || len > 9)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v >= lo && v <= hi ? v : -1;
}

#define FAIL(...) (snprintf(why, whylen, __VA_ARGS__), -EINVAL)

/* "user:password@" (either may be absent) of LEN bytes at S into OUT. */
static int userinfo(const char *s, size_t len, struct ccap_redis_conf *out, char *why, size_t whylen)
{
    const char *colon = memchr(s, ':', len);
    size_t ulen = colon ? (size_t)(colon - s) : len;
    int rc = 0;

    if (len > URL_PART_MAX)
        return FAIL("the user and password are longer than %d bytes", URL_PART_MAX);
    if (ulen && (rc = decode(s, ulen, &out->username)) < 0)
        return rc == -ENOMEM ? rc : FAIL("the user name has a bad %%-escape");
    if (colon && len - ulen > 1 && (rc = decode(colon + 1, len - ulen - 1, &out->password)) < 0)
        return rc == -ENOMEM ? rc : FAIL("the password has a bad %%-escape");
    if (out->username && !out->password)
        return FAIL("a user name needs a password (redis://user:password@host)");
    return 0;
}

/* "host[:port][/db]" at S (TCP) into OUT. */
static int hostpart(const char *s, struct ccap_redis_conf *out, char *why, size_t whylen)
{
    const char *h = s, *end, *slash = strchr(s, '/'), *colon;
    size_t hl;
    long v;

    if (s[0] == '[') {
        if (!(end = strchr(s, ']')))
            return FAIL("an IPv6 address needs its closing ']'");
        h = s + 1;
        hl = (size_t)(end - h);
        colon = end[1] == ':' ? end + 1 : NULL;
        if (end[1] && end[1] != ':' && end[1] != '/')
            return FAIL("unexpected text after the IPv6 address");
    } else {
        end = slash ? slash : s + strlen(s);
        colon = memchr(s, ':', (size_t)(end - s));
        hl = (size_t)((colon ? colon : end) - s);
    }
    if (hl == 0 || hl >= 256)
        return FAIL("the host is %s", hl ? "longer than 255 bytes" : "missing (redis://host:port)");
    if (!(out->host = strndup(h, hl)))
        return -ENOMEM;
    if (colon) {
        size_t pl = (size_t)((slash ? slash : colon + strlen(colon)) - colon - 1);
        if ((v = number(colon + 1, pl, 1, CCAP_PORT_MAX)) < 0)
            return FAIL("the port must be 1-65535");
        out->port = (int)v;
    }
    if (slash && slash[1] && (v = number(slash + 1, strlen(slash + 1), 0, 999999)) < 0)
        return FAIL("the database after '/' must be a number >= 0");
    if (slash && slash[1])
        out->db = (int)v;
    return 0;
}

/* "/path[?db=N]" at S (Unix socket) into OUT. */
static int unixpart(const char *s, struct ccap_redis_conf *out, char *why, size_t whylen)
{
    const char *q = strchr(s, '?');
    size_t pl = q ? (size_t)(q - s) : strlen(s);
    long v;

    if (s[0] != '/' || pl < 2)
        return FAIL("unix:// needs an absolute path, as in unix:///run/redis.sock");
    if (q && (strncmp(q, "?db=", 4) || (v = number(q + 4, strlen(q + 4), 0, 999999)) < 0))
        return FAIL("the only query a unix:// URL takes is ?db=N (N >= 0)");
    if (q)
        out->db = (int)v;
    return (out->socket = strndup(s, pl)) ? 0 : -ENOMEM;
}

int ccap_redis_url_parse(const char *url, struct ccap_redis_conf *out, char *why, size_t whylen)
{
    static const char *const schemes[] = { "redis://", "rediss://", "unix://", NULL };
    const char *rest = NULL, *at;
    int k, rc;

    memset(out, 0, sizeof *out);
    out->port = 6379;
    for (k = 0; schemes[k] && !rest; k++)
        if (!strncmp(url, schemes[k], strlen(schemes[k])))
            rest = url + strlen(schemes[k]);
    if (!rest)
        return FAIL("must start with redis://, rediss:// or unix://");
    k--;
    out->tls.enabled = k == 1;
    out->tls.verify = true;
    if (k == 2)
        return unixpart(rest, out, why, whylen);
    at = strrchr(rest, '@');
    if (at && (rc = userinfo(rest, (size_t)(at - rest), out, why, whylen)) < 0)
        return rc;
    return hostpart(at ? at + 1 : rest, out, why, whylen);
}

void ccap_redis_url_redact(const char *url, char *out, size_t outlen)
{
    const char *sep = strstr(url, "://"), *at = sep ? strrchr(sep + 3, '@') : NULL, *colon;

    colon = at ? memchr(sep + 3, ':', (size_t)(at - sep - 3)) : NULL;
    if (!colon)
        snprintf(out, outlen, "%s", url);
    else
        snprintf(out, outlen, "%.*s:***%s", (int)(colon - url), url, at);
}
