/* deepbind.c -- dlopen/dlmopen: a library loaded with RTLD_DEEPBIND has its references to what the shim interposes bound to the shim, as a load without RTLD_DEEPBIND binds them. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "log.h"
#include "shim.h"

/* Why: RTLD_DEEPBIND puts the library's own dependencies (libc among them)
 * ahead of the global scope for every object the call loads, so their
 * connect, close, poll... bind to libc's definitions and never reach the
 * preloaded shim. PHP loads every extension that way: php-curl's libcurl
 * connected past any cap.
 *
 * What is done: after a DEEPBIND dlopen has returned, every object it newly
 * loaded (the root and the dependencies loaded with it) has each reference
 * to a symbol the shim exports -- a GOT slot of a JUMP_SLOT, GLOB_DAT or
 * absolute relocation -- that the load bound to the definition the shim
 * wraps (dlsym(RTLD_NEXT): libc's) rewritten to the definition a load
 * without RTLD_DEEPBIND would have given it (dlsym(RTLD_DEFAULT): the
 * shim's, or an earlier preloaded wrapper's). A lazy slot not bound yet is
 * rewritten when the library's own scope would bind it to that same wrapped
 * definition. Nothing else changes: symbols the shim does not export, and a
 * reference the library binds to a definition of its own or of another of
 * its dependencies, keep their DEEPBIND binding. A slot in RELRO is written
 * between mprotect(PROT_READ|PROT_WRITE) and mprotect(PROT_READ), the
 * protection the loader left there.
 *
 * Cost: one test of the mode on every other dlopen (then a tail call, so the
 * loader still sees the program's call site: its RUNPATH and $ORIGIN); a
 * DEEPBIND load that maps nothing new costs one dl_iterate_phdr step.
 *
 * Limits (README, "Limits"): the new objects' constructors run inside the
 * loader, before the rewrite; dlsym on the library's handle still returns
 * libc's symbols; dlmopen into another namespace is not touched (the shim
 * is not there); x86_64 and aarch64 only. */

#if defined(__x86_64__)
#define R_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB R_X86_64_GLOB_DAT
#define R_ABS R_X86_64_64
#define OUR_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define R_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB R_AARCH64_GLOB_DAT
#define R_ABS R_AARCH64_ABS64
#define OUR_MACHINE EM_AARCH64
#endif

#define EXPORT __attribute__((visibility("default")))

/* The address the dynamic entry V points to: glibc relocates the dynamic
 * section in place (an absolute address), other loaders may not. */
static const void *dyn_ptr(ElfW(Addr) base, ElfW(Addr) v)
{
    return (const void *)(v < base ? v + base : v);
}

#ifdef R_SLOT
/* ---- the symbols the shim owns: its own exported functions ---- */

struct owned {
    const char *name;
    void *next;   /* the definition the shim wraps (RTLD_NEXT) */
    void *global; /* what a load without DEEPBIND binds (RTLD_DEFAULT) */
};
static struct owned *owned; /* sorted by name */
static size_t n_owned;
static pthread_once_t owned_once = PTHREAD_ONCE_INIT;

/* Two filters, because every symbol relocation of every object a load
 * brings is looked at: the owned entries' NEXT in an open-addressing set
 * (a slot is judged by its value first; NEXT_SLOTS is a power of two above
 * twice the exports), and a bit per hash of an owned name's first two
 * characters (most names are rejected without a string compare). */
#define NEXT_SLOTS 256
static void *nexts[NEXT_SLOTS];
static uint64_t heads[16];

static unsigned next_hash(const void *v)
{
    return (unsigned)(((uintptr_t)v >> 4) * 0x9E3779B97F4A7C15ull >> 56) & (NEXT_SLOTS - 1);
}

static unsigned head_of(const char *s)
{
    return ((unsigned char)s[0] * 31u + (unsigned char)(s[0] ? s[1] : 0)) & 1023u;
}

