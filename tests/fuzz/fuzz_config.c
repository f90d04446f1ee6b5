/* fuzz_config.c -- libFuzzer target: the configuration loader (core/config.c, core/conftext.c) from a buffer. */
/* The input is the text of a file named /nonexistent-ccap-fuzz/fuzz.conf: relative @include names lead
 * nowhere, absolute ones reach only what ccap_file_read accepts. The loader must never exit, hang or crash
 * (libconfig's scanner calls exit() on a read error), whatever the text; loaded configs are matched once and
 * their notes taken, to reach what they hold. By hand:
 *   clang-14 -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Icore -Ibuild -o fuzz_config \
 *       tests/fuzz/fuzz_config.c core/*.c build/scripts.c `pkg-config --cflags --libs hiredis libconfig` -ldl -pthread
 *   LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp ./fuzz_config -max_len=4096 tests/fuzz/corpus/fuzz_config */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"

static void note(bool warn, const char *msg, void *arg)
{
    (void)warn;
    *(size_t *)arg += strlen(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ccap_config *cfg = NULL;
    char err[512];
    if (ccap_config_load_text("/nonexistent-ccap-fuzz/fuzz.conf", (const char *)data, size, &cfg, err, sizeof err) ==
        0) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(443) };
        sa.sin_addr.s_addr = htonl(0x0a000001);
        const char *names[] = { "api.example.com" };
        size_t n = 0;
        ccap_config_match(cfg, (const struct sockaddr *)&sa, sizeof sa, names, 1);
        ccap_config_notes(cfg, note, &n);
        ccap_config_free(cfg);
    }
    return 0;
}
