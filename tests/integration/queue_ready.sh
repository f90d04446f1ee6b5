# queue_ready.sh -- a queued non-blocking connect (issue 23: nonblocking = "queue", the default) looks to
# every readiness API exactly like a real slow connect: nothing reported while queued, writable once when
# the permit comes, the real socket on the number with the options set meanwhile, one byte echoed; no
# permit within wait_timeout_ms: OUT|ERR|HUP and SO_ERROR = on_timeout's errno, once.
# Each mode of tests/progs/qready runs twice: without the shim against a really slow connect (a loopback
# listener with a full accept queue, released by accepting), which gives the reference sequence, and
# under the shim (limit 1, a holder that lets the permit go 1 s after the connect). The two sequences of
# what the program saw must be equal, and the reference must be the contract.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
"$PROGS/qready" echo "$T/echo.port" 2>"$T/echo.err" &
_pids+=("$!")
h_wait_file "$T/echo.port" || h_fail "the echo upstream did not start"
UP=$(cat "$T/echo.port")
wait_ms=1500
h_conf "$T/q.conf" qr 1 30000 20000 "127.0.0.1:$UP"
h_conf "$T/t.conf" qr 1 30000 $wait_ms "127.0.0.1:$UP"
ON_TIMEOUT=ECONNREFUSED h_conf "$T/t2.conf" qr 1 30000 $wait_ms "127.0.0.1:$UP"
grep -q '^nonblocking' "$T/q.conf" && h_fail "the test relies on the default nonblocking policy"

modes="poll ppoll select pselect epoll epollet thread-in thread-out timeout"

# The contract, token by token (tests/progs/qready.c prints them): q.* while queued (twice, the second
# time half way), c.* once connected.
Q='q.write:EAGAIN q.read:EAGAIN q.soerr:0 q.peer:ENOTCONN q.again:EALREADY'
Q1="$Q q.setnodelay:0 q.nodelay:1 q.nonblock:1 q.sigpipe:0"
Q2="$Q q.nodelay:1 q.nonblock:1 q.sigpipe:0"
C='c.soerr:0 c.peer:up c.rawpeer:up c.sockname:real c.nodelay:1 c.rawnodelay:1 c.nonblock:1 c.rawnonblock:1'
C="$C c.again:0 c.again2:EISCONN c.write:1"
E='c.echo:ok c.sigpipe:0'
declare -A want=(
    [poll]="connect:EINPROGRESS $Q1 $Q2 queued:none ready:OUT still:OUT $C c.echo-ready:IN|OUT $E"
    [ppoll]="connect:EINPROGRESS $Q1 $Q2 queued:none ready:OUT still:OUT $C c.echo-ready:IN|OUT $E"
    [select]="connect:EINPROGRESS $Q1 $Q2 queued:none ready:W still:W $C c.echo-ready:RW $E"
    [pselect]="connect:EINPROGRESS $Q1 $Q2 queued:none ready:W still:W $C c.echo-ready:RW $E"
    [epoll]="connect:EINPROGRESS add:0 mod:0 $Q1 $Q2 queued:none ready:OUT still:OUT data:ok $C c.echo-ready:IN|OUT $E"
    [epollet]="add:0 connect:EINPROGRESS $Q1 $Q2 queued:none ready:OUT more:0 data:ok $C c.echo-ready:IN|OUT $E"
    [thread-in]="connect:EINPROGRESS $Q1 $Q2 queued:none ready:OUT thread:blocked $C thread:IN thread-after-write:1 c.echo-ready:IN|OUT $E"
    [thread-out]="connect:EINPROGRESS $Q1 $Q2 queued:none ready:OUT $C c.echo-ready:IN|OUT $E"
    [timeout]="connect:EINPROGRESS $Q1 ready:OUT|ERR|HUP soerr:ETIMEDOUT soerr2:0"
)

all_clean() {
    local k
    for k in holders waiters queue qexp; do [ "$(h_rcli zcard "conncap:{qr}:$k")" -eq 0 ] || return 1; done
}
fact() { sed -n "s/^$2 //p" "$1" | tail -n 1; }
# first_diff A B: the first token where the sequences A and B differ
first_diff() {
    python3 -c '
import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
for i in range(max(len(a), len(b))):
    x = a[i] if i < len(a) else "(end)"; y = b[i] if i < len(b) else "(end)"
    if x != y:
        print("token %d: %s, want %s" % (i + 1, x, y)); break' "$1" "$2"
}
fails=()
bad() { fails+=("$*"); echo "FAIL: $*" >&2; }

