/* selfheld.c -- a process that holds a permit connects again, non-blocking: the event-loop deadlock case. */
/* Usage: selfheld PORT
 * Connects a blocking socket to 127.0.0.1:PORT and keeps it open, then
 * connects a non-blocking one to the same place. Prints
 * "held ERRNO_OR_0" and "second ERRNO_OR_EINPROGRESS MS" (how long the
 * second connect() call took). Exit 0 unless the first connect failed. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static const char *ename(int e)
{
    switch (e) {
    case 0: return "0";
    case EINPROGRESS: return "EINPROGRESS";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EAGAIN: return "EAGAIN";
    default: return strerror(e);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: selfheld PORT\n");
        return 2;
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s1 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = connect(s1, (struct sockaddr *)&a, sizeof(a));
    printf("held %s\n", ename(rc == 0 ? 0 : errno));
    if (rc != 0)
        return 1;
    int s2 = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    long long t0 = now_ms();
    rc = connect(s2, (struct sockaddr *)&a, sizeof(a));
    int e = rc == 0 ? 0 : errno;
    printf("second %s %lld\n", ename(e), now_ms() - t0);
    close(s2);
    close(s1);
    return 0;
}
