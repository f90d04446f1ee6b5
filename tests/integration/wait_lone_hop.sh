# wait_lone_hop.sh -- a process's only waiter takes its token in its own thread: no other thread of it wakes per wait.
# Two processes in connect loops (5 ms holds: the server closes) on a
# semaphore of limit 1: each connect waits for the other's hold. A lone waiter (one waiting thread in its
# process) blocks on its own wake list, so a token costs one thread wake-up
# (the waiter's), not two (the waker thread's, which then kicks the waiter).
# Counted by the kernel: the voluntary context switches of each thread of a
# client while it runs, against the connects it made meanwhile.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 5
h_conf "$T/c.conf" api 1 30000 60000 "127.0.0.1:$SRV_PORT"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/connloop" 127.0.0.1 "$SRV_PORT" 2 400 -1 >"$T/out" 2>"$T/err" &
loop=$!
_pids+=("$loop")
# switches PID: "TID voluntary_switches" for each thread of PID
switches() {
    local t
    for t in /proc/"$1"/task/*; do
        awk -v t="${t##*/}" '/^voluntary_ctxt_switches:/ {print t, $2}' "$t/status" 2>/dev/null
    done
}
WAIT_S=20 h_wait_for sh -c "[ \$(grep -c '^ok' '$T/out') -ge 100 ]" || h_fail "the loops did not get going: $(head -3 "$T/err")"
child=$(pgrep -P "$loop" | head -1)
[ -n "$child" ] || h_fail "no client process found"
# connloop's lines do not name pids: both children's connects are counted
# (they alternate, limit 1), half of them this child's
before=$(switches "$child")
n0=$(grep -c '^ok' "$T/out")
sleep 1.5
after=$(switches "$child")
n1=$(grep -c '^ok' "$T/out")
kill -0 "$child" 2>/dev/null || h_fail "the client ended before the second sample: too fast a machine for 400 connects"
waits=$(( (n1 - n0) / 2 )) # this child's connects: every one of them waited for the other's hold
main=$(awk -v m="$child" 'NR == FNR {b[$1] = $2; next} $1 == m {print $2 - b[$1]}' <(echo "$before") <(echo "$after"))
others=$(awk -v m="$child" 'NR == FNR {b[$1] = $2; next} $1 != m && ($1 in b) {s += $2 - b[$1]} END {print s + 0}' <(echo "$before") <(echo "$after"))
h_note "over $waits waited connects of one process: main thread $main switches, its other threads $others"
[ "$waits" -ge 20 ] || h_fail "too few connects to judge: $waits"
awk -v o="$others" -v w="$waits" 'BEGIN {exit !(o <= 0.3 * w)}' \
    || h_fail "the client's other threads switched $others times over $waits waits (want <= 0.3 per wait: the waiter's own thread takes its token)"
wait "$loop" || h_fail "some connects failed: $(grep -v '^ok' "$T/out" | head -3)"
[ "$(h_server_stat max)" -le 1 ] || h_fail "cap exceeded: $(h_server_stat max)"
echo ok
