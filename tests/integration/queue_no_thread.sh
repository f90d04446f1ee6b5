# queue_no_thread.sh -- queued connects whose own thread cannot be had (RLIMIT_NPROC, a container's
# pids.max) are slowed down, not failed: Python asyncio as nobody under `prlimit --nproc=20`, 200
# concurrent opens at limit 2 -- all 200 succeed without the shim -- all succeed under it, the cap held,
# the shim saying once that connects wait in its runner thread; the queue empty after. The old code
# failed each connect it could not give a thread at once with ECONNREFUSED (152 of 300 at --nproc=150).
# And the same under --nproc=5, where the keeper must leave the waiters' waker its thread.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && command -v prlimit >/dev/null || h_skip "needs root, setpriv and prlimit"
h_redis_start
h_server_start 30
h_conf "$T/c.conf" api 2 10000 60000 "127.0.0.1:$SRV_PORT"
# nobody reads the shim, the client and the file from here, and reaches Redis's socket
mkdir -p "$T/nb"
cp "$LIB" "$ROOT/tests/lib/clients/asyncio_opens.py" "$T/c.conf" "$T/nb/"
chmod 755 "$T" "$T/nb" && chmod 644 "$T/nb/"* && chmod 777 "$REDIS_SOCK"
# RLIMIT_NPROC counts every task of the user: nobody must have none of its own running now
[ -z "$(pgrep -u nobody)" ] || h_skip "processes of nobody are running: RLIMIT_NPROC would count them"
n=200
rc_run nproc 120 setpriv --reuid=nobody --regid=nogroup --clear-groups prlimit --nproc=20 \
    env LD_PRELOAD="$T/nb/$(basename "$LIB")" CONNCAP_CONFIG="$T/nb/c.conf" python3 "$T/nb/asyncio_opens.py" "$SRV_PORT" $n
rc_all $n 90000
rc_cap 2
rc_clean api
grep -q "no thread for the queued connect of descriptor [0-9]* (Resource temporarily unavailable): it waits in the queue.s runner thread" "$T/nproc.err" ||
    h_fail "the shim did not say that connects wait in its runner thread (was the thread limit reached?): $(tail -n 3 "$T/nproc.err")"

# --nproc=5, nofile 1024:1024: threads for the program, the runner, the heartbeat and the waiters' waker
# only. No keeper there (RLIMIT_NPROC under 16): one started with the first connects took the waker's
# thread, and 166 of 300 such opens then timed out, their waits polling once a second.
h_server_start 30
h_conf "$T/c.conf" api 2 10000 60000 "127.0.0.1:$SRV_PORT"
cp "$T/c.conf" "$T/nb/"
[ -z "$(pgrep -u nobody)" ] || h_skip "processes of nobody are running: RLIMIT_NPROC would count them"
rc_run nproc5 120 setpriv --reuid=nobody --regid=nogroup --clear-groups prlimit --nproc=5 --nofile=1024:1024 \
    env LD_PRELOAD="$T/nb/$(basename "$LIB")" CONNCAP_CONFIG="$T/nb/c.conf" python3 "$T/nb/asyncio_opens.py" "$SRV_PORT" $n
rc_all $n 90000
rc_cap 2
rc_clean api
echo ok
