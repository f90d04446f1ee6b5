# ops_status_holders.sh -- status and holders against real holders (programs under the shim): JSON parsed, alerts, ages.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
lease=3000
h_conf "$T/c.conf" api 3 $lease 300 "127.0.0.1:$SRV_PORT"
cli() { "$CLI" "$1" -c "$T/c.conf" "${@:2}"; }
# refused: a client that finds no permit within the wait (exit 1, "error ETIMEDOUT ...")
refused() {
    local out
    out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0) && return 1
    case "$out" in "error ETIMEDOUT "*) return 0 ;; *) return 1 ;; esac
}
# bgclient VAR [PROGRAM]: a holder in the background (connects, holds 60 s); VAR gets its pid
cp "$PROGS/hold" "$T/partner-sync"   # a program of another name: holders shows which holds what
bgclient() {
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "${2:-$PROGS/hold}" 127.0.0.1 "$SRV_PORT" 60000 >/dev/null &
    printf -v "$1" %s $!
}

bgclient a
WAIT_S=10 h_wait_for h_holders_is api 1 || h_fail "A got no permit"
sleep 0.3
bgclient b "$T/partner-sync"
WAIT_S=10 h_wait_for h_holders_is api 2 || h_fail "B got no permit"

# status --json: two holders, nothing to alert about
cli status --json > "$T/st.json"; rc=$?
[ $rc -eq 0 ] || h_fail "status --json: exit $rc"
python3 - "$T/st.json" $lease <<'PY' || h_fail "status --json: $(cat "$T/st.json")"
import json, sys
d = json.load(open(sys.argv[1])); lease = int(sys.argv[2])
[s] = d["semaphores"]
assert s["name"] == "api" and s["holders"] == 2 and s["limit"] == 3 and s["configured_limit"] == 3, s
assert s["override"] is False and s["over_limit"] is False and s["alert"] is False and s["full_for_ms"] == 0, s
assert s["waiters"] == 0, s
assert len(s["list"]) == 2 and all(0 < h["lease_left_ms"] <= lease for h in s["list"]), s
PY

# holders --json: host, pid, program, fd, destination, age, lease left of each, oldest first
host=$(hostname)
cli holders api --json > "$T/h1.json" || h_fail "holders --json failed"
python3 - "$T/h1.json" "$a" "$b" "$host" "$SRV_PORT" $lease <<'PY' || h_fail "holders --json: $(cat "$T/h1.json")"
import json, sys
d = json.load(open(sys.argv[1])); a, b, host, port, lease = sys.argv[2:7]
assert d["semaphore"] == "api" and d["now_ms"] > 0
hs = d["holders"]
assert [h["pid"] for h in hs] == [int(a), int(b)], ("oldest first", hs)
assert [h["program"] for h in hs] == ["hold", "partner-sync"], ("the programs", hs)
for h in hs:
    assert h["host"] == host[:63] and h["destination"] == "127.0.0.1:" + port, h
    assert isinstance(h["fd"], int) and h["fd"] >= 3, h
    assert h["holder"].startswith("%s/%d/%d/127.0.0.1:%s/%s/" % (h["host"], h["pid"], h["fd"], port, h["program"])), h
    assert 0 < h["lease_left_ms"] <= int(lease), h
    assert 0 <= h["age_ms"] < 60000, h
assert hs[0]["age_ms"] >= hs[1]["age_ms"] + 200, hs
PY
sleep 1.2
cli holders api --json > "$T/h2.json" || h_fail "holders --json failed"
python3 - "$T/h1.json" "$T/h2.json" <<'PY' || h_fail "ages did not grow: $(cat "$T/h1.json" "$T/h2.json")"
import json, sys
h1, h2 = (json.load(open(f)) for f in sys.argv[1:3])
for x, y in zip(h1["holders"], h2["holders"]):
    assert x["holder"] == y["holder"]
    grown = y["age_ms"] - x["age_ms"]
    assert abs(grown - (h2["now_ms"] - h1["now_ms"])) <= 1 and grown >= 1000, (x, y)
PY
out=$(cli holders api) || h_fail "holders failed"
echo "$out" | head -1 | grep -q "^HOST  *PID  *PROGRAM  *FD  *DESTINATION  *AGE  *LEASE LEFT$" || h_fail "holders header: $out"
for pp in "$a hold" "$b partner-sync"; do
    set -- $pp
    echo "$out" | grep -Eq "^${host:0:20} +$1  $2 +[0-9]+  127\.0\.0\.1:$SRV_PORT +[0-9.]+ (ms|s) +[0-9.]+ (ms|s)$" ||
        h_fail "holders: no line for pid $1 ($2): $out"
done

# over the limit: a lowered limit under live holders
cli set-limit api 1 >/dev/null || h_fail "set-limit failed"
out=$(cli status); rc=$?
[ $rc -eq 1 ] || h_fail "status with 2 holders over a limit of 1: exit $rc, want 1: $out"
echo "$out" | grep -q "^api  *2/1 (runtime override)  ALERT: over limit" || h_fail "status: no over-limit mark: $out"
cli status --json | python3 -c 'import json,sys; s=json.load(sys.stdin)["semaphores"][0]; assert s["over_limit"] and s["alert"] and s["override"], s' ||
    h_fail "status --json: no over_limit"
cli set-limit api --default >/dev/null || h_fail "set-limit --default failed"

# full for long: the third permit taken, nobody can get in
bgclient c
WAIT_S=10 h_wait_for h_holders_is api 3 || h_fail "C got no permit"
cli status --full-alert 30 >/dev/null || h_fail "status alerted before 30 s at full"
refused || h_fail "a fourth client was not refused"
sleep 1.2
out=$(cli status --full-alert 1); rc=$?
[ $rc -eq 1 ] || h_fail "status --full-alert 1 after >1 s full: exit $rc, want 1: $out"
echo "$out" | grep -Eq "^api  *3/3  ALERT: no permit free for [0-9.]+ s$" || h_fail "status: no full-for-long mark: $out"
cli status --json --full-alert 1 | python3 -c '
import json,sys; s=json.load(sys.stdin)["semaphores"][0]
assert s["full_too_long"] and s["alert"] and not s["over_limit"] and s["full_for_ms"] >= 1000, s' || h_fail "status --json: no full_too_long"
cli status --full-alert 0 >/dev/null || h_fail "--full-alert 0 should turn that alert off"
cli status >/dev/null || h_fail "the default threshold (60 s) alerted"

# one permit back: no alert
kill -9 $c; wait $c 2>/dev/null
cli reset api --yes 2>/dev/null || h_fail "reset failed" # C's permit would stay until its lease ended
WAIT_S=10 h_wait_for h_holders_is api 2 || h_fail "A and B did not re-register after the reset"
cli status --full-alert 1 >/dev/null || h_fail "status alerts with a free permit: $(cli status --full-alert 1)"
kill $a $b 2>/dev/null
echo ok
