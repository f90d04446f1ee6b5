/* log.c -- one write(2) per line to stderr (or syslog), tagged conncap[pid], rate-limited. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "clock.h"

#define CCAP_LOG_LINE 1024

static atomic_int log_level = CCAP_LOG_WARN;
static atomic_int log_target = CCAP_LOG_STDERR;

/* The rate limit: a window of one second and the lines written in it, for
 * the process WIN_PID (a fork child starts its own count: what its parent
 * held back is the parent's to report). */
static atomic_long win_sec = -1;
static atomic_int win_count;
static atomic_long suppressed;
static atomic_int win_pid;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void ccap_log_setup(int level, int target)
{
    if (level < CCAP_LOG_ERROR)
        level = CCAP_LOG_ERROR;
    if (level > CCAP_LOG_DEBUG)
        level = CCAP_LOG_DEBUG;
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
    atomic_store_explicit(&log_target, target == CCAP_LOG_SYSLOG ? CCAP_LOG_SYSLOG : CCAP_LOG_STDERR,
                          memory_order_relaxed);
}

int ccap_log_level_parse(const char *s)
{
    if (!s)
        return -EINVAL;
    for (int i = 0; i <= CCAP_LOG_DEBUG; i++)
        if (!strcmp(s, level_names[i]))
            return i;
    if (!strcmp(s, "warning"))
        return CCAP_LOG_WARN;
    return -EINVAL;
}

/* A fork child's first line: forget the parent's window and count. */
static void rate_follow(int pid)
{
    int was = atomic_load(&win_pid);
    if (was != pid && atomic_compare_exchange_strong(&win_pid, &was, pid)) {
        atomic_store(&suppressed, 0);
        atomic_store(&win_count, 0);
        atomic_store(&win_sec, -1);
    }
}

/* True when this line may pass; counts it as suppressed otherwise. */
static int rate_pass(void)
{
    rate_follow((int)getpid());
    long now = (long)(ccap_now_coarse_ms() / 1000), w = atomic_load(&win_sec);
    if (w != now && atomic_compare_exchange_strong(&win_sec, &w, now))
        atomic_store(&win_count, 0);
    if (atomic_fetch_add(&win_count, 1) >= CCAP_LOG_BURST) {
        atomic_fetch_add(&suppressed, 1);
        return 0;
    }
    return 1;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w, n -= (size_t)w;
    }
}

size_t ccap_text_char_len(const unsigned char *p, size_t n)
{
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;

    if (n == 0)
        return 0;
    if (p[0] >= 0x20 && p[0] < 0x7f)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        len = 2, lo = p[0] == 0xc2 ? 0xa0 : 0x80; /* U+0080..U+009F are C1 controls */
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        len = 3, lo = p[0] == 0xe0 ? 0xa0 : 0x80, hi = p[0] == 0xed ? 0x9f : 0xbf;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        len = 4, lo = p[0] == 0xf0 ? 0x90 : 0x80, hi = p[0] == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

size_t ccap_text_escape(char *out, size_t cap, const char *msg, size_t n, int flags, int *cut)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)msg;
    size_t w = 0;

    for (size_t i = 0; i < n;) {
        size_t k = ccap_text_char_len(p + i, n - i);

        if (k == 0 && (flags & CCAP_ESC_WS_SPACE) && (p[i] == '\n' || p[i] == '\r' || p[i] == '\t'))
            k = 1;
        if (k == 1 && p[i] == '\\' && (flags & CCAP_ESC_BACKSLASH))
            k = 0;
        if (w + (k ? k : 4) > cap) {
            *cut = 1;
            break;
        }
        if (k == 1 && p[i] < 0x20) {
            out[w++] = ' ';
        } else if (k) {
            memcpy(out + w, p + i, k);
            w += k;
        } else {
            out[w++] = '\\';
            out[w++] = 'x';
            out[w++] = hex[p[i] >> 4];
            out[w++] = hex[p[i] & 15];
            k = 1;
        }
        i += k;
    }
    return w;
}

