/* real.c -- the next definition of every symbol the shim interposes (dlsym(RTLD_NEXT)), in one table. */
#include <dlfcn.h>
#include "shim.h"

struct ccap_real ccap_real;

/* No lock: a racing second resolution stores the same pointers, and a lock
 * here could be re-entered by an allocator that dlsym calls. Each entry is
 * stored with a relaxed atomic, so a reader sees NULL or the pointer. */
void ccap_real_resolve(void)
{
#define R(f)                                                                                                        \
    if (!CCAP_REAL_LOAD(f))                                                                                         \
    __atomic_store_n((void **)&ccap_real.f, dlsym(RTLD_NEXT, #f), __ATOMIC_RELAXED)
    R(connect);
    R(close);
    R(dup);
    R(dup2);
    R(dup3);
    R(fcntl);
    R(fcntl64);
    R(close_range);
    R(closefrom);
    R(fclose);
    R(sendto);
    R(sendmsg);
    R(sendmmsg);
    R(execve);
    R(execvpe);
    R(fexecve);
    R(execveat);
    R(getaddrinfo);
    R(gethostbyname);
    R(gethostbyname2);
    R(gethostbyname_r);
    R(gethostbyname2_r);
    R(__libc_start_main);
    R(setsockopt);
    R(getsockopt);
    R(getsockname);
    R(shutdown);
    R(epoll_ctl);
    R(epoll_create);
    R(epoll_create1);
    R(poll);
    R(ppoll);
    R(__poll_chk);
    R(__ppoll_chk);
    R(select);
    R(pselect);
    R(syscall);
    R(dlopen);
    R(dlmopen);
#undef R
}
