/* acquire.c -- a connect's permit: classify the destination, take a permit for a matched TCP connect, undo a failed one. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include "clock.h"
#include "log.h"
#include "queued.h"
#include "reload.h"
#include "rt_int.h"
#include "waiting.h"

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

/* One getsockopt: the protocol alone tells TCP (and MPTCP) from UDP, SCTP
 * and raw sockets. A kernel without SO_PROTOCOL (< 2.6.32): the type. */
static bool is_tcp(int fd)
{
    int v = 0;
    socklen_t l = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) == 0)
        return v == IPPROTO_TCP || v == IPPROTO_MPTCP;
    l = sizeof(v);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) == 0 && v == SOCK_STREAM;
}

/* A new permit of semaphore S (index SEM) for socket FD connecting to SA,
 * named and counted, not yet granted; NULL (pass the connect through) when
 * out of memory or FD cannot be identified. */
static struct ccap_permit *new_permit(const struct ccap_sem_conf *s, size_t sem, int fd, const struct sockaddr *sa)
{
    struct stat st;
    struct ccap_permit *p = ccap_permit_new();
    if (!p || fstat(fd, &st) != 0) {
        free(p);
        return NULL;
    }
    p->dev = st.st_dev;
    p->ino = st.st_ino;
    p->lease_ms = s->lease_ms;
    snprintf(p->sem, sizeof(p->sem), "%s", s->name);
    ccap_rt_make_holder(p, fd, sa);
    p->held = &ccap_rt.held[sem];
    return p;
}

int ccap_rt_permit_attach(int fd, struct ccap_permit *p)
{
    /* read before attaching: from then on the heartbeat writes the flags
     * (under the table lock) */
    bool local = p->flags & CCAP_PERMIT_LOCAL;
    int lease_ms = p->lease_ms;
    int rc = ccap_ptab_attach(fd, p);
    if (rc < 0) {
        if (rc == -EBADF)
            ccap_log(CCAP_LOG_WARN, "descriptor %d is beyond the permit table: not counted", fd);
        else
            ccap_log(CCAP_LOG_WARN, "descriptor %d: %s: its permit goes back, the connect is not counted", fd,
                     strerror(-rc));
        return rc;
    }
    if (ccap_rt.hooks.permit_taken && !local)
        ccap_rt.hooks.permit_taken(lease_ms);
    else
        ccap_rt_kick();
    return 0;
}

/* How a connect on FD waits (waiting.h), and whether it may queue. */
static int wait_mode(const struct ccap_config *cfg, int fd, bool may_queue, bool *queue)
{
    int fl = fcntl(fd, F_GETFL);

    *queue = false;
    if (fl < 0 || !(fl & O_NONBLOCK))
        return CCAP_WAIT_BLOCK;
    switch (cfg->nonblocking) {
    case CCAP_NONBLOCK_FAIL: return CCAP_WAIT_AT_ONCE;
    case CCAP_NONBLOCK_QUEUE: *queue = may_queue; return may_queue ? CCAP_WAIT_BLOCK : CCAP_WAIT_NONBLOCK;
    default: return CCAP_WAIT_NONBLOCK;
    }
}

#define QUEUED 2      /* the connect goes on in the queue: EINPROGRESS */
#define INTERRUPTED 3 /* a blocking connect interrupted by a signal goes on in the queue: EINTR */

/* A non-blocking connect that is to queue: one attempt here; with no permit
 * free its wait goes on in the queue (runtime/queued.c). When the queue
 * cannot take it (no descriptor or thread to be had) it fails at once with
 * CFG's nonblocking_errno, its ticket given back: a non-blocking connect
 * never waits in the program's thread (an event loop holding the permits
 * would wait on itself). Returns as ccap_rt_wait_for_permit, or QUEUED. */
static int queue_or_wait(const struct ccap_config *cfg, const struct ccap_sem_conf *s, size_t sem,
                         struct ccap_permit *p, int fd, const struct sockaddr *sa, socklen_t len)
{
    struct ccap_wait *ws;
    int rc = ccap_rt_wait_start(s, sem, p, sa, len, &ws);

    if (rc != 0)
        return rc;
    rc = ccap_q_enqueue(fd, sa, len, p, ws, s->wait_timeout_ms + CCAP_Q_SPARE_MS);
    if (rc == 0)
        return QUEUED;
    ccap_log(CCAP_LOG_WARN,
             "connect of descriptor %d to a destination of %s cannot be queued (%s): it fails at once "
             "with %s",
             fd, s->name, strerror(-rc), ccap_errno_name(cfg->nonblocking_errno));
    ccap_rt_wait_cancel(ccap_rt_wait_id(ws));
    ccap_rt_wait_resume(ws, CCAP_WAIT_PROGRAM); /* ends at once, leaving the queue */
    return -cfg->nonblocking_errno;
}

/* FD's SO_SNDTIMEO in ms (rounded up), 0 when none: how long a real
 * blocking connect of it waits before it fails with EINPROGRESS. */
