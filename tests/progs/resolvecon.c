/* resolvecon.c -- resolve a name with one chosen libc resolver call, then connect: for the resolver-hook tests. */
/* Usage: resolvecon FUNC NAME PORT [HOLD_MS]
 *   FUNC: getaddrinfo | gethostbyname | gethostbyname2 | gethostbyname_r |
 *         gethostbyname2_r (AF_INET) | none (NAME is an IPv4 address, no lookup)
 * Sets errno and h_errno to sentinels, resolves, and prints
 *   "resolve rc=RC errno=E h_errno=H addr=A"
 * (what the call returned and left behind, so runs with and without the shim
 * can be compared), then, if it resolved, connects to the first IPv4
 * address at PORT and prints "connect ok" or "connect ENAME", holds HOLD_MS,
 * closes. A HOLD_MS of -1 sends one HTTP request and reads the reply to its
 * end instead (the countserver stops counting the connection before it
 * answers, so the next holder of the permit never overlaps it there).
 * Exit 0 (2 on bad usage). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SENTINEL_ERRNO EDOM
#define SENTINEL_HERRNO 4242

static const char *ename(int e)
{
    switch (e) {
    case 0: return "0";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ECONNREFUSED: return "ECONNREFUSED";
    case EDOM: return "EDOM";
    case ENOENT: return "ENOENT";
    case ERANGE: return "ERANGE";
    case EAGAIN: return "EAGAIN";
    default: return strerror(e);
    }
}

static int from_hostent(const struct hostent *he, struct in_addr *out)
{
    if (!he || he->h_addrtype != AF_INET || !he->h_addr_list[0])
        return -1;
    memcpy(out, he->h_addr_list[0], 4);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: resolvecon FUNC NAME PORT [HOLD_MS]\n");
        return 2;
    }
    const char *fn = argv[1], *name = argv[2];
    int port = atoi(argv[3]), hold = argc > 4 ? atoi(argv[4]) : 0, rc = 0, got = -1;
    struct in_addr addr = { 0 };
    struct hostent hb, *he = NULL;
    char buf[4096];
    int herr = SENTINEL_HERRNO;
    h_errno = SENTINEL_HERRNO;
    errno = SENTINEL_ERRNO;
    if (!strcmp(fn, "getaddrinfo")) {
        struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
        rc = getaddrinfo(name, NULL, &hints, &res);
        if (rc == 0) {
            addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
            got = 0;
            freeaddrinfo(res);
        }
    } else if (!strcmp(fn, "gethostbyname")) {
        he = gethostbyname(name);
        rc = he ? 0 : -1;
        got = from_hostent(he, &addr);
    } else if (!strcmp(fn, "gethostbyname2")) {
        he = gethostbyname2(name, AF_INET);
        rc = he ? 0 : -1;
        got = from_hostent(he, &addr);
    } else if (!strcmp(fn, "gethostbyname_r")) {
        rc = gethostbyname_r(name, &hb, buf, sizeof buf, &he, &herr);
        got = from_hostent(he, &addr);
    } else if (!strcmp(fn, "gethostbyname2_r")) {
        rc = gethostbyname2_r(name, AF_INET, &hb, buf, sizeof buf, &he, &herr);
        got = from_hostent(he, &addr);
    } else if (!strcmp(fn, "none")) {
        got = inet_pton(AF_INET, name, &addr) == 1 ? 0 : -1;
    } else {
        fprintf(stderr, "resolvecon: unknown FUNC %s\n", fn);
        return 2;
    }
    int e = errno, h = h_errno;
    char a[INET_ADDRSTRLEN] = "-";
    if (got == 0)
        inet_ntop(AF_INET, &addr, a, sizeof a);
    printf("resolve rc=%d errno=%s h_errno=%d herr=%d addr=%s\n", rc, ename(e), h, herr, a);
    if (got != 0)
        return 0;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port), .sin_addr = addr };
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        printf("connect %s\n", ename(errno));
    } else {
        printf("connect ok\n");
        fflush(stdout);
        if (hold > 0) {
            struct timespec ts = { hold / 1000, (hold % 1000) * 1000000L };
            nanosleep(&ts, NULL);
        } else if (hold < 0) {
            static const char req[] = "GET / HTTP/1.0\r\n\r\n";
            if (write(fd, req, sizeof req - 1) > 0)
                while (read(fd, buf, sizeof buf) > 0) {
                }
        }
    }
    close(fd);
    return 0;
}
