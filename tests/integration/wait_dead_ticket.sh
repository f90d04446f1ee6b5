# wait_dead_ticket.sh -- queued waiters killed while they wait: their tickets stop blocking the queue within about one round of re-checks, not 6 s.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" dt 1 9000 20000 "127.0.0.1:$SRV_PORT"
# in the background, env execs the program: $! is its pid
RUN=(env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf")
"${RUN[@]}" "$PROGS/failclient" hold 127.0.0.1 "$SRV_PORT" >"$T/h.out" 2>"$T/h.err" &
h=$!; _pids+=("$h")
WAIT_S=5 h_wait_for h_holders_is dt 1 || h_fail "the holder got no permit"
w=()
for i in 1 2; do
    "${RUN[@]}" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/w$i.out" 2>"$T/w$i.err" &
    w+=("$!"); _pids+=("$!")
done
WAIT_S=5 h_wait_for eval '[ "$(h_rcli zcard "conncap:{dt}:queue")" -eq 2 ]' || h_fail "two waiters not queued"
sleep 0.5
kill -9 "${w[@]}"; { wait "${w[@]}"; } 2>/dev/null
killed=$("$PROGS/monotime")
h_stop_pid "$h"     # its release runs at once: a permit is free, two dead tickets ahead
"${RUN[@]}" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/f.out" 2>"$T/f.err" || h_fail "the fresh connect failed: $(cat "$T/f.out")"
got=$(awk '/^connected/ { print $2 }' "$T/f.out")
ms=$(python3 -c "print(int($got - $killed))")
# a ticket lives one re-check (1 s) + 500 ms slack + 2 commands (500 ms each
# here) unless refreshed; the fresh connect sees it gone at its next re-check
h_note "a fresh connect got the free permit $ms ms after the waiters queued ahead of it were killed"
[ "$ms" -le 4500 ] || h_fail "dead tickets blocked a free permit for $ms ms"
[ "$(h_rcli zcard 'conncap:{dt}:queue')" -eq 0 ] || h_fail "dead tickets still queued"
echo ok
