/* ljwait.c -- a SIGALRM handler's siglongjmp out of connects waiting for a permit (the alarm() timeout idiom).
 *
 * Usage: ljwait PORT ROUNDS [no-reenter]
 * PORT is a capped upstream of limit 1. The program takes the permit (a blocking connect, "the holder"),
 * then runs ROUNDS rounds of each kind, a one-shot ITIMER_REAL whose handler siglongjmps out of the call:
 *   block   a blocking connect to PORT (it waits for the permit), the timer at 0.3..3.3 ms: the jump
 *           comes in the wait's sleep, or (held back until then) during its first Redis round trip;
 *   poll    a non-blocking connect to PORT (queued) and poll() on it, the timer at 0.3..3.3 ms.
 * Then it prints "key value" lines:
 *   jumped N            how many calls were left by a jump (of 2 x ROUNDS)
 *   reentered N         how many times the handler re-entered
 *   fd-growth N         descriptors open after the rounds minus after the first round of each kind
 *   capped 0|1          a non-blocking connect to PORT is still not connected 1 s later (the holder still
 *                       holds the permit: the thread is still capped)
 *   cancel-enabled 0|1  the thread's cancellation state is still enabled
 *   granted-ms N        after the holder lets go, a blocking connect's wait for the permit (-1: failed)
 * Then, the permit taken again, 20,000 poll()s of one queued connect, an interval timer of 50 us whose
 * handler (no jump) polls another queued connect, and every 16th time closes it and queues a new one: a
 * handler's call that re-enters the shim while the thread is inside it ("reentered N" times),
 * and "result ok"; the process then exits (the test's timeout catches a hang at exit). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static sigjmp_buf jb;
static volatile sig_atomic_t armed;
static struct sockaddr_in up;

static volatile int other = -1; /* the handler's queued connect */
static volatile sig_atomic_t reentered;

static void on_alarm(int sig)
{
    (void)sig;
    if (armed) {
        armed = 0;
        siglongjmp(jb, 1);
    }
    if (other < 0)
        return;
    struct pollfd p = { .fd = other, .events = POLLOUT };
    poll(&p, 1, 0);
    if (++reentered % 16 == 0) {
        int e = errno;
        close(other);
        other = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(other, (struct sockaddr *)&up, sizeof up);
        errno = e;
    }
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void timer_us(long us)
{
    struct itimerval it = { .it_value = { us / 1000000, us % 1000000 } };
    setitimer(ITIMER_REAL, &it, NULL);
}

/* The polls of a queued connect under a handler that polls, closes and queues another (see the usage). */
static void reenter(void)
{
    int q = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(q, (struct sockaddr *)&up, sizeof up);
    other = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(other, (struct sockaddr *)&up, sizeof up);
    struct itimerval it = { .it_interval = { 0, 50 }, .it_value = { 0, 50 } };
    setitimer(ITIMER_REAL, &it, NULL);
    for (int i = 0; i < 20000; i++) {
        struct pollfd p = { .fd = q, .events = POLLOUT };
        poll(&p, 1, 0);
    }
    timer_us(0);
    int o = other;
    other = -1;
    close(o);
    close(q);
    printf("reentered %d\n", (int)reentered);
}

/* One call of kind POLL (else a blocking connect), left by the timer's jump or not: 1 if it jumped. */
static int one_round(int poll_kind)
{
    volatile int s = -1, jumped = 0;

    if (sigsetjmp(jb, 1) == 0) {
        s = socket(AF_INET, SOCK_STREAM | (poll_kind ? SOCK_NONBLOCK : 0), 0);
        armed = 1;
        timer_us(300 + rand() % 3000); /* not in a connect's first microseconds: see the README, Signals */
        if (connect(s, (struct sockaddr *)&up, sizeof up) != 0 && errno == EINPROGRESS) {
            struct pollfd p = { .fd = s, .events = POLLOUT };
            poll(&p, 1, 5000);
        }
        armed = 0;
    } else {
        jumped = 1;
    }
    timer_us(0);
    if (s >= 0)
        close(s);
    return jumped;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ljwait PORT ROUNDS\n");
        return 2;
    }
    up = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])) };
    up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rounds = atoi(argv[2]), jumped = 0, base = 0;
    struct sigaction sa = { .sa_handler = on_alarm };
    sigaction(SIGALRM, &sa, NULL);
    srand((unsigned)getpid());
    setvbuf(stdout, NULL, _IONBF, 0);

    int holder = socket(AF_INET, SOCK_STREAM, 0);
    if (holder < 0 || connect(holder, (struct sockaddr *)&up, sizeof up) != 0) {
        fprintf(stderr, "FAIL: the holder could not connect: %s\n", strerror(errno));
        return 1;
    }
    for (int kind = 0; kind < 2; kind++)
        for (int i = 0; i < rounds; i++) {
            jumped += one_round(kind);
            if (i == 0)
                base = open_fds(); /* the calls' own first descriptors (Redis, the queue's) made */
        }
    printf("jumped %d\n", jumped);
    printf("fd-growth %d\n", open_fds() - base);

    int b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int rb = connect(b, (struct sockaddr *)&up, sizeof up), eb = errno;
    struct pollfd pb = { .fd = b, .events = POLLOUT };
    int pr = poll(&pb, 1, 1000);
    printf("capped %d\n", rb != 0 && eb == EINPROGRESS && pr == 0);
    close(b);
    int st;
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &st);
    printf("cancel-enabled %d\n", st == PTHREAD_CANCEL_ENABLE);

    close(holder);
    long long t = now_ms();
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int r = connect(s, (struct sockaddr *)&up, sizeof up);
    printf("granted-ms %lld\n", r == 0 ? now_ms() - t : -1);
    close(s);
    holder = socket(AF_INET, SOCK_STREAM, 0); /* the permit again: the re-entries' connects queue */
    if (holder < 0 || connect(holder, (struct sockaddr *)&up, sizeof up) != 0)
        printf("holder-again %s\n", strerror(errno));
    if (argc < 4 || strcmp(argv[3], "no-reenter") != 0)
        reenter();
    close(holder);
    printf("result ok\n");
    return 0;
}
