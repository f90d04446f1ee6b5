# redis_stall_renew.sh -- a Redis stall (SIGSTOP for 2 s) under a churning program (20 threads of blocking
# connects, limit 4, on_redis_down = "open"): the permits on_redis_down granted meanwhile are registered
# by the heartbeat's renew, which may time out in the stalled Redis and still run when it wakes. Those
# the program closed meanwhile must be released there too: afterwards no holder is left beyond the live
# sockets (none once the program has exited, within a few beats; leases are 30 s), and no connect fails.
# The old code sent nothing for a locally granted permit closed while Redis was down, and the late renew
# left it a holder for its whole lease: 8 of 4 permits taken, waiters timed out.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
h_redis_start
h_server_start 300
ON_DOWN=open h_conf "$T/c.conf" st 4 30000 30000 "127.0.0.1:$SRV_PORT"
stalled=0
trap 'rc=$?; [ $stalled = 1 ] && kill -CONT "$REDIS_PID" 2>/dev/null; (exit $rc); h_cleanup' EXIT
fails=0
for round in 1 2 3; do
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" timeout 90 python3 "$ROOT/tests/lib/clients/churn_threads.py" \
        "$SRV_PORT" 20 7 >"$T/out.$round" 2>"$T/err.$round" &
    cp=$!
    sleep 2
    kill -STOP "$REDIS_PID"; stalled=1
    sleep 2
    kill -CONT "$REDIS_PID"; stalled=0
    wait "$cp"
    h_note "round $round: $(cat "$T/out.$round"); $(grep -o 'on_redis_down granted [0-9]*' "$T/err.$round" | head -1)"
    read -r _ ok _ failed _ codes <"$T/out.$round"
    [ "${failed:-x}" = 0 ] || { h_note "round $round: $failed connects failed ($codes)"; fails=$((fails + 1)); }
    WAIT_S=5 h_wait_for h_holders_is st 0 || {
        h_note "round $round: $(h_holders st) holders left after the program exited: $(h_rcli zrange 'conncap:{st}:holders' 0 3 | paste -sd' ')"
        fails=$((fails + 1))
    }
done
[ $fails -eq 0 ] || h_fail "$fails of 3 rounds left holders behind the stall, or failed connects"
echo ok
