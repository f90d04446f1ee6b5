# loop_asyncio.sh -- Python asyncio, concurrent asyncio.open_connection, limit 4: under the default (non-blocking
# connects queue) all of 100 opens are answered and the cap holds and is reached; behind an asyncio.Semaphore(4)
# (the README's setting) every open succeeds; nonblocking = "fail" (opt-in) refuses the excess at once with
# ECONNREFUSED, never stalling the loop; nonblocking = "wait" blocks the loop in each excess connect for its
# wait_timeout_ms, also while the loop holds the permits itself (6 opens: 4 answered, 2 time out, one after the other).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
h_redis_start
py="$ROOT/tests/lib/clients/asyncio_opens.py"
n=100

h_server_start 200
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run opens-100 60 "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n
rc_all $n 30000
rc_cap 4
rc_clean api

h_server_start 200
h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run semaphore-4 60 "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n --semaphore 4
rc_all $n 30000
rc_cap 4

h_server_start 200
CONF_EXTRA='nonblocking = "fail";' h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run fail-opens-100 60 "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n
rc_expect $n 15000 ECONNREFUSED
[ "$RC_OK" -ge 4 ] || h_fail "only $RC_OK opens answered, want at least the cap's 4"
rc_cap 4
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"

# the upstream holds 4 s, longer than the loop's stall, so that the 4 answered opens find it waiting
h_server_start 4000
wait_ms=1000
CONF_EXTRA='nonblocking = "wait"; nonblocking_errno = "ETIMEDOUT";' h_conf "$T/c.conf" api 4 10000 $wait_ms "127.0.0.1:$SRV_PORT"
rc_run wait-opens-6 60 "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" 6
rc_expect 6 15000 ETIMEDOUT
[ "$RC_OK" -eq 4 ] || h_fail "wait: $RC_OK of 6 opens answered, want the cap's 4 (the 2 others wait out wait_timeout_ms)"
[ "$RC_ELAPSED" -ge $((2 * wait_ms)) ] || h_fail "wait: done in $RC_ELAPSED ms: the 2 excess connects did not each wait wait_timeout_ms ($wait_ms)"
rc_cap 4
rc_clean api
echo ok
