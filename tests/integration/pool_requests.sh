# pool_requests.sh -- a requests.Session (Debian's python3-requests) shared by 16 threads, limit 4, requests with
# a timeout (so Python connects non-blocking): under the default (non-blocking connects queue) with a pool of 16
# every request succeeds and the cap holds and is reached; with pool_maxsize 4 and pool_block (the README's
# setting) every request succeeds; under nonblocking = "fail" (opt-in), keep-alive server, the idle pooled
# connections keep their permits and a thread's connect beyond them fails at once with ECONNREFUSED instead
# of waiting out wait_timeout_ms.
# The default case's upstream closes each connection (Connection: close): with a keep-alive one the pool's
# idle connections would keep their permits, and the connects queued behind them would wait them out.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
/usr/bin/python3 -c 'import requests' 2>/dev/null || { echo "skipped: python3-requests is not installed (mk/deps.sh test)"; exit 77; }
h_redis_start
py="$ROOT/tests/lib/clients/requests_pool.py"
n=200

h_server_start 50
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run pool-16 60 "$CLI" run -c "$T/c.conf" -- /usr/bin/python3 "$py" "$SRV_PORT" $n 16 16
rc_all $n 30000
rc_cap 4
rc_clean api

h_server_start 50 --keepalive
h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run pool-4-block 60 "$CLI" run -c "$T/c.conf" -- /usr/bin/python3 "$py" "$SRV_PORT" $n 16 4 --block
rc_all $n 30000
rc_cap 4

h_server_start 50 --keepalive
CONF_EXTRA='nonblocking = "fail";' h_conf "$T/c.conf" api 4 10000 5000 "127.0.0.1:$SRV_PORT"
rc_run fail-pool-16 60 "$CLI" run -c "$T/c.conf" -- /usr/bin/python3 "$py" "$SRV_PORT" $n 16 16
rc_expect $n 20000 ECONNREFUSED
[ "$RC_OK" -ge 4 ] || h_fail "only $RC_OK requests answered, want at least the cap's 4"
[ "$RC_SLOWEST" -le 3000 ] || h_fail "a request took $RC_SLOWEST ms: a connect waited for permits its own pool keeps"
rc_cap 4
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
