/* taskhold.c -- one TCP connect held a while, then closed: how many threads the process had meanwhile. */
/* Usage: taskhold HOST PORT HOLD_MS TICK_MS [BEFORE_MS]. Sleeps BEFORE_MS
 * (default 0) first, then connects and holds the connection HOLD_MS;
 * every TICK_MS (0: never) makes one interposed call that does nothing
 * (close(-1)), as a program that works with other descriptors meanwhile.
 * Prints "connected", then "tasks MAX" (the most entries /proc/self/task
 * had while the connection was open), then "closed". Exit 0, or 1 when the
 * connect failed. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

/* Entries of /proc/self/task (opendir is not interposed: counts nothing). */
static int tasks(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: taskhold HOST PORT HOLD_MS TICK_MS [BEFORE_MS]\n");
        return 2;
    }
    if (argc == 6)
        usleep((useconds_t)(atof(argv[5]) * 1000));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &sa.sin_addr);
    double hold = atof(argv[3]), tick = atof(argv[4]);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("connect");
        return 1;
    }
    printf("connected\n");
    fflush(stdout);
    int most = tasks();
    double end = mono_ms() + hold;
    while (mono_ms() < end) {
        double left = end - mono_ms(), step = tick > 0 && tick < left ? tick : left;
        if (step > 0)
            usleep((useconds_t)(step * 1000));
        if (tick > 0)
            close(-1);
        int n = tasks();
        if (n > most)
            most = n;
    }
    int n = tasks();
    printf("tasks %d\n", n > most ? n : most);
    close(fd);
    printf("closed\n");
    return 0;
}
