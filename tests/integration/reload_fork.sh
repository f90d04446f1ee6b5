# reload_fork.sh -- a hot reload adds a semaphore, then the process forks: the child handler resets only the
# per-semaphore counters that exist (it wrote past them, by as many as a reload may add; SAN=asan reports
# it), and the child connects, capped, and exits cleanly.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 100
sed 's/^semaphores = ( \(.*\) );$/semaphores = ( \1, { name = "lc2"; limit = 1; } );/' "$LC_CONF" >"$T/lc2.conf"
grep -q lc2 "$T/lc2.conf" || h_fail "could not write the second config"
lc_run reloadfork "$T/lc2.conf"
grep -q 'reload failed' "$T/lc.err" && h_fail "the reload failed: $(cat "$T/lc.err")"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"
echo ok
