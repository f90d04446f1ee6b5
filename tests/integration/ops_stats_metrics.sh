# ops_stats_metrics.sh -- stats and metrics after real contention (programs under the shim); the exposition checked line by line; metrics over HTTP.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 400
h_conf "$T/c.conf" api 2 3000 700 "127.0.0.1:$SRV_PORT"
cli() { "$CLI" "$1" -c "$T/c.conf" "${@:2}"; }
check() { python3 "$ROOT/tests/lib/promcheck.py" "$@" --prefix conncap_ --label semaphore; }

# the checker itself must catch broken expositions
cli metrics > "$T/m0.txt" || h_fail "metrics failed"
check "$T/m0.txt" || h_fail "fresh exposition invalid: $(cat "$T/m0.txt")"
bad() { if python3 "$ROOT/tests/lib/promcheck.py" - --prefix conncap_ --label semaphore 2>/dev/null; then h_fail "promcheck accepted: $1"; fi; }
sed 's/,le="+Inf"//' "$T/m0.txt" | bad "a bucket without le"
sed '/le="+Inf"/d' "$T/m0.txt" | bad "no +Inf bucket"
sed 's/^\(conncap_wait_seconds_bucket{semaphore="api",le="0.001"}\) 0$/\1 5/' "$T/m0.txt" | bad "decreasing buckets"
sed 's/^conncap_holders{semaphore="api"}/conncap_holders{semaphore=api}/' "$T/m0.txt" | bad "unquoted label"
sed 's/^# TYPE conncap_limit gauge$/# TYPE conncap_limit gauge\n# TYPE conncap_limit gauge/' "$T/m0.txt" | bad "two TYPE lines"
sed 's/^conncap_acquired_total{semaphore="api"} 0$/conncap_acquired_total{semaphore="api"} zero/' "$T/m0.txt" | bad "a value that is no number"
{ cat "$T/m0.txt"; echo 'conncap_holders{semaphore="api"} 1'; } | bad "a family interleaved"

# 8 clients at once, 2 permits, 400 ms per connection, 700 ms to wait: some time out
pids=()
for i in $(seq 8); do
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 400 >"$T/out.$i" 2>"$T/err.$i" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
ok=$(grep -l '^closed ' "$T"/out.* | wc -l); tmo=$(grep -l '^error ETIMEDOUT ' "$T"/out.* | wc -l)
h_note "$ok clients connected, $tmo timed out"
[ $((ok + tmo)) -eq 8 ] || h_fail "clients failed otherwise: $(cat "$T"/out.* "$T"/err.*)"
[ "$ok" -ge 2 ] && [ "$tmo" -ge 1 ] || h_fail "no contention: $ok ok, $tmo timed out"
[ "$(h_server_stat total)" -eq "$ok" ] || h_fail "server saw $(h_server_stat total) connections, $ok clients connected"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left"

cli stats --json > "$T/s.json" || h_fail "stats --json failed"
python3 - "$T/s.json" "$ok" "$tmo" <<'PY' || h_fail "stats --json: $(cat "$T/s.json")"
import json, sys
d = json.load(open(sys.argv[1])); ok, tmo = int(sys.argv[2]), int(sys.argv[3])
[s] = d["semaphores"]
c, w = s["counters"], s["wait"]
assert s["name"] == "api" and s["holders"] == 0 and s["limit"] == 2 and s["waiters"] == 0, s
assert c["acquired"] == ok and c["released"] == ok and c["timed_out"] == tmo, c
assert c["denied"] >= tmo and c["reclaimed"] == 0 and c["reregistered"] == 0 and c["fallback_granted"] == 0, c
assert w["count"] == ok + tmo, w
assert w["sum_ms"] >= tmo * 700, w
assert w["p50_ms"] <= w["p90_ms"] <= w["p99_ms"] <= 10000, w
assert abs(w["mean_ms"] - w["sum_ms"] / w["count"]) < 0.01, w
b = w["buckets"]
assert [x["le_ms"] for x in b] == [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, None], b
assert all(x["count"] <= y["count"] for x, y in zip(b, b[1:])) and b[-1]["count"] == w["count"], b
assert b[6]["count"] <= w["count"] - tmo, ("timeouts waited >= 700 ms", b)   # le 250
PY
out=$(cli stats) || h_fail "stats failed"
echo "$out" | grep -q "acquired $ok released $ok timed_out $tmo " || h_fail "stats text: $out"
echo "$out" | grep -Eq "wait: $((ok + tmo)) waits, mean [0-9.]+ ms, p50 [0-9.]+ ms, p90 [0-9.]+ ms, p99 [0-9.]+ ms" || h_fail "stats text: $out"

