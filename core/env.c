/* env.c -- the CONNCAP_* environment, copied once before main: later changes to environ do not matter. */
#include "env.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#define PREFIX "CONNCAP_"

extern char **environ;

/* "NAME=value\0NAME=value\0...": the CONNCAP_* strings as they were. */
static char store[CCAP_ENV_STORE];
static size_t used, dropped;
static bool captured;

/* Appends S if it fits. Known names come first, so they always do. */
static void keep(const char *s)
{
    size_t n = strlen(s) + 1;
    if (n > sizeof(store) - used) {
        dropped++;
        return;
    }
    memcpy(store + used, s, n);
    used += n;
}

static bool named(const char *entry, const char *name, size_t len)
{
    return strncmp(entry, name, len) == 0 && entry[len] == '=';
}

/* Copies the entries named NAME (or, NAME NULL, every CONNCAP_* entry but
 * CONNCAP_CONFIG and CONNCAP_PERMITS). */
static void keep_all(const char *name)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, PREFIX, sizeof(PREFIX) - 1) != 0)
            continue;
        bool known = named(*e, "CONNCAP_CONFIG", 14) || named(*e, "CONNCAP_PERMITS", 15);
        if (name ? named(*e, name, strlen(name)) : !known)
            keep(*e);
    }
}

void ccap_env_capture(void)
{
    used = 0;
    dropped = 0;
    captured = true;
    if (getauxval(AT_SECURE))
        return; /* setuid and the like: trust none of them */
    keep_all("CONNCAP_CONFIG");
    keep_all("CONNCAP_PERMITS");
    keep_all(NULL);
}

const char *ccap_env_get(const char *name)
{
    size_t len = strlen(name);
    if (!captured || strncmp(name, PREFIX, sizeof(PREFIX) - 1) != 0)
        return secure_getenv(name);
    /* the first entry wins, as with getenv */
    for (size_t off = 0; off < used; off += strlen(store + off) + 1)
        if (named(store + off, name, len))
            return store + off + len + 1;
    return NULL;
}

size_t ccap_env_dropped(void)
{
    return dropped;
}
