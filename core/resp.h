/* resp.h -- a scanner that checks Redis replies (RESP2) on the wire against size caps, before any parser. */
#ifndef CCAP_RESP_H
#define CCAP_RESP_H

#include <stddef.h>

/* The most a reply may hold. A reply beyond any of these is refused before
 * a byte of it reaches hiredis's reader (which would allocate what the
 * headers announce). */
struct ccap_resp_caps {
    size_t bulk;     /* bytes of one bulk string, status or error line */
    size_t elements; /* array elements in one reply, every level counted */
    int depth;       /* nested arrays (1: a flat array), at most CCAP_RESP_DEPTH_MAX */
    size_t bytes;    /* wire bytes of one reply */
};

#define CCAP_RESP_DEPTH_MAX 7 /* hiredis 0.14's reader nests no deeper */

/* The shim's replies: script results (a few integers), SCRIPT LOAD's SHA,
 * ROLE, SENTINEL's address, BLPOP's pair, CLUSTER SLOTS (up to 16384
 * ranges of a few elements each) and error texts. At most about 20 MB of
 * reply objects. */
extern const struct ccap_resp_caps ccap_resp_caps_shim;
/* The conncap command's: `holders`, `status` and `audit` read every holder
 * (two elements each) or a page of the audit stream. */
extern const struct ccap_resp_caps ccap_resp_caps_cli;

/* The scanner's state for one connection's byte stream. The parser does
 * no I/O; an error lives on the object and is final (drop the connection). */
struct ccap_resp_scan {
    const struct ccap_resp_caps *caps;
    int state;
    char type;              /* '+', '-', ':', '$' or '*' of the header being read */
    unsigned char line_len; /* digits of a numeric header so far */
    char line[24];
    size_t text_len;                     /* bytes of a status or error line so far */
    long long bulk_left;                 /* payload bytes still to skip */
    long long left[CCAP_RESP_DEPTH_MAX]; /* elements still to come in each open array */
    int depth;
    size_t elements, bytes;     /* of the reply under way */
    unsigned long long replies; /* complete replies seen */
    const char *err;            /* NULL, or why the stream was refused (static text) */
};

/* Starts a scan of a new connection's stream under CAPS (kept, not copied). */
void ccap_resp_scan_init(struct ccap_resp_scan *s, const struct ccap_resp_caps *caps);

/* Checks the next LEN bytes of the stream. Returns 0 when they are well
 * formed and within the caps so far (a reply may be incomplete), or
 * -EMSGSIZE (a cap exceeded) / -EPROTO (not RESP2) with s->err set; once
 * failed, every later call fails the same way. Pure; thread-compatible. */
int ccap_resp_scan(struct ccap_resp_scan *s, const char *buf, size_t len);

#endif
