/* resolve.c -- the interposed resolver calls: pass through, then note which name gave which addresses. */
#include <errno.h>
#include <netdb.h>
#include "reload.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))

/* After a successful lookup by the program (never the shim's own: the
 * guard is set then): record NAME's addresses, errno and h_errno kept. */
#define NOTE(call)                                                                                                  \
    do {                                                                                                            \
        int e_ = errno, he_ = h_errno;                                                                              \
        GUARDED(call);                                                                                              \
        h_errno = he_;                                                                                              \
        errno = e_;                                                                                                 \
    } while (0)

EXPORT int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
    __typeof__(ccap_real.getaddrinfo) next = CCAP_REAL(getaddrinfo);
    if (!next) {
        errno = ENOSYS;
        return EAI_SYSTEM;
    }
    int rc = next(node, service, hints, res);
    if (rc == 0 && !ccap_guard && node && res)
        NOTE(ccap_live_resolved_addrinfo(node, hints ? hints->ai_flags : 0, *res));
    return rc;
}

EXPORT struct hostent *gethostbyname(const char *name)
{
    __typeof__(ccap_real.gethostbyname) next = CCAP_REAL(gethostbyname);
    if (!next) {
        h_errno = NO_RECOVERY;
        return NULL;
    }
    struct hostent *he = next(name);
    if (he && !ccap_guard)
        NOTE(ccap_live_resolved_hostent(name, he));
    return he;
}

EXPORT struct hostent *gethostbyname2(const char *name, int af)
{
    __typeof__(ccap_real.gethostbyname2) next = CCAP_REAL(gethostbyname2);
    if (!next) {
        h_errno = NO_RECOVERY;
        return NULL;
    }
    struct hostent *he = next(name, af);
    if (he && !ccap_guard)
        NOTE(ccap_live_resolved_hostent(name, he));
    return he;
}

EXPORT int gethostbyname_r(const char *name, struct hostent *ret, char *buf, size_t len, struct hostent **result,
                           int *h_errnop)
{
    __typeof__(ccap_real.gethostbyname_r) next = CCAP_REAL(gethostbyname_r);
    if (!next) {
        if (result)
            *result = NULL;
        if (h_errnop)
            *h_errnop = NO_RECOVERY;
        return ENOSYS;
    }
    int rc = next(name, ret, buf, len, result, h_errnop);
    if (rc == 0 && result && *result && !ccap_guard)
        NOTE(ccap_live_resolved_hostent(name, *result));
    return rc;
}

EXPORT int gethostbyname2_r(const char *name, int af, struct hostent *ret, char *buf, size_t len,
                            struct hostent **result, int *h_errnop)
{
    __typeof__(ccap_real.gethostbyname2_r) next = CCAP_REAL(gethostbyname2_r);
    if (!next) {
        if (result)
            *result = NULL;
        if (h_errnop)
            *h_errnop = NO_RECOVERY;
        return ENOSYS;
    }
    int rc = next(name, af, ret, buf, len, result, h_errnop);
    if (rc == 0 && result && *result && !ccap_guard)
        NOTE(ccap_live_resolved_hostent(name, *result));
    return rc;
}
