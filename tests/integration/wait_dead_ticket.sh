# wait_dead_ticket.sh -- waiters killed (kill -9) while they wait: their tickets stop blocking the live waiter behind them within the stated bound, 5/3 of the ticket TTL (runtime/waiting.c).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
# lease 3 s: the ticket TTL is max(lease, 3 s) = 3 s, refreshed every 2 s;
# a dead ticket holds the queue at most 3 + 2 s (plus commands)
h_conf "$T/c.conf" dt 1 3000 20000 "127.0.0.1:$SRV_PORT"
# in the background, env execs the program: $! is its pid
RUN=(env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf")
queued() { [ "$(h_rcli zcard "conncap:{dt}:queue")" -eq "$1" ]; }
"${RUN[@]}" "$PROGS/failclient" hold 127.0.0.1 "$SRV_PORT" >"$T/h.out" 2>"$T/h.err" &
h=$!; _pids+=("$h")
WAIT_S=5 h_wait_for h_holders_is dt 1 || h_fail "the holder got no permit"
w=()
for i in 1 2; do
    "${RUN[@]}" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/w$i.out" 2>"$T/w$i.err" &
    w+=("$!"); _pids+=("$!")
    WAIT_S=5 h_wait_for queued "$i" || h_fail "waiter $i not queued"
done
"${RUN[@]}" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/l.out" 2>"$T/l.err" &
live=$!; _pids+=("$live")
WAIT_S=5 h_wait_for queued 3 || h_fail "the live waiter not queued behind the two"
sleep 0.5
kill -9 "${w[@]}"; { wait "${w[@]}"; } 2>/dev/null
killed=$("$PROGS/monotime")
h_stop_pid "$h"     # its release runs at once: a permit is free, two dead tickets ahead
wait "$live" || h_fail "the live waiter failed: $(cat "$T/l.out")"
got=$(awk '/^connected/ { print $2 }' "$T/l.out")
ms=$(python3 -c "print(int($got - $killed))")
h_note "the live waiter got the free permit $ms ms after the waiters queued ahead of it were killed (bound 5000 ms + commands)"
[ "$ms" -le 6500 ] || h_fail "dead tickets blocked a free permit for $ms ms"
[ "$(h_rcli zcard 'conncap:{dt}:queue')" -eq 0 ] || h_fail "dead tickets still queued"
echo ok
