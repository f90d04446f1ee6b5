# lifecycle_exit.sh -- return from main and exit() give every permit back at once; _exit(), abort() and
# SIGKILL leave it to the lease, which ends within lease + one heartbeat.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lease=1500
lc_setup $lease
for how in return exit; do
    lc_run exit $how
    [ "$(lc_live)" -eq 0 ] || h_fail "$how: the permit was not given back at exit"
done
ulimit -c 0
for how in _exit abort kill; do
    LC_ANY_RC=1 lc_run exit $how
    t0=$(date +%s%N)
    [ "$(lc_live)" -eq 1 ] || h_fail "$how: the permit should stay until its lease ends"
    WAIT_S=10 h_wait_for eval '[ "$(lc_live)" -eq 0 ]' || h_fail "$how: the permit never expired"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    h_note "$how (status $LC_RC): the permit expired $ms ms after the process ended (lease $lease, heartbeat $((lease / 3)))"
    [ $ms -le $((lease + lease / 3 + 1000)) ] || h_fail "$how: took $ms ms, more than lease + heartbeat (+1 s slack)"
    h_rcli del 'conncap:{lc}:holders' >/dev/null
done
echo ok
