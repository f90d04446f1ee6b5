/* fuzz_permits.c -- libFuzzer target: the CONNCAP_PERMITS decoder (runtime/handoff.c).
 * Any input: decode never crashes; what it accepts encodes back and decodes
 * to the same entries; ccap_handoff_pid agrees with decode on the pid. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handoff.h"

static void round_trip(pid_t pid, const struct ccap_handoff_entry *e, size_t n)
{
    struct ccap_handoff_entry *e2 = NULL;
    size_t n2 = 0, kept = 0;
    char *s = NULL;
    pid_t pid2;

    if (ccap_handoff_encode(pid, e, n, &s, &kept) < 0)
        return; /* e.g. a negative fd or lease the decoder let through is refused here */
    assert(strncmp(s, "CONNCAP_PERMITS=", 16) == 0);
    assert(ccap_handoff_decode(s + 16, &pid2, &e2, &n2) == 0);
    assert(pid2 == pid && n2 == kept);
    for (size_t i = 0; i < n2; i++) {
        assert(e2[i].fd == e[i].fd && e2[i].dev == e[i].dev && e2[i].ino == e[i].ino);
        assert(e2[i].lease_ms == e[i].lease_ms);
        assert(strcmp(e2[i].sem, e[i].sem) == 0 && strcmp(e2[i].holder, e[i].holder) == 0);
    }
    free(e2);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ccap_handoff_entry *e = NULL;
    char *value = malloc(size + 1);
    size_t n = 0;
    pid_t pid;

    if (!value)
        return 0;
    memcpy(value, data, size);
    value[size] = '\0';
    if (ccap_handoff_decode(value, &pid, &e, &n) == 0) {
        assert(ccap_handoff_pid(value) == pid);
        round_trip(pid, e, n);
        free(e);
    }
    free(value);
    return 0;
}
