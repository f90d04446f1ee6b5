/* hold.c -- one TCP connect (timed), hold it, close: prints when, for the wait tests. */
/* Usage: hold HOST PORT HOLD_MS. Prints "connected T WAITED" or "error ENAME WAITED",
 * then "closed T" (T: CLOCK_MONOTONIC ms, comparable across processes). A
 * HOLD_MS of -1 holds until standard input closes. Exit 0 connected, 1 not. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

static const char *ename(int e)
{
    switch (e) {
    case ETIMEDOUT: return "ETIMEDOUT";
    case EAGAIN: return "EAGAIN";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    default: return strerror(e);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hold HOST PORT HOLD_MS\n");
        return 2;
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    int hold = atoi(argv[3]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    double t0 = mono_ms();
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    int e = errno;
    double t1 = mono_ms();
    if (rc != 0) {
        printf("error %s %.1f\n", ename(e), t1 - t0);
        return 1;
    }
    printf("connected %.3f %.1f\n", t1, t1 - t0);
    if (hold < 0) {
        char b[64];
        while (read(0, b, sizeof(b)) > 0) {
        }
    } else {
        struct timespec ts = { hold / 1000, (hold % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    double t2 = mono_ms();
    close(fd);
    printf("closed %.3f\n", t2);
    return 0;
}
