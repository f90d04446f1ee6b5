# queue_python.sh -- under the default configuration (non-blocking connects queue), limit 4, Python's non-blocking connects all succeed: 100 asyncio opens (the loop keeps answering meanwhile), 20 threads of requests.get(timeout=30), 20 threads of socket.create_connection(timeout=60).
# Each run: every request succeeds, the upstream's concurrency reaches 4 and
# never exceeds it, and no holder, ticket or waiter is left in Redis after.
# The asyncio run's side probe: a 50 ms timer and, 500 ms in (dozens of opens
# still queued), a GET to an uncapped upstream, answered without delay.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
/usr/bin/python3 -c 'import requests' 2>/dev/null || { echo "skipped: python3-requests is not installed (mk/deps.sh test)"; exit 77; }
h_redis_start
C="$ROOT/tests/lib/clients"
hold=250
rc_free_server

h_server_start $hold
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run asyncio-100 60 "$CLI" run -c "$T/c.conf" -- python3 "$C/asyncio_opens.py" "$SRV_PORT" 100 --probe "$FREE_PORT"
rc_all 100 30000
rc_probe 4 1500
rc_cap 4
rc_clean api

h_server_start $hold
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run requests-20-threads 60 "$CLI" run -c "$T/c.conf" -- /usr/bin/python3 "$C/threads_get.py" requests "$SRV_PORT" 40 20
rc_all 40 30000
rc_cap 4
rc_clean api

h_server_start $hold
h_conf "$T/c.conf" api 4 10000 30000 "127.0.0.1:$SRV_PORT"
rc_run create-connection-20-threads 60 "$CLI" run -c "$T/c.conf" -- /usr/bin/python3 "$C/threads_get.py" socket "$SRV_PORT" 40 20
rc_all 40 30000
rc_cap 4
rc_clean api
echo ok
