# wait_timeout.sh -- no permit within wait_timeout_ms: connect fails with the on_timeout errno, on time, and leaves the queue.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" api 1 5000 300 "127.0.0.1:$SRV_PORT"
run() { local c=$1; shift; LD_PRELOAD="$LIB" CONNCAP_CONFIG="$c" "$@"; }

mkfifo "$T/a.in"
run "$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
holder=$!
exec 7>"$T/a.in"
WAIT_S=5 h_wait_for h_holders_is api 1 || h_fail "first client got no permit"

# the timeout comes on time: measured inside the client (no start-up
# noise); the smallest overshoot of three must be small (30 ms; 150 in a
# sanitizer build), none may be huge
for w in 300 1000; do
    h_conf "$T/w$w.conf" api 1 5000 $w "127.0.0.1:$SRV_PORT"
    over=()
    for i in 1 2 3; do
        out=$(run "$T/w$w.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 7>&-) && h_fail "connected: $out"
        set -- $out
        [ "$1 $2" = "error ETIMEDOUT" ] || h_fail "want ETIMEDOUT, got '$out'"
        over+=("$(python3 -c "print(int(round($3 - $w)))")")
    done
    h_note "wait_timeout_ms $w: ETIMEDOUT after $w ms + (${over[*]}) ms"
    for o in "${over[@]}"; do
        [ "$o" -ge 0 ] || h_fail "failed $o ms before the wait timeout of $w ms"
        [ "$o" -le 250 ] || h_fail "failed $o ms after the wait timeout of $w ms"
    done
    min=$(printf '%s\n' "${over[@]}" | sort -n | head -1)
    lim=30; [ -n "${SAN:-}" ] && lim=150
    [ "$min" -le "$lim" ] || h_fail "the timeout of $w ms overshoots by at least $min ms"
done
[ "$(h_rcli exists 'conncap:{api}:queue')" -eq 0 ] || h_fail "a timed-out waiter stayed queued"

# another errno, and wait_timeout_ms = 0 (fail at once)
ON_TIMEOUT=EAGAIN h_conf "$T/c2.conf" api 1 5000 0 "127.0.0.1:$SRV_PORT"
out=$(run "$T/c2.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 7>&-) && h_fail "connected: $out"
set -- $out
[ "$1 $2" = "error EAGAIN" ] || h_fail "with on_timeout EAGAIN: got '$out'"
python3 -c "import sys; sys.exit(0 if $3 < 200 else 1)" || h_fail "wait_timeout_ms 0 waited $3 ms"
[ "$(h_server_stat total)" -eq 1 ] || h_fail "a refused connect reached the server"
exec 7>&-
wait $holder || h_fail "the holder failed"
WAIT_S=5 h_wait_for h_holders_is api 0 || h_fail "holder left"
echo ok
