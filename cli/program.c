/* program.c -- whether a program can be capped: what exec would run ($PATH, #! interpreters), its ELF headers, its set-id bits. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "cli.h"

/* Why: LD_PRELOAD is read by glibc's dynamic loader, so a static binary, a
 * program the loader runs in secure-execution mode (setuid, setgid, file
 * capabilities: LD_PRELOAD ignored), one of another ELF class or loader
 * (the shim cannot be loaded into it), and a Go program (its connections
 * are raw system calls, with cgo too) run uncapped, and until now
 * `conncap run` started them without a word. Only headers are read (no
 * libelf): every offset and size from the file is checked against it. */

#define NOTE_MAX (64 << 10) /* bytes of one PT_NOTE segment read */
#define SHSTR_MAX (1 << 20) /* bytes of the section-name table read */
#define SCRIPT_DEPTH 4      /* #! interpreters followed, as the kernel does */
#define SHEBANG_MAX 256     /* bytes of a #! line the kernel reads (BINPRM_BUF_SIZE) */
#define NT_GO_BUILDID 4     /* the Go linker's note: name "Go\0\0" (4 bytes), type 4 */

static void add_reason(struct ccap_prog *p, unsigned bit, const char *fmt, const char *arg)
{
    size_t n = strlen(p->detail);
    if (n)
        n += (size_t)snprintf(p->detail + n, sizeof p->detail - n, "; ");
    if (n < sizeof p->detail)
        snprintf(p->detail + n, sizeof p->detail - n, fmt, arg);
    p->why |= bit;
}

/* Reads exactly N bytes at OFF; false on a short file or an error. */
static bool read_at(int fd, void *buf, size_t n, off_t off)
{
    return off >= 0 && pread(fd, buf, n, off) == (ssize_t)n;
}

/* Whether one of the PT_NOTE segments holds the Go build-id note. */
static bool go_note(int fd, const ElfW(Phdr) * ph, size_t phnum, off_t size)
{
    for (size_t i = 0; i < phnum; i++) {
        if (ph[i].p_type != PT_NOTE || ph[i].p_filesz > NOTE_MAX || (off_t)(ph[i].p_offset + ph[i].p_filesz) > size)
            continue;
        size_t n = ph[i].p_filesz;
        unsigned char *buf = malloc(n ? n : 1);
        bool found = false;
        if (buf && read_at(fd, buf, n, (off_t)ph[i].p_offset)) {
            for (size_t off = 0; !found && off + 12 <= n;) {
                uint32_t namesz, descsz, type;
                memcpy(&namesz, buf + off, 4), memcpy(&descsz, buf + off + 4, 4), memcpy(&type, buf + off + 8, 4);
                size_t name_end = off + 12 + ((namesz + 3) & ~3u), next = name_end + ((descsz + 3) & ~3u);
                if (namesz > n || descsz > n || next > n || next <= off)
                    break;
                found = type == NT_GO_BUILDID && (namesz == 3 || namesz == 4) && !memcmp(buf + off + 12, "Go", 3);
                off = next;
            }
        }
        free(buf);
        if (found)
            return true;
    }
    return false;
}

/* Whether the section headers name a Go section (.note.go.buildid, .go.buildinfo). */
static bool go_section(int fd, const ElfW(Ehdr) * e, off_t size)
{
    if (!e->e_shoff || e->e_shentsize != sizeof(ElfW(Shdr)) || e->e_shstrndx >= e->e_shnum ||
        (off_t)(e->e_shoff + (size_t)e->e_shnum * sizeof(ElfW(Shdr))) > size)
        return false;
    ElfW(Shdr) *sh = malloc((size_t)e->e_shnum * sizeof *sh);
    char *names = NULL;
    bool found = false;
    if (sh && read_at(fd, sh, (size_t)e->e_shnum * sizeof *sh, (off_t)e->e_shoff)) {
        const ElfW(Shdr) *st = &sh[e->e_shstrndx];
        if (st->sh_size && st->sh_size <= SHSTR_MAX && (off_t)(st->sh_offset + st->sh_size) <= size &&
            (names = malloc(st->sh_size + 1)) && read_at(fd, names, st->sh_size, (off_t)st->sh_offset)) {
            names[st->sh_size] = '\0';
            for (size_t i = 0; !found && i < e->e_shnum; i++)
                found = sh[i].sh_name < st->sh_size && (!strcmp(names + sh[i].sh_name, ".note.go.buildid") ||
                                                        !strcmp(names + sh[i].sh_name, ".go.buildinfo"));
        }
    }
    free(names);
    free(sh);
    return found;
}

