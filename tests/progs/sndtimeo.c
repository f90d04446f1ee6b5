/* sndtimeo.c -- a blocking connect with SO_SNDTIMEO: what it returns, when, and what the socket becomes after.
 * Usage: sndtimeo HOST PORT SNDTIMEO_MS
 * Prints "connect ERR ms MS" (ERR 0 or the errno's name, MS how long connect() took); after EINPROGRESS,
 * polls up to 10 s for POLLOUT and prints "then SO_ERROR_NAME peer yes|no ms MS" (since the start). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

static const char *name(int e)
{
    return e == 0 ? "0" : e == EINPROGRESS ? "EINPROGRESS" : e == ETIMEDOUT ? "ETIMEDOUT" : strerror(e);
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    int s = socket(AF_INET, SOCK_STREAM, 0), ms = atoi(argv[3]);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    long long t0 = now_ms();
    int r = connect(s, (struct sockaddr *)&a, sizeof a), e = r == 0 ? 0 : errno;
    printf("connect %s ms %lld\n", name(e), now_ms() - t0);
    if (e == EINPROGRESS) {
        struct pollfd p = { s, POLLOUT, 0 };
        int v = -1;
        socklen_t l = sizeof v;
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        poll(&p, 1, 10000);
        getsockopt(s, SOL_SOCKET, SO_ERROR, &v, &l);
        printf("then %s peer %s ms %lld\n", name(v),
               getpeername(s, (struct sockaddr *)&peer, &pl) == 0 ? "yes" : "no", now_ms() - t0);
    }
    close(s);
    return 0;
}
