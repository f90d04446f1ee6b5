# ops_wake_queue.sh -- permits an operator frees (conncap reset of a SIGKILLed holder, set-limit raised) go to the queued waiters at once, not at their deadline.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
# a long lease and wait: without a wake-up the waiter would sleep until its deadline (25 s)
h_conf "$T/c.conf" s 1 120000 25000 "127.0.0.1:$SRV_PORT"
export CONNCAP_CONFIG="$T/c.conf"
connected() { grep -q '^connected' "$1"; }

# reset: the only holder was SIGKILLed; its lease would hold the permit 2 min
mkfifo "$T/a.in"
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
A=$!
exec 7>"$T/a.in"
WAIT_S=5 h_wait_for h_holders_is s 1 || h_fail "the holder got no permit"
kill -9 "$A"
exec 7>&-
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 200 >"$T/w1.out" &
W1=$!
qlen_is() { [ "$(h_rcli zcard 'conncap:{s}:queue')" -eq "$1" ]; }
WAIT_S=5 h_wait_for qlen_is 1 || h_fail "the waiter did not queue"
sleep 0.5   # asleep on its wake list
"$CLI" reset -c "$T/c.conf" s --yes 2>"$T/reset.err" || h_fail "reset failed: $(cat "$T/reset.err")"
WAIT_S=8 h_wait_for connected "$T/w1.out" || h_fail "after reset, the waiter still waits: $(cat "$T/w1.out")"
wait "$W1" || h_fail "the waiter failed: $(cat "$T/w1.out")"

# set-limit: a live holder keeps limit 1 full; raised to 2, the waiter goes
mkfifo "$T/b.in"
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/b.in" >"$T/b.out" &
B=$!
exec 8>"$T/b.in"
WAIT_S=5 h_wait_for connected "$T/b.out" || h_fail "the second holder got no permit: $(cat "$T/b.out")"
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 200 >"$T/w2.out" 8>&- &
W2=$!
WAIT_S=5 h_wait_for qlen_is 1 || h_fail "the second waiter did not queue"
sleep 0.5
"$CLI" set-limit -c "$T/c.conf" s 2 >"$T/sl.out" 2>&1 || h_fail "set-limit failed: $(cat "$T/sl.out")"
WAIT_S=8 h_wait_for connected "$T/w2.out" || h_fail "after set-limit 2, the waiter still waits: $(cat "$T/w2.out")"
wait "$W2" || h_fail "the second waiter failed: $(cat "$T/w2.out")"
[ "$(h_server_stat max)" -le 2 ] || h_fail "the server saw $(h_server_stat max) at once, limit 2"
exec 8>&-
wait "$B" || h_fail "the second holder failed"
echo ok
