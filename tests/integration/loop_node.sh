# loop_node.sh -- node (one event loop) through a keep-alive http.Agent, limit 4: with maxSockets 50 the
# loop is never stalled -- the excess connects fail at once with ECONNREFUSED, every other request is
# answered -- and the cap holds and is reached; with maxSockets 4 (the README's setting) every request
# succeeds; nonblocking = "wait" also fails the excess at once (the process holds permits of its own).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
command -v node >/dev/null || { echo "skipped: node is not installed (mk/deps.sh test)"; exit 77; }
h_redis_start
js="$ROOT/tests/lib/clients/node_agent.js"
n=200

h_server_start 100 --keepalive
h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run maxsockets-50 60 "$CLI" run -c "$T/c.conf" -- node "$js" "$SRV_PORT" $n 50
rc_expect $n 20000 ECONNREFUSED
rc_cap 4
[ "$RC_OK" -ge 4 ] || h_fail "maxSockets 50: only $RC_OK requests answered, want at least the cap's 4"
[ "$RC_SLOWEST" -le 15000 ] || h_fail "a request took $RC_SLOWEST ms"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"

h_server_start 100 --keepalive
h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run maxsockets-4 60 "$CLI" run -c "$T/c.conf" -- node "$js" "$SRV_PORT" $n 4
rc_expect $n 20000 -
[ "$RC_OK" -eq $n ] || h_fail "maxSockets 4: $RC_FAILED of $n failed"
rc_cap 4

h_server_start 100 --keepalive
CONF_EXTRA='nonblocking = "wait";' h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run wait-maxsockets-50 60 "$CLI" run -c "$T/c.conf" -- node "$js" "$SRV_PORT" $n 50
rc_expect $n 20000 ECONNREFUSED
rc_cap 4
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
