/* fuzz_reply.c -- libFuzzer target: reply bytes -> the RESP scanner (core/resp.c) -> hiredis's reader -> sem.c's parsing.
 * The first input byte picks the chunk size the bytes arrive in (1..256) and
 * the caps (shim or CLI); the rest is the stream. Checked: the scanner never
 * lets through what hiredis's reader refuses, and every parsed field is in
 * its documented range. */
#include <assert.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "resp.h"
#include "sem.h"

static void check_reply(const redisReply *rep)
{
    struct ccap_sem_result res;
    long long v;

    if (ccap_sem_parse_acquire(NULL, rep, &res) == 0) {
        assert(res.granted == 0 || res.granted == 1);
        assert(res.count >= 0 && res.count <= INT_MAX);
        assert(res.retry_ms >= 0 && res.retry_ms <= CCAP_SEM_MS_MAX);
        assert(res.wake_ms >= -1 && res.wake_ms <= CCAP_SEM_MS_MAX);
        assert(res.wake_ms + 1 > res.wake_ms); /* the sum runtime/waiting.c computes */
        assert(res.queue_full == 0 || res.queue_full == 1);
    }
    if (ccap_sem_parse_int(NULL, "reply", rep, 0, 1, &v) == 0)
        assert(v == 0 || v == 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ccap_resp_scan scan;
    redisReader *rd;
    size_t chunk, off;

    if (size < 1)
        return 0;
    chunk = (size_t)(data[0] & 0x7f) * 2 + 1;
    ccap_resp_scan_init(&scan, data[0] & 0x80 ? &ccap_resp_caps_cli : &ccap_resp_caps_shim);
    rd = redisReaderCreate();
    if (!rd)
        return 0;
    for (off = 1; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        void *rep;

        if (ccap_resp_scan(&scan, (const char *)data + off, n) < 0) {
            assert(scan.err);
            break;
        }
        assert(redisReaderFeed(rd, (const char *)data + off, n) == REDIS_OK);
        for (;;) {
            rep = NULL;
            /* what the scanner passed, hiredis parses */
            assert(redisReaderGetReply(rd, &rep) == REDIS_OK);
            if (!rep)
                break;
            check_reply(rep);
            freeReplyObject(rep);
        }
    }
    redisReaderFree(rd);
    return 0;
}
