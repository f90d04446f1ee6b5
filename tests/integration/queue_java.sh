# queue_java.sh -- under the default configuration (non-blocking connects queue), limit 4, Java's HttpClient (its own selector loop) completes 200 asynchronous GETs, every one, and its loop keeps answering meanwhile.
# The upstream holds each connection 200 ms and closes it (Connection: close),
# so every permit comes back when its request ends; the client's connect
# timeout (60 s) outlasts the queue (about 10 s). Asserts: every request
# succeeds, the upstream's concurrency reaches 4 and never exceeds it, no
# holder, ticket or waiter is left in Redis after; side probe: 500 ms in (most
# connects still queued), a GET to an uncapped upstream through the same
# client, answered without delay.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
java --list-modules 2>/dev/null | grep -q '^jdk.compiler' || { echo "skipped: no JDK (openjdk-17-jdk-headless, mk/deps.sh test)"; exit 77; }
h_redis_start
rc_free_server
h_server_start 200
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run httpclient-200 100 "$CLI" run -c "$T/c.conf" -- java -Xshare:auto "$ROOT/tests/lib/clients/HttpClientLoad.java" \
    "$SRV_PORT" 200 --connect-timeout 60 --probe "$FREE_PORT"
rc_all 200 60000
rc_probe 4 1500
rc_cap 4
rc_clean api
echo ok
