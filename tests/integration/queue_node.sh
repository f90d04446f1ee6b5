# queue_node.sh -- under the default configuration (non-blocking connects queue), limit 4, node's requests all succeed and its loop keeps answering: 100 GETs through an http.Agent with maxSockets 50, and 50 concurrent fetch() calls (node 18+, undici).
# The upstream holds each connection 250 ms and closes it (Connection: close),
# so every permit comes back when its request ends. Each run: every request
# succeeds, the upstream's concurrency reaches 4 and never exceeds it, no
# holder, ticket or waiter is left in Redis after; side probe: a 50 ms timer
# and, 500 ms in (most connects still queued), a GET to an uncapped upstream,
# answered without delay.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
command -v node >/dev/null || { echo "skipped: node is not installed (mk/deps.sh test)"; exit 77; }
node -e 'process.exit(typeof fetch === "function" ? 0 : 1)' || { echo "skipped: this node has no fetch (node 18+)"; exit 77; }
h_redis_start
C="$ROOT/tests/lib/clients"
hold=250
rc_free_server

h_server_start $hold
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run agent-maxsockets-50 60 "$CLI" run -c "$T/c.conf" -- node "$C/node_agent.js" "$SRV_PORT" 100 50 "$FREE_PORT"
rc_all 100 30000
rc_probe 4 1500
rc_cap 4
rc_clean api

h_server_start $hold
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run fetch-50 60 "$CLI" run -c "$T/c.conf" -- node "$C/node_fetch.js" "$SRV_PORT" 50 "$FREE_PORT"
rc_all 50 30000
rc_probe 4 1500
rc_cap 4
rc_clean api
echo ok
