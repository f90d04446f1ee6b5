# lifecycle_fork.sh -- fork: a parent with 4 threads looping connect/close forks 20 children that each
# connect and exit: no hang, the child's close of its inherited copy keeps the parent's permit, children
# take their own permits, counts balanced.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 100
# A thread in the middle of connect() at fork time leaves the permit it was
# filling in to the child, where no thread owns it: a few hundred bytes,
# once per fork, not a leak of the parent. Do not let LeakSanitizer fail the
# children for it.
[ "${SAN:-}" = asan ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
lc_run fork 20
h_note "connect/close loops meanwhile: $(lc_fact loops)"
# 20 children's permits, each child's own (its pid in the holder id)
pids=$(grep -v "^[^/]*/$(head -n1 "$T/step.parent" | cut -d/ -f2)/" "$T/step.children-connected" | cut -d/ -f2 | sort -u | wc -l)
[ "$pids" -eq 20 ] || h_fail "want 20 children holding their own permits, have $pids"
cmp -s "$T/step.parent" "$T/step.children-gone" || h_fail "the parent's permit changed while children closed their copies"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left: $(h_rcli zrange 'conncap:{lc}:holders' 0 -1)"
echo ok
