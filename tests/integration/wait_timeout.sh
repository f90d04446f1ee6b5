# wait_timeout.sh -- no permit within wait_timeout_ms: connect fails with the on_timeout errno.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 3000
h_conf "$T/c.conf" api 1 5000 300 "127.0.0.1:$SRV_PORT"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" python3 "$ROOT/tests/lib/pyclient.py" 127.0.0.1 "$SRV_PORT" &
holder=$!
WAIT_S=5 h_wait_for h_holders_is api 1 || h_fail "first client got no permit"
t0=$(date +%s%N)
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" python3 "$ROOT/tests/lib/pyclient.py" 127.0.0.1 "$SRV_PORT" --expect-errno ETIMEDOUT) \
    || h_fail "second client: want ETIMEDOUT, got '$out'"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
h_note "ETIMEDOUT after $ms ms (wait_timeout_ms 300, includes python start-up)"
[ "$ms" -ge 300 ] || h_fail "failed after $ms ms, before the wait timeout of 300 ms"
# another errno, and wait_timeout_ms = 0 (fail at once)
ON_TIMEOUT=EAGAIN h_conf "$T/c2.conf" api 1 5000 0 "127.0.0.1:$SRV_PORT"
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c2.conf" python3 "$ROOT/tests/lib/pyclient.py" 127.0.0.1 "$SRV_PORT" --expect-errno EAGAIN) \
    || h_fail "with on_timeout EAGAIN: got '$out'"
[ "$(h_server_stat total)" -eq 1 ] || h_fail "a refused connect reached the server"
wait $holder || h_fail "the holder failed"
[ "$(h_holders api)" -eq 0 ] || h_fail "holder left"
echo ok
