/* acceptlog.c -- a listener that logs the time of every accept (CLOCK_MONOTONIC seconds), then closes the connection. */
/* Usage: acceptlog PORTFILE LOGFILE. Listens on 127.0.0.1 (a free port,
 * written to PORTFILE), one thread, no other work per connection: the
 * timestamps are as close to the kernel's accept as user space gets (the
 * rate test's measure; the Python countserver spends about 1 ms per accept). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: acceptlog PORTFILE LOGFILE\n");
        return 2;
    }
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(a);
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 4096) || getsockname(s, (struct sockaddr *)&a, &l)) {
        perror("acceptlog");
        return 1;
    }
    int log = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (log < 0 || !f)
        return 1;
    fprintf(f, "%d\n", ntohs(a.sin_port));
    fclose(f);
    rename(tmp, argv[1]);
    for (;;) {
        int c = accept(s, NULL, NULL);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (c < 0)
            continue;
        char line[64];
        int n = snprintf(line, sizeof(line), "%ld.%09ld\n", (long)ts.tv_sec, ts.tv_nsec);
        if (write(log, line, (size_t)n) != n)
            return 1;
        close(c);
    }
}
