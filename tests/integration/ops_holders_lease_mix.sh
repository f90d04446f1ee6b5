# ops_holders_lease_mix.sh -- holders' ages before their first renewal, when processes use different lease_ms for one
# semaphore (a service's configuration and a scripts' one): never older than they are by more than half their lease left.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/main.conf" api 5 30000 100 "127.0.0.1:$SRV_PORT"
h_conf "$T/scripts.conf" api 5 10000 100 "127.0.0.1:$SRV_PORT"
hold() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/$1.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 60000 >/dev/null 2>&1 & _pids+=("$!"); }
hold scripts
WAIT_S=10 h_wait_for h_holders_is api 1 || h_fail "the scripts' holder got no permit"
hold main
WAIT_S=10 h_wait_for h_holders_is api 2 || h_fail "the service's holder got no permit"
t0=$(date +%s%N)
sleep 2
# read with each configuration; neither holder is renewed yet (first renewal
# at a third of its lease: 3.3 s and 10 s)
for c in main scripts; do
    "$CLI" holders -c "$T/$c.conf" --json api > "$T/$c.json" || h_fail "holders -c $c.conf failed"
done
up=$(( ($(date +%s%N) - t0) / 1000000 + 2000 ))   # at most this old (ms), with slack for the start-up
python3 - "$T/main.json" "$T/scripts.json" "$up" <<'PY' || h_fail "ages: $(cat "$T/main.json" "$T/scripts.json")"
import json, sys
up = int(sys.argv[3])
for f in sys.argv[1:3]:
    hs = json.load(open(f))["holders"]
    assert len(hs) == 2, hs
    for h in hs:
        # never older than the holder is (before: a 10 s lease read with a
        # 30 s configuration showed 20 s too old)
        assert h["age_ms"] is not None and 0 <= h["age_ms"] <= up, (f, h, up)
# read with its own configuration, the service's holder's age is exact
# (within the reading): at least the 2 s slept
main = json.load(open(sys.argv[1]))["holders"]
assert max(h["age_ms"] for h in main) >= 1900, main
PY
h_note "ages within 0..$up ms with either configuration"
echo ok
