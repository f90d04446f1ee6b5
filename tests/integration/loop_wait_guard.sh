# loop_wait_guard.sh -- nonblocking = "wait" simply waits, like a blocking socket, also in a process that
# already holds a permit of the semaphore (the old rule that failed such a connect at once is gone,
# issue 23): holding the only permit, its next non-blocking connect waits its wait_timeout_ms, then fails
# and sends no SYN; with the other permit of two held by another process for 1.5 s, it waits for that one
# and connects.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
wait_ms=2500
# which errno a timed-out "wait" reports (nonblocking_errno or on_timeout) is not this test's subject
extra='nonblocking = "wait"; nonblocking_errno = "ETIMEDOUT";'

# selfheld: "held ERRNO_OR_0" (its first, blocking connect), "second ERRNO MS" (its non-blocking one)
selfheld() {
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/selfheld" "$SRV_PORT" >"$T/out" 2>"$T/selfheld.err" \
        || h_fail "selfheld failed: $(cat "$T/out" "$T/selfheld.err")"
    read -r _ held <<<"$(grep '^held ' "$T/out")"
    read -r _ err ms <<<"$(grep '^second ' "$T/out")"
    [ "$held" = 0 ] || h_fail "the first connect failed: $held"
}

# the process holds the only permit: its second connect waits it out
CONF_EXTRA=$extra ON_TIMEOUT=ETIMEDOUT h_conf "$T/c.conf" api 1 30000 $wait_ms "127.0.0.1:$SRV_PORT"
selfheld
h_note "limit 1, the permit its own: second, non-blocking: $err after $ms ms (wait_timeout_ms $wait_ms)"
[ "$err" = ETIMEDOUT ] || h_fail "second connect: want ETIMEDOUT after wait_timeout_ms, got $err"
[ "$ms" -ge "$wait_ms" ] || h_fail "second connect gave up after $ms ms, before wait_timeout_ms (the old at-once rule)"
[ "$ms" -lt $((wait_ms + 2000)) ] || h_fail "second connect took $ms ms"
[ "$(h_server_stat total)" -eq 1 ] || h_fail "the connect that got no permit reached the server (SYN sent)"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"

# limit 2, another process holds one permit for 1.5 s: the second connect waits for it and connects
CONF_EXTRA=$extra ON_TIMEOUT=ETIMEDOUT h_conf "$T/c.conf" api 2 30000 $((wait_ms * 2)) "127.0.0.1:$SRV_PORT"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 1500 >"$T/hold.out" 2>"$T/hold.err" &
holder=$!
WAIT_S=10 h_wait_for h_holders_is api 1 || h_fail "the other process got no permit: $(cat "$T/hold.err")"
selfheld
h_note "limit 2, one permit its own, the other held for 1.5 s: second, non-blocking: $err after $ms ms"
case "$err" in EINPROGRESS|0) ;; *) h_fail "second connect: want it connected once the other permit came back, got $err after $ms ms" ;; esac
[ "$ms" -ge 300 ] || h_fail "second connect took $ms ms: it did not wait for the other permit"
wait $holder
[ "$(h_server_stat total)" -eq 4 ] || h_fail "the server saw $(h_server_stat total) connections, want 4"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