/* The number of symbols of a DT_GNU_HASH table (the last chain's end). */
static size_t gnu_hash_count(const uint32_t *h)
{
    uint32_t nbuckets = h[0], symoffset = h[1], bloom = h[2], last = 0;
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)&h[4] + bloom), *chain = buckets + nbuckets;
    for (uint32_t i = 0; i < nbuckets; i++)
        if (buckets[i] > last)
            last = buckets[i];
    if (last < symoffset)
        return symoffset;
    while (!(chain[last - symoffset] & 1))
        last++;
    return last + 1;
}

static int owned_cmp(const void *a, const void *b)
{
    return strcmp(((const struct owned *)a)->name, ((const struct owned *)b)->name);
}

/* The shim's exported functions (shim/exports.map, read back from its own
 * .dynsym: one list), each with its wrapped and its global definition.
 * Entries whose global definition is the wrapped one (the shim is not in
 * the global scope) are left out: there is nothing to bind to. */
static void owned_init(void)
{
    struct link_map *self;
    Dl_info info;
    if (!dladdr1((void *)owned_init, &info, (void **)&self, RTLD_DL_LINKMAP) || !self)
        return;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    size_t nsyms = 0;
    for (const ElfW(Dyn) *d = self->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_SYMTAB)
            symtab = dyn_ptr(self->l_addr, d->d_un.d_ptr);
        else if (d->d_tag == DT_STRTAB)
            strtab = dyn_ptr(self->l_addr, d->d_un.d_ptr);
        else if (d->d_tag == DT_HASH)
            nsyms = ((const uint32_t *)dyn_ptr(self->l_addr, d->d_un.d_ptr))[1];
        else if (d->d_tag == DT_GNU_HASH && !nsyms)
            nsyms = gnu_hash_count(dyn_ptr(self->l_addr, d->d_un.d_ptr));
    }
    if (!symtab || !strtab || !nsyms || !(owned = calloc(nsyms, sizeof *owned)))
        return;
    for (size_t i = 0; i < nsyms; i++) {
        const ElfW(Sym) *s = &symtab[i];
        if (s->st_shndx == SHN_UNDEF || !s->st_name || ELF64_ST_TYPE(s->st_info) != STT_FUNC ||
            ELF64_ST_VISIBILITY(s->st_other) != STV_DEFAULT)
            continue;
        struct owned o = { strtab + s->st_name, dlsym(RTLD_NEXT, strtab + s->st_name),
                           dlsym(RTLD_DEFAULT, strtab + s->st_name) };
        if (o.next && o.global && o.next != o.global)
            owned[n_owned++] = o;
    }
    if (n_owned > NEXT_SLOTS / 2)
        n_owned = 0; /* cannot happen with exports.map as it is; bind nothing rather than loop */
    qsort(owned, n_owned, sizeof *owned, owned_cmp);
    for (size_t i = 0; i < n_owned; i++) {
        unsigned h = next_hash(owned[i].next);
        while (nexts[h] && nexts[h] != owned[i].next)
            h = (h + 1) & (NEXT_SLOTS - 1);
        nexts[h] = owned[i].next;
        heads[head_of(owned[i].name) / 64] |= 1ull << (head_of(owned[i].name) % 64);
    }
    dlerror(); /* a name libc lacks left an error the program must not see */
}

static const struct owned *owned_find(const char *name)
{
    struct owned key = { name, NULL, NULL };
    unsigned h = head_of(name);
    if (!(heads[h / 64] & (1ull << (h % 64))))
        return NULL;
    return n_owned ? bsearch(&key, owned, n_owned, sizeof *owned, owned_cmp) : NULL;
}

/* ---- the objects a load brought in ---- */

/* One object of the namespace list, from the load's root on. Strings are
 * copies: an object that is not the load's may be unloaded meanwhile. */
struct obj {
    ElfW(Addr) addr;
    const ElfW(Phdr) * ph; /* the loader's: read only for the load's own objects */
    ElfW(Half) phnum;
    char *name, *soname; /* copies */
    char **needed;       /* copies */
    size_t n_needed;
    bool mine; /* loaded by this call: the root, or needed by one of the load's objects */
};

