/* pairs.c -- acquire/release pairs per second through the shim's own semaphore calls (linked with core/). */
/* Usage: pairs SOCK NPROC SECONDS LIMIT
 * NPROC processes (this program again), each with its own connection to the
 * Redis at Unix socket SOCK, loop acquire + release (the calls and scripts the
 * shim uses: acquire.lua with its queue and rate keys, release.lua with its
 * wake-ups) on one semaphore of LIMIT for SECONDS. Prints the total pairs/s. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "sem.h"

extern char **environ;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int child(const char *sock, double secs, int limit)
{
    struct ccap_redis_conf c = { 0 };
    c.socket = (char *)sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 1000;
    struct ccap_redis *r = ccap_redis_new(&c);
    char holder[64];
    long n = 0;
    double end = now_s() + secs;
    while (now_s() < end) {
        snprintf(holder, sizeof(holder), "bench/%d/%ld", (int)getpid(), n);
        struct ccap_sem_req q = { .holder = holder, .lease_ms = 30000, .limit = limit, .ticket_ttl_ms = 5000 };
        struct ccap_sem_result res;
        if (ccap_sem_acquire(r, "bench:", "pairs", &q, &res) < 0)
            return 1;
        if (!res.granted)
            continue; /* contended: try again (the bench uses an uncontended limit) */
        if (ccap_sem_release(r, "bench:", "pairs", &(struct ccap_sem_rel){ holder, limit, 0 }) < 0)
            return 1;
        n++;
    }
    printf("%ld\n", n);
    ccap_redis_free(r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[5], "--child"))
        return child(argv[1], atof(argv[3]), atoi(argv[4]));
    if (argc != 5) {
        fprintf(stderr, "usage: pairs SOCK NPROC SECONDS LIMIT\n");
        return 2;
    }
    int nproc = atoi(argv[2]);
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    for (int p = 0; p < nproc; p++) {
        char *av[] = { argv[0], argv[1], argv[2], argv[3], argv[4], "--child", NULL };
        pid_t pid;
        if (posix_spawn(&pid, "/proc/self/exe", &fa, NULL, av, environ) != 0)
            return 1;
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    long total = 0, v;
    while (fscanf(in, "%ld", &v) == 1)
        total += v;
    int st, bad = 0;
    while (wait(&st) > 0)
        bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    printf("%.0f\n", total / atof(argv[3]));
    return bad;
}
