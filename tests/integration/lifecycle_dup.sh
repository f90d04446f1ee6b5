# lifecycle_dup.sh -- dup family, dup2 over a permit (the JDK's close), close_range, closefrom, fdopen+fclose, reused numbers.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 60000
lc_setup
for mode in dup closerange fdopen reuse; do
    lc_run "$mode"
    [ "$(h_holders lc)" -eq 0 ] || h_fail "$mode: holders left: $(h_rcli zrange 'conncap:{lc}:holders' 0 -1)"
done
echo ok
