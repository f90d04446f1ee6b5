# wait_idle_cost.sh -- 50 waiting threads in one process and 20 waiting processes cost Redis at most 0.25 commands per waiter-second, over at most 2 connections per process; then all get the permit in turn, the cap held.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
# each connection counts until its reply (100 ms): the cap is seen without the race of a
# close and the next accept
h_server_start 100
# TCP, not the Unix socket: ss names the process of each connection
cat >"$T/c.conf" <<CONF
redis = { host = "127.0.0.1"; port = $REDIS_PORT; connect_timeout_ms = 300; command_timeout_ms = 1000; key_prefix = "conncap:"; };
semaphores = ( { name = "ic"; limit = 1; lease_ms = 30000; wait_timeout_ms = 60000; } );
rules = ( { semaphore = "ic"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_timeout = "ETIMEDOUT";
log_level = "warn";
CONF
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }
queued() { [ "$(h_rcli zcard 'conncap:{ic}:queue')" -eq "$1" ]; }
WINDOW_S=${WINDOW_S:-18}

mkfifo "$T/a.in"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" 2>"$T/a.err" &
_pids+=("$!")
exec 7>"$T/a.in"
h_wait_for h_holders_is ic 1 || h_fail "the holder got no permit"
run "$PROGS/capclient" 127.0.0.1 "$SRV_PORT" 50 1 0 >"$T/t.out" 2>"$T/t.err" 7>&- &
tp=$!; _pids+=("$tp")
wp=()
for i in $(seq 20); do
    run "$PROGS/capclient" 127.0.0.1 "$SRV_PORT" 1 1 0 >"$T/w$i.out" 2>"$T/w$i.err" 7>&- &
    wp+=("$!"); _pids+=("$!")
done
WAIT_S=20 h_wait_for queued 70 || h_fail "70 waiters not queued: $(h_rcli zcard 'conncap:{ic}:queue')"
sleep 1
# the window: the commands clients sent (INFO commandstats)
s0=$(h_redis_sent -s "$REDIS_SOCK")
t0=$("$PROGS/monotime")
sleep $((WINDOW_S / 2))
# connections per waiting process, by their local end (ss names the process)
ss -Htnp state established "( dport = :$REDIS_PORT )" >"$T/ss" 2>/dev/null
clients=$(h_rcli client list | grep -vc 'cmd=client')
sleep $((WINDOW_S - WINDOW_S / 2))
t1=$("$PROGS/monotime")
sent=$(( $(h_redis_sent -s "$REDIS_SOCK") - s0 ))
ws=$(python3 -c "print(round(70 * ($t1 - $t0) / 1000.0, 1))")
rate=$(python3 -c "print(round($sent / $ws, 3))")
h_note "$sent commands sent in $ws waiter-seconds: $rate per waiter-second"
per=$(grep -o 'pid=[0-9]*' "$T/ss" | sort | uniq -c | sort -rn)
most=$(echo "$per" | awk 'NR == 1 {print $1}')
h_note "$clients Redis clients for 22 processes; most per process: $most"
python3 -c "import sys; sys.exit(0 if $sent <= 0.25 * $ws else 1)" || h_fail "$rate commands per waiter-second (want <= 0.25)"
[ "${most:-99}" -le 2 ] || h_fail "a process has $most Redis connections: $(echo $per)"
[ "$clients" -le 44 ] || h_fail "$clients Redis clients for 22 processes (want <= 44)"
exec 7>&-          # the holder closes: the 70 waiters get the permit one after another
for p in "${wp[@]}"; do wait "$p" || h_fail "a waiting process failed: $(cat "$T"/w*.out | grep -v '^ok' | head -3)"; done
wait "$tp" || h_fail "the threads failed: $(cat "$T/t.out")"
[ "$(h_server_stat max)" -le 1 ] || h_fail "the server saw $(h_server_stat max) at once (limit 1)"
[ "$(h_server_stat total)" -eq 71 ] || h_fail "the server saw $(h_server_stat total) connections, want 71"
echo ok
