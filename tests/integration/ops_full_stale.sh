# ops_full_stale.sh -- "no permit free for" counts from when the semaphore became full, not from an older fill that releases ended.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" api 2 3000 100 "127.0.0.1:$SRV_PORT"
h_conf "$T/c1.conf" api 1 3000 100 "127.0.0.1:$SRV_PORT" # the same file after its limit was lowered to 1
cli() { "$CLI" "$1" -c "$T/c.conf" "${@:2}"; }
full_for() { "$CLI" status -c "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["semaphores"][0]["full_for_ms"])'; }

# A holds; B holds a second, which fills the semaphore, then closes
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 60000 >/dev/null 2>&1 &
WAIT_S=10 h_wait_for h_holders_is api 1 || h_fail "A got no permit"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 300 >/dev/null 2>&1 &
b=$!
wait $b || h_fail "B got no permit"
[ "$(h_holders api)" -eq 1 ] || h_fail "B's permit was not given back"
[ "$(full_for "$T/c.conf")" -eq 0 ] || h_fail "one permit free, yet full_for_ms is not 0"
sleep 3 # a permit was free all this time

# the limit lowered in the file (every reader of it sees 1 holder of 1): full
# from now on, never since B's fill
ms=$(full_for "$T/c1.conf")
[ "$ms" -lt 2000 ] || h_fail "limit lowered in the file: full_for_ms $ms counts the time a permit was free"

# the limit lowered with set-limit: the same, and no alert at once
cli set-limit api 1 >/dev/null || h_fail "set-limit failed"
ms=$(full_for "$T/c.conf")
[ "$ms" -lt 2000 ] || h_fail "set-limit: full_for_ms $ms counts the time a permit was free"
out=$(cli status --full-alert 2); rc=$?
[ $rc -eq 0 ] || h_fail "status alerts right after set-limit (exit $rc): $out"
m=$(cli metrics | sed -n 's/^conncap_full_seconds{semaphore="api"} //p')
python3 -c "import sys; sys.exit(float('$m') >= 2)" || h_fail "metrics: conncap_full_seconds $m right after set-limit"

# a refused connect under the new limit starts the count; it then grows
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >/dev/null 2>&1 &&
    h_fail "C got a permit above the limit"
sleep 1.2
ms=$(full_for "$T/c.conf")
[ "$ms" -ge 1000 ] && [ "$ms" -lt 3000 ] || h_fail "after a refusal: full_for_ms $ms, want about 1.2 s"
cli set-limit api --default >/dev/null || h_fail "set-limit --default failed"
[ "$(full_for "$T/c.conf")" -eq 0 ] || h_fail "limit back to 2 with 1 holder: full_for_ms not 0"
# lowered to 1 again later: the gauge that refusal set under the limit 1
# is not taken for this new fill either
sleep 2
cli set-limit api 1 >/dev/null || h_fail "set-limit failed"
ms=$(full_for "$T/c.conf")
[ "$ms" -lt 1500 ] || h_fail "set-limit 1 again: full_for_ms $ms counts from the refusal under the first set-limit 1"

# a holder that comes back without a grant (its process stalled past its
# lease, the other holder's heartbeat swept it, its own heartbeat added it
# again) fills the semaphore again: full from then on, not since the fill
# before the stall
h_conf "$T/s.conf" st 2 1500 100 "127.0.0.1:$SRV_PORT"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/s.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 60000 >/dev/null 2>&1 &
a=$!
WAIT_S=10 h_wait_for h_holders_is st 1 || h_fail "st: A got no permit"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/s.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 60000 >/dev/null 2>&1 &
WAIT_S=10 h_wait_for h_holders_is st 2 || h_fail "st: C got no permit"
kill -STOP $a
sleep 4 # A's lease (1.5 s) ends: one permit free
ms=$(full_for "$T/s.conf")
[ "$ms" -eq 0 ] || h_fail "st: A stalled past its lease, yet full_for_ms $ms"
kill -CONT $a
WAIT_S=10 h_wait_for h_holders_is st 2 || h_fail "st: A did not come back"
[ "$(h_rcli hget 'conncap:{st}:stats' reregistered)" -ge 1 ] || h_fail "st: A was not re-registered"
ms=$(full_for "$T/s.conf")
[ "$ms" -lt 2000 ] || h_fail "st: full_for_ms $ms after A came back counts the 4 s a permit was free"
echo ok
