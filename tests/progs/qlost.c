/* qlost.c -- a queued connect loses the program's socket (the program closes the number the shim keeps it
 * on, with no number free to move it to), then the program closes the queued descriptor at once, while the
 * queue's thread is still ending its wait: the entry must outlive that thread (ASan: no use after free).
 * Usage: qlost PORT ROUNDS. A holder takes the permit of limit 1 on 127.0.0.1:PORT; each round queues one
 * non-blocking connect, finds the kept socket by its inode in /proc/self/fd, uses up every free number,
 * closes the kept one and then the queued one, and frees the numbers again. Prints "rounds N lost L" (L:
 * rounds whose queued connect reported its loss: SO_ERROR or POLLERR before the close); exits 0, or 2 on a
 * setup failure. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILL 3300 /* RLIMIT_NOFILE: at least 100 times the queue's 32 own threads (runtime/queued.c) */

static int kept_of(ino_t ino, int not_fd)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int found = -1;
    while (d && (de = readdir(d))) {
        int fd = atoi(de->d_name);
        struct stat st;
        if (de->d_name[0] != '.' && fd != not_fd && fd != dirfd(d) && fstat(fd, &st) == 0 && st.st_ino == ino)
            found = fd;
    }
    if (d)
        closedir(d);
    return found;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[1])) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct rlimit rl = { FILL,
                         FILL }; /* a table large enough that the shim keeps the socket on a number of its own */
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 2;
    int holder = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(holder, (struct sockaddr *)&a, sizeof a) != 0)
        return 2;
    int rounds = atoi(argv[2]), lost = 0;
    static int fill[FILL];
    for (int r = 0; r < rounds; r++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct stat st;
        if (s < 0 || fstat(s, &st) != 0)
            return 2;
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0 || errno != EINPROGRESS)
            return 2;
        int kept = kept_of(st.st_ino, s), n = 0;
        if (kept < 0)
            return 2;
        while (n < FILL && (fill[n] = open("/dev/null", O_RDONLY)) >= 0)
            n++;
        close(kept); /* no number free to move it to: the queued connect loses the program's socket */
        int e = 0;
        socklen_t l = sizeof e;
        lost += getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e != 0;
        close(s); /* at once: the queue's thread may still be ending its wait */
        while (n > 0)
            close(fill[--n]);
    }
    usleep(300 * 1000); /* the threads end */
    printf("rounds %d lost %d\n", rounds, lost);
    close(holder);
    return 0;
}
