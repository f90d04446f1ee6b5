# ops_refusal_line.sh -- a refused connect's warning names the semaphore, the destination (and the host name its
# rule matched by), the holders/limit and the queue length Redis answered with, and the errno; a semaphore's
# refusals make one line per interval, the others counted in the next line or at exit.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 600000
h_conf "$T/ip.conf" lc 1 30000 100 "127.0.0.1:$SRV_PORT"
h_conf "$T/name.conf" lc 1 30000 100 "localhost:$SRV_PORT"
run() { local c=$1; shift; LD_PRELOAD="$LIB" CONNCAP_CONFIG="$c" "$@"; }

mkfifo "$T/a.in"
run "$T/ip.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" &
exec 7>"$T/a.in"
WAIT_S=5 h_wait_for h_holders_is lc 1 || h_fail "the holder got no permit"
# a live ticket of a waiter elsewhere: the queue Redis reports holds it
now=$(h_rcli eval "local t = redis.call('TIME'); return t[1] * 1000 + math.floor(t[2] / 1000)" 0)
h_rcli zadd 'conncap:{lc}:queue' 1 ghost >/dev/null
h_rcli zadd 'conncap:{lc}:qexp' $((now + 600000)) ghost >/dev/null

# 20 refusals in one process, well within the interval: one line, the 19 others counted at exit
n=20
run "$T/ip.conf" "$PROGS/connloop" 127.0.0.1 "$SRV_PORT" 1 $n 0 >"$T/loop.out" 2>"$T/loop.err" 7>&-
[ "$(grep -c ' ETIMEDOUT ' "$T/loop.out")" -eq $n ] || h_fail "want $n refused connects: $(cat "$T/loop.out")"
h_note "stderr: $(cat "$T/loop.err")"
lines=$(grep -c 'no permit of lc' "$T/loop.err" || true)
[ "$lines" -eq 1 ] || h_fail "$n refusals within the interval made $lines lines, not 1: $(cat "$T/loop.err")"
want="warn: no permit of lc within 100 ms for 127.0.0.1:$SRV_PORT: holders 1/1, queue 1: connect fails with ETIMEDOUT"
grep -qF "$want" "$T/loop.err" || h_fail "the line does not say \"$want\": $(cat "$T/loop.err")"
grep -q "warn: $((n - 1)) more refusals of lc since its last line" "$T/loop.err" ||
    h_fail "the $((n - 1)) refusals held back are not counted at exit: $(cat "$T/loop.err")"

# a rule that matched by host name: the line names it after the address
run "$T/name.conf" "$PROGS/resolvecon" getaddrinfo localhost "$SRV_PORT" >"$T/name.out" 2>"$T/name.err" 7>&-
grep -qx 'connect ETIMEDOUT' "$T/name.out" || h_fail "localhost: not refused: $(cat "$T/name.out" "$T/name.err")"
want="no permit of lc within 100 ms for 127.0.0.1:$SRV_PORT (localhost): holders 1/1, queue 1: connect fails with ETIMEDOUT"
grep -qF "$want" "$T/name.err" || h_fail "the line does not say \"$want\": $(cat "$T/name.err")"
exec 7>&-
echo ok