cli metrics > "$T/m1.txt" || h_fail "metrics failed"
check "$T/m1.txt" || h_fail "exposition invalid"
vals=$(check "$T/m1.txt" --get 'conncap_acquired_total{semaphore="api"}' --get 'conncap_timed_out_total{semaphore="api"}' \
    --get 'conncap_wait_seconds_count{semaphore="api"}' --get 'conncap_holders{semaphore="api"}' \
    --get 'conncap_limit{semaphore="api"}' --get 'conncap_redis_up' | tr '\n' ' ')
[ "$vals" = "$ok $tmo $((ok + tmo)) 0 2 1 " ] || h_fail "metrics values: $vals, want $ok $tmo $((ok + tmo)) 0 2 1"
grep -q '^# HELP conncap_wait_seconds ' "$T/m1.txt" && grep -q '^# TYPE conncap_wait_seconds histogram$' "$T/m1.txt" || h_fail "no histogram family"
# --json: the same figures as one JSON object; not with --listen
cli metrics --json > "$T/m1.json" || h_fail "metrics --json failed"
jv=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); s=d["semaphores"][0]
print(s["counters"]["acquired"], s["counters"]["timed_out"], s["wait"]["count"], s["holders"], s["limit"], d["redis_up"])' "$T/m1.json")
[ "$jv " = "$ok $tmo $((ok + tmo)) 0 2 1 " ] || h_fail "metrics --json values: $jv, want $ok $tmo $((ok + tmo)) 0 2 1"
cli metrics --json --listen 127.0.0.1:0 >/dev/null 2>&1 && h_fail "metrics --json --listen accepted"

# served over HTTP
"$CLI" metrics -c "$T/c.conf" --listen 127.0.0.1:0 2>"$T/srv.err" &
srv=$!
h_wait_file "$T/srv.err" 10 || h_fail "metrics server said nothing"
url=$(sed -n 's|^conncap metrics: serving \(http://127.0.0.1:[0-9]*/metrics\)$|\1|p' "$T/srv.err")
[ -n "$url" ] || h_fail "metrics server: $(cat "$T/srv.err")"
curl -sS -D "$T/hdr" -o "$T/m2.txt" --max-time 10 "$url" || h_fail "GET /metrics failed"
head -1 "$T/hdr" | grep -q '^HTTP/1.0 200 OK' || h_fail "status line: $(cat "$T/hdr")"
grep -qi '^Content-Type: text/plain; version=0.0.4; charset=utf-8' "$T/hdr" || h_fail "content type: $(cat "$T/hdr")"
check "$T/m2.txt" || h_fail "served exposition invalid"
[ "$(check "$T/m2.txt" --get 'conncap_acquired_total{semaphore="api"}')" = "$ok" ] || h_fail "served counter differs"
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@"; }
[ "$(code "${url%/metrics}/nope")" = 404 ] || h_fail "GET /nope is not 404"
[ "$(code "$url?x=1")" = 200 ] || h_fail "GET /metrics?x=1 is not 200"
[ "$(code -X POST "$url")" = 405 ] || h_fail "POST is not 405"
[ "$(curl -s -I --max-time 10 "$url" | head -1 | tr -d '\r')" = "HTTP/1.0 200 OK" ] || h_fail "HEAD is not 200"
port=${url#http://127.0.0.1:}; port=${port%/metrics}
python3 - "$port" <<'PY' || h_fail "an 8 KiB+ request was not refused with 431"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"GET /metrics HTTP/1.0\r\nX-Pad: " + b"x" * 9000 + b"\r\n\r\n")
assert s.recv(100).startswith(b"HTTP/1.0 431"), "no 431"
PY
printf 'garbage\r\n\r\n' | python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10); s.sendall(sys.stdin.buffer.read())
assert s.recv(100).startswith(b"HTTP/1.0 400"), "no 400"' "$port" || h_fail "a malformed request was not refused with 400"
# 12 clients that connect and send nothing (or half a request) do not hold
# up a scrape, and the server drops each after its 2 s
python3 -c '
import socket, sys, time
socks = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(12)]
for s in socks[::2]: s.sendall(b"GET /metrics HTTP/1.0\r\nX-Slow: ")
open(sys.argv[2], "w").write("1")
time.sleep(4)
closed = 0
for s in socks:
    s.settimeout(1)
    try: closed += s.recv(1) == b""
    except OSError: pass
