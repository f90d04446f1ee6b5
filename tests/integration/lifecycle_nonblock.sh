# lifecycle_nonblock.sh -- non-blocking connect: EINPROGRESS keeps the permit with flags, options and fd
# untouched; EALREADY/EISCONN polling and a retry after an SO_ERROR failure take no second permit; the
# failure's permit goes back at close; with the cap full the default (nonblocking = "queue") returns
# EINPROGRESS at once and the epoll-registered descriptor learns the outcome: connected when a permit comes,
# on_timeout's errno in SO_ERROR after wait_timeout_ms (no SYN); "fail" fails at once with nonblocking_errno,
# "wait" waits; neither sends a SYN.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 100
lc_run nonblock
h_note "first connect: $(lc_fact first-connect); polling calls: $(lc_fact connect-again); dead port: $(lc_fact refused-connect), retry: $(lc_fact retry)"
[ "$(lc_fact first-connect)" = EINPROGRESS ] || h_fail "want EINPROGRESS from a non-blocking connect, got $(lc_fact first-connect)"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"

# the cap is full for 1.5 s: a holder keeps the only permit, then closes; the default queues the
# connect, which starts when the holder's permit comes back
wait_ms=3000
lc_setup 30000 1 $wait_ms
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$LC_CONF" "$PROGS/lifecycle" hold "$SRV_PORT" "$DEAD_PORT" 1500 >/dev/null &
holder=$!
WAIT_S=10 h_wait_for h_holders_is lc 1 || h_fail "the holder got no permit"
total=$(h_server_stat total)
lc_run full queued
read -r err ms <<<"$(lc_fact result)"
read -r out oms <<<"$(lc_fact outcome)"
h_note "default (queue), the permit back in 1.5 s: connect $err after $ms ms, outcome ${out:-none} after ${oms:--} ms"
[ "$err" = EINPROGRESS ] || h_fail "default: want EINPROGRESS at once (the connect queued), got $err"
[ "$ms" -lt $((wait_ms / 2)) ] || h_fail "default: connect() took $ms ms, it must not wait"
[ "$out" = 0 ] || h_fail "default: the queued connect's outcome is $out, want connected once the permit came back"
[ "$oms" -lt "$wait_ms" ] || h_fail "default: connected after $oms ms, not when the permit came back"
wait $holder
[ "$(h_server_stat total)" -eq $((total + 1)) ] || h_fail "default: the queued connect did not reach the server"
WAIT_S=5 h_wait_for h_holders_is lc 0 || h_fail "holders left after the queued connect"

# the cap stays full: a holder keeps the only permit
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$LC_CONF" "$PROGS/lifecycle" hold "$SRV_PORT" "$DEAD_PORT" 60000 >/dev/null &
holder=$!
WAIT_S=10 h_wait_for h_holders_is lc 1 || h_fail "the holder got no permit"
total=$(h_server_stat total)
lc_run full queued
read -r err ms <<<"$(lc_fact result)"
read -r out oms <<<"$(lc_fact outcome)"
h_note "default (queue), no permit: connect $err after $ms ms, outcome ${out:-none} after ${oms:--} ms (wait_timeout_ms $wait_ms)"
[ "$err" = EINPROGRESS ] || h_fail "default: want EINPROGRESS at once (the connect queued), got $err"
[ "$ms" -lt $((wait_ms / 2)) ] || h_fail "default: connect() took $ms ms, it must not wait"
[ "$out" = ETIMEDOUT ] || h_fail "default: want on_timeout's ETIMEDOUT in SO_ERROR after wait_timeout_ms, got ${out:-none}"
[ "$oms" -ge "$wait_ms" ] || h_fail "default: the queued connect failed after $oms ms, before wait_timeout_ms"
[ "$oms" -lt $((wait_ms + 3000)) ] || h_fail "default: the queued connect failed only after $oms ms"
[ "$(h_server_stat total)" -eq "$total" ] || h_fail "default: a queued connect that got no permit reached the server (SYN sent)"
CONF_EXTRA='nonblocking = "fail";' lc_setup 30000 1 $wait_ms
lc_run full connect
read -r err ms <<<"$(lc_fact result)"
h_note "nonblocking = fail: $err after $ms ms"
[ "$err" = ECONNREFUSED ] || h_fail "fail: want ECONNREFUSED, got $err"
[ "$ms" -lt $((wait_ms / 2)) ] || h_fail "fail: took $ms ms, it must not wait"
CONF_EXTRA='nonblocking = "fail"; nonblocking_errno = "ETIMEDOUT";' lc_setup 30000 1 $wait_ms
lc_run full connect
read -r err ms <<<"$(lc_fact result)"
h_note "nonblocking = fail, nonblocking_errno ETIMEDOUT: $err after $ms ms"
[ "$err" = ETIMEDOUT ] || h_fail "fail: want ETIMEDOUT, got $err"
[ "$ms" -lt $((wait_ms / 2)) ] || h_fail "fail: took $ms ms, it must not wait"
CONF_EXTRA='nonblocking = "wait";' lc_setup 30000 1 $wait_ms
lc_run full connect
read -r err ms <<<"$(lc_fact result)"
h_note "nonblocking = wait: $err after $ms ms"
[ "$err" = ECONNREFUSED ] || h_fail "wait: want nonblocking_errno ECONNREFUSED, got $err"
[ "$ms" -ge $wait_ms ] || h_fail "wait: gave up after $ms ms, before wait_timeout_ms"
[ "$(h_server_stat total)" -eq "$total" ] || h_fail "a refused connect reached the server (SYN sent)"
kill $holder; wait $holder 2>/dev/null
echo ok
