/* qthreads.c -- several threads of one process each queue many non-blocking connects at once, then wait
 * for each (tests/integration/queue_threads.sh).
 * Usage: qthreads PORT THREADS N WAIT_MS [HOLD_MS]. Each of THREADS threads makes N non-blocking connects
 * to 127.0.0.1:PORT (each must say EINPROGRESS) and adds them to an epoll set of its own; each one
 * reported writable has its SO_ERROR read (0 counts as connected) and is closed, a connected one after
 * HOLD_MS (default 0); those still open WAIT_MS after the last report count as timed out. Prints "connected K of THREADS*N" and the errno
 * names of the others ("failed ETIMEDOUT 12"). Exits 0, or 2 on a setup failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in up = { .sin_family = AF_INET };
static int n, wait_ms, hold_ms;
static atomic_int ok, timedout, other, setup;

/* One thread: N queued connects in an epoll set, each handled as it becomes writable (in whatever
 * order the permits come), until all are or WAIT_MS pass without any. */
static void *run(void *arg)
{
    int *fds = calloc((size_t)n, sizeof *fds), ep = epoll_create1(EPOLL_CLOEXEC), left = n;

    (void)arg;
    for (int i = 0; fds && ep >= 0 && i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&up, sizeof up) == 0 || errno != EINPROGRESS) {
            fprintf(stderr, "qthreads: connect: %s\n", strerror(errno));
            atomic_fetch_add(&setup, 1);
            return NULL;
        }
        struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = (unsigned)i };
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
    }
    while (fds && left > 0) {
        struct epoll_event ev[16];
        int k = epoll_wait(ep, ev, 16, wait_ms);
        if (k <= 0)
            break;
        for (int j = 0; j < k; j++) {
            int fd = fds[ev[j].data.u32], err = -1;
            socklen_t l = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
            atomic_fetch_add(err == 0 ? &ok : err == ETIMEDOUT ? &timedout : &other, 1);
            if (err == 0 && hold_ms > 0)
                usleep((useconds_t)hold_ms * 1000);
            epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
            close(fd);
            left--;
        }
    }
    atomic_fetch_add(&timedout, left); /* none came within WAIT_MS of the last */
    if (ep >= 0)
        close(ep);
    free(fds);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads;
    pthread_t t[64];

    if ((argc != 5 && argc != 6) || (threads = atoi(argv[2])) <= 0 || threads > 64 || (n = atoi(argv[3])) <= 0)
        return 2;
    wait_ms = atoi(argv[4]);
    hold_ms = argc == 6 ? atoi(argv[5]) : 0;
    up.sin_port = htons((unsigned short)atoi(argv[1]));
    inet_pton(AF_INET, "127.0.0.1", &up.sin_addr);
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, run, NULL) != 0)
            return 2;
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("connected %d of %d\nfailed ETIMEDOUT %d other %d\n", atomic_load(&ok), threads * n,
           atomic_load(&timedout), atomic_load(&other));
    return atomic_load(&setup) ? 2 : 0;
}
