# lifecycle.sh -- drives tests/progs/lifecycle under the shim and checks each step's holder count.
# Source after harness.sh. Needs h_redis_start and h_server_start first.
#
# lc_setup [LEASE_MS] [LIMIT] [WAIT_MS]: writes $LC_CONF, semaphore "lc" with
#     rules for 127.0.0.1:$SRV_PORT, [::1]:$SRV_PORT and 127.0.0.1:$DEAD_PORT
#     (a port nobody listens on).
# lc_live: live holders of "lc" (lease not over yet, by Redis server time).
# lc_drive NAME CMD...: runs CMD under the shim as below (NAME labels its lines).
# lc_run MODE ARGS...: runs lifecycle MODE $SRV_PORT $DEAD_PORT ARGS... under
#     the shim (LD_PRELOAD=${LC_PRELOAD:-$LIB}); at every "@NAME N [PID K]" line it
#     waits (up to ${LC_STEP_WAIT:-5} s) until N live holders (K of them with
#     PID in their id), saves the holders to $T/step.NAME and answers "ok";
#     other lines go to $T/lc.out (and stderr). Fails the test on a wrong
#     count or a failed program (unless LC_ANY_RC=1; the status is in $LC_RC).

DEAD_PORT=${DEAD_PORT:-$(h_free_port)}
# see tests/lib/tsan-fd.supp: the identity checks read program descriptors on purpose.
# die_after_fork=0: a child of a multi-threaded parent that connects starts its own
# heartbeat thread; glibc supports that, TSan only warns that it cannot follow it.
[ "${SAN:-}" = tsan ] && export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS }suppressions=$ROOT/tests/lib/tsan-fd.supp die_after_fork=0"
LC_CONF="$T/lc.conf"

lc_setup() {
    local lease=${1:-30000} limit=${2:-100} wait=${3:-20000}
    h_conf "$LC_CONF" lc "$limit" "$lease" "$wait" "127.0.0.1:$SRV_PORT" "[::1]:$SRV_PORT" "127.0.0.1:$DEAD_PORT"
}

lc_live() {
    h_rcli eval "local t = redis.call('TIME'); local now = t[1] * 1000 + math.floor(t[2] / 1000);
                 return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')" 1 'conncap:{lc}:holders'
}

# _lc_pid_count PID: live holders whose id names PID (host/PID/fd/...).
_lc_pid_count() {
    h_rcli zrange 'conncap:{lc}:holders' 0 -1 | grep -c "^[^/]*/$1/" || true
}

_lc_step_ok() { # N [PID K]
    [ "$(lc_live)" -eq "$1" ] || return 1
    [ -z "${2:-}" ] || [ "$(_lc_pid_count "$2")" -eq "$3" ]
}

# _lc_wait N [PID K]: _lc_step_ok until it holds or ${LC_STEP_WAIT:-5} s of
# wall time have passed (a deadline, not a count of tries: a slow check must
# not stretch the wait past a heartbeat).
_lc_wait() {
    local end=$(( $(date +%s%N) / 1000000 + ${LC_STEP_WAIT:-5} * 1000 ))
    while :; do
        _lc_step_ok "$@" && return 0
        [ $(( $(date +%s%N) / 1000000 )) -lt $end ] || return 1
        sleep 0.05
    done
}

lc_run() { lc_drive "$1" "$PROGS/lifecycle" "$1" "$SRV_PORT" "$DEAD_PORT" "${@:2}"; }

lc_drive() {
    local line name n pid k rc pre="${LC_PRELOAD:-$LIB}"
    : > "$T/lc.out"
    coproc LCP { LD_PRELOAD="$pre" CONNCAP_CONFIG="$LC_CONF" "${@:2}" 2>"$T/lc.err"; }
    local p=$LCP_PID
    exec {lc_in}<&"${LCP[0]}" {lc_out}>&"${LCP[1]}"
    while true; do
        IFS= read -r -t 240 line <&$lc_in; rc=$?
        [ $rc -eq 0 ] || break
        case "$line" in
        @*)
            pid=""; k=""
            read -r name n pid k <<<"${line#@}"
            if ! _lc_wait "$n" ${pid:+"$pid" "$k"}; then
                h_rcli zrange 'conncap:{lc}:holders' 0 -1 WITHSCORES >&2
                kill -9 "$p" 2>/dev/null
                h_fail "$1 step $name: want $n live holders${pid:+ ($k of pid $pid)}, have $(lc_live)"
            fi
            h_rcli zrange 'conncap:{lc}:holders' 0 -1 > "$T/step.$name"
            h_note "$1: $name: $n holders${pid:+ ($k of pid $pid)}"
            echo ok >&$lc_out ;;
        *)
            echo "$line" >> "$T/lc.out"
            h_note "$1: $line" ;;
        esac
    done
    if [ $rc -gt 128 ]; then kill -9 "$p" 2>/dev/null; h_fail "$1: no output for 240 s (hung?)"; fi
    exec {lc_in}<&- {lc_out}>&-
    wait "$p"; rc=$?
    LC_RC=$rc
    [ -s "$T/lc.err" ] && sed 's/^/    stderr: /' "$T/lc.err" >&2
    [ "${LC_ANY_RC:-0}" = 1 ] || [ $rc -eq 0 ] || h_fail "$* exited with $rc"
    return 0
}

# lc_fact KEY: the value of the "KEY value" line the program printed.
lc_fact() { sed -n "s/^$1 //p" "$T/lc.out" | tail -n 1; }
