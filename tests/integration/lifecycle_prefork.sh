# lifecycle_prefork.sh -- a prefork server: the parent never connects before it forks; the child connects,
# holds and closes. The child owns what it creates: its own pid in the holder id, the lease renewed while it
# holds, the permit released at close (not left to expire); the parent's later permit is its own.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 1500 100
lc_run prefork 1500
# "live 0" could also mean "expired": the holder must be gone from the set itself
! grep -q . "$T/step.child-closed" || h_fail "the child's close left its holder for the lease to end: $(cat "$T/step.child-closed")"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left: $(h_rcli zrange 'conncap:{lc}:holders' 0 -1)"
echo ok
