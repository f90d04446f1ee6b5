# queue_curl.sh -- under the default configuration (non-blocking connects queue), limit 4, curl's connects all succeed: one curl --parallel --parallel-immediate --parallel-max 20 over 40 URLs (its loop answers an uncapped URL meanwhile), and 24 curl processes at once.
# The upstream holds each connection 250 ms. Each run: every transfer gets
# 200, the upstream's concurrency reaches 4 and never exceeds it, no holder,
# ticket or waiter is left in Redis after. The parallel run's side probe: a
# 41st URL, on an uncapped upstream, among the first 20 started: its answer
# comes while most capped transfers are still queued, without delay.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
h_redis_start
hold=250
rc_free_server
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# ---- one curl, 40 capped URLs 20 at a time, and one uncapped
h_server_start $hold
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
RC_LABEL=parallel
urls=()
for i in $(seq 40); do
    urls+=(-o /dev/null "http://127.0.0.1:$SRV_PORT/?i=$i")
    [ "$i" -eq 5 ] && urls+=(-o /dev/null "http://127.0.0.1:$FREE_PORT/?free")
done
t0=$(now_ms)
timeout 60 stdbuf -oL "$CLI" run -c "$T/c.conf" -- curl -sS --no-progress-meter --max-time 50 --parallel --parallel-immediate --parallel-max 20 \
    -w '%{http_code} %{url_effective}\n' "${urls[@]}" 2>"$T/parallel.err" |
    while IFS= read -r line; do echo "$(( $(now_ms) - t0 )) $line"; done >"$T/parallel.out"
st=${PIPESTATUS[0]}
ok=$(grep -c " 200 http://127.0.0.1:$SRV_PORT/" "$T/parallel.out")
read -r free_ms free_code _ <<<"$(grep "/?free" "$T/parallel.out")"
before=$(awk -v f="${free_ms:-0}" -v p="127.0.0.1:$SRV_PORT/" '$1 <= f && index($3, p) { n++ } END { print n + 0 }' "$T/parallel.out")
h_note "parallel: curl exit $st, $ok of 40 capped transfers 200 in $(( $(now_ms) - t0 )) ms; uncapped: ${free_code:-none} at ${free_ms:--} ms, $before capped done before it"
codes=$(awk -v p="127.0.0.1:$SRV_PORT/" 'index($3, p) && $2 != 200 { print $2 }' "$T/parallel.out" | sort | uniq -c | awk '{ printf "%s%sx%s", (NR > 1 ? "," : ""), $2, $1 }')
[ "$ok" -eq 40 ] || h_fail "parallel: $ok of 40 capped transfers got 200 (others: ${codes:-none}): $(grep '^curl:' "$T/parallel.err" | sed 's/port [0-9]* //' | sort | uniq -c | head -n 3)"
[ "$st" -eq 0 ] || h_fail "parallel: curl exited $st"
[ "${free_code:-}" = 200 ] || h_fail "parallel: the uncapped URL was not answered: $(grep free "$T/parallel.out")"
echo "probe free_ms $free_ms pending $((40 - before)) ticks 0 maxgap_ms 0" >>"$T/parallel.err"
rc_probe 4 1500
rc_cap 4
[ "$(h_server_stat total)" -eq 40 ] || h_fail "parallel: the upstream saw $(h_server_stat total) connections, want 40"
rc_clean api

# ---- 24 curl processes at once
h_server_start $hold
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
RC_LABEL=processes
pids=()
for i in $(seq 24); do
    timeout 60 "$CLI" run -c "$T/c.conf" -- curl -sS --max-time 50 -o /dev/null -w '%{http_code}\n' \
        "http://127.0.0.1:$SRV_PORT/" >"$T/curl.$i.out" 2>"$T/curl.$i.log" &
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
ok=$(cat "$T"/curl.*.out | grep -c '^200$')
h_note "processes: $ok of 24 answered 200, $failed curl processes failed; upstream max $(h_server_stat max), total $(h_server_stat total)"
[ "$ok" -eq 24 ] || h_fail "processes: $ok of 24 got 200: $(cat "$T"/curl.*.log | grep '^curl:' | sed 's/port [0-9]* //' | sort | uniq -c | head -n 3)"
[ "$failed" -eq 0 ] || h_fail "processes: $failed curl processes failed"
rc_cap 4
[ "$(h_server_stat total)" -eq 24 ] || h_fail "processes: the upstream saw $(h_server_stat total) connections, want 24"
rc_clean api

# ---- a table of 400 (hard 20,000): 600 URLs, 200 at a time (without the shim curl needs about 210
# numbers). The queue once gave each queued connect curl's poll() had seen an eventfd of its own, kept on
# curl's numbers until it ended: 193 of them, and 382 of 600 transfers failed ("Couldn't connect": EMFILE).
h_server_start 30
h_conf "$T/c.conf" api 3 60000 120000 "127.0.0.1:$SRV_PORT"
RC_LABEL=table
urls=()
for i in $(seq 600); do urls+=(-o /dev/null "http://127.0.0.1:$SRV_PORT/?i=$i"); done
[ "$(ulimit -H -n)" = unlimited ] || [ "$(ulimit -H -n)" -ge 800 ] || h_skip "hard RLIMIT_NOFILE $(ulimit -H -n)"
timeout 90 bash -c 'ulimit -S -n 400 && exec "$@"' _ "$CLI" run -c "$T/c.conf" -- curl -sS --max-time 80 --parallel \
    --parallel-immediate --parallel-max 200 -w '%{http_code}\n' "${urls[@]}" >"$T/table.out" 2>"$T/table.err"
st=$?
ok=$(grep -c '^200$' "$T/table.out")
h_note "table of 400: curl exit $st, $ok of 600 answered 200; upstream max $(h_server_stat max)"
[ "$ok" -eq 600 ] || h_fail "table of 400: $ok of 600 got 200: $(grep '^curl:' "$T/table.err" | sed 's/port [0-9]* //' | sort | uniq -c | head -n 3)"
rc_cap 3
rc_clean api
echo ok
