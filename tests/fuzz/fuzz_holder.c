/* fuzz_holder.c -- libFuzzer target: the CLI's holder id parser (ccap_ops_parse_holder). */
/* Any input: no crash, no read past the id. An accepted id must be what the
 * shim writes (core/holder.c ccap_holder_format):
 * "host/pid/fd/destination/program/nonce.seq", or one of before the program
 * part, "host/pid/fd/destination/nonce.seq", with pid in 1..INT_MAX and fd in
 * 0..INT_MAX in canonical decimal, so that printing the parts again gives
 * back the id itself. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ops.h"

static void fail(const char *what, const char *id)
{
    fprintf(stderr, "fuzz_holder: %s: \"%s\"\n", what, id);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *id = malloc(size + 1); /* exact size: ASan sees any read past the end */
    if (!id)
        return 0;
    memcpy(id, data, size);
    id[size] = '\0';
    struct ccap_ops_holder h;
    if (ccap_ops_parse_holder(id, &h) == 0) {
        char back[600];
        if (h.pid <= 0 || h.pid > INT_MAX || h.fd < 0 || h.fd > INT_MAX)
            fail("pid or fd out of range", id);
        if (h.prog[0])
            snprintf(back, sizeof back, "%s/%ld/%ld/%s/%s/%s", h.host, h.pid, h.fd, h.dest, h.prog, h.nonce);
        else
            snprintf(back, sizeof back, "%s/%ld/%ld/%s/%s", h.host, h.pid, h.fd, h.dest, h.nonce);
        if (strcmp(back, id) != 0)
            fail("accepted an id the shim never writes", id);
    }
    free(id);
    return 0;
}
