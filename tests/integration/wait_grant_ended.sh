# wait_grant_ended.sh -- a permit a release granted to a waiter is never kept by nobody: the waiter takes it late, or its lease ends.
# release.lua makes the head waiter a holder and pushes it a 'g' token. A
# stopped waiter (SIGSTOP) cannot take it at once:
#   1. resumed after its wait's deadline, it still connects on that permit
#      (its last attempt finds itself a holder), and closing gives it back:
#      no permit, ticket or grant entry is left, acquired == released;
#   2. killed instead (kill -9), its permit comes back at its lease's end,
#      as any crashed holder's, and the next connect gets it.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
h_conf "$T/c.conf" ge 1 3000 1500 "127.0.0.1:$SRV_PORT"
RUN=(env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf")
queued() { [ "$(h_rcli zcard 'conncap:{ge}:queue')" -eq "$1" ]; }
granted_to() { [ "$(h_rcli zscore 'conncap:{ge}:holders' "$1")" != "" ] && queued 0; }

# holds a permit until its stdin closes (fd 3 here)
take() {
    mkfifo "$T/$1.in"
    "${RUN[@]}" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/$1.in" >"$T/$1.out" 2>"$T/$1.err" &
    _pids+=("$!")
    exec 3>"$T/$1.in"
    WAIT_S=5 h_wait_for h_holders_is ge 1 || h_fail "$1 got no permit"
}
# starts a waiter that queues behind it, then stops it; sets W, WID
waiter() {
    "${RUN[@]}" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/$1.out" 2>"$T/$1.err" 3>&- &
    W=$!
    _pids+=("$W")
    WAIT_S=5 h_wait_for queued 1 || h_fail "$1 not queued"
    WID=$(h_rcli zrange 'conncap:{ge}:queue' 0 0)
    [ "$(h_rcli hexists 'conncap:{ge}:grant' "$WID")" -eq 1 ] || h_fail "$1's ticket does not take grants"
    kill -STOP "$W"
}

# 1. granted while stopped, resumed after its deadline
take a1
waiter w1
exec 3>&-
WAIT_S=5 h_wait_for granted_to "$WID" || h_fail "the release did not grant the stopped waiter: $(h_rcli zrange 'conncap:{ge}:holders' 0 -1)"
# (its token is on its way: the stopped process's waker BLPOPs it already)
sleep 2 # past its 1.5 s deadline
kill -CONT "$W"
wait "$W" || h_fail "the granted waiter did not connect: $(cat "$T/w1.out" "$T/w1.err")"
grep -q '^connected' "$T/w1.out" || h_fail "w1: $(cat "$T/w1.out")"
WAIT_S=5 h_wait_for h_holders_is ge 0 || h_fail "a permit left after the granted waiter closed: $(h_rcli zrange 'conncap:{ge}:holders' 0 -1)"
[ "$(h_rcli exists 'conncap:{ge}:queue' 'conncap:{ge}:qexp' 'conncap:{ge}:grant')" -eq 0 ] || h_fail "tickets or grant entries left"
acq=$(h_rcli hget 'conncap:{ge}:stats' acquired) rel=$(h_rcli hget 'conncap:{ge}:stats' released)
[ "$acq" = 2 ] && [ "$rel" = 2 ] || h_fail "stats: acquired $acq, released $rel (want 2, 2)"

# 2. granted while stopped, then killed: the lease (3 s) ends it
take a2
waiter w2
exec 3>&-
WAIT_S=5 h_wait_for granted_to "$WID" || h_fail "the release did not grant the second stopped waiter"
kill -9 "$W"
{ wait "$W"; } 2>/dev/null
t0=$("$PROGS/monotime")
h_conf "$T/n.conf" ge 1 3000 10000 "127.0.0.1:$SRV_PORT" # it waits longer than the lease
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/n.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 0 >"$T/n.out" 2>"$T/n.err" 3>&- \
    || h_fail "the next connect did not get the dead waiter's permit: $(cat "$T/n.out" "$T/n.err")"
ms=$(python3 -c "print(int($("$PROGS/monotime") - $t0))")
h_note "the next connect got the killed waiter's granted permit after $ms ms (its lease: 3000 ms)"
WAIT_S=5 h_wait_for h_holders_is ge 0 || h_fail "permits left: $(h_rcli zrange 'conncap:{ge}:holders' 0 -1)"
[ "$(h_rcli hget 'conncap:{ge}:stats' reclaimed)" -ge 1 ] || h_fail "the dead waiter's permit was not reclaimed at its lease end"
echo ok
