# lifecycle_envclear.sh -- the program clears its environment and overwrites the old strings (as nginx does
# for its workers, and setproctitle) before its first connect: the CONNCAP_* values copied before main still
# apply, so the connect is capped.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 100
lc_run envclear
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"
echo ok
