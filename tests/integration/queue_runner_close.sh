# queue_runner_close.sh -- queued connects beyond the first 32 of a process wait in the queue's runner
# (one thread for all of them), and each still behaves as one with a thread of its own: a close gives
# its ticket back at once, the others keep their places and connect in turn, the cap held. A program
# (tests/progs/qclose.c) holds limit 1 with a blocking connect, queues 80 non-blocking ones, closes the
# last 40 (all in the runner), then lets its permit go. The old code started a thread for each queued
# connect (85 threads for 80).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 200
h_conf "$T/c.conf" rq 1 30000 60000 "127.0.0.1:$SRV_PORT"
mkfifo "$T/go"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" timeout 120 "$PROGS/qclose" "$SRV_PORT" 80 40 <"$T/go" >"$T/out" 2>"$T/err" &
cp=$!
exec 8>"$T/go"
queue() { h_rcli zcard 'conncap:{rq}:queue'; }
queue_is() { [ "$(queue)" -eq "$1" ]; }
h_wait_for grep -q '^queued' "$T/out" || h_fail "not queued: $(tail -n 3 "$T/err")"
WAIT_S=5 h_wait_for queue_is 80 || h_fail "$(queue) tickets for 80 queued connects"
threads=$(awk '/^Threads/ {print $2}' /proc/"$(pgrep -P $cp -x qclose)"/status)
h_note "$threads threads in the process with 80 connects queued"
[ "$threads" -le 40 ] || h_fail "$threads threads for 80 queued connects (32 of their own, the runner, the waker, the heartbeat)"
echo close >&8
h_wait_for grep -q '^closed' "$T/out" || h_fail "the client did not close: $(tail -n 3 "$T/err")"
t0=$(date +%s%N)
WAIT_S=2 h_wait_for queue_is 40 || h_fail "$(queue) tickets 2 s after 40 of 80 queued connects were closed (40 expected)"
h_note "the 40 closed connects' tickets were back in $((($(date +%s%N) - t0) / 1000000)) ms"
echo go >&8
exec 8>&-
wait $cp || h_fail "the client failed: $(tail -n 3 "$T/err")"
grep -q '^connected 40 of 40' "$T/out" || h_fail "$(cat "$T/out" | tail -n 1)"
[ "$(h_server_stat max)" -le 1 ] || h_fail "the upstream saw $(h_server_stat max) at once (limit 1)"
grep -q 'Sanitizer' "$T/err" && h_fail "$(head -n 5 "$T/err")"
empty() { [ "$(queue)" -eq 0 ] && [ "$(h_holders rq)" -eq 0 ]; }
WAIT_S=10 h_wait_for empty || h_fail "left in Redis: $(queue) tickets, $(h_holders rq) holders"
echo ok
