# redis_stall.sh -- a Redis stall (SIGSTOP/SIGCONT) during an acquire and during queued waits: afterwards holders equal live sockets within one heartbeat, and a fresh connect with free permits does not wait.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_redis_start
h_server_start 120000
lease=9000          # heartbeat every 3 s; a ghost lives up to 9 s after the stall
beat=$((lease / 3))
run() { local c=$1; shift; LD_PRELOAD="$LIB" CONNCAP_CONFIG="$c" "$@"; }
# in the background, env execs the program: $! is its pid (a function's
# would be a subshell's, which a SIGTERM ends without the program)
RUN=(env LD_PRELOAD="$LIB")
queue() { h_rcli zcard "conncap:{$1}:queue"; }
queue_is() { [ "$(queue "$1")" -eq "$2" ]; }
stalled=0
stall() { kill -STOP "$REDIS_PID"; stalled=1; }
resume() { kill -CONT "$REDIS_PID"; stalled=0; }
trap 'rc=$?; [ $stalled = 1 ] && kill -CONT "$REDIS_PID" 2>/dev/null; (exit $rc); h_cleanup' EXIT
# connect time in ms of one `failclient try`, or the errno name
try_ms() { run "$1" "$FC" try 127.0.0.1 "$SRV_PORT" 1 | awk '{ print ($1 == "ok" ? int($2) : $1) }'; }
ms_since() { python3 -c "print(int($("$PROGS/monotime") - $1))"; }
# within MS CMD...: retries CMD until it holds, for MS
within() {
    local end=$(( ${EPOCHREALTIME/./} / 1000 + $1 )); shift
    until "$@"; do
        [ $(( ${EPOCHREALTIME/./} / 1000 )) -lt $end ] || return 1
        sleep 0.05
    done
}

# --- 1. an acquire written to a stalled Redis, failed by its timeout, runs
# when Redis resumes: the process that gave up on it releases it then ---
ON_DOWN=closed h_conf "$T/a.conf" st 3 $lease 20000 "127.0.0.1:$SRV_PORT"
# the function library: the acquire written during the stall is an FCALL
# that runs when Redis resumes (without it, an FCALL answered "not found")
"$CLI" setup -c "$T/a.conf" >/dev/null 2>&1 || h_fail "conncap setup failed"
for i in 1 2; do
    "${RUN[@]}" CONNCAP_CONFIG="$T/a.conf" "$FC" hold 127.0.0.1 "$SRV_PORT" >"$T/h$i.out" 2>"$T/h$i.err" &
    eval "h$i=$!"; _pids+=("$!")
done
WAIT_S=5 h_wait_for h_holders_is st 2 || h_fail "two permits not held"
stall
"${RUN[@]}" CONNCAP_CONFIG="$T/a.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 1 60000 >"$T/c.out" 2>"$T/c.err" &
c=$!; _pids+=("$c")
WAIT_S=10 h_wait_file "$T/c.out" || h_fail "the acquire during the stall did not end"
grep -q '^ECONNREFUSED' "$T/c.out" || h_fail "want ECONNREFUSED during the stall, got: $(cat "$T/c.out")"
resume
t0=$("$PROGS/monotime")
# the acquire written during the stall did run in Redis
WAIT_S=5 h_wait_for eval '[ "$(h_rcli hget "conncap:{st}:stats" acquired)" = 3 ]' ||
    h_fail "the stalled acquire never ran: nothing to test ($(h_rcli hgetall 'conncap:{st}:stats' | paste -sd' '))"
within $((beat + 1500)) h_holders_is st 2 ||
    h_fail "holders $(h_holders st) for 2 live sockets $(ms_since "$t0") ms after the stall (heartbeat $beat ms)"
h_note "the stalled acquire's holder was gone $(ms_since "$t0") ms after Redis resumed (heartbeat $beat ms, lease $lease ms)"
ms=$(try_ms "$T/a.conf")
h_note "a fresh connect with a permit free took $ms ms"
[[ "$ms" =~ ^[0-9]+$ ]] && [ "$ms" -lt 1000 ] || h_fail "a fresh connect with a permit free took $ms ms"
h_stop_pid "$h1"; h_stop_pid "$h2"; h_stop_pid "$c"
WAIT_S=5 h_wait_for h_holders_is st 0 || h_fail "holders left: $(h_rcli zrange 'conncap:{st}:holders' 0 -1)"

# --- 2. waiters queued when Redis stalls are refused (on_redis_down
# "closed"); their last re-check ran when Redis resumed and renewed their
# tickets: they leave the queue then, and a fresh connect goes first ---
ON_DOWN=closed h_conf "$T/q.conf" sq 2 $lease 20000 "127.0.0.1:$SRV_PORT"
for i in 1 2; do
    "${RUN[@]}" CONNCAP_CONFIG="$T/q.conf" "$FC" hold 127.0.0.1 "$SRV_PORT" >"$T/qh$i.out" 2>"$T/qh$i.err" &
    eval "h$i=$!"; _pids+=("$!")
done
WAIT_S=5 h_wait_for h_holders_is sq 2 || h_fail "two permits not held"
w=()
for i in 1 2 3; do
    "${RUN[@]}" CONNCAP_CONFIG="$T/q.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 1 60000 >"$T/w$i.out" 2>"$T/w$i.err" &
    w+=("$!"); _pids+=("$!")
done
WAIT_S=5 h_wait_for queue_is sq 3 || h_fail "three waiters not queued: $(queue sq)"
sleep 0.3
stall
# a sleeping waiter meets the stall at its next re-check: the earliest lease
# end (within a lease), not sooner
for i in 1 2 3; do
    WAIT_S=$((lease / 1000 + 5)) h_wait_file "$T/w$i.out" || h_fail "waiter $i was not refused during the stall"
    grep -q '^ECONNREFUSED' "$T/w$i.out" || h_fail "waiter $i: want ECONNREFUSED, got: $(cat "$T/w$i.out")"
done
resume
# the holders' heartbeats met the stall too: once both renewed on the resumed
# server (no lease expiry of just after the stall left), their circuits are
# closed and their releases go at once
sleep 0.3
h_rcli zrange 'conncap:{sq}:holders' 0 -1 withscores | awk 'NR % 2 == 0' >"$T/scores"
renewed() { ! h_rcli zrange 'conncap:{sq}:holders' 0 -1 withscores | awk 'NR % 2 == 0' | grep -qxF -f "$T/scores"; }
WAIT_S=$((2 * beat / 1000 + 5)) h_wait_for renewed || h_fail "the holders did not renew after the stall"
t0=$("$PROGS/monotime")
h_stop_pid "$h1"; h_stop_pid "$h2"   # their releases run at once: 0 holders
within $((beat + 1500)) queue_is sq 0 ||
    h_fail "tickets of refused waiters still queued $(ms_since "$t0") ms after the stall: $(h_rcli zrange 'conncap:{sq}:queue' 0 -1)"
h_note "the refused waiters' tickets were gone $(ms_since "$t0") ms after Redis resumed"
ms=$(try_ms "$T/q.conf")
h_note "a fresh connect with 0 holders took $ms ms"
[[ "$ms" =~ ^[0-9]+$ ]] && [ "$ms" -lt 1000 ] || h_fail "a fresh connect with 0 holders took $ms ms"
[ "$(h_holders sq)" -eq 0 ] || h_fail "holders left: $(h_rcli zrange 'conncap:{sq}:holders' 0 -1)"
echo ok
