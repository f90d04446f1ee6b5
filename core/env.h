/* env.h -- the CONNCAP_* environment, copied once before main. */
#ifndef CCAP_ENV_H
#define CCAP_ENV_H

#include <stddef.h>

/* Room for every CONNCAP_* "NAME=value" string of one process. The kernel
 * caps one environment string at 128 KiB (MAX_ARG_STRLEN), so CONNCAP_CONFIG
 * and CONNCAP_PERMITS always fit together; further CONNCAP_* variables fit
 * while the sum stays below this. */
#define CCAP_ENV_STORE (2 * 128 * 1024 + 16 * 1024)

/* Copies every CONNCAP_* variable of environ into a static buffer, so that
 * a program that clears or rewrites its environment later (nginx workers,
 * setproctitle, clearenv) changes nothing for the shim. In secure-execution
 * mode (setuid, setgid, file capabilities: AT_SECURE) nothing is copied: the
 * shim then ignores every CONNCAP_* variable, as secure_getenv does. No
 * allocation, no lock, no I/O: for the library's constructor, before main
 * and before any other thread. A variable that does not fit is left out
 * (counted: ccap_env_dropped). Calling it again takes a fresh copy. */
void ccap_env_capture(void);

/* The value of the environment variable NAME as the shim sees it: for a
 * CONNCAP_* name after ccap_env_capture, the copy (NULL if it was unset,
 * left out, or the process runs in secure-execution mode); otherwise
 * secure_getenv(NAME) now. The string stays valid for the life of the
 * process (until the next capture). Thread-safe once captured. */
const char *ccap_env_get(const char *name);

/* How many CONNCAP_* variables the last capture left out for want of room. */
size_t ccap_env_dropped(void);

#endif
