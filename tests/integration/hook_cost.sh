# hook_cost.sh -- issue 26's budget, in instructions (callgrind: exact, whatever the machine's load): every hooked
# call on a descriptor the shim neither counts nor queues costs at most 30 instructions more than without the
# shim (a pair of calls 60) and calls no clock; an unmatched connect+close at most 600 more (and, once the
# threads its first connect owes have started, no clock either). bench/run.sh's
# row 2b measures the same calls (tests/lib/hook_calls.sh) with a larger N.
. "$(dirname "$0")/../lib/harness.sh"
if [ -n "${SAN:-}" ]; then echo "skipped under SAN=$SAN: instruction counts are the plain build's"; exit 77; fi
if ! command -v valgrind >/dev/null || [ ! -r /usr/include/valgrind/callgrind.h ]; then
    echo "skipped: valgrind (callgrind) is not installed (Debian package valgrind; make deps installs it)"
    exit 77
fi
B="$T/bench"
cc -O2 -g -std=gnu11 -D_GNU_SOURCE $(pkg-config --cflags hiredis) -o "$B" "$ROOT/bench/bench.c" \
    $(pkg-config --libs hiredis) || h_fail "bench/bench.c does not build"
N=2000

# cg OUT ARGS...: bench ARGS under callgrind, only its timed part collected (bench.c's toggles)
cg() {
    local out=$1; shift
    valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" "$B" "$@" >/dev/null 2>"$out.err" ||
        h_fail "callgrind of bench $*: $(tail -n 5 "$out.err")"
}
total() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }
# clocks OUT: calls made to a clock in the collected part (clock_gettime, time, gettimeofday; the vDSO's too)
clocks() {
    awk '/^c?fn=\([0-9]+\) / { id = $1; sub(/^c?fn=/, "", id); name[id] = $2 }
         /^cfn=/ { id = $1; sub(/^cfn=/, "", id); callee = name[id]; next_calls = 1; next }
         next_calls && /^calls=/ { split($1, c, "="); if (callee ~ /clock_gettime|gettimeofday|^time$|^__vdso/) n += c[2] }
         { next_calls = 0 }
         END { print n + 0 }' "$1"
}

bad=()
# measure NAME BUDGET ARGS...: the instructions the shim adds per operation, and its clock calls
measure() {
    local name=$1 budget=$2; shift 2
    cg "$T/cg0" "$@"
    LD_PRELOAD="$LIB" cg "$T/cg1" "$@"
    local i0 i1 d c
    i0=$(total "$T/cg0"); i1=$(total "$T/cg1")
    [ -n "$i0" ] && [ -n "$i1" ] || h_fail "$name: no callgrind totals"
    d=$(( (i1 - i0) / N )); c=$(( $(clocks "$T/cg1") - $(clocks "$T/cg0") ))
    h_note "$(printf '%-24s +%4d instructions (budget +%d), %d clock calls' "$name" "$d" "$budget" "$c")"
    [ "$d" -le "$budget" ] || bad+=("$name: +$d instructions, over +$budget")
    [ "$c" -eq 0 ] || [ "$name" = "connect+close, 1st s" ] || bad+=("$name: $c clock calls in $N calls")
}

export CONNCAP_CONFIG="$T/c.conf"
for c in $(bash "$ROOT/tests/lib/hook_calls.sh"); do
    t=30; case "$c" in *+*) t=60 ;; esac
    measure "$c" $t hook "$c" $N
done

# an unmatched connect+close under bench/run.sh's configuration (row 1), the warm-up connect outside the
# collected part: in the first second after it, while the reload thread is owed (each hook then reads the
# coarse clock), and once that thread runs (no clock then)
h_redis_start
"$B" listen "$T/port" >/dev/null 2>&1 &
_pids+=("$!")
h_wait_file "$T/port" || h_fail "listener did not start"
read -r mp xp hp < <(h_free_ports 3 | tr '\n' ' ')
cat >"$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; key_prefix = "bench:"; command_timeout_ms = 1000; };
semaphores = ( { name = "free"; limit = 1000000; lease_ms = 30000; },
               { name = "one"; limit = 1; lease_ms = 30000; wait_timeout_ms = 10000; } );
rules = ( { semaphore = "free"; match = ( "127.0.0.1:$mp", "127.0.0.1:$xp" ); },
          { semaphore = "one"; match = ( "127.0.0.1:$hp" ); } );
CONF
measure "connect+close, 1st s" 600 conn "$(cat "$T/port")" $N
measure connect+close 600 conn "$(cat "$T/port")" $N 1500

[ ${#bad[@]} -eq 0 ] || h_fail "$(printf '%s; ' "${bad[@]}")"
echo ok
