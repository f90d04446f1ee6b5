/* cancelwait.c -- threads cancelled while they wait in connect() for a permit, at several points of the wait.
 *
 * Usage: cancelwait HOST PORT LIMIT
 * Holds LIMIT connections to HOST:PORT (a capped destination of limit
 * LIMIT), then runs each cancel point: a thread connects (blocking, so it
 * waits) and is cancelled. After each point it prints "@NAME" and waits for
 * one line on stdin (the driver checks Redis meanwhile). Points:
 *   sleep    deferred cancel 300 ms into the wait (the waiter asleep)
 *   early    cancel at once (the thread may still be in its first attempt)
 *   pending  cancel pending (the thread had cancellation disabled) when it
 *            calls connect()
 *   async    asynchronous cancel type, cancel 300 ms into the wait
 *   stall    the driver stops Redis first: the cancel comes during the
 *            first attempt's round trip (the driver resumes Redis later)
 *   behind   two waiters, the first cancelled: a permit freed then goes to
 *            the second at once (its wait is printed: "behind MS")
 * Each point prints "cancelled NAME MS" (the cancel acted after MS ms) or
 * "hung NAME" (the thread did not end within 5 s), and "cleanup NAME" when
 * the thread's own cleanup handler ran; connect() returning is printed as
 * "returned NAME RC ERRNO". Finally "@hold": the LIMIT connections stay open
 * until stdin closes (the driver checks that their leases are renewed). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in dst;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The driver's go-ahead: one line on stdin. */
static void step(const char *name)
{
    char line[64];
    printf("@%s\n", name);
    if (!fgets(line, sizeof line, stdin))
        exit(0);
}

static int connect_one(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

enum how { DEFERRED, PENDING, ASYNC };

struct waiter {
    const char *name;
    enum how how;
    atomic_int fd;
    atomic_bool cleaned, started, may_go;
    int rc, err;
    long long connected_at;
};

/* The thread's own cleanup, as a program's: closes its socket. */
static void cleanup(void *arg)
{
    struct waiter *w = arg;
    int fd = atomic_exchange(&w->fd, -1);
    if (fd >= 0)
        close(fd);
    atomic_store(&w->cleaned, true);
}

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    int fd;

    if (w->how == PENDING)
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    if (w->how == ASYNC)
        pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
    pthread_cleanup_push(cleanup, w);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    atomic_store(&w->fd, fd);
    atomic_store(&w->started, true);
    if (w->how == PENDING) {
        while (!atomic_load(&w->may_go)) /* the cancel is pending by now */
            nap_ms(5);
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    }
    w->rc = connect(fd, (struct sockaddr *)&dst, sizeof dst);
    w->err = errno;
    w->connected_at = now_ms();
    if (w->how == ASYNC)
        pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
    if (w->rc == 0)
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL); /* connected: keep it (behind) */
    printf("returned %s %d %s\n", w->name, w->rc, w->rc ? strerror(w->err) : "-");
    pthread_testcancel();
    pthread_cleanup_pop(w->rc != 0);
    return NULL;
}

static void start(struct waiter *w, pthread_t *t)
{
    atomic_store(&w->fd, -1);
    if (pthread_create(t, NULL, waiter_main, w) != 0) {
        perror("pthread_create");
        exit(2);
    }
    while (!atomic_load(&w->started))
        nap_ms(1);
}

/* Cancels T (running W) after DELAY_MS, and joins it within 5 s. */
static void cancel_after(struct waiter *w, pthread_t t, int delay_ms)
{
    struct timespec dl;
    void *ret = NULL;
    long long t0;

    nap_ms(delay_ms);
    t0 = now_ms();
    pthread_cancel(t);
    if (w->how == PENDING)
        atomic_store(&w->may_go, true);
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    if (pthread_timedjoin_np(t, &ret, &dl) != 0) {
        printf("hung %s\n", w->name);
        return;
    }
    printf("%s %s %lld\n", ret == PTHREAD_CANCELED ? "cancelled" : "ended", w->name, now_ms() - t0);
    if (atomic_load(&w->cleaned))
        printf("cleanup %s\n", w->name);
}

static void point(const char *name, enum how how, int delay_ms)
{
    struct waiter w = { .name = name, .how = how };
    pthread_t t;

    start(&w, &t);
    cancel_after(&w, t, delay_ms);
    step(name);
}

int main(int argc, char **argv)
{
    int limit, held[64];

    if (argc != 4 || (limit = atoi(argv[3])) < 1 || limit > 64) {
        fprintf(stderr, "usage: cancelwait HOST PORT LIMIT\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    dst = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &dst.sin_addr);
    for (int i = 0; i < limit; i++) {
        if ((held[i] = connect_one()) < 0) {
            printf("cannot hold %d: %s\n", i, strerror(errno));
            return 1;
        }
    }
    step("held");
    point("sleep", DEFERRED, 300);
    point("early", DEFERRED, 0);
    point("pending", PENDING, 50);
    point("async", ASYNC, 300);
    step("stall"); /* the driver stops Redis now */
    point("stalled", DEFERRED, 100);

    /* two waiters; the first one cancelled: the freed permit goes to the second */
    struct waiter a = { .name = "first", .how = DEFERRED }, b = { .name = "second", .how = DEFERRED };
    pthread_t ta, tb;
    start(&a, &ta);
    nap_ms(200);
    start(&b, &tb);
    nap_ms(200);
    cancel_after(&a, ta, 0);
    long long t0 = now_ms();
    close(held[--limit]);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    if (pthread_timedjoin_np(tb, NULL, &dl) != 0)
        printf("hung second\n");
    else if (b.rc == 0)
        printf("behind %lld\n", b.connected_at - t0);
    held[limit++] = atomic_load(&b.fd);
    step("behind");

    step("hold");
    for (int i = 0; i < limit; i++)
        close(held[i]);
    return 0;
}
