/* handoff.c -- permits across execve(): the CONNCAP_PERMITS format, adoption, exec split and restore. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime.h"
#include "env.h"
#include "handoff.h"
#include "waiting.h"
#include "log.h"

#define NAME_EQ CCAP_HANDOFF_ENV "="
#define VERSION "1"

/* ---- the format ---- */

static bool plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("._/:@+[]-", c));
}

/* Appends S escaped; returns the new length or -1 when it would pass CAP. */
static long put_escaped(char *buf, long len, long cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const void *)s; *p; p++) {
        if (len + 3 >= cap)
            return -1;
        if (plain(*p)) {
            buf[len++] = (char)*p;
        } else {
            buf[len++] = '%';
            buf[len++] = hex[*p >> 4];
            buf[len++] = hex[*p & 15];
        }
    }
    return len;
}

static long put_entry(char *buf, long len, long cap, const struct ccap_handoff_entry *e, bool first)
{
    char nums[96];
    int k = snprintf(nums, sizeof(nums), "%s%d,%llu,%llu,%d,", first ? "" : ";", e->fd, (unsigned long long)e->dev,
                     (unsigned long long)e->ino, e->lease_ms);
    if (len + k >= cap)
        return -1;
    memcpy(buf + len, nums, (size_t)k);
    len += k;
    if ((len = put_escaped(buf, len, cap, e->sem)) < 0 || len + 1 >= cap)
        return -1;
    buf[len++] = ',';
    return put_escaped(buf, len, cap, e->holder);
}

int ccap_handoff_encode(pid_t pid, const struct ccap_handoff_entry *e, size_t n, char **out, size_t *kept)
{
    *out = NULL;
    if (kept)
        *kept = 0;
    if (pid <= 0 || (n && !e))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (e[i].fd < 0 || e[i].lease_ms < 0)
            return -EINVAL;
    long cap = CCAP_HANDOFF_MAX_LEN;
    char *buf = malloc((size_t)cap);
    if (!buf)
        return -ENOMEM;
    long len = snprintf(buf, (size_t)cap, "%s%s:%ld:", NAME_EQ, VERSION, (long)pid);
    size_t i = 0;
    for (; i < n && i < CCAP_HANDOFF_MAX_ENTRIES; i++) {
        long l = put_entry(buf, len, cap, &e[i], i == 0);
        if (l < 0)
            break;
        len = l;
    }
    buf[len] = '\0';
    if (kept)
        *kept = i;
    *out = buf;
    return (int)len;
}

/* Parses an unsigned decimal number of at most MAX at S (digits only: no
 * sign, no space). Returns the position after it, or NULL. */
static const char *get_num(const char *s, unsigned long long max, unsigned long long *v)
{
    unsigned long long x = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (x > (max - d) / 10)
            return NULL;
        x = x * 10 + d;
    }
    if (p == s)
        return NULL;
    *v = x;
    return p;
}

static int unhex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Unescapes up to a ',' ';' or the end into OUT (CAP bytes with NUL).
 * Returns the position after the text, or NULL. */
static const char *get_text(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && *s != ',' && *s != ';'; s++) {
        int c = (unsigned char)*s;
        if (c == '%') {
            int h = unhex(s[1]), l = h < 0 ? -1 : unhex(s[2]);
            if (l < 0)
                return NULL;
            c = h * 16 + l;
            s += 2;
        } else if (!plain((unsigned char)c)) {
            return NULL;
        }
        if (c == 0 || n + 1 >= cap)
            return NULL;
        out[n++] = (char)c;
    }
    if (n == 0)
        return NULL;
    out[n] = '\0';
    return s;
}

static const char *get_entry(const char *s, struct ccap_handoff_entry *e)
{
    unsigned long long fd, dev, ino, lease;
    if (!(s = get_num(s, CCAP_PTAB_MAX_FD - 1, &fd)) || *s++ != ',')
        return NULL;
    if (!(s = get_num(s, UINT64_MAX, &dev)) || *s++ != ',')
        return NULL;
    if (!(s = get_num(s, UINT64_MAX, &ino)) || *s++ != ',')
        return NULL;
    if (!(s = get_num(s, INT_MAX, &lease)) || *s++ != ',' || lease == 0)
        return NULL;
    if (!(s = get_text(s, e->sem, sizeof(e->sem))) || *s++ != ',')
        return NULL;
    if (!(s = get_text(s, e->holder, sizeof(e->holder))))
        return NULL;
    e->fd = (int)fd;
    e->dev = (dev_t)dev;
    e->ino = (ino_t)ino;
    e->lease_ms = (int)lease;
    return s;
}