struct scan {
    const struct link_map *root;
    bool seen_root, oom;
    struct obj *v;
    size_t n, cap;
};

static const ElfW(Dyn) * dynamic_of(ElfW(Addr) addr, const ElfW(Phdr) * ph, ElfW(Half) phnum)
{
    for (ElfW(Half) i = 0; i < phnum; i++)
        if (ph[i].p_type == PT_DYNAMIC)
            return (const ElfW(Dyn) *)(addr + ph[i].p_vaddr);
    return NULL;
}

static char *dup_or_flag(const char *s, struct scan *sc)
{
    char *c = strdup(s ? s : "");
    if (!c)
        sc->oom = true;
    return c;
}

/* Copies what the closure needs of one object (its names and DT_NEEDED). */
static void record(struct scan *sc, const struct dl_phdr_info *info)
{
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? 2 * sc->cap : 32;
        struct obj *v = realloc(sc->v, cap * sizeof *v);
        if (!v) {
            sc->oom = true;
            return;
        }
        sc->v = v, sc->cap = cap;
    }
    struct obj *o = &sc->v[sc->n++];
    *o = (struct obj){ info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum };
    o->name = dup_or_flag(info->dlpi_name, sc);
    const ElfW(Dyn) *dyn = dynamic_of(o->addr, o->ph, o->phnum);
    const char *str = NULL;
    size_t n = 0;
    for (const ElfW(Dyn) *d = dyn; d && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB)
            str = dyn_ptr(o->addr, d->d_un.d_ptr);
        n += d->d_tag == DT_NEEDED;
    }
    if (!str)
        return;
    o->needed = calloc(n ? n : 1, sizeof *o->needed);
    sc->oom |= !o->needed;
    for (const ElfW(Dyn) *d = dyn; o->needed && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_NEEDED)
            o->needed[o->n_needed++] = dup_or_flag(str + d->d_un.d_val, sc);
        else if (d->d_tag == DT_SONAME)
            o->soname = dup_or_flag(str + d->d_un.d_val, sc);
    }
}

/* dl_iterate_phdr: every object from the root on (the loader's lock keeps
 * the list still meanwhile; objects after the root's are its dependencies
 * loaded with it, or another thread's load). */
static int record_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct scan *sc = arg;
    (void)size;
    if (!sc->seen_root)
        sc->seen_root = info->dlpi_addr == sc->root->l_addr && info->dlpi_name == sc->root->l_name;
    if (sc->seen_root && !sc->oom)
        record(sc, info);
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Whether O is the object a DT_NEEDED entry NAME names (as the loader
 * matches names: its path, its soname, or the file name it was found by). */
static bool names(const struct obj *o, const char *name)
{
    return !strcmp(o->name, name) || (o->soname && !strcmp(o->soname, name)) ||
           (!strchr(name, '/') && !strcmp(base_name(o->name), name));
}

/* Marks the load's own objects: the root (v[0]) and, transitively, what
 * they need among the objects recorded after it. Those stay loaded while
 * the handle is open, and the loader has relocated them all. */
static void mark_mine(struct scan *sc)
{
    sc->v[0].mine = true;
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; i < sc->n; i++)
            for (size_t k = 0; sc->v[i].mine && k < sc->v[i].n_needed; k++)
                for (size_t j = 1; j < sc->n; j++)
                    if (!sc->v[j].mine && names(&sc->v[j], sc->v[i].needed[k]))
                        sc->v[j].mine = more = true;
    }
}

static void scan_free(struct scan *sc)
{
    for (size_t i = 0; i < sc->n; i++) {
        free(sc->v[i].name);
        free(sc->v[i].soname);
        for (size_t k = 0; k < sc->v[i].n_needed; k++)
            free(sc->v[i].needed[k]);
        free(sc->v[i].needed);
    }
    free(sc->v);
}

/* ---- rewriting one object's slots ---- */

struct fix {
    void **slot;
    void *to;
};

