# loop_wait_guard.sh -- nonblocking = "wait" never blocks a process that already holds a permit of the
# semaphore (it may be the only one able to give it back): the process holds the only permit and
# connects again non-blocking -- that connect fails at once with nonblocking_errno and sends no SYN;
# a blocking connect of a process holding none still waits its wait_timeout_ms (lifecycle_nonblock.sh).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 60000
wait_ms=4000
CONF_EXTRA='nonblocking = "wait";' h_conf "$T/c.conf" api 1 30000 $wait_ms "127.0.0.1:$SRV_PORT"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/selfheld" "$SRV_PORT" >"$T/out" 2>"$T/selfheld.err" \
    || h_fail "selfheld failed: $(cat "$T/out" "$T/selfheld.err")"
read -r _ held <<<"$(grep '^held ' "$T/out")"
read -r _ err ms <<<"$(grep '^second ' "$T/out")"
h_note "held: $held; second, non-blocking: $err after $ms ms (wait_timeout_ms $wait_ms)"
[ "$held" = 0 ] || h_fail "the first connect failed: $held"
[ "$err" = ECONNREFUSED ] || h_fail "second connect: want ECONNREFUSED at once, got $err"
[ "$ms" -lt $((wait_ms / 2)) ] || h_fail "second connect took $ms ms: it waited on its own permit"
[ "$(h_server_stat total)" -eq 1 ] || h_fail "the refused connect reached the server (SYN sent)"
WAIT_S=10 h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_holders api)"
echo ok
