# ops_fallback.sh -- permits granted while Redis was down are counted (fallback_granted) once the heartbeat registers them.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 30000
ON_DOWN=open h_conf "$T/c.conf" api 2 1500 300 "127.0.0.1:$SRV_PORT"
# Redis is down before the clients start: they connect anyway (on_redis_down =
# open); it comes back empty on the same socket, and their heartbeats register them
h_redis_stop
pids=()
for i in 1 2; do
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 30000 >/dev/null 2>"$T/err.$i" &
    pids+=($!)
done
count_is() { [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$SRV_STATS" cur)" -eq "$1" ]; }
WAIT_S=15 h_wait_for count_is 2 || h_fail "the clients did not connect while Redis was down (on_redis_down = open)"
h_redis_start    # same socket: the heartbeats reach it again
WAIT_S=20 h_wait_for h_holders_is api 2 || h_fail "the permits granted while Redis was down were not registered"
"$CLI" stats -c "$T/c.conf" --json > "$T/s.json" || h_fail "stats failed"
python3 - "$T/s.json" <<'PY' || h_fail "stats: $(cat "$T/s.json")"
import json, sys
c = json.load(open(sys.argv[1]))["semaphores"][0]["counters"]
assert c["fallback_granted"] == 2, c
assert c["reregistered"] >= 2, c     # registered by renew, as any holder Redis lost
assert c["acquired"] == 0, c         # never granted by Redis
PY
"$CLI" metrics -c "$T/c.conf" | python3 "$ROOT/tests/lib/promcheck.py" - --get 'conncap_fallback_granted_total{semaphore="api"}' > "$T/v" ||
    h_fail "metrics invalid"
[ "$(cat "$T/v")" = 2 ] || h_fail "conncap_fallback_granted_total is $(cat "$T/v")"
# counted once: later heartbeats do not add to it
sleep 1.5
[ "$("$CLI" stats -c "$T/c.conf" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["semaphores"][0]["counters"]["fallback_granted"])')" = 2 ] ||
    h_fail "fallback_granted grew after the registration"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
echo ok