struct patch {
    const struct obj *o;
    void *const *local;            /* per owned entry: the load's scope's definition (NULL: not looked up yet) */
    size_t lazy;                   /* slots not bound yet whose binding needs the load's scope */
    size_t done;                   /* slots rewritten */
    bool now;                      /* every slot bound at load: none is lazy */
    ElfW(Addr) lo, hi;             /* the object's mapping: a lazy slot points into it */
    ElfW(Addr) relro_lo, relro_hi; /* pages the loader made read-only */
    struct fix *fix;
    size_t n_fix, cap_fix;
    bool failed;
};

/* Whether [P, P+N) lies in one of O's segments; WRITABLE: a PF_W one. */
static bool inside(const struct obj *o, const void *p, size_t n, bool writable)
{
    ElfW(Addr) a = (ElfW(Addr))p;
    for (ElfW(Half) i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->ph[i];
        if (ph->p_type == PT_LOAD && (!writable || (ph->p_flags & PF_W)) && a >= o->addr + ph->p_vaddr &&
            a + n <= o->addr + ph->p_vaddr + ph->p_memsz)
            return true;
    }
    return false;
}

static void add_fix(struct patch *p, void **slot, void *to)
{
    if (p->n_fix == p->cap_fix) {
        size_t cap = p->cap_fix ? 2 * p->cap_fix : 16;
        struct fix *f = realloc(p->fix, cap * sizeof *f);
        if (!f) {
            p->failed = true;
            return;
        }
        p->fix = f, p->cap_fix = cap;
    }
    p->fix[p->n_fix++] = (struct fix){ slot, to };
}

/* Whether V is one of the wrapped definitions (this runs for every symbol
 * relocation of every object a load brings). */
static inline bool is_next(const void *v)
{
    for (unsigned h = next_hash(v); nexts[h]; h = (h + 1) & (NEXT_SLOTS - 1))
        if (nexts[h] == v)
            return true;
    return false;
}

/* One relocation: a slot bound to the wrapped definition of an owned
 * symbol, or a lazy one the load's scope would bind there, gets the global
 * definition. */
static inline void consider(struct patch *p, const ElfW(Rela) * r, const ElfW(Sym) * symtab, const char *strtab,
                            size_t strsz)
{
    unsigned long type = ELF64_R_TYPE(r->r_info), sym = ELF64_R_SYM(r->r_info);
    if (!sym || !(type == R_SLOT || type == R_GLOB || (type == R_ABS && r->r_addend == 0)))
        return;
    /* by value first (the loader wrote every slot of these tables): most
     * slots hold neither a wrapped definition nor a lazy stub of the object */
    void **slot = (void **)(p->o->addr + r->r_offset), *v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    bool wrapped = is_next(v);
    bool lazy = !wrapped && !p->now && type == R_SLOT && (ElfW(Addr))v >= p->lo && (ElfW(Addr))v < p->hi;
    if ((!wrapped && !lazy) || symtab[sym].st_name >= strsz)
        return;
    const struct owned *w = owned_find(strtab + symtab[sym].st_name);
    if (!w || !inside(p->o, slot, sizeof *slot, true))
        return;
    if (v == w->next) {
        add_fix(p, slot, w->global);
    } else if (lazy) { /* still the object's own PLT stub (or its own definition) */
        if (!p->local)
            p->lazy++;
        else if (p->local[w - owned] == w->next)
            add_fix(p, slot, w->global);
    }
}

/* The object's mapping and its RELRO pages. */
static void ranges_of(struct patch *p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    p->lo = ~(ElfW(Addr))0;
    for (ElfW(Half) i = 0; i < p->o->phnum; i++)
        if (p->o->ph[i].p_type == PT_LOAD) {
            ElfW(Addr) lo = p->o->addr + p->o->ph[i].p_vaddr, hi = lo + p->o->ph[i].p_memsz;
            p->lo = lo < p->lo ? lo : p->lo;
            p->hi = hi > p->hi ? hi : p->hi;
        }
    for (ElfW(Half) i = 0; i < p->o->phnum; i++)
        if (p->o->ph[i].p_type == PT_GNU_RELRO) {
            ElfW(Addr) lo = p->o->addr + p->o->ph[i].p_vaddr, hi = lo + p->o->ph[i].p_memsz;
            p->relro_lo =
                lo & ~(ElfW(Addr))(page - 1); /* as the loader rounds: the last partial page stays writable */
            p->relro_hi = hi & ~(ElfW(Addr))(page - 1);
        }
}

