/* pairs.c -- acquire/release pairs through the shim's own semaphore calls (linked with core/). */
/* Usage: pairs SOCK NPROC SECONDS LIMIT
 * NPROC processes (this program again), each with its own connection to the
 * Redis at Unix socket SOCK, loop acquire + release (the calls and scripts the
 * shim uses: acquire.lua with its queue and rate keys, release.lua with its
 * wake-ups) on one semaphore of LIMIT for SECONDS. Prints the total pairs/s.
 *        pairs conn SOCK NPROC N LIMIT PORT
 * The shim's pattern without the shim: NPROC processes each make N x (the
 * acquire a blocking connect sends, a plain TCP connect+close to 127.0.0.1:PORT,
 * the release as close() sends it: ccap_sem_release_defer, written without
 * waiting for its reply, which comes back with the next acquire's), on
 * semaphore "conn" of LIMIT, key prefix "bench:". Prints the pairs made.
 *        pairs rsconn SOCK NPROC N LIMIT PORT SHA
 * The same loop with redis-semaphore's operations: EVALSHA SHA (the npm
 * package's acquire script, loaded by the caller: KEYS[1] the semaphore,
 * ARGV limit, identifier, lock timeout 30 s, the client's ms), the
 * connect+close, then its release, ZREM, written without waiting for its
 * reply as the shim's is: one driver for both, so the gaps Redis idles
 * between calls are alike (bench/shim_pairs.sh). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
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

/* One process of "pairs conn": the calls runtime/waiting.c and
 * runtime/release.c make for a connect that finds a free permit (lease 30 s,
 * ticket TTL 30 s and 5 s of wait left, as the shim's default semaphore;
 * flag "g": a blocking connect takes grants). */
static int conn_child(const char *sock, long n, int limit, int port)
{
    struct ccap_redis_conf c = { 0 };
    c.socket = (char *)sock;
    c.connect_timeout_ms = 1000;
    c.command_timeout_ms = 1000;
    struct ccap_redis *r = ccap_redis_new(&c);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    char holder[64];
    long done = 0;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (long i = 0; i < n; i++) {
        snprintf(holder, sizeof(holder), "bench/%d/%ld", (int)getpid(), i);
        struct ccap_sem_req q = { .holder = holder,
                                  .lease_ms = 30000,
                                  .limit = limit,
                                  .ticket_ttl_ms = 30000,
                                  .wait_left_ms = 5000,
                                  .flags = CCAP_SEM_GRANTS };
        struct ccap_sem_result res;
        if (ccap_sem_acquire(r, "bench:", "conn", &q, &res) < 0)
            return 1;
        if (!res.granted)
            continue; /* contended: the bench uses an uncontended limit */
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
            return 1;
        close(s);
        if (ccap_sem_release_defer(r, "bench:", "conn", &(struct ccap_sem_rel){ holder, limit, 0 },
                                   (long long)(now_s() * 1000) + 30000, true) < 0)
            return 1;
        done++;
    }
    if (ccap_redis_flush(r) != 0)
        return 1;
    printf("%ld\n", done);
    ccap_redis_free(r);
    return 0;
}

/* One process of "pairs rsconn". */
static int rsconn_child(const char *sock, long n, int limit, int port, const char *sha)
{
    redisContext *c = redisConnectUnix(sock);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
    char id[64], lim[16];
    long done = 0;
    int owed = 0; /* replies of ZREMs sent and not read yet */

    if (!c || c->err)
        return 1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    snprintf(lim, sizeof lim, "%d", limit);
    for (long i = 0; i < n; i++) {
        redisReply *rep;
        snprintf(id, sizeof id, "rs/%d/%ld", (int)getpid(), i);
        redisAppendCommand(c, "EVALSHA %s 1 bench-rs:conn %s %s 30000 %lld", sha, lim, id,
                           (long long)(now_s() * 1000));
        for (; owed > 0; owed--) {
            if (redisGetReply(c, (void **)&rep) != REDIS_OK)
                return 1;
            freeReplyObject(rep);
        }
        if (redisGetReply(c, (void **)&rep) != REDIS_OK || rep->type != REDIS_REPLY_INTEGER)
            return 1;
        long long granted = rep->integer;
        freeReplyObject(rep);
        if (!granted)
            continue;
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
            return 1;
        close(s);
        redisAppendCommand(c, "ZREM bench-rs:conn %s", id);
        int wdone = 0;
        if (redisBufferWrite(c, &wdone) != REDIS_OK)
            return 1;
        owed++;
        done++;
    }
    for (; owed > 0; owed--) {
        redisReply *rep;
        if (redisGetReply(c, (void **)&rep) != REDIS_OK)
            return 1;
        freeReplyObject(rep);
    }
    printf("%ld\n", done);
    redisFree(c);
    return 0;
}

/* Runs AV (this program again) NPROC times at once, their stdout into one
 * pipe; returns the sum of the numbers they print, -1 if one failed. */
static long spawn_sum(char **av, int nproc)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    for (int p = 0; p < nproc; p++) {
        pid_t pid;
        if (posix_spawn(&pid, "/proc/self/exe", &fa, NULL, av, environ) != 0)
            return -1;
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    long total = 0, v;
    while (fscanf(in, "%ld", &v) == 1)
        total += v;
    int st, bad = 0;
    while (wait(&st) > 0)
        bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    return bad ? -1 : total;
}

int main(int argc, char **argv)
{
    if (argc == 8 && !strcmp(argv[1], "conn") && !strcmp(argv[7], "--child"))
        return conn_child(argv[2], atol(argv[4]), atoi(argv[5]), atoi(argv[6]));
    if (argc == 7 && !strcmp(argv[1], "conn")) {
        char *av[] = { argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], "--child", NULL };
        long total = spawn_sum(av, atoi(argv[3]));
        printf("%ld\n", total);
        return total < 0;
    }
    if (argc == 9 && !strcmp(argv[1], "rsconn") && !strcmp(argv[8], "--child"))
        return rsconn_child(argv[2], atol(argv[4]), atoi(argv[5]), atoi(argv[6]), argv[7]);
    if (argc == 8 && !strcmp(argv[1], "rsconn")) {
        char *av[] = { argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], "--child", NULL };
        long total = spawn_sum(av, atoi(argv[3]));
        printf("%ld\n", total);
        return total < 0;
    }
    if (argc == 6 && !strcmp(argv[5], "--child"))
        return child(argv[1], atof(argv[3]), atoi(argv[4]));
    if (argc != 5) {
        fprintf(stderr, "usage: pairs SOCK NPROC SECONDS LIMIT | pairs conn SOCK NPROC N LIMIT PORT"
                        " | pairs rsconn SOCK NPROC N LIMIT PORT SHA\n");
        return 2;
    }
    char *av[] = { argv[0], argv[1], argv[2], argv[3], argv[4], "--child", NULL };
    long total = spawn_sum(av, atoi(argv[2]));
    printf("%.0f\n", total < 0 ? 0 : total / atof(argv[3]));
    return total < 0;
}
