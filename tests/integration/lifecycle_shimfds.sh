# lifecycle_shimfds.sh -- the program closes or overwrites the shim's own Redis descriptor (closefrom(3),
# close_range, a close() loop from 3 up, a /proc/self/fd walk, dup2 onto it): the close succeeds, the shim
# never writes to or closes the program's file on that number, and reconnects on a fresh descriptor.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 100
for how in closefrom close_range loop proc dup2; do
    lc_run shimfds $how
    h_note "$how: shim descriptor $(lc_fact shim-fd), then $(lc_fact new-shim-fd)"
    [ "$(h_holders lc)" -eq 0 ] || h_fail "$how: holders left"
done
# The race: for 3 s the program keeps putting a pipe on the shim's Redis
# descriptor while another thread keeps the shim busy talking to Redis (and the
# heartbeat renews every 100 ms). A close or dup2 that may hit the shim's
# descriptor waits for the Redis call in flight, so nothing may ever reach the
# pipe. (Without that, this run catches a write into the pipe most times.)
lc_setup 300 100
lc_run shimrace 3000
h_note "the shim's descriptor was replaced $(lc_fact replaced) times under load"
[ "$(lc_fact replaced)" -gt 10 ] || h_fail "too few replacements to show anything"
echo ok
