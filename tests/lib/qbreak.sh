# qbreak.sh -- helpers for the tests that run tests/progs/qbreak (hostile cases of a queued connect,
# issue 23). Source after harness.sh: qb_setup starts Redis and the echo upstream and writes
# $T/q.conf (semaphore qb, limit 1, wait_timeout_ms $QB_WAIT_MS, default 6000); qb_run MODE [ARG]
# runs one mode under the shim (output in $T/MODE.out, .err) and notes a failure with the mode's own
# FAIL line (the next modes still run); qb_clean checks that no holder, waiter or ticket is left in
# Redis; qb_done fails the test with the first failure noted, if any.
QB_FAILS=()
qb_bad() { QB_FAILS+=("$*"); echo "FAIL: $*" >&2; return 1; }
qb_done() {
    [ ${#QB_FAILS[@]} -eq 0 ] || h_fail "${#QB_FAILS[@]} problem(s); the first: ${QB_FAILS[0]}"
    echo ok
}

qb_setup() { # [MORE MATCH PATTERNS, same semaphore]
    h_redis_start
    "$PROGS/qready" echo "$T/echo.port" 2>"$T/echo.err" &
    _pids+=("$!")
    h_wait_file "$T/echo.port" || h_fail "the echo upstream did not start"
    QB_UP=$(cat "$T/echo.port")
    h_conf "$T/q.conf" qb 1 30000 "${QB_WAIT_MS:-6000}" "127.0.0.1:$QB_UP" "$@"
}

# qb_fact MODE KEY: the last value the mode printed for KEY
qb_fact() { sed -n "s/^$2 //p" "$T/$1.out" | tail -n 1; }

qb_run() { # MODE [ARG]
    local m=$1 rc
    shift
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/q.conf" timeout "${QB_TIMEOUT:-40}" "$PROGS/qbreak" "$m" "$QB_UP" "$@" \
        >"$T/$m.out" 2>"$T/$m.err"
    rc=$?
    sed 's/^/  /' "$T/$m.out" >&2
    if grep -q 'Sanitizer' "$T/$m.err"; then
        qb_bad "$m: a sanitizer report: $(grep -m1 -A40 "Sanitizer" "$T/$m.err" | tr '\n' ' ')"
    elif [ $rc -ne 0 ]; then
        qb_bad "$m $*: exit $rc: $(grep -m1 '^FAIL' "$T/$m.err")"
    elif [ "$(qb_fact "$m" result)" != ok ]; then
        qb_bad "$m: no result"
    fi
}

# QB_KEYS: the keys qb_clean checks (default all four)
qb_all_clean() {
    local k
    for k in ${QB_KEYS:-holders waiters queue qexp}; do [ "$(h_rcli zcard "conncap:{qb}:$k")" -eq 0 ] || return 1; done
}

qb_clean() { # WHAT
    local k
    WAIT_S=${QB_CLEAN_S:-8} h_wait_for qb_all_clean && return 0
    for k in ${QB_KEYS:-holders waiters queue qexp}; do
        [ "$(h_rcli zcard "conncap:{qb}:$k")" -eq 0 ] ||
            qb_bad "$1: $(h_rcli zcard "conncap:{qb}:$k") entries left in $k"
    done
}
