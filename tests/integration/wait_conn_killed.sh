# wait_conn_killed.sh -- a waiter whose BLPOP connection the server closes (CLIENT KILL, an idle timeout, a restart) blocks again on a new one, and is still woken by the release.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" api 1 30000 20000 "127.0.0.1:$SRV_PORT"
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }
queued() { [ "$(h_rcli zcard 'conncap:{api}:queue')" -eq "$1" ]; }
blocked() { h_rcli client list | grep -q 'cmd=blpop'; }

mkfifo "$T/a.in"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
exec 7>"$T/a.in"
h_wait_for h_holders_is api 1 || h_fail "A got no permit"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/b.out" 7>&- &
b=$!
h_wait_for queued 1 || h_fail "B is not queued"
h_wait_for blocked || h_fail "B does not block in BLPOP"
# every client connection but redis-cli's own: A's and B's, B's BLPOP too
h_rcli client kill type normal >/dev/null
# before: B slept out its re-check (up to 1 s) and then polled for the rest of its wait
WAIT_S=3 h_wait_for blocked || h_fail "B did not block again after its connection was closed"
exec 7>&-          # A closes (its release goes on a new connection): B is woken
wait $b || h_fail "B failed: $(cat "$T/b.out")"
closed=$(awk '/^closed/ {print $2}' "$T/a.out")
got=$(awk '/^connected/ {print $2}' "$T/b.out")
[ -n "$closed" ] && [ -n "$got" ] || h_fail "no timestamps: A: $(cat "$T/a.out") B: $(cat "$T/b.out")"
h_note "hand-off after the kill: B connected $(python3 -c "print(round($got - $closed, 1))") ms after A closed"
WAIT_S=5 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_rcli zrange 'conncap:{api}:holders' 0 -1)"
echo ok