/* Writes the fixes: those in RELRO between mprotect RW and R. */
static void apply(struct patch *p)
{
    bool relro = false;
    for (size_t i = 0; i < p->n_fix; i++)
        relro |= (ElfW(Addr))p->fix[i].slot >= p->relro_lo && (ElfW(Addr))p->fix[i].slot < p->relro_hi;
    if (relro && mprotect((void *)p->relro_lo, p->relro_hi - p->relro_lo, PROT_READ | PROT_WRITE) != 0) {
        ccap_log(CCAP_LOG_WARN,
                 "%s (loaded with RTLD_DEEPBIND): cannot make its RELRO writable to bind it to the "
                 "shim (mprotect: %s): its connections are not capped",
                 p->o->name, strerror(errno));
        p->failed = true;
        return;
    }
    for (size_t i = 0; i < p->n_fix; i++)
        __atomic_store_n(p->fix[i].slot, p->fix[i].to, __ATOMIC_RELAXED);
    p->done += p->n_fix;
    if (relro && mprotect((void *)p->relro_lo, p->relro_hi - p->relro_lo, PROT_READ) != 0)
        ccap_log(CCAP_LOG_WARN, "%s: its RELRO could not be made read-only again: %s", p->o->name, strerror(errno));
}

/* Rewrites O's owned slots; with LOCAL NULL, counts the lazy ones that need
 * the load's scope (*LAZY) and leaves them. NOW: the load bound every slot
 * (RTLD_NOW). Returns the slots rewritten. */
