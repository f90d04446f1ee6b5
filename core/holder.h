/* holder.h -- the holder id: the one format a permit is named by in Redis, built by the shim, read by the CLI. */
#ifndef CCAP_HOLDER_H
#define CCAP_HOLDER_H

#include <stddef.h>
#include <sys/socket.h>

/* Buffer sizes, NUL included, of the two names a permit carries (the
 * permit table, the exec hand-over's entries and the runtime's renewal
 * batches share them): a semaphore's name and a holder id. */
#define CCAP_SEM_NAME_MAX 72
#define CCAP_HOLDER_MAX 192

/* The format, one owner (this file):
 *   host/pid/fd/destination/program/nonce.seq
 * host: gethostname() (cut to fit); pid, fd: canonical decimals (pid >= 1,
 * fd >= 0); destination: "a.b.c.d:port" or "[v6]:port" (never a '/');
 * program: the process's name (its main thread's comm, as ps shows it), at
 * most CCAP_HOLDER_PROG_MAX bytes of [A-Za-z0-9._+-] (any other byte
 * written as '_'), "-" when unknown; nonce: 8 lowercase hex digits, one per
 * process image; seq: a decimal counter, unique within the image. Ids of
 * before the program part (host/pid/fd/destination/nonce.seq) parse too,
 * with an empty program. An id longer than CCAP_HOLDER_MAX - 1 is cut (a
 * host name of the maximal length); ids are never compared by parts in
 * the shim, only whole. The program costs Redis nothing but its bytes in
 * the id (no command, no key). */
#define CCAP_HOLDER_PROG_MAX 15 /* the kernel's TASK_COMM_LEN - 1 */

/* An id's parts, as ccap_holder_parse fills them. */
struct ccap_holder {
    char host[128], dest[128], nonce[64]; /* nonce: "nonce.seq" */
    char prog[32];                        /* "" in an id of before the program part */
    long pid, fd;
};

/* Writes the id of a connect from PID's descriptor FD to SA (AF_INET or
 * AF_INET6) into OUT (N bytes, N >= 1; always NUL-terminated, cut at N - 1),
 * with this process's program (ccap_holder_program). No allocation, no
 * sprintf, no lock: built on every matched connect. Returns the length
 * written. Thread-safe. */
size_t ccap_holder_format(char *out, size_t n, const char *host, int pid, int fd, const struct sockaddr *sa,
                          unsigned nonce, unsigned long long seq);

/* Writes the destination part of an id, "a.b.c.d:port" or "[v6]:port", of
 * SA (AF_INET or AF_INET6) into OUT (N >= 1 bytes; NUL-terminated, cut at
 * N - 1). Returns the length written. Pure; thread-safe. */
size_t ccap_holder_dest(char *out, size_t n, const struct sockaddr *sa);

/* The same with the program PROG (made safe as the format says). Pure;
 * thread-safe. */
size_t ccap_holder_format_prog(char *out, size_t n, const char *host, const char *prog, int pid, int fd,
                               const struct sockaddr *sa, unsigned nonce, unsigned long long seq);

/* This process image's program, as the ids carry it: /proc/self/comm read
 * once (the first call; a fork child keeps its parent's, an exec'ed image
 * reads its own), else glibc's program_invocation_short_name, else "-".
 * Thread-safe. */
const char *ccap_holder_program(void);

/* Replaces the sequence number after the last '.' of ID (a buffer of N
 * bytes holding an id ccap_holder_format wrote) by SEQ. Returns 0, or -1
 * (ID unchanged) when ID has no '.'. Pure; thread-safe. */
int ccap_holder_set_seq(char *id, size_t n, unsigned long long seq);

/* Parses ID into *H (copied into H's buffers). PID (1..INT_MAX) and FD
 * (0..INT_MAX) must be canonical decimals, as ccap_holder_format writes
 * them; a part too long for H's buffer, or an empty one, is a mismatch.
 * With a '/' between the destination and the nonce the part after it is
 * the program, else (an older id) the program is "". Returns 0, or -1 (H
 * zeroed) when ID has another shape. Pure; thread-safe. */
int ccap_holder_parse(const char *id, struct ccap_holder *h);

#endif
