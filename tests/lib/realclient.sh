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

# rc_all N MAX_ELAPSED_MS: all N requests finished within MAX_ELAPSED_MS and
# every one succeeded (a failure is named by its code).
rc_all() {
    rc_expect "$1" "$2" -
    [ "$RC_OK" -eq "$1" ] || h_fail "$RC_LABEL: $RC_FAILED of $1 requests failed ($RC_CODES)"
}

# rc_probe CAP MAX_MS: the client's side probe (its stderr line "probe free_ms F
# pending P ticks K maxgap_ms G"): while P > CAP requests to the capped
# upstream were pending (so some connects were queued), a request to an
# uncapped upstream was answered within MAX_MS (F; -1: it failed) and the
# loop's timer never missed more than MAX_MS (G; 0 ticks: no timer).
rc_probe() {
    local line free pending ticks gap
    line=$(grep '^probe ' "$T/$RC_LABEL.err" | tail -n 1)
    read -r _ _ free _ pending _ ticks _ gap <<<"$line"
    [ -n "${gap:-}" ] || h_fail "$RC_LABEL: the client printed no probe line: $(tail -n 3 "$T/$RC_LABEL.err")"
    h_note "$RC_LABEL: probe: uncapped request answered in $free ms with $pending capped pending; timer $ticks ticks, longest gap $gap ms"
    [ "$pending" -gt "$1" ] || h_fail "$RC_LABEL: the probe ran with only $pending capped requests pending (cap $1): nothing was queued"
    [ "$free" -ge 0 ] || h_fail "$RC_LABEL: the probe's request to the uncapped upstream failed"
    [ "$free" -le "$2" ] || h_fail "$RC_LABEL: the probe's uncapped request took $free ms, want <= $2 (the loop stalled)"
    [ "$gap" -le "$2" ] || h_fail "$RC_LABEL: the loop's timer missed $gap ms, want <= $2 (the loop stalled)"
}

# rc_clean SEM: within 10 s, no holder, no queued ticket and no waiter of SEM
# is left in Redis (the holders, queue, qexp and waiters keys, core/keys.h).
rc_clean() {
    local k
    for k in holders queue qexp waiters; do
        WAIT_S=10 h_wait_for _rc_zempty "$1" "$k" ||
            h_fail "${RC_LABEL:-$1}: $(h_rcli zcard "conncap:{$1}:$k") left in conncap:{$1}:$k: $(h_rcli zrange "conncap:{$1}:$k" 0 4 | paste -sd' ')"
    done
}
_rc_zempty() { [ "$(h_rcli zcard "conncap:{$1}:$2")" -eq 0 ]; }

# rc_free_server: starts an uncapped countserver for the side probes (holds
# 20 ms: long enough to read the request before it answers); sets FREE_PORT
# and FREE_STATS. Call it before h_server_start, which sets SRV_PORT.
rc_free_server() {
    h_server_start 20
    FREE_PORT=$SRV_PORT FREE_STATS=$SRV_STATS
}
