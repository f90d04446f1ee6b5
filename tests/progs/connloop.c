/* connloop.c -- NPROC processes, each connecting NITER times in a row: per-connect wait times, for the fairness and rate tests. */
/* Usage: connloop HOST PORT NPROC NITER HOLD_MS [WARM_PORT]
 * The children are fresh processes (this program run again with --child ID),
 * as independent clients would be. Each child connects, holds HOLD_MS, closes, and repeats NITER times. One
 * A HOLD_MS of -1 holds until the server closes (the server's count of the
 * connection then ends before the client's close hands the permit on). One
 * line per connect on stdout: "ok CHILD ITER T WAITED_MS" or "err CHILD ITER
 * ENAME WAITED_MS" (T: CLOCK_MONOTONIC ms when connect returned). Exit 0 when
 * every connect succeeded. With WARM_PORT, each child first connects there
 * once (and closes): the shim's one-time set-up (configuration, heartbeat
 * thread) is then out of the way of the timed connects. With
 * CONNLOOP_START_BARRIER=1 in the environment, the children start their
 * loops together, once all of them are spawned (and warmed): the timed
 * connects then leave out the processes' start-up (about 2 ms of CPU each). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* With CONNLOOP_GO_FD (the parent's start barrier): blocks until the
 * parent closes the pipe's other end. */
static void await_go(void)
{
    const char *go = getenv("CONNLOOP_GO_FD");
    char c;
    if (!go)
        return;
    int fd = atoi(go);
    while (read(fd, &c, 1) < 0 && errno == EINTR) {
    }
    close(fd);
}

static int child(const struct sockaddr_in *a, int id, int niter, int hold, int warm)
{
    int bad = 0;
    if (warm > 0) {
        struct sockaddr_in w = *a;
        w.sin_port = htons((unsigned short)warm);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (const struct sockaddr *)&w, sizeof(w)) != 0)
            bad = 1;
        close(fd);
    }
    await_go();
    for (int i = 0; i < niter; i++) {
        char line[128];
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        double t0 = mono_ms();
        int rc = connect(fd, (const struct sockaddr *)a, sizeof(*a));
        int e = errno;
        double t1 = mono_ms();
        int n = rc == 0 ? snprintf(line, sizeof(line), "ok %d %d %.3f %.1f\n", id, i, t1, t1 - t0)
                        : snprintf(line, sizeof(line), "err %d %d %s %.1f\n", id, i,
                                   e == ETIMEDOUT ? "ETIMEDOUT" : strerror(e), t1 - t0);
        if (write(1, line, (size_t)n) != n)
            bad = 1; /* one write: lines never interleave */
        if (rc != 0)
            bad = 1;
        else if (hold > 0)
            sleep_ms(hold);
        else if (hold < 0) {
            char b[256];
            while (read(fd, b, sizeof(b)) > 0) {
            }
        }
        close(fd);
    }
    return bad;
}

extern char **environ;

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[7], "--child") == 0) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
        inet_pton(AF_INET, argv[1], &a.sin_addr);
        return child(&a, atoi(argv[8]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
    }
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: connloop HOST PORT NPROC NITER HOLD_MS [WARM_PORT]\n");
        return 2;
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    int nproc = atoi(argv[3]), niter = atoi(argv[4]), hold = atoi(argv[5]), bad = 0;
    (void)a;
    (void)niter;
    (void)hold;
    int go[2] = { -1, -1 };
    if (getenv("CONNLOOP_START_BARRIER") && pipe(go) == 0) {
        char n[16];
        snprintf(n, sizeof(n), "%d", go[0]);
        fcntl(go[1], F_SETFD, FD_CLOEXEC); /* only the parent holds the end that starts them */
        setenv("CONNLOOP_GO_FD", n, 1);
    }
    for (int p = 0; p < nproc; p++) {
        char id[16];
        snprintf(id, sizeof(id), "%d", p);
        char *av[] = { argv[0],   argv[1], argv[2], argv[3], argv[4], argv[5], argc == 7 ? argv[6] : "0",
                       "--child", id,      NULL };
        pid_t pid;
        if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, av, environ) != 0)
            bad = 1;
    }
    if (go[1] >= 0) {
        close(go[0]);
        close(go[1]); /* every child reads EOF: go */
    }
    int st;
    while (wait(&st) > 0)
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad = 1;
    return bad;
}
