/* qclose.c -- many queued connects, some closed while they wait (tests/integration/queue_runner_close.sh).
 * Usage: qclose PORT N CUT. A holder takes the permit of limit 1 on 127.0.0.1:PORT with a blocking connect;
 * N non-blocking connects queue (each must say EINPROGRESS); "queued" is printed and a line awaited on
 * stdin; the last CUT are closed, "closed" printed, a line awaited; the holder closes, and each of the
 * other N - CUT is awaited (POLLOUT, 60 s) and its SO_ERROR read: "connected K of N-CUT". Exits 0, or 2 on
 * a setup failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void await_line(void)
{
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        exit(2);
}

int main(int argc, char **argv)
{
    struct sockaddr_in up = { .sin_family = AF_INET };
    int n, cut, held, ok = 0, *fds;

    if (argc != 4 || (n = atoi(argv[2])) <= 0 || (cut = atoi(argv[3])) < 0 || cut > n)
        return 2;
    up.sin_port = htons((unsigned short)atoi(argv[1]));
    inet_pton(AF_INET, "127.0.0.1", &up.sin_addr);
    fds = calloc((size_t)n, sizeof *fds);
    held = socket(AF_INET, SOCK_STREAM, 0);
    if (!fds || held < 0 || connect(held, (struct sockaddr *)&up, sizeof up) != 0) {
        fprintf(stderr, "qclose: holder: %s\n", strerror(errno));
        return 2;
    }
    for (int i = 0; i < n; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&up, sizeof up) == 0 || errno != EINPROGRESS) {
            fprintf(stderr, "qclose: connect %d: %s\n", i, strerror(errno));
            return 2;
        }
    }
    printf("queued\n");
    fflush(stdout);
    await_line();
    for (int i = n - cut; i < n; i++)
        close(fds[i]);
    printf("closed\n");
    fflush(stdout);
    await_line();
    close(held);
    for (int i = 0; i < n - cut; i++) {
        struct pollfd p = { .fd = fds[i], .events = POLLOUT };
        int err = -1;
        socklen_t l = sizeof err;
        if (poll(&p, 1, 60000) == 1 && getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &l) == 0 && err == 0)
            ok++;
        close(fds[i]);
    }
    printf("connected %d of %d\n", ok, n - cut);
    free(fds);
    return 0;
}
