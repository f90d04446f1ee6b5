# loop_java.sh -- Java's java.net.http.HttpClient (its own selector loop), 200 asynchronous GETs, keep-alive
# server, limit 4: the program finishes without stalling, the cap holds and is reached, and every failed
# request failed with java.net.ConnectException (the connect refused at once with ECONNREFUSED, which the
# client retries once).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
java --list-modules 2>/dev/null | grep -q '^jdk.compiler' || { echo "skipped: no JDK (openjdk-17-jdk-headless, mk/deps.sh test)"; exit 77; }
h_redis_start
n=200
h_server_start 100 --keepalive
h_conf "$T/c.conf" api 4 10000 10000 "127.0.0.1:$SRV_PORT"
rc_run httpclient-200 120 "$CLI" run -c "$T/c.conf" -- java -Xshare:auto "$ROOT/tests/lib/clients/HttpClientLoad.java" "$SRV_PORT" $n
rc_expect $n 30000 ConnectException
[ "$RC_OK" -ge 4 ] || h_fail "only $RC_OK requests answered, want at least the cap's 4"
[ "$RC_SLOWEST" -lt 8000 ] || h_fail "a request took $RC_SLOWEST ms: a connect waited (wait_timeout_ms 10000)"
rc_cap 4
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
