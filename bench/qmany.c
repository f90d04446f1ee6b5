/* qmany.c -- one event-loop process queues N non-blocking connects to a capped destination, then all get their permits. */
/* Usage: qmany PORT N HOLD. Takes HOLD permits with blocking connects (the
 * semaphore's limit), then queues N non-blocking connects to 127.0.0.1:PORT,
 * each added to one epoll set after its connect (asyncio, libuv, Java do so);
 * stops early when a descriptor or a queued connect cannot be had. Prints
 * "key value" lines: what the queued connects cost (resident memory, the
 * process's descriptors and threads per queued connect), then "queued" and
 * waits for a line on stdin (the caller measures meanwhile); then closes the
 * holders and, from its epoll loop, closes each connect once connected (its
 * permit goes to the next queued one) until all are done: prints the time to
 * grant all and how many connected. RLIMIT_NOFILE is raised to 3 N + HOLD +
 * 1024 when the process may (root), else its soft limit to its hard one. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* FIELD of /proc/self/status (kB for the memory ones). */
static long status(const char *field)
{
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    FILE *f = fopen("/proc/self/status", "re");

    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':')
            v = atol(line + n + 1);
    if (f)
        fclose(f);
    return v;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");

    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n - 3; /* ".", "..", the directory's own */
}

/* The CPU time (ms) of the process, of main, and of each other thread
 * still alive, the largest first: after the grants, the shim's long-lived
 * threads (the waker, the heartbeat) are what is left. */
static void thread_cpu(void)
{
    long hz = sysconf(_SC_CLK_TCK), v[64];
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;

    while (d && (de = readdir(d)) && n < 64) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", de->d_name);
        FILE *f = de->d_name[0] != '.' ? fopen(path, "re") : NULL;
        if (!f)
            continue;
        unsigned long ut = 0, st = 0;
        char *p = fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2) {
            if (atoi(de->d_name) == (int)getpid())
                printf("main-cpu-ms %lu\n", (ut + st) * 1000 / (unsigned long)hz);
            else
                v[n++] = (long)((ut + st) * 1000 / (unsigned long)hz);
        }
        fclose(f);
    }
    if (d)
        closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (v[j] > v[i]) {
                long t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("process-cpu-ms %ld\n",
           (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000);
    printf("other-threads-left-cpu-ms");
    for (int i = 0; i < n; i++)
        printf(" %ld", v[i]);
    printf("\n");
}

static int tcp(int flags)
{
    return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: qmany PORT N HOLD\n");
        return 2;
    }
    struct sockaddr_in up = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])) };
    int n = atoi(argv[2]), hold = atoi(argv[3]), q = 0, stop_errno = 0;
    inet_pton(AF_INET, "127.0.0.1", &up.sin_addr);
    struct rlimit rl, want;
    getrlimit(RLIMIT_NOFILE, &rl);
    want.rlim_cur = want.rlim_max = (rlim_t)(3 * n + hold + 1024); /* root may raise the hard limit */
    if (want.rlim_max <= rl.rlim_max || setrlimit(RLIMIT_NOFILE, &want) != 0) {
        rl.rlim_cur = rl.rlim_max; /* else the soft limit up to the hard one */
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    printf("nofile %llu\n", (unsigned long long)rl.rlim_cur);

    int *held = calloc((size_t)hold + 1, sizeof *held), *fds = calloc((size_t)n + 1, sizeof *fds);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < hold; i++)
        if ((held[i] = tcp(0)) < 0 || connect(held[i], (struct sockaddr *)&up, sizeof up) != 0) {
            fprintf(stderr, "qmany: holder %d: %s\n", i, strerror(errno));
            return 1;
        }
    long rss0 = status("VmRSS"), thr0 = status("Threads");
    int fd0 = open_fds();
    long long t0 = now_ms();
    for (; q < n; q++) {
        int fd = tcp(SOCK_NONBLOCK);
        if (fd < 0) {
            stop_errno = errno;
            break;
        }
        if (connect(fd, (struct sockaddr *)&up, sizeof up) == 0 || errno != EINPROGRESS) {
            stop_errno = errno;
            close(fd);
            break;
        }
        struct epoll_event ev = { .events = EPOLLOUT, .data.fd = fd };
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        fds[q] = fd;
    }
    long long t1 = now_ms();
    sleep(2); /* the waits settle (each arms its wait with the process's waker) */
    long rss1 = status("VmRSS"), thr1 = status("Threads");
    int fd1 = open_fds();
    printf("queued %d\n", q);
    printf("stopped %s\n", q < n ? strerror(stop_errno) : "no");
    printf("queue-ms %lld\n", t1 - t0);
    printf("rss-kib %ld %ld\n", rss0, rss1);
    printf("kib-per-queued %.1f\n", q ? (double)(rss1 - rss0) / q : 0.0);
    printf("fds-per-queued %.2f\n", q ? (double)(fd1 - fd0) / q : 0.0);
    printf("threads-per-queued %.2f\n", q ? (double)(thr1 - thr0) / q : 0.0);
    printf("threads-added %ld\n", thr1 - thr0);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) {
        free(held);
        free(fds);
        return 1;
    }

    long long g0 = now_ms(), deadline = g0 + 600000;
    int done = 0, ok = 0, bad = 0, stale = 0, stale_fds = 0, nfd = (int)rl.rlim_cur;
    unsigned stale_ev = 0;
    char *closed = calloc((size_t)nfd, 1);
    struct epoll_event evs[256];
    for (int i = 0; i < hold; i++)
        close(held[i]);
    while (done < q && now_ms() < deadline) {
        int k = epoll_wait(ep, evs, 256, 1000);
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd, e = 0;
            if (fd < 0 || fd >= nfd || closed[fd]) {
                if (fd >= 0 && fd < nfd && closed[fd] == 1) {
                    closed[fd] = 2; /* first stale event of this number */
                    stale_fds++;
                    stale_ev |= evs[i].events;
                    if (stale_fds <= 5) {
                        char lp[64], what[128] = "closed";
                        snprintf(lp, sizeof lp, "/proc/self/fd/%d", fd);
                        ssize_t wl = readlink(lp, what, sizeof what - 1);
                        what[wl > 0 ? wl : 6] = '\0';
                        printf("stale-number %d events 0x%x now %s\n", fd, evs[i].events, what);
                    }
                }
                stale++; /* an event for a number closed already: its file is still open elsewhere */
                continue;
            }
            socklen_t l = sizeof e;
            struct sockaddr_in peer;
            socklen_t pl = sizeof peer;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
            int pe = getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 ? 0 : errno;
            if (e == 0 && pe == 0 && peer.sin_port == up.sin_port)
                ok++;
            else if (bad++ < 5)
                printf("not-connected fd %d SO_ERROR %s getpeername %s events 0x%x\n", fd, strerror(e),
                       pe ? strerror(pe) : "ok", evs[i].events);
            closed[fd] = 1;
            close(fd); /* its permit goes to the next queued connect */
            done++;
        }
    }
    printf("granted %d of %d\n", ok, q);
    printf("stale-events %d\n", stale);
    printf("stale-numbers %d events 0x%x\n", stale_fds, stale_ev);
    printf("grant-all-ms %lld\n", now_ms() - g0);
    printf("rss-kib-end %ld\n", status("VmRSS"));
    thread_cpu();
    fflush(stdout);
    free(held);
    free(fds);
    free(closed);
    close(ep);
    return ok == q ? 0 : 1;
}
