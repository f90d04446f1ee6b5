# queue_handoff.sh -- a queued connect's hand-off, many times in one process (issue 26): one permit (limit 1),
# held by a connection of the process itself, one waiter per round -- a blocking connect, a non-blocking one
# queued in epoll (edge-triggered, added before its connect, as nginx does) or in poll -- then the holder
# closes: every waiter's connection reaches the listener, each queued one is reported writable with SO_ERROR
# 0 (bench/bench.c qhandoff fails on anything else, or after 10 s), and no holder, waiter or ticket is left
# in Redis. The latencies it prints are bench/qconn.sh's figures; none is asserted here.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_build_bench
port=$(h_free_port)
h_conf "$T/h.conf" qh 1 30000 10000 "127.0.0.1:$port"
rounds=40
CONNCAP_CONFIG="$T/h.conf" LD_PRELOAD="$LIB" "$T/bench" qhandoff "$port" $rounds bqp >"$T/h.out" 2>"$T/h.err" ||
    h_fail "qhandoff failed: $(tail -n 3 "$T/h.err")"
for m in b q p; do
    n=$(awk -v m=$m '$1 == m && $2 > 0 && $3 > 0' "$T/h.out" | wc -l)
    [ "$n" -eq $rounds ] || h_fail "waiters of kind $m: $n of $rounds connected after the release"
done
all_clean() {
    local k
    for k in holders waiters queue qexp; do [ "$(h_rcli zcard "conncap:{qh}:$k")" -eq 0 ] || return 1; done
}
h_wait_for all_clean || h_fail "left in Redis: holders $(h_holders qh), queue $(h_rcli zcard 'conncap:{qh}:queue')"
grep -iE 'error|warn' "$T/h.err" && h_fail "the shim complained (above)"
echo "ok: $((3 * rounds)) hand-offs"
