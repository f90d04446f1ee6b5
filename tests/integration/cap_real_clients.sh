# cap_real_clients.sh -- 30 concurrent curl and python3 clients, limit 4, default configuration: all succeed, the server sees at most 4.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
h_redis_start
h_server_start 300
# curl connects non-blocking: under the default its connect queues for a permit (python3's, blocking, waits)
h_conf "$T/c.conf" api 4 5000 20000 "127.0.0.1:$SRV_PORT"
pids=()
for i in $(seq 15); do
    "$CLI" run -c "$T/c.conf" -- curl -sS -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$SRV_PORT/" >"$T/out.curl.$i" 2>&1 &
    pids+=($!)
    "$CLI" run -c "$T/c.conf" -- python3 "$ROOT/tests/lib/pyclient.py" 127.0.0.1 "$SRV_PORT" >"$T/out.py.$i" 2>&1 &
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
grep -L '^200$' "$T"/out.curl.* | while read -r f; do echo "curl failed: $(cat "$f")"; done
max=$(h_server_stat max); total=$(h_server_stat total)
h_note "server max concurrency $max, total $total, failed clients $failed"
[ "$failed" -eq 0 ] || h_fail "$failed clients failed"
[ "$total" -eq 30 ] || h_fail "server saw $total connections, want 30"
[ "$max" -le 4 ] || h_fail "cap exceeded: server saw $max concurrent connections, limit 4"
[ "$max" -eq 4 ] || h_fail "server saw at most $max concurrent, expected the cap of 4 to be reached"
rc_clean api
echo ok
