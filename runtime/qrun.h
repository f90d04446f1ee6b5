/* qrun.h -- the queue's runner: one thread of the shim's that polls many queued connects' waits on one sleep. Runtime-internal. */
#ifndef CCAP_QRUN_H
#define CCAP_QRUN_H
#include <stdbool.h>

/* A queued connect's wait needs a thread of the shim's for as long as it
 * waits (runtime/queued.h). A thread each costs a stack and a scheduler
 * entry per queued connect -- 10,000 of them in one event loop are 10,000
 * threads, and where threads are limited (RLIMIT_NPROC, a container's
 * pids.max) none can be had at all. The runner is one thread that serves
 * any number of waits: each wait's kicks (its waker's tokens, a cancel, a
 * reload's nudge) mark it due, its own times (its sleep's end, a look at
 * its descriptor) are kept in a min-heap, and the thread polls the due
 * ones one after another (runtime/waiting.h, ccap_rt_wait_poll), sleeping
 * in between until the earliest. Its Redis calls are those the waits would
 * make in threads of their own, made one at a time on the shared
 * connection, as they would be under its lock anyway. It starts on
 * demand and ends CCAP_QRUN_IDLE_S after its last wait. */

#define CCAP_QRUN_IDLE_S 10

/* One wait handed to the runner. WS and DONE are the caller's to set; the
 * rest is the runner's. */
struct ccap_qrun_item {
    struct ccap_wait *ws;
    /* Called in the runner's thread (no lock of its held) once WS ended,
     * with its result (1 granted, -errno); IT is the caller's again. */
    void (*done)(struct ccap_qrun_item *it, int rc);
    long long at;           /* monotonic ms of its next poll; 0 due now */
    unsigned long long seq; /* the order it was added in: first among equal ATs */
    int hidx;               /* its place in the heap; -1 while it is being polled */
    bool kicked;            /* kicked while being polled: polled again at once */
};

/* Starts the runner unless it runs, through the runtime's spawn hook (a
 * thread of the shim's). Returns true when it runs. Thread-safe; call it
 * while threads can still be had, so that it is there when none can. */
bool ccap_qrun_start(void);
/* Hands IT (WS and DONE set; WS in progress, from ccap_rt_wait_start) to
 * the runner, which polls it at once and then as it asks, and calls DONE.
 * A runner that ended meanwhile (idle) is started again. Returns false
 * (nothing changed) when no runner can run, or its heap cannot grow.
 * Thread-safe. */
bool ccap_qrun_add(struct ccap_qrun_item *it);
/* Waits the runner holds now, for tests and logs. Thread-safe. */
int ccap_qrun_count(void);
/* fork(): the child has no runner thread and none of its waits (the
 * queue's fork handler, runtime/queued.c). */
void ccap_qrun_fork_child(void);
#endif