# 1. without the shim, every mode at once (they share nothing): the reference
plain=()
for m in $modes; do
    "$PROGS/qready" "$m" 0 $wait_ms >"$T/$m.plain" 2>"$T/$m.plain.err" &
    plain+=("$!")
done
for p in "${plain[@]}"; do wait "$p" || true; done
for m in $modes; do
    s=$(fact "$T/$m.plain" seq)
    if [ "$s" != "${want[$m]}" ]; then
        bad "$m: a real slow connect is not the contract: $(first_diff "$s" "${want[$m]}") $(tail -n 1 "$T/$m.plain.err")"
    fi
    h_note "$m without the shim: connected $(fact "$T/$m.plain" connect-to-ready-ms) ms after the connect"
done

# 2. under the shim, one mode at a time (one permit)
run_shim() { # MODE CONF OUT
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$2" timeout 40 "$PROGS/qready" "$1" "$UP" $wait_ms >"$3" 2>"$3.err"
}
clean_after() { # WHAT: no holder, no waiter, no ticket left (one deadline for all)
    local k
    WAIT_S=8 h_wait_for all_clean && return 0
    for k in holders waiters queue qexp; do
        [ "$(h_rcli zcard "conncap:{qr}:$k")" -eq 0 ] ||
            bad "$1: $(h_rcli zcard "conncap:{qr}:$k") entries left in $k: $(h_rcli zrange "conncap:{qr}:$k" 0 2 | paste -sd' ')"
    done
}
check_shim() { # MODE OUT REFERENCE-SEQ
    local m=$1 out=$2 ref=$3 c s ms
    c=$(fact "$out" connect)
    if [ "$c" != EINPROGRESS ]; then
        bad "$m: connect gave ${c:-nothing} after $(fact "$out" connect-ms) ms, want EINPROGRESS (queued) $(tail -n 1 "$out.err")"
        return
    fi
    ms=$(fact "$out" connect-ms)
    [ "${ms:-9999}" -lt 1000 ] || bad "$m: connect took $ms ms: it must return at once"
    s=$(fact "$out" seq)
    [ "$s" = "$ref" ] || bad "$m: with the shim the program saw another sequence than a real slow connect: $(first_diff "$s" "$ref") $(tail -n 1 "$out.err")"
    [ "$(fact "$out" holder-status)" = 0 ] || bad "$m: the holder ended with status $(fact "$out" holder-status)"
}
for m in $modes; do
    # a budget: a shim that never makes the socket ready costs each mode its bounds (8 s and more)
    if [ $SECONDS -gt 60 ]; then bad "out of time after $SECONDS s: modes from $m on not run"; break; fi
    [ "$m" = timeout ] && conf="$T/t.conf" || conf="$T/q.conf"
    run_shim "$m" "$conf" "$T/$m.shim"
    check_shim "$m" "$T/$m.shim" "$(fact "$T/$m.plain" seq)"
    r=$(fact "$T/$m.shim" connect-to-ready-ms)
    [ -n "$r" ] && h_note "$m with the shim: reported $r ms after the connect ($(fact "$T/$m.shim" ready-ms) after the release)"
    if [ "$m" = timeout ] && [ -n "$r" ]; then
        [ "$r" -ge $((wait_ms - 50)) ] && [ "$r" -le $((wait_ms + 2500)) ] ||
            bad "timeout: the failure came $r ms after the connect, wait_timeout_ms is $wait_ms"
    fi
    clean_after "$m"
done

# 3. the errno of a timeout is on_timeout's
[ $SECONDS -le 70 ] && run_shim timeout "$T/t2.conf" "$T/timeout2.shim"
check_shim "timeout (on_timeout ECONNREFUSED)" "$T/timeout2.shim" "$(fact "$T/timeout.plain" seq | sed 's/soerr:ETIMEDOUT/soerr:ECONNREFUSED/')"
clean_after "timeout (on_timeout ECONNREFUSED)"

kill -0 "${_pids[-1]}" 2>/dev/null || h_fail "the echo upstream died"
[ ${#fails[@]} -eq 0 ] || h_fail "${#fails[@]} problem(s); the first: ${fails[0]}"
echo ok
