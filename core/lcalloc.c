/* lcalloc.c -- the shim's libconfig allocates through here: every block listed in the parse's guard, a failure longjmps out of the parse. */
#include "lcalloc.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The references of libconfig-shim.a, renamed by the Makefile. */
void *ccap_lc_malloc(size_t n);
void *ccap_lc_calloc(size_t k, size_t n);
void *ccap_lc_realloc(void *p, size_t n);
void ccap_lc_free(void *p);
char *ccap_lc_strdup(const char *s);
locale_t ccap_lc_newlocale(int mask, const char *name, locale_t base);
locale_t ccap_lc_uselocale(locale_t loc);
void ccap_lc_freelocale(locale_t loc);
void ccap_lc_exit(int status) __attribute__((noreturn));

_Static_assert(sizeof(struct ccap_lc_block) == 16, "a block's header keeps malloc's alignment");

static __thread struct ccap_lc_guard *cur;

void ccap_lc_guard_begin(struct ccap_lc_guard *g)
{
    g->armed = true;
    g->why = 0;
    g->head.prev = g->head.next = &g->head;
    g->have_prev = false;
    g->own = (locale_t)0;
    cur = g;
}

void ccap_lc_guard_disarm(struct ccap_lc_guard *g)
{
    g->armed = false;
}

static void unlink_block(struct ccap_lc_block *b)
{
    b->prev->next = b->next;
    b->next->prev = b->prev;
    b->prev = b->next = b;
}

void ccap_lc_guard_end(struct ccap_lc_guard *g)
{
    while (g->head.next != &g->head) {
        struct ccap_lc_block *b = g->head.next;
        unlink_block(b);
        free(b);
    }
    if (g->have_prev)
        uselocale(g->prev);
    if (g->own)
        freelocale(g->own);
    g->have_prev = false;
    g->own = (locale_t)0;
    g->armed = false;
    if (cur == g)
        cur = NULL;
}

/* An allocation failed (or the scanner gave up: WHY -EIO): out of the parse
 * when the guard is armed; else NULL with errno ENOMEM for libconfig. */
static void *failed(int why)
{
    if (cur && cur->armed) {
        cur->why = why;
        cur->armed = false;
        longjmp(cur->jb, 1);
    }
    errno = ENOMEM;
    return NULL;
}

/* B (N payload bytes after it) into the guard's list, or alone. */
static void *listed(struct ccap_lc_block *b)
{
    if (cur) {
        b->next = cur->head.next;
        b->prev = &cur->head;
        b->next->prev = b;
        cur->head.next = b;
    } else {
        b->prev = b->next = b;
    }
    return b + 1;
}

void *ccap_lc_malloc(size_t n)
{
    struct ccap_lc_block *b = n <= SIZE_MAX - sizeof *b ? malloc(sizeof *b + n) : NULL;
    return b ? listed(b) : failed(-ENOMEM);
}

void *ccap_lc_calloc(size_t k, size_t n)
{
    if (n && k > (SIZE_MAX - sizeof(struct ccap_lc_block)) / n)
        return failed(-ENOMEM);
    struct ccap_lc_block *b = calloc(1, sizeof *b + k * n);
    return b ? listed(b) : failed(-ENOMEM);
}

void ccap_lc_free(void *p)
{
    if (!p)
        return;
    struct ccap_lc_block *b = (struct ccap_lc_block *)p - 1;
    unlink_block(b);
    free(b);
}

void *ccap_lc_realloc(void *p, size_t n)
{
    if (!p)
        return ccap_lc_malloc(n);
    struct ccap_lc_block *b = (struct ccap_lc_block *)p - 1, *nb;
    bool alone = b->next == b;
    if (n > SIZE_MAX - sizeof *b || !(nb = realloc(b, sizeof *b + (n ? n : 1))))
        return failed(-ENOMEM); /* B is still valid, still listed */
    if (alone) {
        nb->prev = nb->next = nb;
    } else if (nb != b) {
        nb->prev->next = nb;
        nb->next->prev = nb;
    }
    return nb + 1;
}

char *ccap_lc_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ccap_lc_malloc(n);
    return d ? memcpy(d, s, n) : NULL;
}

/* libconfig's override: newlocale, then uselocale of it; its restore:
 * uselocale(LC_GLOBAL_LOCALE) and freelocale of what that returned. Here
 * the restore puts back the thread's own locale, and only libconfig's
 * locale is ever freed. */
locale_t ccap_lc_newlocale(int mask, const char *name, locale_t base)
{
    locale_t l = newlocale(mask, name, base);
    if (!l)
        return failed(-ENOMEM);
    if (cur && !cur->own)
        cur->own = l;
    return l;
}

locale_t ccap_lc_uselocale(locale_t loc)
{
    if (!cur)
        return uselocale(loc);
    if (loc == LC_GLOBAL_LOCALE && cur->have_prev) {
        cur->have_prev = false;
        return uselocale(cur->prev); /* libconfig's: freed next */
    }
    locale_t prev = uselocale(loc);
    if (!cur->have_prev && prev) {
        cur->prev = prev;
        cur->have_prev = true;
    }
    return prev;
}

void ccap_lc_freelocale(locale_t loc)
{
    if (!loc || loc == LC_GLOBAL_LOCALE)
        return;
    if (cur && cur->own == loc)
        cur->own = (locale_t)0;
    freelocale(loc);
}

/* flex's yy_fatal_error: never the host's exit. */
void ccap_lc_exit(int status)
{
    failed(-EIO);
    exit(status); /* no parse under way: as before */
}
