/* lcstdio.c -- the standard streams of the shim's private libconfig. */
#include <stdio.h>

/* The shim links libconfig from its static archive, which (built as PIE in
 * Debian) reaches stdin, stdout and stderr directly rather than through the
 * GOT; the build renames those three references to these hidden variables
 * (Makefile, $(BUILD)/libconfig-shim.a), so the archive links into a shared
 * object. libconfig's scanner reads only buffers and files it is handed, and
 * writes only error text: its "stdout" is stderr, so the shim never writes
 * to the program's standard output. Set before any libconfig call (the
 * configuration is loaded at the first connect, after every constructor). */
__attribute__((visibility("hidden"))) FILE *ccap_lc_stdin;
__attribute__((visibility("hidden"))) FILE *ccap_lc_stdout;
__attribute__((visibility("hidden"))) FILE *ccap_lc_stderr;

__attribute__((constructor)) static void ccap_lc_stdio_init(void)
{
    ccap_lc_stdin = stdin;
    ccap_lc_stdout = stderr;
    ccap_lc_stderr = stderr;
}
