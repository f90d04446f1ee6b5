/* resolve.c -- the interposed resolver calls: pass through, then note which name gave which addresses. */
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include "reload.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))

/* The next definitions (libc's, or another preloaded wrapper's that comes
 * after this library in LD_PRELOAD), looked up on first use. A racing
 * second lookup stores the same pointer. */
static void *next_sym(void **cache, const char *name)
{
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f;
}
#define NEXT(type, name) ({ static void *c_; (type)next_sym(&c_, #name); })

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
typedef struct hostent *(*ghbn_fn)(const char *);
typedef struct hostent *(*ghbn2_fn)(const char *, int);
typedef int (*ghbn_r_fn)(const char *, struct hostent *, char *, size_t, struct hostent **, int *);
typedef int (*ghbn2_r_fn)(const char *, int, struct hostent *, char *, size_t, struct hostent **, int *);

/* After a successful lookup by the program (never the shim's own: the
 * guard is set then): record NAME's addresses, errno and h_errno kept. */
#define NOTE(call)                                  \
    do {                                            \
        int e_ = errno, he_ = h_errno;              \
        ccap_guard++;                               \
        call;                                       \
        ccap_guard--;                               \
        h_errno = he_;                              \
        errno = e_;                                 \
    } while (0)

EXPORT int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res)
{
    gai_fn next = NEXT(gai_fn, getaddrinfo);
    if (!next) { errno = ENOSYS; return EAI_SYSTEM; }
    int rc = next(node, service, hints, res);
    if (rc == 0 && !ccap_guard && node && res)
        NOTE(ccap_live_resolved_addrinfo(node, hints ? hints->ai_flags : 0, *res));
    return rc;
}

EXPORT struct hostent *gethostbyname(const char *name)
{
    ghbn_fn next = NEXT(ghbn_fn, gethostbyname);
    if (!next) { h_errno = NO_RECOVERY; return NULL; }
    struct hostent *he = next(name);
    if (he && !ccap_guard) NOTE(ccap_live_resolved_hostent(name, he));
    return he;
}

EXPORT struct hostent *gethostbyname2(const char *name, int af)
{
    ghbn2_fn next = NEXT(ghbn2_fn, gethostbyname2);
    if (!next) { h_errno = NO_RECOVERY; return NULL; }
    struct hostent *he = next(name, af);
    if (he && !ccap_guard) NOTE(ccap_live_resolved_hostent(name, he));
    return he;
}

EXPORT int gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t len, struct hostent **result,
                           int *h_errnop)
{
    ghbn_r_fn next = NEXT(ghbn_r_fn, gethostbyname_r);
    if (!next) { if (result) *result = NULL; if (h_errnop) *h_errnop = NO_RECOVERY; return ENOSYS; }
    int rc = next(name, ret, buf, len, result, h_errnop);
    if (rc == 0 && result && *result && !ccap_guard) NOTE(ccap_live_resolved_hostent(name, *result));
    return rc;
}

EXPORT int gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t len,
                            struct hostent **result, int *h_errnop)
{
    ghbn2_r_fn next = NEXT(ghbn2_r_fn, gethostbyname2_r);
    if (!next) { if (result) *result = NULL; if (h_errnop) *h_errnop = NO_RECOVERY; return ENOSYS; }
    int rc = next(name, af, ret, buf, len, result, h_errnop);
    if (rc == 0 && result && *result && !ccap_guard) NOTE(ccap_live_resolved_hostent(name, *result));
    return rc;
}
