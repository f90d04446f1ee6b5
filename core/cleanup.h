/* cleanup.h -- cleanup handlers that run when a thread is cancelled and when a signal handler's longjmp leaves their frames. */
#ifndef CCAP_CLEANUP_H
#define CCAP_CLEANUP_H

#include <pthread.h>

/* glibc's handlers of the first kind (_pthread_cleanup_push, exported, no
 * longer declared): cancellation's unwinding runs them, as it runs
 * pthread_cleanup_push's, and so does longjmp/siglongjmp (and
 * __longjmp_chk) for the frames it leaves (glibc's _longjmp_unwind). A
 * handler that siglongjmps out of a sleep of the shim's -- the alarm()
 * idiom around a blocking connect -- must leave no wait behind: those of
 * pthread_cleanup_push are skipped by a longjmp. */
extern void _pthread_cleanup_push(struct _pthread_cleanup_buffer *buf, void (*fn)(void *), void *arg);
extern void _pthread_cleanup_pop(struct _pthread_cleanup_buffer *buf, int execute);

/* FN(ARG) runs if the thread is cancelled, or a longjmp leaves this frame,
 * before CCAP_CLEANUP_POP; that runs it too when EXECUTE. Lexically paired,
 * as pthread_cleanup_push and _pop; async-signal context: FN runs in the
 * handler that jumps, before the jump. */
#define CCAP_CLEANUP_PUSH(fn, arg)                                                                                  \
    {                                                                                                               \
        struct _pthread_cleanup_buffer ccap_cbuf_;                                                                  \
        _pthread_cleanup_push(&ccap_cbuf_, (fn), (arg));

#define CCAP_CLEANUP_POP(execute)                                                                                   \
    _pthread_cleanup_pop(&ccap_cbuf_, (execute));                                                                   \
    }

#endif
