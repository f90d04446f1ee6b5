# lifecycle_forkwait.sh -- a multi-threaded parent forks while its other threads are inside the shim
# (connect/close loops, Redis calls in flight): in each child, fork returns, a close and a close_range in
# the shim's own descriptor range, and a capped connect/close take no lock wait (each well under 1 s;
# a lock inherited from the parent made each of them wait 2 s).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 100
[ "${SAN:-}" = asan ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"   # see lifecycle_fork.sh
lc_run forkwait 10
for k in fork-ms close-ms close-range-ms connect-ms; do
    v=$(lc_fact "$k")
    h_note "worst $k over 10 children: $v (connect/close loops meanwhile: $(lc_fact loops))"
    [ -n "$v" ] && [ "$v" -lt 1000 ] || h_fail "a child waited $v ms ($k)"
done
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left: $(h_rcli zrange 'conncap:{lc}:holders' 0 -1)"
echo ok
