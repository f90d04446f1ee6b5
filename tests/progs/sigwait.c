/* sigwait.c -- a blocking connect() waiting for a permit, and a signal: what the program sees, as with a real slow connect.
 *
 * Usage: sigwait MODE HOST PORT
 * HOST:PORT is a capped destination whose permits are all held (the driver
 * frees one when told). The program prints facts ("key value...") and, at
 * each "@NAME", waits for one line on stdin from the driver. A SIGALRM 300
 * ms into each wait (setitimer) is the signal. Modes:
 *   intr     handler without SA_RESTART: "eintr MS"; then the socket's state
 *            ("state POLLOUT SO_ERROR PEER"); @queued; connect() again is
 *            interrupted again ("retry eintr MS"); @retry (the driver frees
 *            a permit 500 ms later): connect() again returns when connected
 *            ("retry connected MS PEERPORT"); once more ("again ERRNO")
 *   restart  handler with SA_RESTART; @armed (the driver frees a permit
 *            1200 ms later): connect() goes on waiting ("connected MS
 *            HANDLED")
 *   blocked  handler without SA_RESTART, SIGALRM blocked: as restart
 *   close    handler without SA_RESTART: "eintr MS", then close(); @closed
 *   poll     handler without SA_RESTART: "eintr MS"; @polling (the driver
 *            frees a permit 500 ms later): poll(POLLOUT) then SO_ERROR, as
 *            Python's socket.connect() does after EINTR ("polled MS
 *            REVENTS SO_ERROR PEERPORT")
 *   cancel   in a thread: SIGUSR1 (pthread_kill, no SA_RESTART) 300 ms into
 *            its wait: "eintr MS"; its connect() again waits and is
 *            cancelled 300 ms later ("cancelled MS"); @cancelled */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in dst;
static atomic_int handled;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void step(const char *name)
{
    char line[64];
    printf("@%s\n", name);
    if (!fgets(line, sizeof line, stdin))
        exit(0);
}

static void on_signal(int sig)
{
    (void)sig;
    atomic_fetch_add(&handled, 1);
}

static void handler(int sig, int flags)
{
    struct sigaction sa = { .sa_handler = on_signal, .sa_flags = flags };
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

static void alarm_in(int ms)
{
    struct itimerval it = { .it_value = { ms / 1000, (ms % 1000) * 1000 } };
    setitimer(ITIMER_REAL, &it, NULL);
}

static const char *ename(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "?";
}

static int peer_port(int fd)
{
    struct sockaddr_in a;
    socklen_t l = sizeof a;
    return getpeername(fd, (struct sockaddr *)&a, &l) == 0 ? ntohs(a.sin_port) : -errno;
}

static int so_error(int fd)
{
    int v = -1;
    socklen_t l = sizeof v;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &l);
    return v;
}

/* connect() with a SIGALRM 300 ms into it: prints "LABEL eintr MS" or
 * "LABEL connected MS PEERPORT" or "LABEL error ERRNO MS"; returns errno (0). */
static int timed_connect(int fd, const char *label, int alarm_ms)
{
    long long t0 = now_ms();
    int rc, e;

    if (alarm_ms)
        alarm_in(alarm_ms);
    rc = connect(fd, (struct sockaddr *)&dst, sizeof dst);
    e = rc ? errno : 0;
    alarm_in(0);
    if (e == EINTR)
        printf("%s eintr %lld\n", label, now_ms() - t0);
    else if (e == 0)
        printf("%s connected %lld %d\n", label, now_ms() - t0, peer_port(fd));
    else
        printf("%s error %s %lld\n", label, ename(e), now_ms() - t0);
    return e;
}

static int mode_intr(int fd)
{
    struct pollfd p = { fd, POLLOUT, 0 };

    handler(SIGALRM, 0);
    if (timed_connect(fd, "first", 300) != EINTR)
        return 1;
    int n = poll(&p, 1, 0);
    printf("state %d %d %d\n", n > 0 ? p.revents : 0, so_error(fd), peer_port(fd));
    step("queued");
    timed_connect(fd, "retry", 300);
    step("retry");
    if (timed_connect(fd, "retry", 0) != 0)
        return 1;
    int rc = connect(fd, (struct sockaddr *)&dst, sizeof dst);
    printf("again %s\n", rc == 0 ? "0" : ename(errno));
    return 0;
}

static int mode_wait_through(int fd, bool block)
{
    handler(SIGALRM, block ? 0 : SA_RESTART);
    if (block) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGALRM);
        sigprocmask(SIG_BLOCK, &s, NULL);
    }
    step("armed");
    long long t0 = now_ms();
    alarm_in(300);
    int rc = connect(fd, (struct sockaddr *)&dst, sizeof dst), e = errno;
    if (rc == 0)
        printf("connected %lld %d\n", now_ms() - t0, atomic_load(&handled));
    else
        printf("error %s %lld\n", ename(e), now_ms() - t0);
    return rc != 0;
}

static int mode_close(int fd)
{
    handler(SIGALRM, 0);
    if (timed_connect(fd, "first", 300) != EINTR)
        return 1;
    close(fd);
    step("closed");
    return 0;
}

static int mode_poll(int fd)
{
    struct pollfd p = { fd, POLLOUT, 0 };

    handler(SIGALRM, 0);
    if (timed_connect(fd, "first", 300) != EINTR)
        return 1;
    step("polling");
    long long t0 = now_ms();
    int n = poll(&p, 1, 10000);
    printf("polled %lld %d %d %d\n", now_ms() - t0, n > 0 ? p.revents : 0, so_error(fd), peer_port(fd));
    return 0;
}

static atomic_bool first_done;

static void *cancel_main(void *arg)
{
    int fd = *(int *)arg;

    if (timed_connect(fd, "first", 0) != EINTR)
        return NULL;
    atomic_store(&first_done, true);
    connect(fd, (struct sockaddr *)&dst, sizeof dst); /* waits for the queued connect: cancelled */
    printf("retry returned %s\n", ename(errno));
    return NULL;
}

static int mode_cancel(int fd)
{
    pthread_t t;
    void *ret;

    handler(SIGUSR1, 0);
    pthread_create(&t, NULL, cancel_main, &fd);
    struct timespec ts = { 0, 300 * 1000000L };
    nanosleep(&ts, NULL);
    pthread_kill(t, SIGUSR1);
    while (!atomic_load(&first_done))
        nanosleep(&(struct timespec){ 0, 1000000L }, NULL);
    nanosleep(&ts, NULL);
    long long t0 = now_ms();
    pthread_cancel(t);
    pthread_join(t, &ret);
    printf("%s %lld\n", ret == PTHREAD_CANCELED ? "cancelled" : "ended", now_ms() - t0);
    close(fd); /* what the program's cleanup would do */
    step("cancelled");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: sigwait MODE HOST PORT\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    dst = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[3])) };
    inet_pton(AF_INET, argv[2], &dst.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    const char *m = argv[1];
    if (!strcmp(m, "intr"))
        return mode_intr(fd);
    if (!strcmp(m, "restart"))
        return mode_wait_through(fd, false);
    if (!strcmp(m, "blocked"))
        return mode_wait_through(fd, true);
    if (!strcmp(m, "close"))
        return mode_close(fd);
    if (!strcmp(m, "poll"))
        return mode_poll(fd);
    if (!strcmp(m, "cancel"))
        return mode_cancel(fd);
    fprintf(stderr, "sigwait: unknown mode %s\n", m);
    return 2;
}