long ccap_handoff_pid(const char *value)
{
    unsigned long long pid;
    if (!value || strncmp(value, VERSION ":", 2) != 0)
        return -EINVAL;
    const char *p = get_num(value + 2, INT_MAX, &pid);
    if (!p || *p != ':' || pid == 0)
        return -EINVAL;
    return (long)pid;
}

int ccap_handoff_decode(const char *value, pid_t *pid, struct ccap_handoff_entry **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    long p = ccap_handoff_pid(value);
    if (p < 0)
        return -EINVAL;
    const char *s = strchr(value + 2, ':') + 1;
    size_t cnt = *s ? 1 : 0;
    for (const char *c = s; *c; c++)
        cnt += *c == ';';
    if (cnt > CCAP_HANDOFF_MAX_ENTRIES)
        return -EINVAL;
    struct ccap_handoff_entry *e = cnt ? calloc(cnt, sizeof(*e)) : NULL;
    if (cnt && !e)
        return -ENOMEM;
    for (size_t i = 0; i < cnt; i++) {
        s = get_entry(s, &e[i]);
        if (!s || (*s && *s != ';') || (*s == ';' && i + 1 == cnt)) {
            free(e);
            return -EINVAL;
        }
        if (*s)
            s++;
    }
    *pid = (pid_t)p;
    *out = e;
    *n = cnt;
    return 0;
}

static bool is_ours(const char *entry)
{
    return strncmp(entry, NAME_EQ, sizeof(NAME_EQ) - 1) == 0;
}

bool ccap_handoff_in_envp(char *const *envp)
{
    for (; envp && *envp; envp++)
        if (is_ours(*envp))
            return true;
    return false;
}

char **ccap_handoff_envp(char *const *envp, const char *extra)
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    char **out = malloc((n + 2) * sizeof(*out));
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_ours(envp[i]))
            out[k++] = envp[i];
    if (extra)
        out[k++] = (char *)extra;
    out[k] = NULL;
    return out;
}

/* ---- the lifecycle ---- */

static const char *recorded;      /* the constructor's copy (env.c) */
atomic_bool ccap_handoff_pending; /* ccap_handoff_waiting */
#define waiting ccap_handoff_pending
static pthread_once_t adopt_once = PTHREAD_ONCE_INIT;

void ccap_handoff_record(void)
{
    recorded = ccap_env_get(CCAP_HANDOFF_ENV);
    atomic_store_explicit(&waiting, recorded != NULL, memory_order_release);
}

void ccap_handoff_fork_child(void)
{
    atomic_store(&waiting, false);
}

static bool same_socket(int fd, const struct ccap_handoff_entry *e)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == e->dev && st.st_ino == e->ino;
}

/* Builds one permit from the entries of E[I]'s holder (marking them used)
 * and attaches it to those of their descriptors that are still its socket.
 * Returns 1 if it was kept, 0 if released (its socket is gone), -ENOMEM. */
static int adopt_one(struct ccap_handoff_entry *e, size_t n, size_t i, bool *used)
{
    struct ccap_permit *p = ccap_permit_new();
    if (!p)
        return -ENOMEM;
    p->dev = e[i].dev;
    p->ino = e[i].ino;
    p->lease_ms = e[i].lease_ms;
    p->flags |= CCAP_PERMIT_RENEWED; /* the image before exec may have renewed it */
    memcpy(p->sem, e[i].sem, sizeof(p->sem));
    memcpy(p->holder, e[i].holder, sizeof(p->holder));
    p->held = ccap_rt_held_count(p->sem);
    int attached = 0;
    for (size_t j = i; j < n; j++) {
        if (used[j] || strcmp(e[j].holder, e[i].holder) != 0)
            continue;
        used[j] = true;
        if (e[j].dev == p->dev && e[j].ino == p->ino && same_socket(e[j].fd, &e[j]) && !ccap_ptab_maybe(e[j].fd) &&
            ccap_ptab_attach(e[j].fd, p) == 0)
            attached++;
    }
    if (attached)
        return 1;
    ccap_log(CCAP_LOG_INFO, "handed-over permit %s: its socket is gone, given back", p->holder);
    ccap_rt_release(p);
    return 0;
}

