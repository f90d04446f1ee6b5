/* twosem.c -- a thread blocked on semaphore A must not delay another thread's connects on semaphore B. */
/* Usage: twosem HOST PORT_A PORT_B N
 * A second thread connects to PORT_A (whose semaphore is full) and waits;
 * meanwhile the main thread connects and closes N times to PORT_B, timing
 * each. Prints "b_median_ms M b_max_ms X a_waiting_after_b 0|1 a_result R". */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in A, B;
static atomic_int a_done;
static int a_rc, a_errno;

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void *wait_a(void *arg)
{
    (void)arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    a_rc = connect(fd, (struct sockaddr *)&A, sizeof(A));
    a_errno = errno;
    atomic_store(&a_done, 1);
    close(fd);
    return NULL;
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: twosem HOST PORT_A PORT_B N\n");
        return 2;
    }
    A.sin_family = B.sin_family = AF_INET;
    inet_pton(AF_INET, argv[1], &A.sin_addr);
    B.sin_addr = A.sin_addr;
    A.sin_port = htons((unsigned short)atoi(argv[2]));
    B.sin_port = htons((unsigned short)atoi(argv[3]));
    int n = atoi(argv[4]);
    double *t = calloc((size_t)n, sizeof(*t));
    pthread_t th;
    pthread_create(&th, NULL, wait_a, NULL);
    struct timespec ts = { 0, 300 * 1000000L }; /* let A queue and block */
    nanosleep(&ts, NULL);
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        double t0 = mono_ms();
        if (connect(fd, (struct sockaddr *)&B, sizeof(B)) != 0) {
            printf("b connect failed: %s\n", strerror(errno));
            return 1;
        }
        close(fd);
        t[i] = mono_ms() - t0;
    }
    int waiting = !atomic_load(&a_done);
    pthread_join(th, NULL);
    qsort(t, (size_t)n, sizeof(*t), cmp);
    printf("b_median_ms %.1f b_max_ms %.1f a_waiting_after_b %d a_result %s\n", t[n / 2], t[n - 1], waiting,
           a_rc == 0              ? "connected"
           : a_errno == ETIMEDOUT ? "ETIMEDOUT"
                                  : strerror(a_errno));
    free(t);
    return 0;
}
