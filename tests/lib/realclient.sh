# realclient.sh -- shared checks for the tests that run real client programs
# (tests/lib/clients/) under the shim. Source after harness.sh. Every client
# prints "ok K failed F codes NAME=n,... elapsed_ms E slowest_ms S".

# rc_run LABEL SECONDS CMD...: runs CMD (under `conncap run` if the caller
# says so), at most SECONDS, and parses its line into RC_OK, RC_FAILED,
# RC_CODES, RC_ELAPSED, RC_SLOWEST. A
# program killed for overrunning SECONDS (a stalled event loop) fails the test.
rc_run() {
    local label=$1 secs=$2 out; shift 2
    RC_LABEL=$label
    out=$(timeout "$secs" "$@" 2>"$T/$label.err" | tail -n 1)
    read -r _ RC_OK _ RC_FAILED _ RC_CODES _ RC_ELAPSED _ RC_SLOWEST <<<"$out"
    [ -n "${RC_SLOWEST:-}" ] || h_fail "$label: no result within $secs s (stalled?): '$out'; $(tail -n 3 "$T/$label.err")"
    h_note "$label: ok $RC_OK failed $RC_FAILED ($RC_CODES) in $RC_ELAPSED ms, slowest request $RC_SLOWEST ms"
}

# rc_expect N MAX_ELAPSED_MS ALLOWED_CODE...: N requests finished, within
# MAX_ELAPSED_MS, each failure with one of the ALLOWED codes ("-": none may fail).
rc_expect() {
    local n=$1 max=$2 c code; shift 2
    [ $((RC_OK + RC_FAILED)) -eq "$n" ] || h_fail "$RC_LABEL: $((RC_OK + RC_FAILED)) results, want $n"
    [ "$RC_ELAPSED" -le "$max" ] || h_fail "$RC_LABEL: took $RC_ELAPSED ms, want <= $max (a stalled loop)"
    [ "$RC_OK" -ge 1 ] || h_fail "$RC_LABEL: no request succeeded"
    [ "$RC_CODES" = - ] && return 0
    for c in ${RC_CODES//,/ }; do
        code=${c%%=*}
        [[ " $* " == *" $code "* ]] || h_fail "$RC_LABEL: $c failed with $code, want only: $*"
    done
}

# rc_cap LIMIT: the countserver saw at most LIMIT concurrent connections,
# and LIMIT at some point (the cap was reached).
rc_cap() {
    local max
    max=$(h_server_stat max)
    [ "$max" -le "$1" ] || h_fail "$RC_LABEL: cap exceeded: the server saw $max concurrent connections, limit $1"
    [ "$max" -eq "$1" ] || h_fail "$RC_LABEL: the server saw at most $max concurrent, the cap of $1 was not reached"
}
