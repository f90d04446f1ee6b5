/* qthreads.c -- several threads of one process each queue many non-blocking connects at once, then wait
 * for each (tests/integration/queue_threads.sh).
 * Usage: qthreads PORT THREADS N WAIT_MS. Each of THREADS threads makes N non-blocking connects to
 * 127.0.0.1:PORT (each must say EINPROGRESS), then polls each in turn (POLLOUT, up to WAIT_MS) and reads
 * its SO_ERROR: 0 counts as connected; it closes each. Prints "connected K of THREADS*N" and the errno
 * names of the others ("failed ETIMEDOUT 12"). Exits 0, or 2 on a setup failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in up = { .sin_family = AF_INET };
static int n, wait_ms;
static atomic_int ok, timedout, other, setup;

static void *run(void *arg)
{
    int *fds = calloc((size_t)n, sizeof *fds);

    (void)arg;
    for (int i = 0; fds && i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&up, sizeof up) == 0 || errno != EINPROGRESS) {
            fprintf(stderr, "qthreads: connect: %s\n", strerror(errno));
            atomic_fetch_add(&setup, 1);
            return NULL;
        }
    }
    for (int i = 0; fds && i < n; i++) {
        struct pollfd p = { .fd = fds[i], .events = POLLOUT };
        int err = -1;
        socklen_t l = sizeof err;
        if (poll(&p, 1, wait_ms) == 1)
            getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &l);
        atomic_fetch_add(err == 0 ? &ok : err == ETIMEDOUT ? &timedout : &other, 1);
        close(fds[i]);
    }
    free(fds);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads;
    pthread_t t[64];

    if (argc != 5 || (threads = atoi(argv[2])) <= 0 || threads > 64 || (n = atoi(argv[3])) <= 0)
        return 2;
    wait_ms = atoi(argv[4]);
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
