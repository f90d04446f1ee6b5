# queue_lone_ends.sh -- a queued connect that is its process's only waiter blocks on its own wake list
# in the queue's thread (runtime/wait.c, a lone waiter); however its wait ends, nothing of it may stay in
# the semaphore's keys: no ticket (queue, qexp, grant), no wake list, no :waiters entry. One connect at a
# time (tests/progs/qbreak.c, lone-ends), each ended while in its own block: close(), syscall(SYS_close)
# (found by the queue's look at its descriptor), shutdown(), dup2() over it, the process's Redis
# connections killed then close(), granted, and the process exiting with it queued; then (retry-timeout)
# one that times out. wait_timeout_ms is 30 s: an entry left behind cannot expire by itself before the
# check, 3 s after the program's end. Old: release.lua took a giving-up waiter's ticket but not its
# :waiters entry, which stayed until the wait's would-be end (every closed one here).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/qbreak.sh"
QB_WAIT_MS=30000
qb_setup
keys="holders waiters queue qexp"
# left: what the semaphore's keys still hold ("" when nothing): sorted sets, the grant hash, the waiters'
# wake lists (not the waker's poke list, which expires by itself)
left() {
    local k n out=""
    for k in $keys; do
        n=$(h_rcli zcard "conncap:{qb}:$k")
        [ "$n" -eq 0 ] || out="$out $k $n ($(h_rcli zrange "conncap:{qb}:$k" 0 1 | paste -sd' '))"
    done
    n=$(h_rcli hlen "conncap:{qb}:grant")
    [ "$n" -eq 0 ] || out="$out grant $n"
    n=$(h_rcli --scan --pattern 'conncap:{qb}:wake:*' | grep -cv ':wake:poke\.')
    [ "$n" -eq 0 ] || out="$out wake-lists $n"
    echo "$out"
}
clean() { [ -z "$(left)" ]; }
check() { # WHAT
    WAIT_S=3 h_wait_for clean || qb_bad "$1: left in Redis:$(left)"
}

# the Redis kill of lone-ends: when it says so, every client of the private Redis but redis-cli's
(
    for _ in $(seq 400); do
        grep -q '^kill-clients' "$T/lone-ends.out" 2>/dev/null && break
        sleep 0.05
    done
    h_rcli client kill type normal >"$T/kill.out" 2>&1
) &
_pids+=("$!")
qb_run lone-ends
grep -q '^exit-queued ' "$T/lone-ends.out" || qb_bad "lone-ends did not reach its last step"
h_note "lone-ends: Redis clients killed: $(cat "$T/kill.out" 2>/dev/null)"
check "lone-ends (closed, raw-closed, shut down, dup2'd over, after a Redis kill, granted, exit)"
h_rcli del $(for k in $keys grant; do echo "conncap:{qb}:$k"; done) >/dev/null # the next check is its own

QB_WAIT_MS=4000
h_conf "$T/q.conf" qb 1 30000 $QB_WAIT_MS "127.0.0.1:$QB_UP"
qb_run retry-timeout $QB_WAIT_MS
check "retry-timeout (timed out, then granted)"
qb_done
