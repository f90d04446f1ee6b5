#!/usr/bin/env bash
# demo.sh -- `make demo`: 20 curl processes, one global cap of 3, a private Redis.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/tests/lib/harness.sh"
set -e
echo "== conncap demo: 20 curl processes at once, global cap of 3 concurrent connections"
h_redis_start demo
echo "   private redis-server pid $REDIS_PID on $REDIS_SOCK"
h_server_start 500
echo "   local server on 127.0.0.1:$SRV_PORT holds each connection 500 ms and counts them"
h_conf "$T/demo.conf" partner-api 3 30000 20000 "127.0.0.1:$SRV_PORT"
# curl connects with a non-blocking socket: one-shot clients queue for a
# permit under nonblocking = "wait" (the default "fail" suits event loops).
echo 'nonblocking = "wait";' >> "$T/demo.conf"
echo "   config: $T/demo.conf (limit 3, rule 127.0.0.1:$SRV_PORT, nonblocking = \"wait\" for one-shot curl)"
echo
"$CLI" check -c "$T/demo.conf" | sed 's/^/   check: /'
echo
start=$(date +%s%N)
pids=()
for i in $(seq 20); do
    "$CLI" run -c "$T/demo.conf" -- curl -sS -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$SRV_PORT/" >"$T/curl.$i" 2>&1 &
    pids+=($!)
done
sleep 0.7
echo "   while they run, \`conncap status\` says:"
"$CLI" status -c "$T/demo.conf" | sed 's/^/     /' || true
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
secs=$(( ($(date +%s%N) - start) / 1000000 ))
ok=$(cat "$T"/curl.* | grep -c '^200$' || true)
max=$(h_server_stat max)
left=$(h_holders partner-api)
echo
echo "   curl processes succeeded:       $ok of 20"
echo "   max concurrency server saw:     $max (cap 3)"
echo "   holders left in redis:          $left"
echo "   wall time:                      ${secs} ms (20 x 500 ms / 3 = ~3.5 s expected)"
echo
if [ "$ok" -eq 20 ] && [ "$max" -le 3 ] && [ "$left" -eq 0 ]; then
    echo "demo: OK -- the cap held"
else
    echo "demo: FAILED"; exit 1
fi
