# wait_cancel.sh -- pthread_cancel of threads waiting in connect(), at several points of the wait: each releases its ticket, no lock stays held, the heartbeat and the other waiters go on, the cap holds.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
# a second upstream under the same semaphore, for another process: whatever
# it accepts while the program holds the limit is a permit too many
PORT1=$SRV_PORT STATS1=$SRV_STATS
h_server_start 60000
PORT2=$SRV_PORT STATS2=$SRV_STATS
SRV_PORT=$PORT1 SRV_STATS=$STATS1
# lease 2000 ms: the heartbeat renews every ~670 ms, so a blocked heartbeat
# shows within a few seconds as leases that run out
ON_DOWN=closed h_conf "$T/c.conf" api 3 2000 20000 "127.0.0.1:$PORT1" "127.0.0.1:$PORT2"
q() { h_rcli zcard 'conncap:{api}:queue'; }
# holders whose lease has not ended, by Redis's own clock
live() { h_rcli eval "local t = redis.call('TIME'); return redis.call('ZCOUNT', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000), '+inf')" 1 'conncap:{api}:holders'; }
queue_empty() { [ "$(q)" -eq 0 ]; }
bad=()
# finish: every failure seen, and the program's messages
finish() {
    [ ${#bad[@]} -eq 0 ] && { echo ok; exit 0; }
    printf 'FAIL: %s\n' "${bad[@]}" >&2
    cat "$T/cw.err" >&2
    exit 1
}

coproc CW { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" exec "$PROGS/cancelwait" 127.0.0.1 "$SRV_PORT" 3 2>"$T/cw.err"; }
_pids+=("$CW_PID")
# next_step NAME: reads the program's lines up to "@NAME", keeping them in $out
next_step() {
    local line
    out=""
    while read -r -t 20 -u "${CW[0]}" line; do
        [ "$line" = "@$1" ] && return 0
        out="$out$line"$'\n'
    done
    bad+=("no @$1 from cancelwait within 20 s (got: $(echo $out))")
    finish
}
go() { echo go >&"${CW[1]}"; }

next_step held
[ "$(live)" -eq 3 ] || h_fail "the program holds $(live) permits, want 3"
go
for p in sleep early pending async; do
    next_step "$p"
    h_note "$p: $(echo $out)"
    grep -q "^cancelled $p " <<<"$out" || bad+=("$p: the thread did not end cancelled: $(echo $out)")
    grep -q "^cleanup $p" <<<"$out" || bad+=("$p: the program's own cleanup handler did not run")
    # the ticket goes back with the cancelled wait, at once
    WAIT_S=2 h_wait_for queue_empty || bad+=("$p: its ticket stayed in the queue ($(q))")
    go
done
next_step stall
kill -STOP "$REDIS_PID"
go
next_step stalled
kill -CONT "$REDIS_PID"
h_note "stalled: $(echo $out)"
grep -q "^cancelled stalled " <<<"$out" || bad+=("stalled: the thread did not end cancelled: $(echo $out)")
WAIT_S=5 h_wait_for queue_empty || bad+=("stalled: its ticket stayed in the queue ($(q))")
sleep 1 # the circuit opened by the stall closes again
go
next_step behind
h_note "behind: $(echo $out)"
ms=$(sed -n 's/^behind //p' <<<"$out")
[ -n "$ms" ] || bad+=("behind: the second waiter never connected: $(echo $out)")
[ -z "$ms" ] || [ "$ms" -lt 1000 ] || bad+=("behind: the second waiter got the freed permit after $ms ms")
go
next_step hold
# the heartbeat goes on: three leases later the permits are still live, and
# another process gets none of them
sleep 6
[ "$(live)" -eq 3 ] || bad+=("after 3 leases the program's permits are $(live) live holders, want 3 (heartbeat blocked?)")
ON_DOWN=closed h_conf "$T/other.conf" api 3 2000 1500 "127.0.0.1:$PORT1" "127.0.0.1:$PORT2"
other=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/other.conf" "$PROGS/capclient" 127.0.0.1 "$PORT2" 3 1 </dev/null 2>&1 | tail -n 1)
h_note "another process meanwhile: $other"
[ "$other" = "ok 0 fail 3" ] || bad+=("another process got permits the program holds: $other")
SRV_STATS=$STATS2
n2=$(h_server_stat total)
SRV_STATS=$STATS1
[ "$n2" -eq 0 ] || bad+=("the upstream saw $((3 + n2)) connections at once at a limit of 3")
go
exec {CW[1]}>&-
wait "$CW_PID" 2>/dev/null
WAIT_S=5 h_wait_for h_holders_is api 0 || bad+=("$(h_holders api) holders left after the program ended")
queue_empty || bad+=("$(q) tickets left after the program ended")
finish
