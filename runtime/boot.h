/* boot.h -- the configuration read when the library is loaded, for the first connect; conncap run's hand-over. */
#ifndef CCAP_BOOT_H
#define CCAP_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include "config.h"

/* What the hot reload starts from (ccap_live_init): the file's absolute
 * path when it was given relative (else NULL: ccap_live_init resolves it),
 * and its stat as read at load (NULL: stat it now). Valid for the life of
 * the process. */
struct ccap_boot_seed {
    const char *abs;
    const struct stat *st;
};

/* True for the errors a later attempt may not meet: out of descriptors
 * (EMFILE, ENFILE), of memory (ENOMEM, ENOBUFS), interrupted (EINTR,
 * EAGAIN). Every other failure of a load is the configuration's own. */
bool ccap_boot_transient(int rc);

/* The configuration to start with, owned by the caller: the one loaded by
 * the constructor, or its text parsed now (it names no other file), or,
 * when the constructor could not read it for a transient reason, or it
 * was not there yet (or the constructor never ran: the unit tests), loaded
 * from disk now -- the caller decides by ccap_boot_transient whether to
 * try again at a later connect. Any other failure of the constructor's
 * load is returned as it was (what it found, with the privileges it had). Returns 0, or -errno with ERR
 * set ("FILE: cannot open: Permission denied"). *SEED is filled in either
 * case. Logs, once, what it found wrong with CONNCAP_CONFIG_FD. One
 * caller at a time (state.c's load). */
int ccap_boot_take(struct ccap_config **out, struct ccap_boot_seed *seed, char *err, size_t errlen);

/* The caller could not put CFG (from ccap_boot_take) in force for want of
 * memory: the next ccap_boot_take returns it again. */
void ccap_boot_put_back(struct ccap_config *cfg);

/* Before an exec with ENVP by the shim at SELF (its own path): when the
 * configuration came from conncap run's descriptor, ENVP still names it
 * (CONNCAP_CONFIG_FD) and preloads a library of SELF's name, and the
 * number is still that descriptor, it is kept open across the exec (made
 * inheritable): the next image reads the same checked configuration.
 * Returns whether it did, for ccap_boot_exec_post. */
bool ccap_boot_exec_pre(char *const *envp, const char *self);

/* After an exec that returned (failed): PASSED as ccap_boot_exec_pre
 * returned; the descriptor is close-on-exec again. */
void ccap_boot_exec_post(bool passed);

#endif