static long long sndtimeo_ms(int fd)
{
    struct timeval tv = { 0, 0 };
    socklen_t l = sizeof tv;

    if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) != 0 || tv.tv_sec < 0)
        return 0;
    return tv.tv_sec * 1000LL + (tv.tv_usec + 999) / 1000;
}

/* A blocking connect (or a TCP Fast Open send, !MAY_QUEUE) waits in this
 * thread, its sleeps the program's: a cancel ends the thread there, its
 * ticket released. A signal handler installed without SA_RESTART makes a real
 * blocking connect fail with EINTR while the connection goes on
 * asynchronously; here the wait goes on the same way, in the queue, with
 * its ticket and place (the descriptor then is a queued connect: poll tells
 * when it connects, connect() again waits for it as a real one does).
 * A real blocking connect whose SO_SNDTIMEO passes fails with EINPROGRESS
 * and goes on the same way: so does this wait then (QUEUED).
 * Returns as ccap_rt_wait_for_permit, or INTERRUPTED or QUEUED; -EINTR, the
 * ticket released and nothing sent, when an interrupted wait cannot go on
 * that way (a Fast Open send carries data, or the queue cannot take it). */
static int wait_here(const struct ccap_sem_conf *s, size_t sem, struct ccap_permit *p, int fd,
                     const struct sockaddr *sa, socklen_t len, bool may_queue)
{
    struct ccap_wait *ws;
    long long sndtimeo = may_queue ? sndtimeo_ms(fd) : 0;
    int rc = ccap_rt_wait_start(s, sem, p, sa, len, &ws);

    if (rc != 0)
        return rc;
    if (sndtimeo > 0)
        ccap_rt_wait_yield_at(ws, ccap_now_ms() + sndtimeo);
    for (;;) {
        rc = ccap_rt_wait_resume(ws, CCAP_WAIT_PROGRAM | CCAP_WAIT_INTR);
        if (rc != CCAP_WAIT_INTERRUPTED)
            return rc;
        bool yielded = ccap_rt_wait_yielded(ws);
        rc = may_queue ? ccap_q_enqueue(fd, sa, len, p, ws, s->wait_timeout_ms + CCAP_Q_SPARE_MS) : -EMSGSIZE;
        if (rc == 0)
            return yielded ? QUEUED : INTERRUPTED;
        if (!yielded)
            break;
        ccap_log(CCAP_LOG_WARN,
                 "connect of descriptor %d: SO_SNDTIMEO passed, cannot go on queued (%s): it waits on", fd,
                 strerror(-rc));
        ccap_rt_wait_yield_at(ws, 0); /* as before SO_SNDTIMEO was looked at */
    }
    if (may_queue)
        ccap_log(CCAP_LOG_WARN,
                 "connect of descriptor %d interrupted, cannot go on queued (%s): it fails with EINTR", fd,
                 strerror(-rc));
    ccap_rt_wait_abandon(ws);
    return -EINTR;
}

int ccap_rt_connect_pre(int fd, const struct sockaddr *sa, socklen_t len, bool may_queue, struct ccap_ticket *t)
{
    t->permit = NULL;
    if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
        return 0;
    const struct ccap_config *cfg = ccap_rt_config();
    if (!cfg)
        return 0;
    if (ccap_rt.hooks.need_watch)
        ccap_rt.hooks.need_watch();
    const struct ccap_rule *rule = ccap_live_match(cfg, sa, len);
    if (!rule || !is_tcp(fd))
        return 0;
    if (ccap_rt.hooks.hold_signals)
        ccap_rt.hooks.hold_signals();

    struct ccap_permit *orphan, *held = ccap_ptab_get(fd, &orphan);
    ccap_rt_release(orphan);
    if (held)
        return 0; /* connect again on the same socket */

    const struct ccap_sem_conf *s = &cfg->sems[rule->sem];
    struct ccap_permit *p = new_permit(s, rule->sem, fd, sa);
    if (!p)
        return 0;
    bool queue;
    int mode = wait_mode(cfg, fd, may_queue, &queue), rc;
    if (queue)
        rc = queue_or_wait(cfg, s, rule->sem, p, fd, sa, len);
    else if (mode == CCAP_WAIT_BLOCK)
        rc = wait_here(s, rule->sem, p, fd, sa, len, may_queue);
    else
        rc = ccap_rt_wait_for_permit(s, rule->sem, p, sa, len, mode, CCAP_WAIT_PROGRAM);
    if (rc == QUEUED)
        return CCAP_RT_QUEUED;
    if (rc == INTERRUPTED)
        return CCAP_RT_INTERRUPTED;
    if (rc < 0) {
        free(p);
        return rc;
    }
    if (ccap_rt_permit_attach(fd, p) < 0) {
        ccap_rt_release(p);
        return 0;
    }
    t->permit = p;
    return 0;
}

void ccap_rt_connect_post(int fd, struct ccap_ticket *t, int rc, int err)
{
    if (!t->permit || rc == 0 || err == EINPROGRESS || err == EINTR)
        return;
    ccap_rt_release(ccap_ptab_detach(fd));
}