/* Formats "HEAD: message (suppressed)" into BUF (CCAP_LOG_LINE bytes, the
 * message escaped); returns its length. */
static size_t format_line(char *buf, int target, int level, const char *fmt, va_list ap)
{
    char msg[CCAP_LOG_LINE], tail[64] = "";
    size_t tl = 0, head, len, room;
    int cut = 0;
    long sup = atomic_exchange(&suppressed, 0);
    if (sup > 0)
        tl = (size_t)snprintf(tail, sizeof tail, " (%ld messages suppressed)", sup);
    int n = target == CCAP_LOG_SYSLOG
                ? snprintf(buf, CCAP_LOG_LINE, "%s: ", level_names[level])
                : snprintf(buf, CCAP_LOG_LINE, "conncap[%d]: %s: ", (int)getpid(), level_names[level]);
    head = (size_t)n;
    n = vsnprintf(msg, sizeof msg, fmt, ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof msg) {
        cut = 1;
        n = (int)sizeof msg - 1;
    }
    room = CCAP_LOG_LINE - 2 - tl - head; /* room for '\n' or NUL */
    len = head + ccap_text_escape(buf + head, room - 3, msg, (size_t)n, CCAP_ESC_WS_SPACE, &cut);
    if (cut) { /* truncated: mark it */
        memcpy(buf + len, "...", 3);
        len += 3;
    }
    memcpy(buf + len, tail, tl);
    return len + tl;
}

void ccap_log(int level, const char *fmt, ...)
{
    if (level > atomic_load_explicit(&log_level, memory_order_relaxed))
        return;
    int saved = errno;
    if (!rate_pass()) {
        errno = saved;
        return;
    }
    if (level < CCAP_LOG_ERROR)
        level = CCAP_LOG_ERROR;
    if (level > CCAP_LOG_DEBUG)
        level = CCAP_LOG_DEBUG;

    char buf[CCAP_LOG_LINE];
    int target = atomic_load_explicit(&log_target, memory_order_relaxed);
    va_list ap;
    va_start(ap, fmt);
    size_t len = format_line(buf, target, level, fmt, ap);
    va_end(ap);

    if (target == CCAP_LOG_SYSLOG) {
        static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
        buf[len] = '\0';
        /* No openlog(): that would change the host program's own ident. */
        syslog(LOG_USER | prio[level], "conncap[%d]: %s", (int)getpid(), buf);
    } else {
        buf[len++] = '\n';
        write_all(2, buf, len);
    }
    errno = saved;
}

void ccap_log_flush(void)
{
    int saved = errno, pid = (int)getpid();
    if (atomic_load(&win_pid) != pid)
        return; /* nothing of this process's held back */
    long sup = atomic_exchange(&suppressed, 0);
    if (sup <= 0) {
        errno = saved;
        return;
    }
    char buf[128];
    if (atomic_load_explicit(&log_target, memory_order_relaxed) == CCAP_LOG_SYSLOG) {
        syslog(LOG_USER | LOG_WARNING, "conncap[%d]: warn: %ld messages suppressed by the rate limit", pid, sup);
    } else {
        int n =
            snprintf(buf, sizeof buf, "conncap[%d]: warn: %ld messages suppressed by the rate limit\n", pid, sup);
        write_all(2, buf, (size_t)n);
    }
    errno = saved;
}

bool ccap_log_every(struct ccap_log_every *e, long long now_ms, int interval_ms, unsigned *held)
{
    long long next = atomic_load_explicit(&e->next_ms, memory_order_relaxed);

    if (now_ms < next || !atomic_compare_exchange_strong(&e->next_ms, &next, now_ms + interval_ms)) {
        atomic_fetch_add_explicit(&e->held, 1, memory_order_relaxed);
        return false;
    }
    *held = atomic_exchange(&e->held, 0);
    return true;
}

unsigned ccap_log_every_take(struct ccap_log_every *e)
{
    return atomic_exchange(&e->held, 0);
}
