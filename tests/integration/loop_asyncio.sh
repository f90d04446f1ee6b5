# loop_asyncio.sh -- Python asyncio, 100 concurrent asyncio.open_connection, limit 4: the loop is never
# stalled (the excess opens raise ConnectionRefusedError at once, the rest are answered), the cap holds
# and is reached; behind an asyncio.Semaphore(4) (the README's setting) every open succeeds; under
# nonblocking = "wait" the excess also fails at once, as the process holds permits of its own.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
h_redis_start
py="$ROOT/tests/lib/clients/asyncio_opens.py"
n=100

h_server_start 200
h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run opens-100 60 "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n
rc_expect $n 15000 ECONNREFUSED
[ "$RC_OK" -ge 4 ] || h_fail "only $RC_OK opens answered, want at least the cap's 4"
rc_cap 4
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"

h_server_start 200
h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run semaphore-4 60 "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n --semaphore 4
rc_expect $n 30000 -
[ "$RC_OK" -eq $n ] || h_fail "Semaphore(4): $RC_FAILED of $n failed"
rc_cap 4

h_server_start 200
CONF_EXTRA='nonblocking = "wait";' h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run wait-opens-100 60 "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n
rc_expect $n 15000 ECONNREFUSED
rc_cap 4
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
