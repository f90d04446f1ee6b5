/* ident.c -- this process's holder ids: host, nonce and sequence number, put in core/holder.h's format. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "clock.h"
#include "holder.h"
#include "rt_int.h"

static struct {
    char host[64];
    unsigned nonce; /* one per process image; 0: not chosen yet */
    atomic_ulong seq;
} ident;

void ccap_rt_ident_init(void)
{
    if (gethostname(ident.host, sizeof(ident.host) - 1) != 0)
        strcpy(ident.host, "unknown");
}

void ccap_rt_ident_fork_child(void)
{
    ident.nonce = 0;
}

/* Per thread, seeded again in a fork child: prefork workers forked from one
 * thread must not draw the same jitter. */
unsigned ccap_rt_rand32(void)
{
    static _Thread_local unsigned s;
    static _Thread_local int seeded_pid;
    int pid = (int)getpid();
    if (!s || seeded_pid != pid) {
        s = (unsigned)ccap_now_ms() ^ (unsigned)pid ^ (unsigned)(uintptr_t)&s;
        s = s ? s : 1;
        seeded_pid = pid;
    }
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    return s;
}

/* The image's nonce, chosen by the first connect of any thread. */
static unsigned nonce(void)
{
    unsigned nonce = __atomic_load_n(&ident.nonce, __ATOMIC_RELAXED);
    if (!nonce) {
        unsigned n = 0, none = 0;
        if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != sizeof(n))
            n = ccap_rt_rand32();
        n = n ? n : 1;
        nonce = __atomic_compare_exchange_n(&ident.nonce, &none, n, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)
                    ? n
                    : none;
    }
    return nonce;
}

void ccap_rt_make_holder(struct ccap_permit *p, int fd, const struct sockaddr *sa)
{
    ccap_holder_format(p->holder, sizeof(p->holder), ident.host, ccap_rt_self_pid(), fd, sa, nonce(),
                       atomic_fetch_add(&ident.seq, 1));
}

void ccap_rt_next_holder(struct ccap_permit *p)
{
    ccap_holder_set_seq(p->holder, sizeof(p->holder), atomic_fetch_add(&ident.seq, 1));
}
