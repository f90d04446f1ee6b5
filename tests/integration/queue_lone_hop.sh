# queue_lone_hop.sh -- a queued connect that is its process's only waiter takes its token in the queue's own
# thread: no other thread of the process wakes per hand-off (issue 26: the queued SYN leaves after one
# thread wake-up, as a lone blocking waiter's does, tests/integration/wait_lone_hop.sh).
# bench/bench.c qhandoff, queued rounds only (non-blocking connect in epoll; one permit of limit 1 held
# by the process itself, released 20 ms after the waiter queued). Counted by the kernel: the voluntary
# context switches of the process's threads that outlive a round -- the shim's (the waker above all),
# not the main thread, the bench's listener (named), the round's own waiting thread or the queue's
# thread (each lives one round) -- against the hand-offs made meanwhile. Old: the waker read every
# token and kicked the queue's thread, 2 or more switches per hand-off.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_build_bench
port=$(h_free_port)
h_conf "$T/h.conf" qh 1 30000 10000 "127.0.0.1:$port"
rounds=400
CONNCAP_CONFIG="$T/h.conf" LD_PRELOAD="$LIB" "$T/bench" qhandoff "$port" $rounds q >"$T/h.out" 2>"$T/h.err" &
pid=$!
_pids+=("$pid")
# switches: "TID voluntary_switches" for each thread of PID but the main one and the bench's listener
switches() {
    local t
    for t in /proc/"$pid"/task/*; do
        [ "${t##*/}" = "$pid" ] && continue
        [ "$(cat "$t/comm" 2>/dev/null)" = qh-listener ] && continue
        awk -v t="${t##*/}" '/^voluntary_ctxt_switches:/ {print t, $2}' "$t/status" 2>/dev/null
    done
}
WAIT_S=30 h_wait_for sh -c "[ \$(grep -c '^q' '$T/h.out') -ge 20 ]" || h_fail "the rounds did not get going: $(tail -3 "$T/h.err")"
before=$(switches)
n0=$(grep -c '^q' "$T/h.out")
sleep 2
after=$(switches)
n1=$(grep -c '^q' "$T/h.out")
kill -0 "$pid" 2>/dev/null || h_fail "the bench ended before the second sample: too fast a machine for $rounds rounds"
waits=$((n1 - n0))
others=$(awk 'NR == FNR {b[$1] = $2; next} ($1 in b) {s += $2 - b[$1]} END {print s + 0}' <(echo "$before") <(echo "$after"))
h_note "over $waits queued hand-offs: the threads that outlive a round switched $others times"
[ "$waits" -ge 20 ] || h_fail "too few hand-offs to judge: $waits"
awk -v o="$others" -v w="$waits" 'BEGIN {exit !(o <= 0.3 * w)}' \
    || h_fail "the shim's threads switched $others times over $waits queued hand-offs (want <= 0.3 per hand-off: the queue's thread takes its token itself)"
wait "$pid" || h_fail "qhandoff failed: $(tail -n 3 "$T/h.err")"
n=$(awk '$1 == "q" && $2 > 0 && $3 > 0' "$T/h.out" | wc -l)
[ "$n" -eq $rounds ] || h_fail "queued waiters connected after the release: $n of $rounds"
grep -iE 'error|warn' "$T/h.err" && h_fail "the shim complained (above)"
echo ok
