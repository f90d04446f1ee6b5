# redis_restart_empty.sh -- Redis restarted empty while three permits are held: within one heartbeat the holders are back.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_redis_start
h_server_start 60000
lease=6000          # heartbeat every lease/3 = 2000 ms
ON_DOWN=closed h_conf "$T/c.conf" api 3 $lease 1000 "127.0.0.1:$SRV_PORT"
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 3 30000 > "$T/m.out" 2> "$T/m.err" &
_pids+=("$!")   # stopped by the harness if the test fails early
holder=$!
h_wait_for grep -q '^held 3$' "$T/m.out" || h_fail "three permits not held: $(cat "$T/m.out" "$T/m.err")"
h_holders_is api 3 || h_fail "redis does not list the three holders"
before=$(h_rcli zrange 'conncap:{api}:holders' 0 -1 | sort)
sleep 1   # somewhere in the middle of a heartbeat period

for round in 1 2; do
    h_rcli set marker 1 >/dev/null
    h_redis_restart
    t0=$(date +%s%N)
    # (the holders may be back already: a probing heartbeat can be that quick)
    [ -z "$(h_rcli get marker)" ] || h_fail "redis did not come back empty"
    WAIT_S=10 h_wait_for h_holders_is api 3 || h_fail "round $round: holders not re-registered within 10 s"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    h_note "round $round: the three holders were back $ms ms after the empty redis answered (heartbeat $((lease / 3)) ms)"
    [ $ms -le $((lease / 3 + 1000)) ] || h_fail "round $round: took $ms ms, more than one heartbeat (+1 s slack)"
    [ "$(h_rcli zrange 'conncap:{api}:holders' 0 -1 | sort)" = "$before" ] || h_fail "other holders than before"
    # the leases are live ones: they expire after a lease from now, not at once
    ttl=$(h_rcli pttl 'conncap:{api}:holders')
    [ "$ttl" -gt $((lease / 2)) ] || h_fail "holders key TTL $ttl ms: the re-added leases are not fresh"
    sleep 0.7
done
# the events are counted and logged
[ "$(h_rcli hget 'conncap:{api}:stats' reregistered)" = 3 ] || h_fail "stats: reregistered is not 3"
grep -q 're-registered 3 permit(s) of api' "$T/m.err" || h_fail "re-registration not logged: $(cat "$T/m.err")"
# the cap still holds afterwards: the set is full again
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$SRV_PORT" 1 2>/dev/null)
case "$out" in ETIMEDOUT*) ;; *) h_fail "a fourth connect was not refused: $out" ;; esac
h_stop_pid $holder
h_wait_for h_holders_is api 0 || h_fail "holders left after the holder exited"
echo ok
