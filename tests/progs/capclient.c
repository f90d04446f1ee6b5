/* capclient.c -- a plain C TCP client for tests: THREADS x N connect/request/hold/close. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* usage: capclient HOST PORT [THREADS [N [HOLD_MS]]]
 * Prints one line per failed connect ("fail ERRNO-NAME-OR-NUMBER") and a
 * summary "ok N fail M"; exit 0 when every connect got a full reply. */
static const char *host, *port;
static int n_each = 1, hold_ms;
static int ok, bad;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int one(void)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return EHOSTUNREACH;
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    freeaddrinfo(ai);
    if (rc) {
        close(fd);
        return rc;
    }
    const char req[] = "GET / HTTP/1.0\r\n\r\n";
    if (write(fd, req, sizeof(req) - 1) < 0)
        rc = errno;
    char buf[256];
    ssize_t got = 0, r;
    while ((r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += r;
    buf[got] = '\0';
    if (!rc && strncmp(buf, "HTTP/1.0 200", 12) != 0)
        rc = EPROTO;
    if (hold_ms) {
        struct timespec ts = { hold_ms / 1000, (hold_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    close(fd);
    return rc;
}

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < n_each; i++) {
        int rc = one();
        pthread_mutex_lock(&mu);
        if (rc) {
            bad++;
            printf("fail %s\n", strerror(rc));
        } else
            ok++;
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: capclient HOST PORT [THREADS [N [HOLD_MS]]]\n");
        return 2;
    }
    host = argv[1];
    port = argv[2];
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    n_each = argc > 4 ? atoi(argv[4]) : 1;
    hold_ms = argc > 5 ? atoi(argv[5]) : 0;
    pthread_t t[256];
    if (threads < 1 || threads > 256)
        return 2;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("ok %d fail %d\n", ok, bad);
    return bad ? 1 : 0;
}