static size_t patch_object(const struct obj *o, bool now, void *const *local, size_t *lazy)
{
    const ElfW(Dyn) *dyn = dynamic_of(o->addr, o->ph, o->phnum);
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *rela = NULL, *jmprel = NULL;
    size_t strsz = 0, relasz = 0, relaent = sizeof(ElfW(Rela)), pltrelsz = 0, relacount = 0;
    long pltrel = DT_RELA;
    for (const ElfW(Dyn) *d = dyn; d && d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_FLAGS: now |= (d->d_un.d_val & DF_BIND_NOW) != 0; break;
        case DT_FLAGS_1: now |= (d->d_un.d_val & DF_1_NOW) != 0; break;
        case DT_SYMTAB: symtab = dyn_ptr(o->addr, d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = dyn_ptr(o->addr, d->d_un.d_ptr); break;
        case DT_STRSZ: strsz = d->d_un.d_val; break;
        case DT_RELA: rela = dyn_ptr(o->addr, d->d_un.d_ptr); break;
        case DT_RELASZ: relasz = d->d_un.d_val; break;
        case DT_RELAENT: relaent = d->d_un.d_val; break;
        case DT_RELACOUNT: relacount = d->d_un.d_val; break; /* the relative ones, first: no symbol */
        case DT_JMPREL: jmprel = dyn_ptr(o->addr, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
        case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab || relaent != sizeof(ElfW(Rela)) || pltrel != DT_RELA)
        return 0;
    struct patch p = { .o = o, .local = local, .now = now };
    ranges_of(&p);
    for (size_t i = relacount; rela && i < relasz / sizeof *rela; i++)
        consider(&p, &rela[i], symtab, strtab, strsz);
    for (size_t i = 0; jmprel && i < pltrelsz / sizeof *jmprel; i++)
        consider(&p, &jmprel[i], symtab, strtab, strsz);
    if (p.n_fix && !p.failed)
        apply(&p);
    if (p.failed && !p.done)
        ccap_log(CCAP_LOG_WARN,
                 "%s (loaded with RTLD_DEEPBIND): not bound to the shim: its connections are not capped", o->name);
    free(p.fix);
    *lazy += p.lazy;
    return p.done;
}

/* Whether O is one the rewrite must leave alone: the shim itself, or an
 * object that defines a wrapped symbol (libc, a wrapper preloaded after
 * the shim): their calls to those are the real ones. */
static bool untouchable(const struct obj *o)
{
    if (inside(o, (const void *)patch_object, 1, false))
        return true;
    for (size_t i = 0; i < n_owned; i++)
        if (inside(o, owned[i].next, 1, false))
            return true;
    return false;
}

/* The rewrite of the load's objects, run as a dl_iterate_phdr callback:
 * under the loader's lock, so that two threads binding the same objects
 * (two DEEPBIND loads of one library) never interleave their mprotect
 * calls. Nothing in it calls back into the loader (no dlsym). */
struct pass {
    const struct scan *sc;
    bool now;           /* the load was RTLD_NOW */
    void *const *local; /* NULL: the first pass */
    size_t done, lazy;
};

static int patch_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct pass *ps = arg;
    (void)info, (void)size;
    for (size_t i = 0; i < ps->sc->n; i++)
        if (ps->sc->v[i].mine && !untouchable(&ps->sc->v[i])) {
            ps->done += patch_object(&ps->sc->v[i], ps->now, ps->local, &ps->lazy);
        }
    return 1; /* once: the objects are the load's own, still loaded */
}

/* Binds the objects the DEEPBIND load of HANDLE (MODE) brought in; FILE
 * names it in the log. */
static void bind_load(void *handle, int mode, const char *file)
{
    struct link_map *root;
    pthread_once(&owned_once, owned_init);
    if (!n_owned || dlinfo(handle, RTLD_DI_LINKMAP, &root) != 0 || !root)
        return;
    struct scan sc = { .root = root };
    dl_iterate_phdr(record_cb, &sc);
    if (sc.oom || !sc.n) {
        ccap_log(CCAP_LOG_WARN, "%s (loaded with RTLD_DEEPBIND): %s: its connections are not capped",
                 file ? file : "?", sc.oom ? "out of memory" : "not found in the namespace");
        scan_free(&sc);
        return;
    }
    mark_mine(&sc);
    struct pass ps = { .sc = &sc, .now = (mode & RTLD_NOW) != 0 };
    dl_iterate_phdr(patch_cb, &ps);
    if (ps.lazy) { /* lazy slots: what the load's own scope binds each owned name to */
        void **local = calloc(n_owned, sizeof *local);
        for (size_t i = 0; local && i < n_owned; i++)
            local[i] = dlsym(handle, owned[i].name);
        struct pass more = { .sc = &sc, .now = ps.now, .local = local };
        if (local)
            dl_iterate_phdr(patch_cb, &more);
        else
            ccap_log(CCAP_LOG_WARN,
                     "%s (loaded with RTLD_DEEPBIND): out of memory: %zu lazy references left unbound", sc.v[0].name,
                     ps.lazy);
        ps.done += more.done;
        free(local);
    }
    if (ps.done)
        ccap_log(CCAP_LOG_INFO, "%s (loaded with RTLD_DEEPBIND): %zu references to the shim's symbols bound to it",
                 sc.v[0].name, ps.done);
    scan_free(&sc);
}
#else
static void bind_load(void *handle, int mode, const char *file)
{
    (void)handle, (void)mode;
    ccap_log(CCAP_LOG_WARN,
             "%s loaded with RTLD_DEEPBIND: binding it to the shim is not supported on this "
             "architecture: its connections are not capped",
             file ? file : "?");
}
#endif

/* ---- whether a load mapped anything ---- */

static int adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    *(unsigned long long *)arg =
        size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds ? info->dlpi_adds : 0;
    return 1;
}

/* The loader's count of objects ever loaded (0 when it has none). */
static unsigned long long loads(void)
{
    unsigned long long n = 0;
    dl_iterate_phdr(adds_cb, &n);
    return n;
}

/* ---- the file, as the program's own call would find it ---- */