open(sys.argv[3], "w").write(str(closed))' "$port" "$T/silent" "$T/silent.closed" &
silent=$!
h_wait_file "$T/silent" 10 || h_fail "the silent clients did not connect"
t0=$(date +%s%N)
[ "$(code --max-time 20 "$url")" = 200 ] || h_fail "no scrape while 12 clients stall"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
h_note "a scrape while 12 clients stall took $ms ms (it took 60 s one at a time)"
[ $ms -lt 1500 ] || h_fail "the scrape waited for the stalled clients: $ms ms"
wait $silent
[ "$(cat "$T/silent.closed")" = 12 ] || h_fail "stalled clients not dropped after their deadline: $(cat "$T/silent.closed")/12"
# the landing page, and conncap_build_info
[ "$(code "${url%/metrics}/")" = 200 ] || h_fail "GET / is not 200"
curl -s --max-time 10 "${url%/metrics}/" | grep -q 'href="/metrics"' || h_fail "the landing page does not link /metrics"
grep -Eq '^conncap_build_info\{version="[^"]+",library="conncap_[0-9a-f]{12}"\} 1$' "$T/m2.txt" ||
    h_fail "no conncap_build_info: $(grep build_info "$T/m2.txt")"
# Redis down: the scrape says so (and stays valid); back again: up
h_redis_stop
curl -sS --max-time 10 "$url" > "$T/m3.txt" || h_fail "scrape with Redis down failed"
check "$T/m3.txt" || h_fail "exposition with Redis down invalid"
[ "$(check "$T/m3.txt" --get conncap_redis_up --get 'conncap_holders{semaphore="api"}' | tr '\n' ' ')" = "0 missing " ] ||
    h_fail "with Redis down: $(cat "$T/m3.txt")"
cli metrics >"$T/m4.txt" 2>/dev/null; rc=$?
[ $rc -eq 2 ] && [ ! -s "$T/m4.txt" ] || h_fail "one-shot metrics with Redis down: exit $rc, output $(wc -c <"$T/m4.txt") bytes"
h_redis_start
WAIT_S=10 h_wait_for sh -c "curl -s --max-time 5 '$url' | grep -q '^conncap_redis_up 1$'" || h_fail "not up again after Redis came back"
kill -TERM $srv
for i in $(seq 100); do kill -0 $srv 2>/dev/null || break; sleep 0.05; done
kill -0 $srv 2>/dev/null && h_fail "metrics server ignored SIGTERM"
wait $srv; rc=$?
[ $rc -eq 0 ] || h_fail "metrics server exit $rc after SIGTERM"
"$CLI" metrics -c "$T/c.conf" --listen 127.0.0.1:99999 2>/dev/null && h_fail "port 99999 accepted"
"$CLI" metrics -c "$T/c.conf" --listen nocolon 2>/dev/null && h_fail "--listen without a port accepted"
echo ok
