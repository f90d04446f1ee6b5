# wait_lease_expiry.sh -- nobody releases a SIGKILLed holder's permit: a waiter still gets it right after the lease ends (no lost wake-up).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
lease=1500
h_conf "$T/c.conf" api 1 $lease 10000 "127.0.0.1:$SRV_PORT"
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 60000 >"$T/a.out" &
a=$!
WAIT_S=5 h_wait_for h_holders_is api 1 || h_fail "A got no permit"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/b.out" &
b=$!
WAIT_S=5 h_wait_for eval '[ "$(h_rcli zcard "conncap:{api}:queue")" -eq 1 ]' || h_fail "B is not queued"
sleep 0.7           # A's heartbeat renews its lease (every lease/3) meanwhile
kill -9 $a
killed=$("$PROGS/monotime")
wait $b || h_fail "B failed: $(cat "$T/b.out")"
got=$(awk '/^connected/ {print $2}' "$T/b.out")
ms=$(python3 -c "print(int($got - $killed))")
h_note "B connected $ms ms after A was killed (lease $lease ms, renewed every $((lease / 3)) ms)"
# the lease ran out between lease*2/3 and lease after the kill; B re-checks
# at the earliest lease expiry, not at its next 1 s re-check or later
[ "$ms" -ge $((lease * 2 / 3 - 200)) ] || h_fail "B got the permit before A's lease ended ($ms ms)"
[ "$ms" -le $((lease + 500)) ] || h_fail "B got the permit $ms ms after the kill: lease expiry did not wake it"
h_rcli zrange 'conncap:{api}:holders' 0 -1 | grep -q "/$a/" && h_fail "dead holder A still listed"
echo ok
