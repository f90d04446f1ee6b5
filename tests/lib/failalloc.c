/* failalloc.c -- a preloaded allocator that fails on purpose, for the tests (tests/integration/lifecycle_nomem.sh).
 *
 * malloc, calloc, realloc, reallocarray, posix_memalign, aligned_alloc,
 * memalign, valloc and pvalloc pass to the next definition (libc's, or a
 * sanitizer's: put this library first in LD_PRELOAD), except that once the
 * program armed it with failalloc_arm(N, ONCE) the Nth of those calls from
 * then on fails with ENOMEM (ONCE), or every call from the Nth on fails
 * (!ONCE); failalloc_arm(0, ...) disarms it. failalloc_count() tells how
 * many calls were made since arming. A program finds both with
 * dlsym(RTLD_DEFAULT, ...), so it also runs without this library. */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static atomic_long armed_at; /* 0: off; N: the Nth call counts */
static atomic_bool once;
static atomic_long calls; /* since arming */

EXPORT void failalloc_arm(long n, int only_once)
{
    atomic_store(&armed_at, 0);
    atomic_store(&calls, 0);
    atomic_store(&once, only_once != 0);
    atomic_store(&armed_at, n);
}

EXPORT long failalloc_count(void)
{
    return atomic_load(&calls);
}

/* Whether this call fails. */
static bool fail_now(void)
{
    long at = atomic_load_explicit(&armed_at, memory_order_relaxed);
    if (at <= 0)
        return false;
    long c = atomic_fetch_add(&calls, 1) + 1;
    if (atomic_load_explicit(&once, memory_order_relaxed) ? c != at : c < at)
        return false;
    errno = ENOMEM;
    return true;
}

/* dlsym may allocate before the next definitions are known: those few
 * early calls are served from this buffer (never freed). */
static _Alignas(16) char early[64 * 1024];
static atomic_size_t early_used;

static void *early_alloc(size_t n)
{
    size_t want = (n + 15) & ~(size_t)15, at = atomic_fetch_add(&early_used, want);
    return at + want <= sizeof early ? early + at : NULL;
}

static bool is_early(const void *p)
{
    return (const char *)p >= early && (const char *)p < early + sizeof early;
}

static struct {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
} next;
static atomic_int resolving; /* 0 not yet, 1 under way, 2 done */

static void resolve(void)
{
    int expect = 0;
    if (!atomic_compare_exchange_strong(&resolving, &expect, 1))
        return;
    next.malloc = dlsym(RTLD_NEXT, "malloc");
    next.calloc = dlsym(RTLD_NEXT, "calloc");
    next.realloc = dlsym(RTLD_NEXT, "realloc");
    next.free = dlsym(RTLD_NEXT, "free");
    next.posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    next.aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    next.memalign = dlsym(RTLD_NEXT, "memalign");
    next.valloc = dlsym(RTLD_NEXT, "valloc");
    next.pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    atomic_store(&resolving, 2);
}

static bool ready(void)
{
    if (atomic_load_explicit(&resolving, memory_order_acquire) != 2)
        resolve();
    return atomic_load_explicit(&resolving, memory_order_acquire) == 2;
}

EXPORT void *malloc(size_t n)
{
    if (!ready())
        return early_alloc(n);
    return fail_now() ? NULL : next.malloc(n);
}

EXPORT void *calloc(size_t k, size_t n)
{
    if (!ready()) {
        if (n && k > SIZE_MAX / n)
            return NULL;
        return early_alloc(k * n); /* static: zeroed */
    }
    return fail_now() ? NULL : next.calloc(k, n);
}

EXPORT void *realloc(void *p, size_t n)
{
    if (is_early(p)) { /* rare: copy out of the early buffer (its block's size is not kept) */
        size_t room = (size_t)(early + sizeof early - (char *)p);
        void *q = malloc(n);
        if (q)
            memcpy(q, p, n < room ? n : room);
        return q;
    }
    if (!ready())
        return early_alloc(n);
    return fail_now() ? NULL : next.realloc(p, n);
}

EXPORT void *reallocarray(void *p, size_t k, size_t n)
{
    if (n && k > SIZE_MAX / n) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, k * n);
}

EXPORT void free(void *p)
{
    if (!p || is_early(p))
        return;
    if (ready())
        next.free(p);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (!ready() || fail_now())
        return ENOMEM;
    return next.posix_memalign(out, align, n);
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    return !ready() || fail_now() ? NULL : next.aligned_alloc(align, n);
}

EXPORT void *memalign(size_t align, size_t n)
{
    return !ready() || fail_now() ? NULL : next.memalign(align, n);
}

EXPORT void *valloc(size_t n)
{
    return !ready() || fail_now() ? NULL : next.valloc(n);
}

EXPORT void *pvalloc(size_t n)
{
    return !ready() || fail_now() ? NULL : next.pvalloc(n);
}
