/* nameloop.c -- THREADS threads connect to HOST:PORT in a loop until STOPFILE exists: for the reload and resolve tests. */
/* Usage: nameloop HOST PORT THREADS STOPFILE. Each round: connect, send one
 * HTTP request, read the reply to its end, close. A numeric HOST is used as
 * it is (inet_pton: no resolver call at all, like a program with its own
 * resolver); a name is looked up with getaddrinfo() every round. A failed
 * connect (say ETIMEDOUT from the shim) is counted and retried after 50 ms.
 * At the end prints "ok N failed M" and exits 0 (2 on bad usage). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *stopfile;
static int port;
static atomic_long ok, failed;

static void nap(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* The destination: from inet_pton for a numeric HOST, else getaddrinfo. */
static int dest(struct sockaddr_storage *ss, socklen_t *len)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof *ss);
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((unsigned short)port);
        *len = sizeof *s4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((unsigned short)port);
        *len = sizeof *s6;
        return 0;
    }
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    if (getaddrinfo(host, p, &hints, &res) != 0)
        return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void *loop(void *arg)
{
    (void)arg;
    char buf[512];
    while (access(stopfile, F_OK) != 0) {
        struct sockaddr_storage ss;
        socklen_t len;
        int fd = dest(&ss, &len) == 0 ? socket(ss.ss_family, SOCK_STREAM, 0) : -1;
        if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) != 0) {
            if (fd >= 0)
                close(fd);
            atomic_fetch_add(&failed, 1);
            nap(50);
            continue;
        }
        static const char req[] = "GET / HTTP/1.0\r\n\r\n";
        if (write(fd, req, sizeof req - 1) > 0)
            while (read(fd, buf, sizeof buf) > 0) {
            }
        close(fd);
        atomic_fetch_add(&ok, 1);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: nameloop HOST PORT THREADS STOPFILE\n");
        return 2;
    }
    host = argv[1];
    port = atoi(argv[2]);
    int n = atoi(argv[3]);
    stopfile = argv[4];
    if (port < 1 || port > 65535 || n < 1 || n > 256) {
        fprintf(stderr, "nameloop: bad port or thread count\n");
        return 2;
    }
    pthread_t t[256];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, loop, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("ok %ld failed %ld\n", atomic_load(&ok), atomic_load(&failed));
    return 0;
}
