# queue_many.sh -- thousands of queued connects in one event-loop process (issue 26; bench/qmany.c, which
# `make bench` ROWS=qmany runs at 10,000). The program takes the limit's permits with blocking connects,
# queues N non-blocking ones (epoll, each added after its connect), lets the holders go, and closes each
# connect once connected until all are. A queued connect costs the process 2 descriptors (the program's
# number and the kept socket), so N queue under RLIMIT_NOFILE 2N + 200 (the shim took 4 a connect); the
# waker's BLPOP names at most 256 wake lists of a semaphore (+ its poke list) however many wait (10,000
# keys a BLPOP took Redis milliseconds each time); no event is reported for a number the program closed
# (the shim kept a second reference to each granted socket while epoll re-added it); at most 2 Redis
# connections; every connect made; nothing left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
N=2000
[ -n "${SAN:-}" ] && N=300 # a sanitizer's threads cost far more memory and time each
LIMIT=20
REDIS_EXTRA="--slowlog-log-slower-than 0 --slowlog-max-len 1000000" h_redis_start
"$PROGS/qready" echo "$T/echo.port" 2>"$T/echo.err" &
_pids+=("$!")
h_wait_file "$T/echo.port" || h_fail "the echo upstream did not start"
UP=$(cat "$T/echo.port")
h_conf "$T/q.conf" qm $LIMIT 60000 120000 "127.0.0.1:$UP"
cc -O2 -std=gnu11 -D_GNU_SOURCE -o "$T/qmany" "$ROOT/bench/qmany.c" || h_fail "cannot build bench/qmany.c"

clients() { h_rcli client list | grep -vc 'cmd=client'; }
# the voluntary context switches of every thread of process $1 so far
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}'; }
mkfifo "$T/go"
(
    ulimit -n $((2 * N + 200)) || exit 3
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/q.conf" exec timeout 240 "$T/qmany" "$UP" $N $LIMIT <"$T/go"
) >"$T/q.out" 2>"$T/q.err" &
qp=$!
exec 8>"$T/go"
most=0 idle=-1
while kill -0 "$qp" 2>/dev/null; do
    c=$(clients); [ "$c" -gt "$most" ] && most=$c
    if [ $idle -lt 0 ] && grep -q '^ready' "$T/q.out"; then
        # all queued: their waits sleep until the permits come (each also looks now and then whether
        # its descriptor is still open: at most 200 such looks a second for the whole process)
        pid=$(pgrep -P "$qp" -x qmany || echo "$qp")
        s0=$(switches "$pid"); sleep 3; idle=$(($(switches "$pid") - s0))
        echo go >&8
        exec 8>&-
    fi
    sleep 0.2
done
wait "$qp"; rc=$?
grep -q 'Sanitizer' "$T/q.err" && h_fail "a sanitizer report: $(grep -m1 -A3 'Sanitizer' "$T/q.err" | tr '\n' ' ')"
fact() { sed -n "s/^$1 //p" "$T/q.out" | tail -n 1; }
h_note "queued $(fact queued) (stopped: $(fact stopped)), $(fact fds-per-queued) descriptors and $(fact kib-per-queued) KiB each; $(fact granted), $(fact stale-events) events for closed numbers, in $(fact grant-all-ms) ms; $most Redis connections at most"
blpop=$(h_rcli --json slowlog get 1000000 | python3 -c '
import json, re, sys
most = 0
for e in json.load(sys.stdin):
    a = e[3]
    if a and a[0].upper() == "BLPOP":
        m = re.match(r"\.\.\. \((\d+) more arguments\)", a[-1])
        most = max(most, len(a) - 1 + int(m.group(1)) if m else len(a))
print(most)')
h_note "the largest BLPOP: $blpop arguments (BLPOP, keys, timeout)"
[ "$(fact queued)" = $N ] || h_fail "$(fact queued) of $N connects queued under RLIMIT_NOFILE $((2 * N + 200)) (stopped: $(fact stopped))"
# the first 32 queued at once wait in threads of their own, the rest in the queue's runner (one
# thread): the old code started a thread per queued connect
h_note "$(fact threads-added) threads started for $N queued connects"
[ "$(fact threads-added)" -le 40 ] || h_fail "$(fact threads-added) threads for $N queued connects (32 own + the runner, the waker, the heartbeat)"
[ "$(fact granted)" = "$N of $N" ] || h_fail "connected: $(fact granted) (exit $rc)"
[ "$(fact stale-events)" = 0 ] || h_fail "$(fact stale-events) events reported for numbers the program had closed"
[ "$blpop" -gt 0 ] && [ "$blpop" -le 259 ] || h_fail "a BLPOP of $blpop arguments (at most 256 wake lists + the poke list)"
[ "$most" -le 2 ] || h_fail "$most Redis connections from one process"
h_note "$idle context switches in 3 s with $N connects queued"
if [ -z "${SAN:-}" ] && { [ "$idle" -lt 0 ] || [ "$idle" -ge $N ]; }; then
    h_fail "$idle context switches in 3 s of $N queued connects: their threads wake about once a second each"
fi
[ $rc -eq 0 ] || h_fail "qmany exit $rc: $(tail -n 3 "$T/q.err")"
empty() { local k; for k in holders queue qexp; do [ "$(h_rcli zcard "conncap:{qm}:$k")" -eq 0 ] || return 1; done; }
WAIT_S=20 h_wait_for empty || h_fail "left in Redis: holders $(h_holders qm), queue $(h_rcli zcard 'conncap:{qm}:queue')"
echo ok
