/* holder.c -- the holder id's one owner: build it (the shim, every matched connect) and parse it (the CLI). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include "holder.h"
#include "redis.h"

/* Appends S at *P, never past END (which stays for the NUL). */
static void put(char **p, char *end, const char *s)
{
    while (*s && *p < end)
        *(*p)++ = *s++;
}

static void put_num(char **p, char *end, unsigned long long v)
{
    char d[24];
    ccap_fmt_ll(d, (long long)v);
    put(p, end, d);
}

/* "a.b.c.d:port" or "[v6]:port", without sprintf: inet_ntop's IPv4 path is
 * one, and this runs on every matched connect. */
static void put_dest(char **p, char *end, const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const void *)sa;
        const unsigned char *b = (const unsigned char *)&s4->sin_addr;
        for (int i = 0; i < 4; i++) {
            if (i)
                put(p, end, ".");
            put_num(p, end, b[i]);
        }
        put(p, end, ":");
        put_num(p, end, ntohs(s4->sin_port));
    } else {
        const struct sockaddr_in6 *s6 = (const void *)sa;
        char a[INET6_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
        put(p, end, "[");
        put(p, end, a);
        put(p, end, "]:");
        put_num(p, end, ntohs(s6->sin6_port));
    }
}

size_t ccap_holder_dest(char *out, size_t n, const struct sockaddr *sa)
{
    char *o = out, *end = out + n - 1;

    put_dest(&o, end, sa);
    *o = '\0';
    return (size_t)(o - out);
}

/* PROG as the format has it: at most CCAP_HOLDER_PROG_MAX bytes of
 * [A-Za-z0-9._+-], any other byte as '_' (so never a '/', nor the ';' and
 * ',' of the exec hand-over); "-" when empty. OUT: CCAP_HOLDER_PROG_MAX + 1. */
static void safe_prog(char *out, const char *prog)
{
    size_t i = 0;
    for (; prog && prog[i] && i < CCAP_HOLDER_PROG_MAX; i++) {
        char c = prog[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '+' || c == '-';
        out[i] = ok ? c : '_';
    }
    if (!i)
        out[i++] = '-';
    out[i] = '\0';
}

static char program[CCAP_HOLDER_PROG_MAX + 1];
static pthread_once_t program_once = PTHREAD_ONCE_INIT;

/* /proc/self/comm (the main thread's name: /proc/self is the process),
 * read once; its newline dropped. */
static void read_program(void)
{
    char buf[64] = "";
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
        ssize_t r;
        do
            r = read(fd, buf, sizeof buf - 1);
        while (r < 0 && errno == EINTR);
        buf[r > 0 ? r : 0] = '\0';
        close(fd);
    }
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
    safe_prog(program, buf[0] ? buf : program_invocation_short_name);
}

const char *ccap_holder_program(void)
{
    int saved = errno; /* the connect path: the program's errno is left as it was */
    pthread_once(&program_once, read_program);
    errno = saved;
    return program;
}

size_t ccap_holder_format(char *out, size_t n, const char *host, int pid, int fd, const struct sockaddr *sa,
                          unsigned nonce, unsigned long long seq)
{
    return ccap_holder_format_prog(out, n, host, ccap_holder_program(), pid, fd, sa, nonce, seq);
}

size_t ccap_holder_format_prog(char *out, size_t n, const char *host, const char *prog, int pid, int fd,
                               const struct sockaddr *sa, unsigned nonce, unsigned long long seq)
{
    static const char hex[] = "0123456789abcdef";
    char nx[9], pr[CCAP_HOLDER_PROG_MAX + 1], *o = out, *end = out + n - 1;
    for (int i = 0; i < 8; i++)
        nx[i] = hex[(nonce >> (28 - 4 * i)) & 0xf];
    nx[8] = '\0';
    safe_prog(pr, prog);
    put(&o, end, host);
    put(&o, end, "/");
    put_num(&o, end, (unsigned)pid);
    put(&o, end, "/");
    put_num(&o, end, (unsigned)fd);
    put(&o, end, "/");
    put_dest(&o, end, sa);
    put(&o, end, "/");
    put(&o, end, pr);
    put(&o, end, "/");
    put(&o, end, nx);
    put(&o, end, ".");
    put_num(&o, end, seq);
    *o = '\0';
    return (size_t)(o - out);
}

int ccap_holder_set_seq(char *id, size_t n, unsigned long long seq)
{
    char *o = strrchr(id, '.'), *end = id + n - 1;
    if (!o)
        return -1;
    o++;
    put_num(&o, end, seq);
    *o = '\0';
    return 0;
}

/* Copies [A, B) into OUT (size N); -1 if it does not fit or is empty. */
static int part(const char *a, const char *b, char *out, size_t n)
{
    if (b <= a || (size_t)(b - a) >= n)
        return -1;
    memcpy(out, a, (size_t)(b - a));
    out[b - a] = '\0';
    return 0;
}

/* The canonical decimal in [A, B) ("0" or digits without a leading zero,
 * as ccap_holder_format writes them) into *OUT; -1 unless it is one in
 * [MIN, INT_MAX]. */
static int part_num(const char *a, const char *b, long min, long *out)
{
    long v = 0;
    if (b <= a || b - a > 10 || (*a == '0' && b - a > 1))
        return -1;
    for (const char *p = a; p < b; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < min || v > INT_MAX)
        return -1;
    *out = v;
    return 0;
}

int ccap_holder_parse(const char *id, struct ccap_holder *h)
{
    const char *s1 = strchr(id, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL, *s3 = s2 ? strchr(s2 + 1, '/') : NULL;
    const char *last = strrchr(id, '/'), *prog = NULL;
    memset(h, 0, sizeof(*h));
    if (!s3 || last <= s3)
        return -1;
    for (const char *p = last - 1; p > s3; p--) /* the '/' before the program, if any */
        if (*p == '/') {
            prog = p;
            break;
        }
    if (prog && part(prog + 1, last, h->prog, sizeof h->prog)) {
        memset(h, 0, sizeof(*h));
        return -1;
    }
    if (part(id, s1, h->host, sizeof h->host) || part(s3 + 1, prog ? prog : last, h->dest, sizeof h->dest) ||
        part(last + 1, id + strlen(id), h->nonce, sizeof h->nonce) || part_num(s1 + 1, s2, 1, &h->pid) ||
        part_num(s2 + 1, s3, 0, &h->fd)) {
        memset(h, 0, sizeof(*h));
        return -1;
    }
    return 0;
}