/* For an ET_DYN without PT_INTERP: a static PIE (DF_1_PIE), or a shared
 * object run as a program (the dynamic loader itself: LD_PRELOAD works). */
static bool static_pie(int fd, const ElfW(Phdr) * ph, size_t phnum, off_t size)
{
    for (size_t i = 0; i < phnum; i++) {
        if (ph[i].p_type != PT_DYNAMIC || ph[i].p_filesz > NOTE_MAX ||
            (off_t)(ph[i].p_offset + ph[i].p_filesz) > size)
            continue;
        size_t n = ph[i].p_filesz / sizeof(ElfW(Dyn));
        ElfW(Dyn) *d = malloc((n ? n : 1) * sizeof *d);
        bool pie = false;
        if (d && read_at(fd, d, n * sizeof *d, (off_t)ph[i].p_offset))
            for (size_t k = 0; k < n && d[k].d_tag != DT_NULL; k++)
                pie |= d[k].d_tag == DT_FLAGS_1 && (d[k].d_un.d_val & DF_1_PIE);
        free(d);
        return pie;
    }
    return true; /* no dynamic section at all */
}

/* The ELF checks on an open file: class and machine, PT_INTERP, Go. */
static void inspect_elf(int fd, const unsigned char *ident, off_t size, struct ccap_prog *p)
{
    if (ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)) {
        add_reason(p, CCAP_PROG_FOREIGN,
                   "it is a %s ELF program: the shim, built for this machine, cannot be loaded into it",
                   ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "64-bit");
        return;
    }
    ElfW(Ehdr) e;
    p->unread = true; /* until its program headers are read */
    if (!read_at(fd, &e, sizeof e, 0))
        return;
    char machine[16];
    snprintf(machine, sizeof machine, "%u", e.e_machine);
#if defined(__x86_64__)
    if (e.e_machine != EM_X86_64)
#elif defined(__aarch64__)
    if (e.e_machine != EM_AARCH64)
#else
    if (0)
#endif
    {
        add_reason(p, CCAP_PROG_FOREIGN, "it is built for another machine (e_machine %s) than the shim", machine);
        return;
    }
    if (e.e_phentsize != sizeof(ElfW(Phdr)) || !e.e_phnum ||
        (off_t)(e.e_phoff + e.e_phnum * sizeof(ElfW(Phdr))) > size)
        return;
    ElfW(Phdr) *ph = malloc(e.e_phnum * sizeof *ph);
    if (!ph || !read_at(fd, ph, e.e_phnum * sizeof *ph, (off_t)e.e_phoff)) {
        free(ph);
        return;
    }
    p->unread = false;
    if (go_note(fd, ph, e.e_phnum, size) || go_section(fd, &e, size))
        add_reason(p, CCAP_PROG_GO,
                   "it is a Go program (%s): Go makes its connections with raw system calls, which LD_PRELOAD never "
                   "sees, with cgo too",
                   "a Go build id or .go.buildinfo");
    const ElfW(Phdr) *in = NULL;
    for (size_t i = 0; i < e.e_phnum; i++)
        if (ph[i].p_type == PT_INTERP)
            in = &ph[i];
    if (in && in->p_filesz > 1 && in->p_filesz < sizeof p->interp && (off_t)(in->p_offset + in->p_filesz) <= size &&
        read_at(fd, p->interp, in->p_filesz, (off_t)in->p_offset)) {
        p->interp[in->p_filesz - 1] = '\0';
        const char *base = strrchr(p->interp, '/') ? strrchr(p->interp, '/') + 1 : p->interp;
        if (!strncmp(base, "ld-musl", 7))
            add_reason(p, CCAP_PROG_LOADER, "its dynamic loader is %s, not glibc's: the shim is built for glibc",
                       p->interp);
    } else if (!in && (e.e_type == ET_EXEC || static_pie(fd, ph, e.e_phnum, size))) {
        add_reason(p, CCAP_PROG_STATIC, "it is statically linked: %s", "no dynamic loader runs to read LD_PRELOAD");
    }
    free(ph);
}

/* Whether exec of ST (at PATH) runs in secure-execution mode (AT_SECURE),
 * where the loader ignores LD_PRELOAD: the effective ids would differ from
 * the real ones, or file capabilities are gained (not by root). Set-id bits
 * and capabilities do nothing on a nosuid mount or under no_new_privs. */
