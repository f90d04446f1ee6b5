# wait_sndtimeo.sh -- a blocking connect with SO_SNDTIMEO (1 s) waiting for a permit (limit 1, held 3 s by
# another process) gives up when a real one does: -1/EINPROGRESS after about its SO_SNDTIMEO, and the
# connect goes on (queued), connecting once the permit comes (SO_ERROR 0, a peer). The old code waited
# for the permit, ignoring the program's bound: 0 after the 3 s. Without SO_SNDTIMEO it waits, as before.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 200
h_conf "$T/c.conf" so 1 10000 20000 "127.0.0.1:$SRV_PORT"
FC="$PROGS/failclient"
hold() { # holds the permit for 3 s, in the background
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 1 3000 >/dev/null 2>&1 &
    _pids+=("$!")
    WAIT_S=5 h_wait_for h_holders_is so 1 || h_fail "the holder did not take the permit"
}
hold
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" timeout 20 "$PROGS/sndtimeo" 127.0.0.1 "$SRV_PORT" 1000)
h_note "SO_SNDTIMEO 1 s: $(echo $out)"
read -r _ err _ ms _ then _ peer _ ms2 <<<"$(echo $out)"
[ "$err" = EINPROGRESS ] || h_fail "connect gave '$err' after ${ms:-?} ms, want EINPROGRESS at SO_SNDTIMEO"
[ "$ms" -ge 950 ] && [ "$ms" -lt 2500 ] || h_fail "EINPROGRESS after $ms ms, want about SO_SNDTIMEO's 1000"
[ "$then" = 0 ] && [ "$peer" = yes ] || h_fail "after EINPROGRESS the socket became '$then' (peer $peer), want connected"
WAIT_S=10 h_wait_for h_holders_is so 0 || h_fail "holders left: $(h_holders so)"
hold
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" timeout 20 "$PROGS/sndtimeo" 127.0.0.1 "$SRV_PORT" 0)
h_note "no SO_SNDTIMEO: $(echo $out)"
read -r _ err _ ms <<<"$(echo $out)"
[ "$err" = 0 ] && [ "$ms" -ge 1500 ] || h_fail "without SO_SNDTIMEO: connect gave '$err' after $ms ms, want 0 once the permit came"
echo ok
