# reload_wait_limit.sh -- a limit raised by hot reload reaches connects already waiting: the process applies the reload although its only thread waits in connect(), and its waits re-check at once with the new limit.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
# a long lease and wait: without the reload's re-check the waiter would sleep
# until its ticket refresh (2/3 of 120 s) or its deadline (25 s)
h_conf "$T/c.conf" s 1 120000 25000 "127.0.0.1:$SRV_PORT"
export CONNCAP_CONFIG="$T/c.conf"
connected() { grep -q '^connected' "$1"; }
qlen_is() { [ "$(h_rcli zcard 'conncap:{s}:queue')" -eq "$1" ]; }

mkfifo "$T/a.in"
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
A=$!
exec 7>"$T/a.in"
WAIT_S=5 h_wait_for connected "$T/a.out" || h_fail "the holder got no permit: $(cat "$T/a.out")"
# the waiter: one thread, blocked in connect() from here on
LD_PRELOAD="$LIB" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 200 >"$T/w.out" 2>"$T/w.err" 7>&- &
W=$!
WAIT_S=5 h_wait_for qlen_is 1 || h_fail "the waiter did not queue"
sleep 1.5   # asleep on its wake list, past the first second of its life
start=$(date +%s%N)
h_conf "$T/c.new" s 2 120000 25000 "127.0.0.1:$SRV_PORT"
mv "$T/c.new" "$T/c.conf"
WAIT_S=8 h_wait_for connected "$T/w.out" || h_fail "the limit raised to 2 in the file did not reach the waiter: $(cat "$T/w.out" "$T/w.err")"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
h_note "the waiter connected $ms ms after the file changed"
wait "$W" || h_fail "the waiter failed: $(cat "$T/w.out")"
[ "$(h_server_stat max)" -le 2 ] || h_fail "the server saw $(h_server_stat max) at once, limit 2"
exec 7>&-
wait "$A" || h_fail "the holder failed"
echo ok
