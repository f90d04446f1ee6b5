# cap_threads.sh -- 4 processes x 8 threads of a C client, limit 5: the server sees at most 5; runs under every SAN variant.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 100
h_conf "$T/c.conf" api 5 3000 30000 "127.0.0.1:$SRV_PORT"
pids=()
for i in 1 2 3 4; do
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/capclient" 127.0.0.1 "$SRV_PORT" 8 4 >"$T/out.$i" 2>&1 &
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
cat "$T"/out.* | grep -v '^ok' | head -5
max=$(h_server_stat max); total=$(h_server_stat total)
h_note "server max $max, total $total"
[ $failed -eq 0 ] || h_fail "$failed client processes failed"
[ "$total" -eq 128 ] || h_fail "server saw $total connections, want 128"
[ "$max" -le 5 ] || h_fail "cap exceeded: $max > 5"
[ "$(h_holders api)" -eq 0 ] || h_fail "holders left"
echo ok