/* Our dlopen runs from the shim, and the loader resolves a name without a
 * slash along its *caller's* search path (RPATH, LD_LIBRARY_PATH, RUNPATH)
 * and $ORIGIN from the caller's directory. So on the DEEPBIND path (the one
 * that is not a tail call) the name is resolved here as CALLER would have
 * it: $ORIGIN expanded, a bare name already loaded left to the loader's
 * name match, otherwise the first match in the part of the caller's search
 * path that the shim's lacks. What remains the loader's (ld.so.cache, the
 * system directories) is the same for every caller. */

static struct link_map *map_of(const void *addr)
{
    struct link_map *m = NULL;
    Dl_info info;
    if (!addr || !dladdr1(addr, &info, (void **)&m, RTLD_DL_LINKMAP))
        return NULL;
    return m;
}

/* The directory $ORIGIN names for M (the main program: /proc/self/exe's). */
static bool origin_of(const struct link_map *m, char *out, size_t n)
{
    char path[PATH_MAX];
    if (!m || !m->l_name || !m->l_name[0]) {
        ssize_t k = readlink("/proc/self/exe", path, sizeof path - 1);
        if (k <= 0)
            return false;
        path[k] = '\0';
    } else if (m->l_name[0] != '/') {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd) || (size_t)snprintf(path, sizeof path, "%s/%s", cwd, m->l_name) >= sizeof path)
            return false;
    } else if ((size_t)snprintf(path, sizeof path, "%s", m->l_name) >= sizeof path) {
        return false;
    }
    char *slash = strrchr(path, '/');
    if (!slash)
        return false;
    *slash = '\0';
    return (size_t)snprintf(out, n, "%s", slash == path ? "/" : path) < n;
}

/* The length of the $ORIGIN token at P (as the loader reads it: "$ORIGIN"
 * not followed by a name character, or "${ORIGIN}"), or 0. */
static size_t origin_token(const char *p)
{
    if (!strncmp(p, "${ORIGIN}", 9))
        return 9;
    if (strncmp(p, "$ORIGIN", 7))
        return 0;
    char c = p[7];
    return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ? 0 : 7;
}

/* FILE with each $ORIGIN token replaced by ORIGIN, into OUT. */
static bool expand_origin(const char *file, const char *origin, char *out, size_t n)
{
    size_t k = 0;
    for (const char *p = file; *p;) {
        size_t skip = origin_token(p);
        const char *piece = skip ? origin : p;
        size_t len = skip ? strlen(origin) : 1;
        if (k + len >= n)
            return false;
        memcpy(out + k, piece, len);
        k += len;
        p += skip ? skip : 1;
    }
    out[k] = '\0';
    return true;
}

static bool has_origin(const char *file)
{
    for (const char *p = strchr(file, '$'); p; p = strchr(p + 1, '$'))
        if (origin_token(p))
            return true;
    return false;
}

/* The search path the loader uses for a dependency of M (RTLD_DI_SERINFO);
 * malloc'd, NULL on failure. */
static Dl_serinfo *serinfo(struct link_map *m)
{
    Dl_serinfo sz, *si;
    if (dlinfo(m, RTLD_DI_SERINFOSIZE, &sz) != 0 || !(si = malloc(sz.dls_size)))
        return NULL;
    si->dls_size = sz.dls_size, si->dls_cnt = sz.dls_cnt;
    if (dlinfo(m, RTLD_DI_SERINFO, si) != 0) {
        free(si);
        return NULL;
    }
    return si;
}

/* Whether PATH is a shared object the loader would take for this process. */
static bool loadable(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ElfW(Ehdr) e;
    bool ok = read(fd, &e, sizeof e) == (ssize_t)sizeof e && !memcmp(e.e_ident, ELFMAG, SELFMAG) &&
              e.e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) && e.e_type == ET_DYN
#ifdef OUR_MACHINE
              && e.e_machine == OUR_MACHINE
#endif
        ;
    close(fd);
    return ok;
}

/* A bare NAME along CALLER's search path: the first loadable match in the
 * directories before the part the shim's own search path ends with too
 * (LD_LIBRARY_PATH, the system directories), into OUT. False: leave NAME
 * to the loader. */
