/* redis_block.c -- a blocking command (BLPOP) on a waiter's own connection, with a deadline of our own. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "redis_int.h"
#include "tls.h"
#include "wait.h"

/* The node serving KEY, connected: the shared client's own choice
 * (ccap_redis_pick: the single server, the Sentinel's master, or the
 * cluster node of KEY's slot). Returns 0 and *OUT, or -errno. */
static int node_for(struct ccap_redis *r, const char *key, struct ccap_node **out)
{
    int fresh, slot = r->mode == CCAP_MODE_CLUSTER ? ccap_redis_key_slot(key, strlen(key)) : -1;
    int rc = ccap_redis_pick(r, slot, out, &fresh);

    return rc < 0 ? rc : 0;
}

static bool still_ours(const struct ccap_node *n)
{
    struct stat st;

    return n && n->ctx && n->ctx->fd >= 0 && n->forks == ccap_redis_forks() && fstat(n->ctx->fd, &st) == 0 &&
           st.st_dev == n->dev && st.st_ino == n->ino;
}

int ccap_redis_send(struct ccap_redis *r, int argc, const char *const *argv)
{
    struct ccap_node *n;
    int rc;

    r->err[0] = '\0';
    if (argc < 2 || !argv)
        return -EINVAL;
    rc = node_for(r, argv[1], &n);
    if (rc < 0)
        return rc;
    r->last = n;
    return ccap_node_send(r, n, argc, argv, ccap_redis_now_ms() + r->conf.command_timeout_ms);
}

/* A blocked read looks this often whether its number is still its socket:
 * a program that closed it, or put another file on it (dup2), leaves the
 * poll sleeping on a socket nothing refers to, for the rest of a block. */
#define RECV_LOOK_MS 1000

int ccap_redis_recv(struct ccap_redis *r, int timeout_ms, redisReply **reply)
{
    long long deadline = ccap_redis_now_ms() + (timeout_ms > 0 ? timeout_ms : 0), slice;
    struct ccap_node *n = r->last;
    int rc;

    *reply = NULL;
    do {
        if (!still_ours(n)) {
            ccap_redis_set_err(r, "redis: the connection of the pending reply is gone");
            if (n)
                ccap_node_forget(n);
            return -EPIPE;
        }
        slice = ccap_redis_now_ms() + RECV_LOOK_MS;
        rc = ccap_node_read(r, n, "reply", slice < deadline ? slice : deadline, reply);
    } while (rc == -ETIMEDOUT && slice < deadline); /* (a timed-out read keeps what it had read) */
    return rc == -ETIMEDOUT ? -EAGAIN : rc;
}

void ccap_redis_close(struct ccap_redis *r)
{
    if (r && r->last)
        ccap_node_drop(r->last);
}

/* The descriptor flags ccap_redis_await cleared, put back (also when a
 * cancellation unwinds its recv). */
struct await_flags {
    int fd, fl;
};
static void await_restore(void *arg)
{
    const struct await_flags *a = arg;

    if (a->fl & O_NONBLOCK)
        fcntl(a->fd, F_SETFL, a->fl);
}

int ccap_redis_await(struct ccap_redis *r)
{
    struct ccap_node *n = r->last;
    struct await_flags a;
    ssize_t k;
    char c;
    int e;

    if (!still_ours(n))
        return -EPIPE;
    if ((n->tls && (ccap_tls_pending(n->tls) || n->want != POLLIN)) || n->ctx->reader->pos < n->ctx->reader->len)
        return 1; /* bytes read already, or TLS mid-renegotiation: ccap_redis_recv goes on */
    a.fd = n->ctx->fd;
    if ((a.fl = fcntl(a.fd, F_GETFL)) < 0)
        return -errno;
    if ((a.fl & O_NONBLOCK) && fcntl(a.fd, F_SETFL, a.fl & ~O_NONBLOCK) != 0)
        return -errno;
    CCAP_CLEANUP_PUSH(await_restore, &a);
    k = recv(a.fd, &c, 1, MSG_PEEK); /* blocking: restarted or EINTR as connect() is */
    e = errno;
    CCAP_CLEANUP_POP(1);
    return k < 0 && e == EINTR ? -EINTR : 1; /* EOF and errors too: ccap_redis_recv reports them */
}

void ccap_redis_interrupt(struct ccap_redis *r)
{
    struct ccap_node *n = r ? r->last : NULL;

    if (still_ours(n))
        shutdown(n->ctx->fd, SHUT_RDWR);
}
