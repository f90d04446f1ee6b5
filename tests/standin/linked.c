/* linked.c -- a program linked against stand-in hiredis and libconfig: one TCP connect, held. */
/* Usage: linked HOST PORT -- connects, prints "connected", holds the
 * connection until standard input closes, closes it, prints "closed", exits
 * 0 (1 when the connect failed). linked --call-standin calls the stand-ins
 * (they abort: the test's proof that they would kill a caller). Linked with
 * --no-as-needed against libhiredis.so.0.14, libhiredis.so.1.1.0 and
 * libconfig.so.9 stand-ins: they are loaded, and never called on the
 * ordinary path. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void redisConnect(void);
void config_init(void);

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--call-standin") == 0) {
        config_init();
        redisConnect();
        return 3;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: linked HOST PORT | linked --call-standin\n");
        return 2;
    }
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        printf("error %s\n", strerror(errno));
        return 1;
    }
    printf("connected\n");
    char b[64];
    while (read(0, b, sizeof(b)) > 0) {
    }
    if (close(fd) != 0) {
        printf("close: %s\n", strerror(errno));
        return 1;
    }
    printf("closed\n");
    return 0;
}
