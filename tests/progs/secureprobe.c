/* secureprobe.c -- linked against libconncap (not preloaded), so that a setgid copy runs with the shim.
 *
 * Usage: secureprobe [PORT]
 * Prints "secure N" (AT_SECURE: 1 in secure-execution mode), then, with
 * PORT, connects to 127.0.0.1:PORT and closes. Exits 0, or 1 when the
 * connect failed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    printf("secure %lu\n", getauxval(AT_SECURE));
    fflush(stdout);
    if (argc < 2)
        return 0;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    close(fd);
    return rc == 0 ? 0 : 1;
}
