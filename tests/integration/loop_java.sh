# loop_java.sh -- Java's java.net.http.HttpClient (its own selector loop), asynchronous GETs, limit 4: under the
# default (non-blocking connects queue) all of 100 GETs succeed and the cap holds and is reached; under
# nonblocking = "fail" (opt-in), 200 GETs to a keep-alive server: the program finishes without stalling, the
# cap holds and is reached, and every failed request failed with java.net.ConnectException (the connect refused
# at once with ECONNREFUSED, which the client retries once).
# The default case's upstream closes each connection (Connection: close): HttpClient keeps idle connections
# (and their permits) in its pool, and connects queued behind them would wait them out. queue_java.sh is the
# longer run, with a side probe.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
java --list-modules 2>/dev/null | grep -q '^jdk.compiler' || { echo "skipped: no JDK (openjdk-17-jdk-headless, mk/deps.sh test)"; exit 77; }
h_redis_start
java=(java -Xshare:auto "$ROOT/tests/lib/clients/HttpClientLoad.java")

h_server_start 100
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run httpclient-100 100 "$CLI" run -c "$T/c.conf" -- "${java[@]}" "$SRV_PORT" 100 --connect-timeout 40
rc_all 100 40000
rc_cap 4
rc_clean api

n=200
h_server_start 100 --keepalive
CONF_EXTRA='nonblocking = "fail";' h_conf "$T/c.conf" api 4 10000 10000 "127.0.0.1:$SRV_PORT"
rc_run fail-httpclient-200 120 "$CLI" run -c "$T/c.conf" -- "${java[@]}" "$SRV_PORT" $n
rc_expect $n 30000 ConnectException
[ "$RC_OK" -ge 4 ] || h_fail "only $RC_OK requests answered, want at least the cap's 4"
[ "$RC_SLOWEST" -lt 8000 ] || h_fail "a request took $RC_SLOWEST ms: a connect waited (wait_timeout_ms 10000)"
rc_cap 4
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
