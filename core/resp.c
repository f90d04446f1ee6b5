/* resp.c -- checks Redis replies on the wire (headers, sizes, nesting) before hiredis's reader sees them. */
#include "resp.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

const struct ccap_resp_caps ccap_resp_caps_shim = {
    .bulk = 64 * 1024,
    .elements = 256 * 1024,
    .depth = 5,
    .bytes = 8 * 1024 * 1024,
};

const struct ccap_resp_caps ccap_resp_caps_cli = {
    .bulk = 16 * 1024 * 1024,
    .elements = 4 * 1024 * 1024,
    .depth = CCAP_RESP_DEPTH_MAX,
    .bytes = 256 * 1024 * 1024,
};

enum { ST_TYPE = 0, ST_TEXT, ST_NUM, ST_LF, ST_BULK, ST_BULK_CR, ST_BULK_LF };

void ccap_resp_scan_init(struct ccap_resp_scan *s, const struct ccap_resp_caps *caps)
{
    memset(s, 0, sizeof *s);
    s->caps = caps;
}

static int fail(struct ccap_resp_scan *s, int rc, const char *why)
{
    s->err = why;
    s->state = rc;
    return rc;
}

/* The numeric header in s->line in canonical form, as Redis writes it
 * and hiredis's reader wants it: an optional '-' and 1-19 digits, no
 * leading zero (but "0"), no "-0", no overflow. Returns 0 and *V, or
 * -EPROTO. */
static int header_value(const struct ccap_resp_scan *s, long long *v)
{
    size_t i = s->line[0] == '-', n = s->line_len;
    unsigned long long x = 0;

    if (n == i || n - i > 19 || (s->line[i] == '0' && n - i > 1) || (i && s->line[1] == '0'))
        return -EPROTO;
    for (; i < n; i++) {
        if (s->line[i] < '0' || s->line[i] > '9')
            return -EPROTO;
        x = x * 10 + (unsigned)(s->line[i] - '0');
    }
    if (x > (unsigned long long)LLONG_MAX + (s->line[0] == '-'))
        return -EPROTO;
    *v = s->line[0] == '-' ? (long long)(0ULL - x) : (long long)x;
    return 0;
}

/* One value ended: it counts against its array; arrays that end with it
 * count against theirs; at the top a reply is complete. */
static void value_done(struct ccap_resp_scan *s)
{
    while (s->depth > 0 && --s->left[s->depth - 1] == 0)
        s->depth--;
    if (s->depth == 0)
        s->replies++;
    s->state = ST_TYPE;
}

/* The header line ended (its "\r\n" read): checks it against the caps. */
static int header_done(struct ccap_resp_scan *s)
{
    long long v;

    if (s->type == '+' || s->type == '-') {
        value_done(s);
        return 0;
    }
    if (header_value(s, &v) < 0)
        return fail(s, -EPROTO, "malformed number in a reply header");
    if (s->type == ':' || v == -1) {
        value_done(s);
        return 0;
    }
    if (v < 0)
        return fail(s, -EPROTO, "negative length in a reply header");
    if (s->type == '$') {
        if ((unsigned long long)v > s->caps->bulk)
            return fail(s, -EMSGSIZE, "bulk string longer than the cap");
        s->bulk_left = v;
        s->state = v ? ST_BULK : ST_BULK_CR;
        return 0;
    }
    if ((unsigned long long)v > s->caps->elements - s->elements)
        return fail(s, -EMSGSIZE, "more array elements than the cap");
    if (v == 0) {
        value_done(s);
        return 0;
    }
    if (s->depth >= s->caps->depth || s->depth >= CCAP_RESP_DEPTH_MAX)
        return fail(s, -EMSGSIZE, "arrays nested deeper than the cap");
    s->elements += (size_t)v;
    s->left[s->depth++] = v;
    s->state = ST_TYPE;
    return 0;
}

/* One byte of a header or of the end of a bulk string. */
static int step(struct ccap_resp_scan *s, char c)
{
    switch (s->state) {
    case ST_TYPE:
        if (!strchr("+-:$*", c) || c == '\0')
            return fail(s, -EPROTO, "not a RESP2 reply type");
        if (s->depth == 0) { /* a new reply */
            s->elements = 0;
            s->bytes = 0;
        }
        s->type = c;
        s->line_len = 0;
        s->text_len = 0;
        s->state = c == '+' || c == '-' ? ST_TEXT : ST_NUM;
        return 0;
    case ST_TEXT:
        if (c == '\r')
            s->state = ST_LF;
        else if (++s->text_len > s->caps->bulk)
            return fail(s, -EMSGSIZE, "status or error line longer than the cap");
        return 0;
    case ST_NUM:
        if (c == '\r')
            s->state = ST_LF;
        else if (s->line_len >= sizeof s->line)
            return fail(s, -EPROTO, "malformed number in a reply header");
        else
            s->line[s->line_len++] = c;
        return 0;
    case ST_LF: return c == '\n' ? header_done(s) : fail(s, -EPROTO, "a reply line not ended by CRLF");
    case ST_BULK_CR:
        if (c != '\r')
            return fail(s, -EPROTO, "a bulk string longer than announced");
        s->state = ST_BULK_LF;
        return 0;
    case ST_BULK_LF:
        if (c != '\n')
            return fail(s, -EPROTO, "a bulk string longer than announced");
        value_done(s);
        return 0;
    default: return fail(s, -EPROTO, "internal scanner state");
    }
}

int ccap_resp_scan(struct ccap_resp_scan *s, const char *buf, size_t len)
{
    size_t i = 0;

    if (s->err)
        return s->state;
    while (i < len) {
        size_t take = 1;

        if (s->state == ST_BULK) {
            take = (unsigned long long)s->bulk_left < len - i ? (size_t)s->bulk_left : len - i;
            if ((s->bulk_left -= (long long)take) == 0)
                s->state = ST_BULK_CR;
        } else if (step(s, buf[i]) < 0) {
            return s->state;
        }
        i += take;
        s->bytes += take;
        if (s->bytes > s->caps->bytes)
            return fail(s, -EMSGSIZE, "reply longer than the cap");
    }
    return 0;
}
