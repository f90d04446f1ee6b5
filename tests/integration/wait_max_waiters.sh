# wait_max_waiters.sh -- max_waiters = 2, six blocked connects on a full semaphore: two queue and wait, four fail at once with on_timeout's errno, counted by stats and metrics.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
ON_TIMEOUT=EAGAIN h_conf "$T/c.conf" api 1 5000 20000 "127.0.0.1:$SRV_PORT"
sed -i 's/wait_timeout_ms = 20000;/& max_waiters = 2;/' "$T/c.conf"
grep -q "max_waiters = 2;" "$T/c.conf" || h_fail "config not written: $(cat "$T/c.conf")"
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }

mkfifo "$T/a.in"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
holder=$!
exec 7>"$T/a.in"
WAIT_S=5 h_wait_for h_holders_is api 1 || h_fail "first client got no permit"

pids=()
for i in 1 2 3 4 5 6; do
    run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/w$i.out" 2>"$T/w$i.err" 7>&- &
    pids+=($!)
done
# four are refused at once: done long before their 20 s wait would end
refused() { [ "$(cat "$T"/w*.out | grep -c '^error EAGAIN')" -ge 4 ]; }
WAIT_S=10 h_wait_for refused || h_fail "not four refused: $(cat "$T"/w*.out)"
for f in "$T"/w*.out; do
    set -- $(head -1 "$f")
    [ "${1:-}" = error ] || continue
    awk -v ms="$3" 'BEGIN { exit !(ms < 3000) }' || h_fail "a refusal took $3 ms: not at once"
    # its line: semaphore, destination, holders/limit and the queue that refused it, the errno
    want="warn: queue of api full (max_waiters 2) for 127.0.0.1:$SRV_PORT: holders 1/1, queue 2: connect fails at once with EAGAIN"
    grep -qF "$want" "${f%.out}.err" || h_fail "$f: no line \"$want\": $(cat "${f%.out}.err")"
done
[ "$(h_rcli zcard 'conncap:{api}:queue')" -eq 2 ] || h_fail "queue holds $(h_rcli zcard 'conncap:{api}:queue'), not 2"
[ "$(cat "$T"/w*.out | grep -c '^connected')" -eq 0 ] || h_fail "a waiter connected while the holder held"

"$CLI" stats -c "$T/c.conf" --json > "$T/s.json" || h_fail "stats --json failed"
python3 -c '
import json, sys
[s] = json.load(open(sys.argv[1]))["semaphores"]
c = s["counters"]
assert c["queue_full"] == 4 and c["denied"] >= 6 and c["timed_out"] == 0, c
' "$T/s.json" || h_fail "stats: $(cat "$T/s.json")"
"$CLI" stats -c "$T/c.conf" | grep -q " queue_full 4" || h_fail "stats text: $("$CLI" stats -c "$T/c.conf")"
"$CLI" metrics -c "$T/c.conf" | grep -qx 'conncap_queue_full_total{semaphore="api"} 4' ||
    h_fail "metrics: $("$CLI" metrics -c "$T/c.conf" | grep queue_full)"

# the holder leaves: the two queued ones get their permits in turn
exec 7>&-
wait $holder || h_fail "the holder failed"
ok=0; bad=0
t0=$(date +%s%N)
for p in "${pids[@]}"; do if wait "$p"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi; done
h_note "the queued two got their permits $(( ($(date +%s%N) - t0) / 1000000 )) ms after the holder left"
[ "$ok" -eq 2 ] && [ "$bad" -eq 4 ] || h_fail "$ok connected, $bad failed (want 2 and 4): $(cat "$T"/w*.out)"
[ "$(h_server_stat total)" -eq 3 ] || h_fail "server saw $(h_server_stat total) connections, not 3"
WAIT_S=5 h_wait_for h_holders_is api 0 || h_fail "holders left"
echo ok