static void inspect_ids(const char *path, const struct stat *st, struct ccap_prog *p)
{
    struct statvfs vfs;
    bool bits =
        !(statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOSUID)) && prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1;
    bool suid = bits && (st->st_mode & S_ISUID) && st->st_uid != getuid();
    bool sgid = bits && (st->st_mode & S_ISGID) && (st->st_mode & S_IXGRP) && st->st_gid != getgid();
    bool already = geteuid() != getuid() || getegid() != getgid();
    bool caps = bits && getuid() != 0 && getxattr(path, "security.capability", NULL, 0) > 0;
    const char *what = suid && sgid ? "setuid and setgid"
                       : suid       ? "setuid"
                       : sgid       ? "setgid"
                       : caps       ? "given file capabilities"
                       : already    ? "run with effective ids other than the real ones"
                                    : NULL;
    if (what)
        add_reason(p, CCAP_PROG_SECURE,
                   "it is %s: the loader runs it in secure-execution mode and ignores LD_PRELOAD", what);
}

/* NAME as execvp finds it: NAME itself when it has a slash, else the first
 * executable regular file along $PATH (glibc's default "/bin:/usr/bin";
 * an empty entry is the current directory). 0, or -ENOENT / -EACCES. */
static int resolve(const char *name, char *out, size_t n)
{
    if (!*name)
        return -ENOENT;
    if (strchr(name, '/'))
        return (size_t)snprintf(out, n, "%s", name) < n ? 0 : -ENAMETOOLONG;
    const char *path = getenv("PATH");
    int rc = -ENOENT;
    for (const char *d = path ? path : "/bin:/usr/bin";; d++) {
        const char *end = strchrnul(d, ':');
        int len = (int)(end - d);
        struct stat st;
        if ((size_t)snprintf(out, n, "%.*s%s%s", len, d, len ? "/" : "", name) < n && stat(out, &st) == 0) {
            if (S_ISREG(st.st_mode) && access(out, X_OK) == 0)
                return 0;
            rc = -EACCES;
        }
        if (!*end)
            return rc;
        d = end;
    }
}

/* One file exec would run: an ELF, a #! script (its interpreter, and for
 * "env NAME" NAME along $PATH, followed), or anything else (execvp hands it
 * to /bin/sh). */
static int inspect_file(const char *path, int depth, struct ccap_prog *p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return -e;
    }
    unsigned char head[SHEBANG_MAX + 1] = { 0 };
    ssize_t got = pread(fd, head, sizeof head - 1, 0);
    snprintf(p->elf, sizeof p->elf, "%s", path);
    int rc = 0;
    if (got >= EI_NIDENT && !memcmp(head, ELFMAG, SELFMAG)) {
        inspect_ids(path, &st, p);
        inspect_elf(fd, head, st.st_size, p);
    } else if (depth < SCRIPT_DEPTH) {
        char interp[PATH_MAX], arg[PATH_MAX] = "", target[PATH_MAX];
        bool script = got > 2 && head[0] == '#' && head[1] == '!';
        if (script && sscanf((char *)head + 2, " %255[^ \t\n] %255[^\n]", interp, arg) < 1)
            script = false, interp[0] = '\0';
        const char *base = strrchr(interp, '/') ? strrchr(interp, '/') + 1 : interp;
        if (!script)
            rc = inspect_file("/bin/sh", depth + 1, p);
        else if (!strcmp(base, "env") && arg[0] && arg[0] != '-' && !strpbrk(arg, " \t") &&
                 resolve(arg, target, sizeof target) == 0)
            rc = inspect_file(target, depth + 1, p); /* env only execs NAME: NAME is the program */
        else
            rc = inspect_file(interp, depth + 1, p);
    }
    close(fd);
    return rc;
}

int ccap_prog_inspect(const char *cmd, struct ccap_prog *p)
{
    memset(p, 0, sizeof *p);
    int rc = resolve(cmd, p->path, sizeof p->path);
    return rc < 0 ? rc : inspect_file(p->path, 0, p);
}

const char *ccap_prog_name(const struct ccap_prog *p, char *buf, size_t n)
{
    if (strcmp(p->path, p->elf))
        snprintf(buf, n, "%s (run by %s)", p->path, p->elf);
    else
        snprintf(buf, n, "%s", p->path);
    return buf;
}
