/* conftext.h -- configuration text read safely: regular files only, size caps, @include expanded, lines mapped back. */
#ifndef CCAP_CONFTEXT_H
#define CCAP_CONFTEXT_H

#include <stddef.h>
#include <sys/stat.h>

/* The whole configuration, the file and every file it includes, in bytes. */
#define CCAP_CONF_MAX_BYTES (1024 * 1024)
/* Files in one configuration, the top-level one included. */
#define CCAP_CONF_MAX_FILES 64
/* How deep @include may nest (the top-level file is depth 0). */
#define CCAP_CONF_MAX_DEPTH 8
/* How deep groups, lists and arrays may nest. */
#define CCAP_CONF_MAX_NEST 32
/* Settings in one group (conncap knows at most 13 names in any group). */
#define CCAP_CONF_MAX_GROUP 64

/* Opens PATH read-only, non-blocking (a FIFO never blocks), close-on-exec,
 * without becoming the controlling terminal, and accepts it only if fstat
 * says it is a regular file. Returns the fd (the caller closes it) and
 * fills *ST, or -errno: the open(2) error, -EISDIR for a directory, -EINVAL
 * for any other kind of file. WHY (if not NULL) gets a phrase such as
 * "cannot open: No such file or directory" or "is a FIFO, not a regular
 * file". Thread-safe. */
int ccap_file_open(const char *path, struct stat *st, char *why, size_t whylen);

/* Reads the whole regular file PATH (ccap_file_open) into *OUT, a heap
 * buffer of *LEN bytes plus a NUL the caller frees, and fills *ST (may be
 * NULL) with what fstat said of it. At most CAP bytes: a
 * larger file, or one that grows past CAP while read, gives -EFBIG. Reads
 * are bounded (never more than CAP + 1 bytes in all) and never block on
 * the file's kind. Returns 0 or -errno (those of ccap_file_open, -EFBIG,
 * the read(2) error such as -EIO, -ENOMEM); WHY as above. Thread-safe. */
int ccap_file_read(const char *path, size_t cap, char **out, size_t *len, struct stat *st, char *why, size_t whylen);

/* A run of lines of the expanded text that come from one file. */
struct ccap_conf_span {
    unsigned first;    /* its first line in the expanded text (1-based) */
    unsigned src_line; /* that line's number in the file */
    unsigned file;     /* index into ccap_conf_text.files */
};

/* A configuration with its @include directives replaced by the files they
 * name, and the map from its lines back to the files they came from. */
struct ccap_conf_text {
    char *text; /* NUL-terminated; no @include left */
    size_t len;
    char **files; /* files[0]: the top-level name */
    size_t n_files;
    struct ccap_conf_span *spans; /* ordered by first */
    size_t n_spans;
};

struct ccap_fileset;

/* Expands TEXT (LEN bytes, the content of the file named PATH) into *OUT.
 * "@include "NAME"" at the start of a line (libconfig's syntax; blanks
 * before it, only blanks and a # or // comment after it) is replaced by
 * the content of NAME: an absolute path, or one relative to the directory
 * of the file that includes it; read with ccap_fileset_read from FS (NULL:
 * the disk), so only regular files. Bounds: CCAP_CONF_MAX_BYTES in all, CCAP_CONF_MAX_FILES files,
 * @include nested CCAP_CONF_MAX_DEPTH deep (so a cycle is an error),
 * CCAP_CONF_MAX_NEST nesting of groups and lists, CCAP_CONF_MAX_GROUP
 * settings per group (libconfig's cost per group is quadratic in its
 * size), no NUL byte, no string or comment left open at the end of a file.
 * Returns 0, or -EINVAL / another -errno with ERR set to "FILE:LINE:
 * message" (FILE the one at fault, LINE within it). Linear in the text's
 * size. On failure *OUT is empty. Thread-safe. */
int ccap_conf_text_build(const char *path, const char *text, size_t len, struct ccap_fileset *fs,
                         struct ccap_conf_text *out, char *err, size_t errlen);

/* The file and the line within it of LINE of T's expanded text; *SRC_LINE
 * gets 0 when LINE is 0. Returns a pointer into T. Pure. */
const char *ccap_conf_text_where(const struct ccap_conf_text *t, unsigned line, unsigned *src_line);

/* Frees what T owns and empties it; an empty T is fine. */
void ccap_conf_text_free(struct ccap_conf_text *t);

#endif
