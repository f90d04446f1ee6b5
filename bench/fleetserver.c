/* fleetserver.c -- the fleet row's TCP server: counts concurrent connections, accept to the peer's EOF, in a few us each. */
/* Usage: fleetserver STATS PORTFILE
 * The same count as bench/fleetserver.py (which took ~0.15 ms of CPU per
 * connect, a fifth of the row's two cores at 2,000 connects/s): one thread
 * on epoll; a connection counts from its accept until the peer closes it
 * (EOF or error); before a new connection is counted, every counted one
 * whose peer has closed is uncounted (MSG_PEEK), so a client that closed
 * (and handed its permit on) before the next one connected never overlaps
 * it, whatever order the events come in. Nothing is sent. A second
 * listener (the warm port, PORTFILE's second number) accepts and closes at
 * once, uncounted: the clients' warm-up connects. {"cur", "max", "total"}
 * go to STATS (JSON, atomically replaced) when the maximum changes, every
 * 100 ms while they change, and at SIGTERM. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIVE 4096

static const char *stats_path;
static int cur, max, total, dirty;
static int live[MAX_LIVE], nlive;
static volatile sig_atomic_t stop;

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void dump(void)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", stats_path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "{\"cur\": %d, \"max\": %d, \"total\": %d}\n", cur, max, total);
    fclose(f);
    rename(tmp, stats_path);
    dirty = 0;
}

static int listener(int *port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int one = 1, s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 4096) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        perror("fleetserver: listen");
        exit(1);
    }
    *port = ntohs(a.sin_port);
    return s;
}

/* Uncounts (and closes) live connection I. */
static void uncount(int i)
{
    close(live[i]);
    live[i] = live[--nlive];
    cur--;
    dirty = 1;
}

/* Uncounts the live connections whose peer has closed. */
static void reap_closed(void)
{
    char c;
    for (int i = 0; i < nlive;) {
        ssize_t r = recv(live[i], &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            uncount(i);
        else
            i++;
    }
}

static void accept_all(int ep, int s, int counted)
{
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0)
            return;
        if (!counted || nlive == MAX_LIVE) {
            close(c);
            continue;
        }
        reap_closed();
        struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = c };
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        live[nlive++] = c;
        cur++;
        total++;
        dirty = 1;
        if (cur > max) {
            max = cur;
            dump();
        }
    }
}

/* Connection FD is readable: drained, and uncounted at EOF or an error. */
static void readable(int fd)
{
    char buf[4096];
    ssize_t r;

    while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    for (int i = 0; i < nlive; i++)
        if (live[i] == fd)
            return uncount(i);
    close(fd);
}

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    int port, wport, s, w, ep;
    struct epoll_event ev[64];
    long long last = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: fleetserver STATS PORTFILE\n");
        return 2;
    }
    stats_path = argv[1];
    s = listener(&port);
    w = listener(&wport);
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = { .events = EPOLLIN, .data.fd = s };
    epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
    e.data.fd = w;
    epoll_ctl(ep, EPOLL_CTL_ADD, w, &e);
    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);
    dump();
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 1;
    fprintf(f, "%d %d\n", port, wport);
    fclose(f);
    rename(tmp, argv[2]);
    while (!stop) {
        int n = epoll_wait(ep, ev, 64, 100), accepts = 0;
        /* EOFs first, then new connections */
        for (int i = 0; i < n; i++) {
            if (ev[i].data.fd == s)
                accepts = 1;
            else if (ev[i].data.fd == w)
                accept_all(ep, w, 0);
            else
                readable(ev[i].data.fd);
        }
        if (accepts)
            accept_all(ep, s, 1);
        if (dirty && mono_ms() - last >= 100) {
            dump();
            last = mono_ms();
        }
    }
    dump();
    return 0;
}
