/* lcalloc.h -- libconfig's allocations and locale calls, checked: a parse that runs out of memory fails with -ENOMEM instead of crashing in libconfig. */
#ifndef CCAP_LCALLOC_H
#define CCAP_LCALLOC_H

#include <locale.h>
#include <setjmp.h>
#include <stdbool.h>

/* libconfig 1.5 does not check most of its allocations (config_init's root,
 * config_setting_create, the scanner's string buffer): a malloc that fails
 * during a parse dereferences NULL. Its locale override frees whatever
 * locale the thread had when newlocale failed (uselocale(LC_GLOBAL_LOCALE)
 * then freelocale of the result), and always leaves the thread on the global
 * locale. And flex's scanner exits the process on a fatal error.
 *
 * In the shim, the build renames libconfig's references to malloc, calloc,
 * realloc, free, strdup, newlocale, uselocale, freelocale and exit to the
 * ccap_lc_* functions of core/lcalloc.c (Makefile, libconfig-shim.a). Each
 * block they allocate is listed in the parse's guard; an allocation (or
 * newlocale) that fails while the guard is armed, or a scanner's exit,
 * longjmps back to the guard's setjmp: the caller then frees every block of
 * the parse with ccap_lc_guard_end and never looks at the half-built tree
 * again. libconfig holds nothing else when it calls them: no lock, no file
 * (conncap hands it the text), no state outside the tree and the scanner's
 * heap. The thread's own locale is put back, and libconfig's freed, however
 * the parse ends.
 *
 * Elsewhere (the CLI and the tests link the shared libconfig) nothing
 * reaches these functions: the guard arms, never jumps, and frees nothing. */

struct ccap_lc_block {
    struct ccap_lc_block *prev, *next;
} __attribute__((aligned(16)));

struct ccap_lc_guard {
    jmp_buf jb;
    bool armed;                /* a failure longjmps to JB (else: NULL, ENOMEM) */
    int why;                   /* what longjmp'd: -ENOMEM, or -EIO (the scanner's fatal error) */
    struct ccap_lc_block head; /* the blocks allocated under it, not yet freed */
    locale_t prev;             /* the thread's locale before libconfig's override */
    bool have_prev;
    locale_t own; /* libconfig's locale, not yet freed */
};

/* Makes G the calling thread's guard, armed: use as
 *     ccap_lc_guard_begin(&g);
 *     if (setjmp(g.jb) == 0) { libconfig calls ...; ccap_lc_guard_disarm(&g); ... } else { failed: g.why }
 *     ccap_lc_guard_end(&g);
 * Not nested; one guard per thread at a time. */
void ccap_lc_guard_begin(struct ccap_lc_guard *g);

/* From here a failure returns NULL/ENOMEM to libconfig instead (its
 * accessors allocate nothing; config_destroy only frees). */
void ccap_lc_guard_disarm(struct ccap_lc_guard *g);

/* Frees every block still listed, puts the thread's locale back and frees
 * libconfig's; G is no longer the thread's guard. */
void ccap_lc_guard_end(struct ccap_lc_guard *g);

#endif
