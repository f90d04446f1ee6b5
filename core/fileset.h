/* fileset.h -- the files a configuration is made of, read once and kept by path: for the shim's load and conncap run's hand-over. */
#ifndef CCAP_FILESET_H
#define CCAP_FILESET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* The environment variable by which conncap run names the descriptor that
 * carries the set it checked (a sealed memfd, ccap_fileset_encode's
 * format). Only the number: no secret is ever in the environment. */
#define CCAP_CONFIG_FD_ENV "CONNCAP_CONFIG_FD"

/* What a hand-over may hold in all: the configuration with its includes
 * (CCAP_CONF_MAX_BYTES), its password file and TLS files. */
#define CCAP_FILESET_MAX_BYTES (8 * 1024 * 1024)
/* Files in one set: CCAP_CONF_MAX_FILES, the password file, three TLS files. */
#define CCAP_FILESET_MAX_FILES 72

/* One file as it was read: its path as the configuration names it, its
 * bytes (NUL-terminated; LEN without the NUL) and what fstat said of it. */
struct ccap_file {
    char *path;
    char *data;
    size_t len;
    struct stat st;
};

/* A set of files by path. With RECORD set, ccap_fileset_read keeps every
 * file it reads from disk; a set decoded from a hand-over serves its files
 * instead of the disk. Zero it to start; one user at a time. */
struct ccap_fileset {
    struct ccap_file *v;
    size_t n;
    bool record;
};

/* Reads PATH: from FS when FS has it, else from disk with ccap_file_read
 * (a regular file only, never blocking; kept in FS when FS->record). At
 * most CAP bytes: a longer file is -EFBIG, unless HEAD, which reads its
 * first CAP bytes only (a password file's first line). *OUT gets a heap
 * copy with a NUL after its *LEN bytes (the caller frees it), *ST (may be
 * NULL) the file's fstat. FS may be NULL (the disk only). Returns 0 or
 * -errno with WHY as ccap_file_read gives it ("cannot open: Permission
 * denied"). Never logs. */
int ccap_fileset_read(struct ccap_fileset *fs, const char *path, size_t cap, bool head, char **out, size_t *len,
                      struct stat *st, char *why, size_t whylen);

/* The entry for PATH in FS, or NULL (also for a NULL FS). */
const struct ccap_file *ccap_fileset_find(const struct ccap_fileset *fs, const char *path);

/* FS as one buffer (*OUT, *LEN; the caller frees it, explicit_bzero
 * first: it may hold a secret). Returns 0, -EFBIG (over the bounds
 * above) or -ENOMEM. Pure. */
int ccap_fileset_encode(const struct ccap_fileset *fs, char **out, size_t *len);

/* The set BUF (LEN bytes, as ccap_fileset_encode made it) into *OUT
 * (zeroed first; free with ccap_fileset_free, also on failure). Returns
 * 0, -EINVAL for anything malformed or over the bounds, -ENOMEM. Pure. */
int ccap_fileset_decode(const char *buf, size_t len, struct ccap_fileset *out);

/* Frees what FS holds, its bytes wiped first, and empties it. */
void ccap_fileset_free(struct ccap_fileset *fs);

#endif