static void adopt(void)
{
    const char *v = recorded;
    if (v && ccap_handoff_pid(v) == (long)getpid()) {
        pid_t pid;
        struct ccap_handoff_entry *e;
        size_t n, kept = 0;
        int rc = ccap_handoff_decode(v, &pid, &e, &n);
        bool *used = rc == 0 ? calloc(n + 1, sizeof(*used)) : NULL;
        if (rc < 0 || !used) {
            ccap_log(CCAP_LOG_WARN, "%s is %s: its permits are not renewed and expire with their leases",
                     CCAP_HANDOFF_ENV, rc == -EINVAL ? "malformed" : "too large for memory");
        } else {
            ccap_rt_claim();
            for (size_t i = 0; i < n; i++)
                if (!used[i] && adopt_one(e, n, i, used) == 1)
                    kept++;
            if (kept)
                ccap_rt_kick();
            ccap_log(CCAP_LOG_DEBUG, "adopted %zu permits handed over across exec", kept);
        }
        free(used);
        free(e);
    }
    atomic_store(&waiting, false);
}

void ccap_handoff_adopt(void)
{
    pthread_once(&adopt_once, adopt);
}

/* Copies the released permits' sem/holder/lease for re-registration. */
static void keep_regone(struct ccap_exec *x, struct ccap_permit *released)
{
    size_t n = 0;
    for (struct ccap_permit *p = released; p; p = p->next)
        n++;
    x->regone = calloc(n ? n : 1, sizeof(*x->regone));
    for (struct ccap_permit *p = released; p && x->regone; p = p->next) {
        struct ccap_handoff_entry *e = &x->regone[x->n_regone++];
        e->lease_ms = p->lease_ms;
        memcpy(e->sem, p->sem, sizeof(e->sem));
        memcpy(e->holder, p->holder, sizeof(e->holder));
    }
}

char *const *ccap_handoff_exec_pre(char *const *envp, struct ccap_exec *x)
{
    memset(x, 0, sizeof(*x));
    if (ccap_handoff_waiting())
        ccap_handoff_adopt();
    bool old_entry = ccap_handoff_in_envp(envp);
    if (ccap_rt_waits_drop())
        ccap_rt_flush(); /* no ticket of a waiting thread outlives the exec */
    if (ccap_ptab_empty() && !old_entry)
        return envp;

    struct ccap_handoff_entry *surv = NULL;
    size_t nsurv = 0, kept = 0;
    struct ccap_permit *released = NULL, *orphans = NULL;
    if (!ccap_ptab_empty())
        ccap_ptab_exec_split(&surv, &nsurv, &x->gone, &x->n_gone, &released, &orphans);
    ccap_rt_release_list(orphans);
    if (released) {
        keep_regone(x, released);
        for (struct ccap_permit *p = released, *next; p; p = next) {
            next = p->next; /* unregister keeps P: it is still in x->gone */
            ccap_rt_unregister(p);
        }
        ccap_rt_flush(); /* before the exec closes the connection */
    }
    if (nsurv) {
        /* a fresh lease gives the new image the longest time to adopt */
        ccap_rt_renew_entries(surv, nsurv);
        if (ccap_handoff_encode(getpid(), surv, nsurv, &x->value, &kept) < 0)
            ccap_log(CCAP_LOG_WARN, "out of memory: %zu permits not handed over across exec", nsurv);
        else if (kept < nsurv)
            ccap_log(CCAP_LOG_WARN,
                     "%zu descriptors beyond the %s size limit: their permits expire with their leases",
                     nsurv - kept, CCAP_HANDOFF_ENV);
    }
    free(surv);
    if (!x->value && !old_entry)
        return envp;
    x->envp = ccap_handoff_envp(envp, x->value);
    return x->envp ? x->envp : envp;
}

char *const *ccap_handoff_exec_e2big(struct ccap_exec *x)
{
    if (!x->envp || !x->value)
        return NULL;
    for (char **p = x->envp; *p; p++)
        if (*p == x->value) {
            *p = NULL; /* it was the last one */
            ccap_log(CCAP_LOG_WARN,
                     "exec: environment too large with %s: retried without it; "
                     "the surviving sockets' permits expire with their leases",
                     CCAP_HANDOFF_ENV);
            return x->envp;
        }
    return NULL;
}

void ccap_handoff_exec_post(struct ccap_exec *x)
{
    int saved = errno;
    ccap_rt_waits_exec_failed();
    if (x->n_gone) {
        /* Register first, attach after: a close racing us then releases
         * a permit that is registered, never one registered after it. */
        ccap_rt_renew_entries(x->regone, x->n_regone);
        ccap_rt_release_list(ccap_ptab_exec_restore(x->gone, x->n_gone));
        if (!ccap_ptab_empty())
            ccap_rt_kick();
    }
    free(x->gone);
    free(x->regone);
    free(x->envp);
    free(x->value);
    memset(x, 0, sizeof(*x));
    errno = saved;
}
