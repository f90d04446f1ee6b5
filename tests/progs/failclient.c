/* failclient.c -- TCP clients for the "when Redis fails" tests: timed connects, held sets, loops. */
/* Usage:
 *   failclient try HOST PORT N [PAUSE_MS]
 *       N connects in a row, each closed at once. One line per connect:
 *       "ok MS" or "ENAME MS" (MS: how long connect() took). Exit 0.
 *   failclient multi HOST PORT N HOLD_MS
 *       N connects in a row (each waiting as connect() decides), all kept
 *       open, then held HOLD_MS and closed. One line per connect as for
 *       try, then "held K" (how many were open together). Exit 0.
 *       SIGTERM or SIGINT end a hold early (then a normal exit) in every
 *       mode (loop mode finishes the connection under way first); hold mode
 *       holds until one comes.
 *   failclient loop HOST PORT DURATION_MS LINGER_MS
 *       Until DURATION_MS passed: connect, send a request, read the reply
 *       to its end (the server decides how long a connection lasts: it
 *       stops counting it before it replies), keep the socket LINGER_MS
 *       more, close (after a failed connect: pause 20 ms). Prints at the end
 *       "ok N fail M maxms X" and one "err ENAME COUNT" line per errno.
 *       With $FAILCLIENT_TRACE set, appends "PID T_CONNECTED T_CLOSED"
 *       per connection to that file (for debugging a test). Exit 0.
 *   failclient pair HOST PORT MS1 MS2
 *       Two connects; closes the first after MS1 and the second after MS2
 *       (from the start), then exits 0. Prints "ok MS" or "ENAME MS" per
 *       connect, and "closed 1" / "closed 2" as they go.
 *   failclient hold HOST PORT
 *       One connect; prints "connected" (or ENAME and exits 1), then holds
 *       the socket until SIGTERM or SIGINT, closes it and exits 0 (a
 *       normal exit: the shim gives its permits back).
 * MS are CLOCK_MONOTONIC milliseconds. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static volatile sig_atomic_t stop;
static void on_stop(int sig)
{
    (void)sig;
    stop = 1;
}

/* Sleeps MS, or less when SIGTERM/SIGINT came. */
static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (!stop && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static const char *ename(int e)
{
    switch (e) {
    case ETIMEDOUT: return "ETIMEDOUT";
    case EAGAIN: return "EAGAIN";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case EINTR: return "EINTR";
    default: return "EOTHER";
    }
}

static struct sockaddr_in dest;

/* One connect. Returns the socket or -errno; *MS gets its duration. */
static int dial(double *ms)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -errno;
    double t0 = mono_ms();
    int rc = connect(fd, (struct sockaddr *)&dest, sizeof dest), e = errno;
    *ms = mono_ms() - t0;
    if (rc != 0) {
        close(fd);
        return -e;
    }
    return fd;
}

static int cmd_try(int n, int pause)
{
    for (int i = 0; i < n; i++) {
        double ms;
        int fd = dial(&ms);
        printf("%s %.1f\n", fd >= 0 ? "ok" : ename(-fd), ms);
        fflush(stdout);
        if (fd >= 0)
            close(fd);
        if (pause > 0)
            sleep_ms(pause);
    }
    return 0;
}

static int cmd_multi(int n, int hold)
{
    int *fds = calloc((size_t)n, sizeof *fds), held = 0;
    if (!fds)
        return 2;
    for (int i = 0; i < n; i++) {
        double ms;
        fds[i] = dial(&ms);
        printf("%s %.1f\n", fds[i] >= 0 ? "ok" : ename(-fds[i]), ms);
        fflush(stdout);
        if (fds[i] >= 0)
            held++;
    }
    printf("held %d\n", held);
    fflush(stdout);
    sleep_ms(hold);
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return 0;
}

static int cmd_loop(int duration, int linger)
{
    static const char req[] = "GET / HTTP/1.0\r\n\r\n";
    int errs[5] = { 0 }, ok = 0, fail = 0;
    static const int codes[5] = { ECONNREFUSED, ETIMEDOUT, EAGAIN, ECONNRESET, 0 };
    double end = mono_ms() + duration, maxms = 0;
    FILE *trace = getenv("FAILCLIENT_TRACE") ? fopen(getenv("FAILCLIENT_TRACE"), "a") : NULL;
    if (trace)
        setvbuf(trace, NULL, _IOLBF, 0);
    while (mono_ms() < end && !stop) {
        double ms;
        int fd = dial(&ms);
        if (ms > maxms)
            maxms = ms;
        if (fd < 0) {
            fail++;
            int k = 0;
            while (codes[k] && codes[k] != -fd)
                k++;
            errs[k]++;
            sleep_ms(20);
            continue;
        }
        ok++;
        double t_conn = mono_ms();
        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1)) {
            /* to the end even after SIGTERM: closing early would hand the
             * permit on while the server still counts this connection */
            char buf[512];
            ssize_t n;
            while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
            }
        }
        sleep_ms(linger);
        close(fd);
        if (trace)
            fprintf(trace, "%d %.1f %.1f\n", (int)getpid(), t_conn, mono_ms());
    }
    if (trace)
        fclose(trace);
    printf("ok %d fail %d maxms %.0f\n", ok, fail, maxms);
    for (int k = 0; k < 5; k++)
        if (errs[k])
            printf("err %s %d\n", codes[k] ? ename(codes[k]) : "EOTHER", errs[k]);
    return 0;
}

static int cmd_pair(int ms1, int ms2)
{
    double t0 = mono_ms(), ms;
    int fd[2];
    for (int i = 0; i < 2; i++) {
        fd[i] = dial(&ms);
        printf("%s %.1f\n", fd[i] >= 0 ? "ok" : ename(-fd[i]), ms);
        fflush(stdout);
    }
    for (int i = 0; i < 2; i++) {
        int left = (int)(t0 + (i ? ms2 : ms1) - mono_ms());
        if (left > 0)
            sleep_ms(left);
        if (fd[i] >= 0)
            close(fd[i]);
        printf("closed %d\n", i + 1);
        fflush(stdout);
    }
    return 0;
}

static int cmd_hold(void)
{
    double ms;
    int fd = dial(&ms);
    if (fd < 0) {
        printf("%s\n", ename(-fd));
        return 1;
    }
    printf("connected\n");
    fflush(stdout);
    while (!stop)
        pause();
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: failclient try|multi|loop|pair|hold HOST PORT ...\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: a wait ends early */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    dest.sin_family = AF_INET;
    dest.sin_port = htons((unsigned short)atoi(argv[3]));
    if (inet_pton(AF_INET, argv[2], &dest.sin_addr) != 1)
        return 2;
    if (!strcmp(argv[1], "try") && argc >= 5)
        return cmd_try(atoi(argv[4]), argc > 5 ? atoi(argv[5]) : 0);
    if (!strcmp(argv[1], "multi") && argc >= 6)
        return cmd_multi(atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(argv[1], "loop") && argc >= 6)
        return cmd_loop(atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(argv[1], "pair") && argc >= 6)
        return cmd_pair(atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(argv[1], "hold"))
        return cmd_hold();
    fprintf(stderr, "failclient: bad arguments\n");
    return 2;
}
