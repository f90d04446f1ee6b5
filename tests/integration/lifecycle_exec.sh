# lifecycle_exec.sh -- exec: CLOEXEC sockets' permits released (restored when the exec fails), survivors
# adopted by the new image and renewed beyond their lease without any interposed call, 100 re-execs leak nothing.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lease=1200
lc_setup $lease
LC_STEP_WAIT=3 lc_run exec $lease
for f in "$T"/step.*; do sort -o "$f" "$f"; done
# the failed execs gave back and took again the very same holders
cmp -s "$T/step.before" "$T/step.failed-exec" || h_fail "holders changed across a failed exec"
cmp -s "$T/step.before" "$T/step.failed-exec-2" || h_fail "holders changed across a failed exec (EACCES)"
# the new image holds the same holder ids: adopted, not acquired again
comm -13 "$T/step.before" "$T/step.adopted" | grep . && h_fail "the new image holds permits it did not adopt"
cmp -s "$T/step.adopted" "$T/step.renewed" || h_fail "holders changed while the new image kept them"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left after the new image returned from main"
h_note "adopted holders kept alive for 3 leases of $lease ms: $(tr '\n' ' ' < "$T/step.renewed")"

# 100 re-execs of a program holding one surviving socket and one CLOEXEC socket
lc_setup 30000
lc_run reexec 100
for f in "$T"/step.*; do sort -o "$f" "$f"; done
[ "$(lc_fact fds-at-start)" = "$(lc_fact fds-at-end)" ] || h_fail "descriptors: $(lc_fact fds-at-start) at start, $(lc_fact fds-at-end) at end"
cmp -s "$T/step.first" "$T/step.last" || h_fail "the surviving socket's holder changed over 100 execs"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left after 100 re-execs: $(h_rcli zrange 'conncap:{lc}:holders' 0 -1)"
echo ok
