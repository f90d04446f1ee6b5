# lifecycle_nomem.sh -- malloc failing at every Nth call of a capped connect (once, and from then on), for every N the connect makes, then at every call of its close and exit: the host never crashes or hangs, the connect succeeds or fails with ENOMEM, the next connect works, a permit is left behind only when even its release could not be kept (logged) and then ends with its lease.
. "$(dirname "$0")/../lib/harness.sh"
if [ "${SAN:-}" = tsan ]; then
    echo "skipped under SAN=tsan: its runtime must come first in the process and allocates for itself"
    exit 77
fi
FA="$BUILD/lib/libfailalloc.so"
[ -f "$FA" ] || h_fail "no $FA: make test-build"
h_redis_start
h_server_start 50
# a limit no run reaches even with permits left to their lease (2 s): each
# run closes two with no memory left for their releases
h_conf "$T/c.conf" api 1000 2000 2000 "127.0.0.1:$SRV_PORT"
# the failing allocator comes first (under ASan it wraps ASan's, which must
# then not insist on coming first)
pre="$FA:$LIB"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
one() {
    LD_PRELOAD="$pre" CONNCAP_CONFIG="$T/c.conf" timeout 20 "$PROGS/nomem" 127.0.0.1 "$SRV_PORT" "$1" "$2" 2>"$T/run.err"
    local rc=$?
    cat "$T/run.err" >>"$T/nomem.err"
    return $rc
}

# the calls a first connect makes (configuration, Redis, threads): N runs over all of them
out=$(one 1000000000 from) || h_fail "without a failure: $out"
calls=$(awk '$1 == "first" { print $4 }' <<<"$out")
[ "$calls" -gt 20 ] || h_fail "the connect made $calls allocations: is the allocator preloaded? ($out)"
h_note "a first connect makes $calls allocations"
# the configuration's parse (libconfig's C-locale override) leaves the
# connecting thread's own locale in force
grep -qx 'locale kept' <<<"$out" || h_fail "the first connect changed the thread's locale ($out)"
last=$((calls + 5))
bad=()
declare -A seen
for mode in from once; do
    for n in $(seq 1 "$last"); do
        out=$(one "$n" "$mode")
        rc=$?
        if [ $rc -eq 124 ]; then
            bad+=("$mode $n: hung (killed after 20 s)")
            continue
        elif [ $rc -ne 0 ] && grep -q 'CheckFailed' "$T/run.err" && grep -q 'GetThreadStackTopAndBottom' "$T/run.err"; then
            # ASan's own start of a new thread (one of the shim's) calls
            # pthread_getattr_np, which allocates through this allocator: ASan
            # aborts on its own CHECK there, before the thread runs any code
            seen["asan's own thread start"]=$((${seen["asan's own thread start"]:-0} + 1))
            continue
        elif [ $rc -ne 0 ]; then
            bad+=("$mode $n: exit status $rc (a signal: $((rc > 128 ? rc - 128 : 0))): $(echo $out) $(grep -v 'function library' "$T/run.err" | grep -m 12 -E 'ERROR|SUMMARY|#[0-9] |leak|conncap' | tr '\n' ' ')")
            continue
        fi
        set -- $(grep '^first' <<<"$out") x x x
        first=$([ "$2" = 0 ] && echo connected || echo "$3")
        set -- $(grep '^second' <<<"$out") x x x
        second=$([ "$2" = 0 ] && echo connected || echo "$3")
        seen["$mode first $first"]=$((${seen["$mode first $first"]:-0} + 1))
        case "$first" in connected | ENOMEM) ;; *) bad+=("$mode $n: the connect failed with $first") ;; esac
        [ "$second" = connected ] || bad+=("$mode $n: the next connect failed with $second")
    done
done
for k in "${!seen[@]}"; do h_note "$k: ${seen[$k]} runs"; done
h_note "messages: $(sort "$T/nomem.err" | sed 's/conncap\[[0-9]*\]/conncap[PID]/; s/holder [^ ]*/holder H/g' | sort | uniq -c | sort -rn | head -8 | tr '\n' ';')"
# a permit whose release could not even be kept (no memory for it) is left
# to its lease, and says so; none other
left=$(h_holders api) told=$(grep -c 'it expires with its lease' "$T/nomem.err")
h_note "permits left to their lease: $left (releases that said so: $told)"
[ "$left" -le "$told" ] || bad+=("$left permits left in Redis by processes that exited, $told releases said they could not be kept")
WAIT_S=5 h_wait_for h_holders_is api 0 || bad+=("$(h_holders api) permits still there a lease later")
[ "$(h_rcli zcard 'conncap:{api}:queue')" -eq 0 ] || bad+=("tickets left in the queue")
if [ ${#bad[@]} -gt 0 ]; then
    printf 'FAIL: %s\n' "${bad[@]}" | head -40 >&2
    echo "FAIL: ${#bad[@]} failures in all" >&2
    exit 1
fi
echo ok
