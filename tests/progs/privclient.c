/* privclient.c -- THREADS concurrent connect/request/read/close, after dropping privileges or with the
 * descriptor table full at the first connect or at load: for the tests of when the shim reads its configuration. */
/* Usage: privclient [--drop UID:GID] [--fill connect|load] [--first PORT] [--nofile N] PORT THREADS
 *   --drop UID:GID  setgroups(0), setgid, setuid in main, before any connect (a daemon's worker)
 *   --fill connect  in main, RLIMIT_NOFILE lowered to N (default 32) and the table filled with
 *                   /dev/null up to it: the first connect (to 127.0.0.1:PORT, or --first PORT) runs
 *                   with one descriptor free, its socket's; then the fillers are closed
 *   --fill load     the same, but done before the shared libraries' constructors run (a
 *                   .preinit_array function of this program), so the shim's constructor finds the
 *                   table full; main frees one for the first connect's socket, then the rest
 * Prints "first ok" or "first ENAME" for the first connect (made, and closed at once, only with
 * --fill or --first), then one "fail ENAME" line per failed thread connect and "ok N fail M".
 * Each thread connects to 127.0.0.1:PORT, sends "GET / HTTP/1.0", reads the whole answer, closes.
 * Exit 0 when every thread's connect got a 200. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FILL 4096

static int fillers[MAX_FILL], n_fill;
static int port, ok, bad;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static const char *ename(int e)
{
    switch (e) {
    case 0: return "ok";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EMFILE: return "EMFILE";
    case ENOMEM: return "ENOMEM";
    case EPROTO: return "EPROTO";
    default: return strerror(e);
    }
}

/* Lowers RLIMIT_NOFILE to LIMIT and opens /dev/null until EMFILE. */
static void fill(long limit)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = (rlim_t)limit;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int fd;
    while (n_fill < MAX_FILL && (fd = open("/dev/null", O_RDONLY)) >= 0)
        fillers[n_fill++] = fd;
}

static void unfill(int keep)
{
    while (n_fill > keep)
        close(fillers[--n_fill]);
}

static long nofile_arg(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--nofile"))
            return atol(argv[i + 1]);
    return 32;
}

/* Runs before every shared library's constructor (the shim's too). */
static void preinit(int argc, char **argv, char **envp)
{
    (void)envp;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--fill") && !strcmp(argv[i + 1], "load"))
            fill(nofile_arg(argc, argv));
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_fn)(int, char **, char **) = preinit;

/* One connect to 127.0.0.1:P; with REQUEST, a GET and its whole answer. Returns 0 or an errno. */
static int one(int p, int request)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)p) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return errno;
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    if (!rc && request) {
        const char req[] = "GET / HTTP/1.0\r\n\r\n";
        char buf[256];
        ssize_t got = 0, r;
        if (write(fd, req, sizeof req - 1) < 0)
            rc = errno;
        while (!rc && got < (ssize_t)sizeof buf - 1 && (r = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
            got += r;
        buf[got] = '\0';
        if (!rc && strncmp(buf, "HTTP/1.0 200", 12) != 0)
            rc = EPROTO;
    }
    close(fd);
    return rc;
}

static void *worker(void *arg)
{
    (void)arg;
    int rc = one(port, 1);
    pthread_mutex_lock(&mu);
    if (rc) {
        bad++;
        printf("fail %s\n", ename(rc));
    } else {
        ok++;
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static int drop(const char *spec)
{
    unsigned uid, gid;
    if (sscanf(spec, "%u:%u", &uid, &gid) != 2)
        return -1;
    if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
        perror("privclient: dropping privileges");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = NULL;
    int first = 0, i = 1;
    for (; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (!strcmp(argv[i], "--drop") && drop(argv[i + 1]) < 0)
            return 2;
        if (!strcmp(argv[i], "--fill"))
            mode = argv[i + 1];
        if (!strcmp(argv[i], "--first"))
            first = atoi(argv[i + 1]);
    }
    if (argc - i != 2) {
        fprintf(stderr, "usage: privclient [--drop UID:GID] [--fill connect|load] [--first PORT] [--nofile N] "
                        "PORT THREADS\n");
        return 2;
    }
    port = atoi(argv[i]);
    int threads = atoi(argv[i + 1]);
    if (threads < 1 || threads > 256)
        return 2;
    if (mode && !strcmp(mode, "connect"))
        fill(nofile_arg(argc, argv));
    if (mode && n_fill == 0) {
        fprintf(stderr, "privclient: could not fill the descriptor table\n");
        return 2;
    }
    if (mode || first) {
        unfill(n_fill ? n_fill - 1 : 0); /* one descriptor free: the first connect's socket */
        printf("first %s\n", ename(one(first ? first : port, 0)));
        fflush(stdout);
    }
    unfill(0);
    pthread_t t[256];
    for (int k = 0; k < threads; k++)
        pthread_create(&t[k], NULL, worker, NULL);
    for (int k = 0; k < threads; k++)
        pthread_join(t[k], NULL);
    printf("ok %d fail %d\n", ok, bad);
    return bad ? 1 : 0;
}
