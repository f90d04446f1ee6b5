# wait_wakeup.sh -- a waiter sleeps (no polling, no periodic re-check: its process's waker holds one BLPOP) and gets the permit within ms of a release.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" api 1 30000 20000 "127.0.0.1:$SRV_PORT"
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }
queued() { [ "$(h_rcli zcard 'conncap:{api}:queue')" -eq "$1" ]; }

mkfifo "$T/a.in"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
exec 7>"$T/a.in"
h_wait_for h_holders_is api 1 || h_fail "A got no permit"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/b.out" 7>&- &
b=$!
h_wait_for queued 1 || h_fail "B is not queued"
sleep 0.2
h_rcli monitor >"$T/monitor" 2>/dev/null 7>&- &
mon=$!
_pids+=("$mon")
sleep 4
blocked=$(h_rcli info clients | tr -d '\r' | awk -F: '$1 == "blocked_clients" {print $2}')
exec 7>&-          # A closes: its release wakes B
wait $b || h_fail "B failed: $(cat "$T/b.out")"
kill "$mon"

# what clients sent (commands run inside scripts show as "[N lua]": not sent)
sent=$(grep -v ' lua\] ' "$T/monitor" | grep '^[0-9]' | awk '{print toupper($4)}' | tr -d '"' | sort | uniq -c)
h_note "commands sent in about 4 s of waiting, then the hand-off:" $sent
blpop=$(echo "$sent" | awk '$2 == "BLPOP" {print $1}'); blpop=${blpop:-0}
evalsha=$(echo "$sent" | awk '$2 == "EVALSHA" || $2 == "EVAL" || $2 == "FCALL" {n += $1} END {print n + 0}')
# FCALL_RO: a new connection asks once whether the function library is loaded;
# INFO: this test's own
others=$(echo "$sent" | awk '$2 != "INFO" && $2 != "BLPOP" && $2 != "EVALSHA" && $2 != "EVAL" && $2 != "SCRIPT" && $2 != "FCALL" && $2 != "FCALL_RO"')
# 4 s of a 30 s lease: no re-check at all, B's waker blocked in its one
# BLPOP (sent before the window; none after the token: B is not waiting
# any more); then A's release (its first: EVAL with the source), B's
# winning attempt, B's release, maybe a heartbeat. A waiter re-checking
# every second sends 4 blocks and 4 attempts more.
[ "$blocked" = 1 ] || h_fail "B's waker is not blocked in Redis (blocked_clients ${blocked:-?})"
[ "$blpop" -le 2 ] || h_fail "want at most 2 blocks (no periodic re-check), got $blpop"
[ "$evalsha" -le 6 ] || h_fail "$evalsha scripts: the waiter re-checks while nothing changed"
[ -z "$others" ] || h_fail "unexpected commands: $others"

closed=$(awk '/^closed/ {print $2}' "$T/a.out")
got=$(awk '/^connected/ {print $2}' "$T/b.out")
[ -n "$closed" ] && [ -n "$got" ] || h_fail "no timestamps: A: $(cat "$T/a.out") B: $(cat "$T/b.out")"
ms=$(python3 -c "print(round($got - $closed, 1))")
h_note "hand-off: B connected $ms ms after A closed"
python3 -c "import sys; sys.exit(0 if $got - $closed < 250 else 1)" || h_fail "hand-off took $ms ms"
WAIT_S=5 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_rcli zrange 'conncap:{api}:holders' 0 -1)"
[ "$(h_rcli exists 'conncap:{api}:queue')" -eq 0 ] || h_fail "queue left behind"
echo ok
