# lifecycle_threads.sh -- 32 threads each connecting and closing 200 times against a limit of 4: the
# server never sees more than 4 at once and no permit is left.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 2
lc_setup 30000 4 120000
n=${LC_THREADS:-32} iters=${LC_ITERS:-200}
t0=$SECONDS
lc_run threads $n $iters
max=$(h_server_stat max); total=$(h_server_stat total)
h_note "$n threads x $iters: server saw $total connections, at most $max at once, in $((SECONDS - t0)) s"
[ "$(lc_fact failures)" = 0 ] || h_fail "$(lc_fact failures) connects failed"
[ "$total" -eq $((n * iters)) ] || h_fail "server saw $total connections, want $((n * iters))"
[ "$max" -le 4 ] || h_fail "cap exceeded: $max concurrent connections, limit 4"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"
echo ok
