# queue_lost_socket.sh -- a queued connect that lost the program's socket (the program closed the number the
# shim kept it on, with no number free to move it to) and whose descriptor the program then closes at once:
# the entry is freed by the queue's thread once its wait has ended, never while that thread still runs it
# (the old code freed it in close(), and the thread then wrote to freed memory: ASan's heap-use-after-free).
# 40 rounds of bench-free tests/progs/qlost.c; nothing left in Redis after.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 100
h_conf "$T/q.conf" ql 1 30000 8000 "127.0.0.1:$SRV_PORT"
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/q.conf" timeout 60 "$PROGS/qlost" "$SRV_PORT" 40 2>"$T/err"); rc=$?
h_note "qlost: $out (exit $rc)"
[ $rc -eq 0 ] || h_fail "qlost exit $rc: $(grep -m3 -E 'ERROR|SUMMARY|#[0-9] ' "$T/err")"
grep -q "AddressSanitizer\|ThreadSanitizer" "$T/err" && h_fail "a sanitizer report: $(grep -m5 -E 'ERROR|SUMMARY|#[0-9] ' "$T/err")"
[ "${out#rounds 40 lost }" -ge 1 ] 2>/dev/null || h_fail "no round lost the program's socket: '$out' (the case is not reached)"
clean() { local k; for k in holders queue qexp; do [ "$(h_rcli zcard "conncap:{ql}:$k")" -eq 0 ] || return 1; done; }
WAIT_S=10 h_wait_for clean || h_fail "left in Redis: holders $(h_holders ql), queue $(h_rcli zcard 'conncap:{ql}:queue')"
echo ok
