# ops_reset_audit.sh -- the audit stream (audit = true) records real acquires, releases, timeouts and resets; `audit --follow` tails it; `reset --yes` drops holders and live ones re-register.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
lease=3000
CONF_EXTRA='audit = true; audit_maxlen = 1000;' h_conf "$T/c.conf" api 2 $lease 300 "127.0.0.1:$SRV_PORT"
cli() { "$CLI" "$1" -c "$T/c.conf" "${@:2}"; }
# bgclient VAR MS: a holder in the background for MS; VAR gets its pid
bgclient() {
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" "$2" >/dev/null &
    printf -v "$1" %s $!
}

"$CLI" audit -c "$T/c.conf" --follow --json --count 0 api >"$T/follow.json" 2>"$T/follow.err" &
follower=$!
sleep 0.5   # the follower is blocked in XREAD: everything after this shows up

bgclient a 20000                        # holds 20 s, then closes
WAIT_S=10 h_wait_for h_holders_is api 1 || h_fail "A got no permit"
bgclient b 60000
WAIT_S=10 h_wait_for h_holders_is api 2 || h_fail "B got no permit"
kill -9 "$b"; wait "$b" 2>/dev/null     # B's permit stays until its lease ends
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/c.out" 2>&1 & c=$!
wait $c; grep -q "^error ETIMEDOUT " "$T/c.out" || h_fail "C was not refused: $(cat "$T/c.out")"

# reset refuses without --yes, and drops nothing
cli reset api >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "add --yes" "$T/err" || h_fail "reset without --yes: exit $rc: $(cat "$T/err")"
[ "$(h_holders api)" -eq 2 ] || h_fail "reset without --yes dropped holders"
cli reset api --yes 2>"$T/err" || h_fail "reset --yes failed: $(cat "$T/err")"
grep -q "^conncap reset: dropped 2 holders of api (by [^ ]*@[^ ]*); recorded in the audit stream$" "$T/err" ||
    h_fail "reset said: $(cat "$T/err")"
[ "$(h_holders api)" -le 1 ] || h_fail "holders after reset: $(h_holders api)"
# A is alive: its heartbeat (every lease/3) registers it again; B is dead and stays gone
WAIT_S=10 h_wait_for h_holders_is api 1 || h_fail "A did not re-register"
h_rcli zrange 'conncap:{api}:holders' 0 -1 | grep -q "/$a/" || h_fail "the holder back is not A"
cli stats --json | python3 -c '
import json, sys; c = json.load(sys.stdin)["semaphores"][0]["counters"]
assert c["reset_dropped"] == 2 and c["reregistered"] >= 1 and c["acquired"] == 2 and c["timed_out"] == 1, c' ||
    h_fail "stats after reset: $(cli stats)"
wait "$a" || h_fail "A failed"         # A closes: its permit goes back
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "A's permit did not go back"

# the stream, oldest first: what happened, with the holders' pids
cli audit api --count 100 --json > "$T/all.json" || h_fail "audit failed"
check_events() {
    python3 - "$1" "$a" "$b" "$c" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
a, b, c = sys.argv[2:5]
pid = lambda e: e.get("holder", "").split("/")[1] if "holder" in e else e.get("by")
got = [(e["event"], pid(e)) for e in evs]
want = [("acquire", a), ("acquire", b), ("timeout", c), ("reset", None), ("release", a)]
assert [g[0] for g in got] == [w[0] for w in want], got
assert all(w[1] is None or g[1] == w[1] for g, w in zip(got, want)), got
assert "@" in evs[3]["by"] and evs[3]["dropped"] == "2", evs[3]
assert int(evs[2]["wait_ms"]) >= 300 and evs[0]["limit"] == "2", evs
ids = [e["id"] for e in evs]
assert all(e["time_ms"] == int(e["id"].split("-")[0]) for e in evs) and ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
PY
}
check_events "$T/all.json" || h_fail "audit events: $(cat "$T/all.json")"
# the follower saw the same, as it happened; it stops on SIGINT with exit 0
WAIT_S=10 h_wait_for sh -c "[ \$(wc -l < '$T/follow.json') -ge 5 ]" || h_fail "follower saw: $(cat "$T/follow.json" "$T/follow.err")"
check_events "$T/follow.json" || h_fail "followed events: $(cat "$T/follow.json")"
kill -INT $follower
wait $follower; rc=$?
[ $rc -eq 0 ] || h_fail "audit --follow: exit $rc after SIGINT"

out=$(cli audit api --count 2) || h_fail "audit text failed"
[ "$(echo "$out" | wc -l)" -eq 2 ] || h_fail "--count 2 printed: $out"
echo "$out" | head -1 | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z  reset     by=[^ ]+ dropped=2$' || h_fail "audit text: $out"
echo "$out" | tail -1 | grep -Eq "^[^ ]+  release   holder=[^/]+/$a/[0-9]+/127.0.0.1:$SRV_PORT/[a-z_]+/[0-9a-f]+\.[0-9]+ count=0$" || h_fail "audit text: $out"

# audit off: no stream written, and the command says so
h_conf "$T/off.conf" api 2 $lease 300 "127.0.0.1:$SRV_PORT"
n=$(h_rcli xlen 'conncap:{api}:audit')
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/off.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >/dev/null || h_fail "client failed"
[ "$(h_rcli xlen 'conncap:{api}:audit')" -eq "$n" ] || h_fail "audit = false still wrote events"
"$CLI" audit -c "$T/off.conf" api 2>&1 >/dev/null | grep -q "audit is off" || h_fail "audit with audit = false: no note"
echo ok
