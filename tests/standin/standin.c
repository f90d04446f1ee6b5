/* standin.c -- a stand-in library whose every function aborts. */
/* Built by tests/integration/isolate_libs.sh under a real library's soname
 * (libhiredis.so.0.14, libhiredis.so.1.1.0, libconfig.so.9), with
 * -DSTANDIN_NAMES='"FILE"' naming a file of STANDIN(name) lines: the real
 * library's function names. A program linked against it runs as long as
 * nobody calls into it; the shim inside that program must never do so. */
#include <stdlib.h>
#include <unistd.h>

#define STANDIN(name)                                                                                               \
    void name(void);                                                                                                \
    void name(void)                                                                                                 \
    {                                                                                                               \
        static const char m[] = "stand-in " #name " called: aborting\n";                                            \
        (void)!write(2, m, sizeof(m) - 1);                                                                          \
        abort();                                                                                                    \
    }

#include STANDIN_NAMES
