# lifecycle_errno.sh -- every interposed call returns what the real one does (ECONNREFUSED, EISCONN, EBADF,
# EINVAL, ENOTSOCK, ENOENT; errno untouched on success) at any log level; the heartbeat heals descriptors
# closed behind the shim's back within one heartbeat; start-up: no thread, close() in a constructor works.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
for level in warn debug; do
    LOG_LEVEL=$level lc_setup 30000 100
    lc_run errno
done
lease=9000   # heartbeat every 3 s; unhealed, the lease would last 9 s
lc_setup $lease 100
LC_STEP_WAIT=5 lc_run selfheal
LC_CTOR_CLOSE=1 lc_run startup
if [ -z "${SAN:-}" ] && [ -r /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ]; then
    # a preloaded allocator, before and after the shim
    for pre in "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2:$LIB" "$LIB:/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"; do
        LC_PRELOAD=$pre LC_CTOR_CLOSE=1 lc_run startup
        LC_PRELOAD=$pre lc_run fork 5
        LC_PRELOAD=$pre lc_run reexec 3
    done
fi
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"
echo ok
