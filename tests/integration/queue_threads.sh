# queue_threads.sh -- queued connects made by several threads of one process at once, most of them in the
# queue's runner, are granted in their queue's order: 4 threads each queue 600 non-blocking connects at
# limit 4 (an upstream that holds each 5 ms) and all 2,400 connect, the cap held. The waker's BLPOP names
# the first-joined 256 waiters of a semaphore as the head of its queue; the runner joined its waits in
# heap order, not the order they were added in, and a grant token went to a waiter left out of the
# BLPOP, its permit held unused until its ticket's refresh: 1,309 and 1,573 of 2,400 failed with ETIMEDOUT in two runs.
. "$(dirname "$0")/../lib/harness.sh"
N=600
[ -n "${SAN:-}" ] && N=150
h_redis_start
h_server_start 5
h_conf "$T/c.conf" qt 4 30000 20000 "127.0.0.1:$SRV_PORT"
(
    ulimit -n $((8 * N + 200)) || exit 3
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" exec timeout 120 "$PROGS/qthreads" "$SRV_PORT" 4 $N 25000
) >"$T/out" 2>"$T/err"
rc=$?
h_note "$(tr '\n' ';' <"$T/out") upstream max $(h_server_stat max)"
grep -q 'Sanitizer' "$T/err" && h_fail "a sanitizer report: $(grep -m1 -A3 'Sanitizer' "$T/err" | tr '\n' ' ')"
[ $rc -eq 0 ] || h_fail "qthreads exit $rc: $(tail -n 3 "$T/err")"
grep -qx "connected $((4 * N)) of $((4 * N))" "$T/out" || h_fail "$(head -n 2 "$T/out" | tr '\n' ' ')"
[ "$(h_server_stat max)" -le 4 ] || h_fail "the upstream saw $(h_server_stat max) at once (limit 4)"
empty() { [ "$(h_rcli zcard 'conncap:{qt}:queue')" -eq 0 ] && [ "$(h_holders qt)" -eq 0 ]; }
WAIT_S=10 h_wait_for empty || h_fail "left in Redis: $(h_rcli zcard 'conncap:{qt}:queue') tickets, $(h_holders qt) holders"
echo ok
