/* log.c -- one write(2) per line to stderr (or syslog), tagged conncap[pid], rate-limited. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

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

static const char *const level_names[] = {"error", "warn", "info", "debug"};

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
    struct timespec ts;
    rate_follow((int)getpid());
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    long now = (long)ts.tv_sec, w = atomic_load(&win_sec);
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

    /* Layout: head, message, tail, '\n' (or NUL for syslog), in BUF. */
    char buf[CCAP_LOG_LINE], tail[64] = "";
    size_t tl = 0;
    long sup = atomic_exchange(&suppressed, 0);
    if (sup > 0)
        tl = (size_t)snprintf(tail, sizeof tail, " (%ld messages suppressed)", sup);
    size_t limit = sizeof buf - 1 - tl; /* head + message + vsnprintf's NUL */
    int target = atomic_load_explicit(&log_target, memory_order_relaxed);
    int n = target == CCAP_LOG_SYSLOG ? snprintf(buf, limit, "%s: ", level_names[level])
                                      : snprintf(buf, limit, "conncap[%d]: %s: ", (int)getpid(),
                                                 level_names[level]);
    size_t head = (size_t)n, len = head;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(buf + len, limit - len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < limit - len) {
        len += (size_t)n;
    } else if (n >= 0) { /* truncated: mark it */
        len = limit - 1;
        memcpy(buf + len - 3, "...", 3);
    }
    memcpy(buf + len, tail, tl);
    len += tl;
    for (size_t i = head; i < len; i++) /* keep it one line */
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';

    if (target == CCAP_LOG_SYSLOG) {
        static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
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
    if (atomic_load(&win_pid) != pid) return;   /* nothing of this process's held back */
    long sup = atomic_exchange(&suppressed, 0);
    if (sup <= 0) {
        errno = saved;
        return;
    }
    char buf[128];
    if (atomic_load_explicit(&log_target, memory_order_relaxed) == CCAP_LOG_SYSLOG) {
        syslog(LOG_USER | LOG_WARNING, "conncap[%d]: warn: %ld messages suppressed by the rate limit", pid, sup);
    } else {
        int n = snprintf(buf, sizeof buf, "conncap[%d]: warn: %ld messages suppressed by the rate limit\n", pid, sup);
        write_all(2, buf, (size_t)n);
    }
    errno = saved;
}
