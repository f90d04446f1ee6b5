/* nomem.c -- one connect() with the preloaded failing allocator armed (tests/lib/failalloc.c), then one without.
 *
 * Usage: nomem HOST PORT N once|from
 * Arms the allocator so that its Nth call from the connect on fails (once)
 * or every call from the Nth on (from), connects, disarms it, and prints
 * "first RC ERRNO CALLS MS" (CALLS: the allocator's calls during the
 * connect), and "locale kept" or "locale changed": whether the thread's
 * own locale (uselocale) is still in force after the connect, which loaded
 * the configuration; then connects again on a new socket: "second RC ERRNO"; then,
 * with every allocation failing, closes both and exits ("closing"): the
 * releases and the exit's flush meet no memory at all. Output is written
 * with write(2): nothing of its own allocates while armed. Runs without the
 * allocator too (N is then ignored). Exit 0 unless usage. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <locale.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static const char *ename(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "?";
}

int main(int argc, char **argv)
{
    void (*arm)(long, int);
    long (*count)(void);
    struct sockaddr_in a;
    char line[160];
    long n;
    int len;

    if (argc != 5) {
        fprintf(stderr, "usage: nomem HOST PORT N once|from\n");
        return 2;
    }
    a = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    n = atol(argv[3]);
    *(void **)&arm = dlsym(RTLD_DEFAULT, "failalloc_arm");
    *(void **)&count = dlsym(RTLD_DEFAULT, "failalloc_count");
    int fd = socket(AF_INET, SOCK_STREAM, 0), fd2;
    locale_t mine = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (mine)
        uselocale(mine);
    long long t0 = now_ms();
    if (arm)
        arm(n, strcmp(argv[4], "once") == 0);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a), e = rc ? errno : 0;
    long calls = count ? count() : -1;
    if (arm)
        arm(0, 0);
    len = snprintf(line, sizeof line, "first %d %s %ld %lld\nlocale %s\n", rc, e ? ename(e) : "-", calls,
                   now_ms() - t0, uselocale((locale_t)0) == mine ? "kept" : "changed");
    if (write(1, line, (size_t)len) < 0)
        return 1;
    fd2 = socket(AF_INET, SOCK_STREAM, 0);
    rc = connect(fd2, (struct sockaddr *)&a, sizeof a);
    e = rc ? errno : 0;
    len = snprintf(line, sizeof line, "second %d %s\n", rc, e ? ename(e) : "-");
    if (write(1, line, (size_t)len) < 0)
        return 1;
    if (write(1, "closing\n", 8) < 0)
        return 1;
    if (arm)
        arm(1, 0);
    close(fd);
    close(fd2);
    return 0;
}
