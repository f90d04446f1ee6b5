# loop_node.sh -- node (one event loop) through a keep-alive http.Agent, limit 4: under the default (non-blocking
# connects queue) with maxSockets 50 every request is answered and the cap holds and is reached; with maxSockets 4
# (the README's setting) every request succeeds; nonblocking = "fail" (opt-in) fails the excess connects at once
# with ECONNREFUSED, never stalling the loop; nonblocking = "wait" blocks the loop in each excess connect for its
# wait_timeout_ms, also while the loop holds the permits itself (6 requests: 4 answered, 2 time out).
# The default case's upstream closes each connection (Connection: close): with a keep-alive upstream the
# agent's idle sockets would keep their permits, and connects queued behind them would wait them out.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
command -v node >/dev/null || { echo "skipped: node is not installed (mk/deps.sh test)"; exit 77; }
h_redis_start
js="$ROOT/tests/lib/clients/node_agent.js"
n=200

h_server_start 100
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run maxsockets-50 60 "$CLI" run -c "$T/c.conf" -- node "$js" "$SRV_PORT" $n 50
rc_all $n 30000
rc_cap 4
rc_clean api

h_server_start 100 --keepalive
h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run maxsockets-4 60 "$CLI" run -c "$T/c.conf" -- node "$js" "$SRV_PORT" $n 4
rc_all $n 20000
rc_cap 4

h_server_start 100 --keepalive
CONF_EXTRA='nonblocking = "fail";' h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run fail-maxsockets-50 60 "$CLI" run -c "$T/c.conf" -- node "$js" "$SRV_PORT" $n 50
rc_expect $n 20000 ECONNREFUSED
rc_cap 4
[ "$RC_OK" -ge 4 ] || h_fail "maxSockets 50: only $RC_OK requests answered, want at least the cap's 4"
[ "$RC_SLOWEST" -le 15000 ] || h_fail "a request took $RC_SLOWEST ms"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"

h_server_start 100 --keepalive
wait_ms=1000
CONF_EXTRA='nonblocking = "wait"; nonblocking_errno = "ETIMEDOUT";' h_conf "$T/c.conf" api 4 10000 $wait_ms "127.0.0.1:$SRV_PORT"
rc_run wait-6 60 "$CLI" run -c "$T/c.conf" -- node "$js" "$SRV_PORT" 6 6
rc_expect 6 15000 ETIMEDOUT
[ "$RC_OK" -eq 4 ] || h_fail "wait: $RC_OK of 6 requests answered, want the cap's 4 (the 2 others wait out wait_timeout_ms)"
[ "$RC_ELAPSED" -ge $((2 * wait_ms)) ] || h_fail "wait: done in $RC_ELAPSED ms: the 2 excess connects did not each wait wait_timeout_ms ($wait_ms)"
rc_cap 4
rc_clean api
echo ok