static bool search_as(struct link_map *caller, const char *name, char *out, size_t n)
{
    struct link_map *self = map_of((const void *)search_as);
    Dl_serinfo *c = caller ? serinfo(caller) : NULL, *s = self ? serinfo(self) : NULL;
    bool found = false;
    if (c && s) {
        size_t common = 0;
        while (common < c->dls_cnt && common < s->dls_cnt &&
               !strcmp(c->dls_serpath[c->dls_cnt - 1 - common].dls_name,
                       s->dls_serpath[s->dls_cnt - 1 - common].dls_name))
            common++;
        for (size_t i = 0; !found && i + common < c->dls_cnt; i++)
            found = (size_t)snprintf(out, n, "%s/%s", c->dls_serpath[i].dls_name, name) < n && loadable(out);
    }
    free(c);
    free(s);
    return found;
}

/* FILE as the program's call from CALLER would find it: FILE itself, or
 * BUF. */
static const char *as_caller(const char *file, const void *caller, void *(*real)(const char *, int), char *buf,
                             size_t n)
{
    if (!file || (strchr(file, '/') && !has_origin(file)))
        return file;
    struct link_map *m = map_of(caller);
    if (has_origin(file)) {
        char origin[PATH_MAX];
        return origin_of(m, origin, sizeof origin) && expand_origin(file, origin, buf, n) ? buf : file;
    }
    void *loaded = real(file, RTLD_LAZY | RTLD_NOLOAD); /* by name: the same answer for every caller */
    if (loaded) {
        dlclose(loaded);
        return file;
    }
    void *main_handle = m ? NULL : real(NULL, RTLD_LAZY);
    if (main_handle && dlinfo(main_handle, RTLD_DI_LINKMAP, &m) != 0)
        m = NULL;
    bool found = search_as(m, file, buf, n);
    if (main_handle)
        dlclose(main_handle);
    return found ? buf : file;
}

/* ---- the hooks ---- */

/* The DEEPBIND path: FILE resolved as from CALLER, the real call made
 * outside the guard (the library's constructors are the program's code),
 * then the new objects bound. The error state dlerror reports is the real
 * call's. */
static __attribute__((noinline)) void *deep_open(Lmid_t lmid, bool m, const char *file, int mode, const void *caller)
{
    char buf[PATH_MAX];
    const char *path;
    unsigned long long before;
    void *(*real_open)(const char *, int) = CCAP_REAL(dlopen);
    int e = errno;
    GUARDED(path = as_caller(file, caller, real_open, buf, sizeof buf); before = loads(); dlerror());
    errno = e;
    void *h = m ? CCAP_REAL(dlmopen)(lmid, path, mode) : real_open(path, mode);
    if (h) {
        e = errno;
        GUARDED(if (loads() != before) bind_load(h, mode, path); dlerror());
        errno = e;
    }
    return h;
}

/* Anything but a DEEPBIND load is a tail call: the loader takes the return
 * address for the program's call site. */
EXPORT void *dlopen(const char *file, int mode)
{
    void *(*real)(const char *, int) = CCAP_REAL_LOAD(dlopen);
    if (__builtin_expect(!real, 0)) {
        ccap_real_resolve();
        real = CCAP_REAL_LOAD(dlopen);
    }
    if (__builtin_expect(!(mode & RTLD_DEEPBIND) || ccap_guard, 1))
        return real(file, mode);
    return deep_open(LM_ID_BASE, false, file, mode, __builtin_return_address(0));
}

/* Only the base namespace: a new one has no shim (and its own libc). */
EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
    void *(*real)(Lmid_t, const char *, int) = CCAP_REAL_LOAD(dlmopen);
    if (__builtin_expect(!real, 0)) {
        ccap_real_resolve();
        real = CCAP_REAL_LOAD(dlmopen);
    }
    if (__builtin_expect(!(mode & RTLD_DEEPBIND) || lmid != LM_ID_BASE || ccap_guard, 1))
        return real(lmid, file, mode);
    return deep_open(lmid, true, file, mode, __builtin_return_address(0));
}
