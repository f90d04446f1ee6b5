/* fuzz_match.c -- libFuzzer target: the destination pattern parser and matcher (core/match.c). */
/* The input, cut at its first NUL, is one pattern; what parses is matched against an IPv4 and an IPv6
 * address and a host name, and the name normaliser gets the same text. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "match.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), err[256], norm[256];
    struct ccap_pattern p;
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (ccap_pattern_parse(text, &p, err, sizeof err) == 0) {
        struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(443) };
        struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(8443) };
        s4.sin_addr.s_addr = htonl(0x0a000001);
        inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
        ccap_pattern_match_addr(&p, (struct sockaddr *)&s4, sizeof s4);
        ccap_pattern_match_addr(&p, (struct sockaddr *)&s6, sizeof s6);
        ccap_pattern_match_name(&p, "api.example.com", 443);
        ccap_pattern_match_name(&p, text, 80);
    }
    ccap_name_normalize(text, norm, sizeof norm);
    free(text);
    return 0;
}
