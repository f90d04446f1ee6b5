/* qfdexh.c -- a queued non-blocking connect, then every free descriptor used up, then a wait for the
 * socket to become writable while another thread lets the holder go after 300 ms. The shim can then make
 * no descriptor: its waker must still get the permit and the poller must still be woken.
 * Usage: qfdexh PORT poll|epoll|connect lower|plain
 *   connect: a blocking connect() instead, waiting in another thread while the descriptors run out;
 *   lower: RLIMIT_NOFILE is lowered to 64 after the connect was queued (below the shim's own numbers);
 *   plain: RLIMIT_NOFILE is 256 from the start, and the program uses up every number below it.
 * Prints "filled N ready-ms X events E so_error S"; exits 0 when ready within 2 s of the release (of a 6 s
 * timeout) and connected, else 1; 2 on a setup failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Under ThreadSanitizer (preloaded): its external symbolizer starts at the first stack it prints, and
 * cannot start once no descriptor is free -- a report then has no function names, and the suppressions
 * (tests/lib/tsan-fd.supp, matched by name) miss. One stack printed first starts it. */
extern void __sanitizer_print_stack_trace(void) __attribute__((weak));

static int holder, blocked = -1, blocked_rc = -1;
static double t_release, t_connected;
static struct sockaddr_in up = { .sin_family = AF_INET };

static double now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *release_later(void *arg)
{
    (void)arg;
    usleep(300000);
    t_release = now_ms();
    close(holder);
    return NULL;
}

/* The blocking connect's thread: it waits for the permit inside connect(). */
static void *connect_blocking(void *arg)
{
    (void)arg;
    blocked_rc = connect(blocked, (struct sockaddr *)&up, sizeof up);
    t_connected = now_ms();
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t b;
    int use_block, use_epoll, lower, s, ep = -1, n = 0, r, ev = 0, so_err = -1;
    socklen_t l = sizeof so_err;
    pthread_t t;

    if (argc != 4) {
        fprintf(stderr, "usage: qfdexh PORT poll|epoll lower|plain\n");
        return 2;
    }
    up.sin_port = htons(atoi(argv[1]));
    inet_pton(AF_INET, "127.0.0.1", &up.sin_addr);
    use_epoll = strcmp(argv[2], "epoll") == 0;
    use_block = strcmp(argv[2], "connect") == 0;
    lower = strcmp(argv[3], "lower") == 0;
    if (!lower) {
        struct rlimit rl = { 256, 256 };
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            perror("setrlimit 256");
            return 2;
        }
    }
    holder = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(holder, (struct sockaddr *)&up, sizeof up) != 0) {
        perror("holder connect");
        return 2;
    }
    if (use_block) {
        if ((blocked = socket(AF_INET, SOCK_STREAM, 0)) < 0 || pthread_create(&b, NULL, connect_blocking, NULL))
            return 2;
        usleep(100000); /* its wait began (the permit is held) */
    }
    s = use_block ? -1 : socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (!use_block && (connect(s, (struct sockaddr *)&up, sizeof up) == 0 || errno != EINPROGRESS)) {
        perror("queued connect (expected EINPROGRESS)");
        return 2;
    }
    if (use_epoll) {
        struct epoll_event e = { .events = EPOLLOUT, .data.fd = s };
        if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &e) != 0) {
            perror("epoll");
            return 2;
        }
    }
    if (lower) {
        struct rlimit rl = { 64, 64 };
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            perror("setrlimit 64");
            return 2;
        }
    }
    if (__sanitizer_print_stack_trace)
        __sanitizer_print_stack_trace();
    while (dup(0) >= 0)
        n++;
    if (errno != EMFILE) {
        perror("dup");
        return 2;
    }
    if (pthread_create(&t, NULL, release_later, NULL) != 0)
        return 2;
    if (use_block) {
        pthread_join(b, NULL);
        r = blocked_rc == 0;
        ev = POLLOUT;
        s = blocked;
    } else if (use_epoll) {
        struct epoll_event e;
        r = epoll_wait(ep, &e, 1, 6000);
        ev = r == 1 ? (int)e.events : 0;
    } else {
        struct pollfd p = { s, POLLOUT, 0 };
        r = poll(&p, 1, 6000);
        ev = p.revents;
    }
    double t_ready = use_block ? t_connected : now_ms();
    getsockopt(s, SOL_SOCKET, SO_ERROR, &so_err, &l);
    pthread_join(t, NULL); /* (T_RELEASE is the thread's until then) */
    double d = t_ready - t_release;
    printf("filled %d ready-ms %.0f r %d events %x so_error %d\n", n, d, r, ev, so_err);
    return !(r == 1 && (ev & (use_epoll ? EPOLLOUT : POLLOUT)) && d < 2000 && so_err == 0);
}
