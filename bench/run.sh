#!/usr/bin/env bash
# run.sh -- `make bench`: every figure against a baseline measured in the same run, on loopback; prints a table.
# Method (see bench/RESULTS.md): the cheap paths (unmatched connect, close of a
# non-socket) are counted in instructions with valgrind's callgrind, which is
# repeatable on a noisy machine: the shim's extra instructions per call,
# turned into ns with this machine's measured instructions per ns, over the
# wall-clock time of the call without the shim. Latencies and rates are
# wall-clock (the fastest of several runs) or percentiles. Needs no network
# beyond 127.0.0.1.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# bench/run.sh SECTION: only that section's rows (cli: bench/cli_scale.sh)
case "${1:-}" in cli) exec bash bench/cli_scale.sh ;; esac
# BENCH_ONLY=shortlived: only that section (bench/shortlived.sh)
[ "${BENCH_ONLY:-}" = shortlived ] && exec bash bench/shortlived.sh
# BENCH_ROWS=waiters: only the sleeping waiters' rows (bench/waiters.sh)
[ "${BENCH_ROWS:-}" = waiters ] && exec bash bench/waiters.sh
. tests/lib/harness.sh
B="$BUILD/bench"
mkdir -p "$B"
CFLAGS_B="-O2 -g -std=gnu11 -D_GNU_SOURCE $(pkg-config --cflags hiredis)"
cc $CFLAGS_B -pthread -o "$B/bench" bench/bench.c $(pkg-config --libs hiredis) || exit 1
cc $CFLAGS_B -Icore -I"$BUILD" -o "$B/pairs" bench/pairs.c "$BUILD"/core/*.o "$BUILD/scripts.o" \
    $(pkg-config --libs hiredis libconfig) -ldl -pthread -lm || exit 1
have_valgrind=0; command -v valgrind >/dev/null && have_valgrind=1

h_redis_start
listener() { # VAR: starts an accept-and-close listener, its port in VAR
    local pf="$T/l.$1"
    "$B/bench" listen "$pf" >/dev/null 2>&1 &
    _pids+=("$!")
    h_wait_file "$pf" || h_fail "listener did not start"
    printf -v "$1" '%s' "$(cat "$pf")"
}
listener LP; listener MP; listener HP; listener XP
cat >"$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; key_prefix = "bench:"; command_timeout_ms = 1000; };
semaphores = ( { name = "free"; limit = 1000000; lease_ms = 30000; },
               { name = "one"; limit = 1; lease_ms = 30000; wait_timeout_ms = 10000; } );
rules = ( { semaphore = "free"; match = ( "127.0.0.1:$MP", "127.0.0.1:$XP" ); },
          { semaphore = "one"; match = ( "127.0.0.1:$HP" ); } );
CONF
export CONNCAP_CONFIG="$T/c.conf"
shim() { LD_PRELOAD="$LIB" "$@"; }
# The fastest of several runs: on a shared machine the other runs only add
# other programs' interference, never less work.
fastest() { sort -g | head -1; }
# wall ns/op: fastest of 7 runs, with and without the shim interleaved
wall() { # ARGS... -> "without with"
    local a=() b=() i
    for i in 1 2 3 4 5 6 7; do a+=("$("$B/bench" "$@")"); b+=("$(shim "$B/bench" "$@")"); done
    echo "$(printf '%s\n' "${a[@]}" | fastest) $(printf '%s\n' "${b[@]}" | fastest)"
}
# instructions in the timed part (callgrind totals)
instr() {
    local out="$T/cg.$RANDOM"
    valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$out" "$@" >/dev/null 2>&1 || { echo -1; return; }
    awk '/^(summary|totals):/ {print $2; exit}' "$out"
}
# ROWS=name,...: only those sections (core: rows 1-6; scale, fleet: bench/scale.sh; shim: bench/shim_pairs.sh;
# cli: bench/cli_scale.sh; waiters: bench/waiters.sh; qconn: bench/qconn.sh; qmany: bench/qmany.sh;
# shortlived: bench/shortlived.sh);
# all by default
only() { [ -z "${ROWS:-}" ] || [[ ",$ROWS," == *",$1,"* ]]; }
rows=()
. bench/lib.sh

# ---- calibration: instructions per ns of this machine ----
ipns=""
if [ $have_valgrind = 1 ] && only core; then
    sn=20000000
    ns_per=$(for i in 1 2 3 4 5; do "$B/bench" spin $sn; done | fastest)
    ir=$(instr "$B/bench" spin $sn)
    ipns=$(awk -v ir="$ir" -v n=$sn -v ns="$ns_per" 'BEGIN {printf "%.2f", ir / (n * ns)}')
fi

cheap() { # NAME TARGET ARGS... (ARGS: the bench mode, N per op last)
    local name=$1 target=$2; shift 2
    local n=${!#} w with without d ratio
    w=$(wall "$@"); without=${w% *}; with=${w#* }
    if [ -n "$ipns" ]; then
        local i0 i1
        i0=$(instr "$B/bench" "$@"); i1=$(LD_PRELOAD="$LIB" instr "$B/bench" "$@")
        d=$(awk -v a="$i0" -v b="$i1" -v n="$OPS" 'BEGIN {printf "%.0f", (b - a) / n}')
        ratio=$(awk -v d="$d" -v ip="$ipns" -v t="$without" 'BEGIN {printf "%.3f", 1 + d / ip / t}')
        row "$name" "${ratio}x (+$d instr)" "${target}x" "$(verdict "$ratio" "$target")"
    else
        ratio=$(awk -v a="$without" -v b="$with" 'BEGIN {printf "%.3f", b / a}')
        row "$name (wall clock: no valgrind)" "${ratio}x" "${target}x" "$(verdict "$ratio" "$target")"
    fi
    rows+=("$(printf '|   %-58s | %-24s | %-8s | %-8s |' "wall clock, fastest ns/op without / with" "$without / $with" "" "")")
}

if only core; then
# 1. unmatched connect+close; 2. close() of a non-socket descriptor
OPS=2000 cheap "unmatched connect+close, with vs without the shim" 1.03 conn "$LP" 2000
OPS=50000 cheap "close() of a non-socket descriptor, with vs without" 1.05 close 10000 5

# 2b. every other hooked call on a socket that is neither queued nor counted
# (the calls interposed for queued connects, fcntl, dup*, the sends, close's
# other forms): at most 30 instructions each over the same call without the
# shim (a pair, A+B: two calls, 60). The same list and budgets are checked
# by tests/integration/hook_cost.sh.
if [ -n "$ipns" ]; then
    for c in $(bash tests/lib/hook_calls.sh); do
        i0=$(instr "$B/bench" hook $c 20000); i1=$(LD_PRELOAD="$LIB" instr "$B/bench" hook $c 20000)
        d=$(awk -v a="$i0" -v b="$i1" 'BEGIN {printf "%.0f", (b - a) / 20000}')
        t=30; case "$c" in *+*) t=60 ;; esac
        row "$c() of a socket not queued nor counted: instructions added" "+$d instr" "+$t" "$(verdict "$d" $t)"
    done
fi

# 3. matched connect+close with a free permit vs the floor
m=""; f1=""; f2=""
for i in 1 2 3 4 5 6 7; do   # interleaved, the fastest of each
    m="$m $(shim "$B/bench" conn "$MP" 2000)"
    f1="$f1 $("$B/bench" floor "$REDIS_SOCK" "$LP" 2000 1)"
    f2="$f2 $("$B/bench" floor "$REDIS_SOCK" "$LP" 2000 2)"
done
m=$(printf '%s\n' $m | fastest); f1=$(printf '%s\n' $f1 | fastest); f2=$(printf '%s\n' $f2 | fastest)
r1=$(awk -v a="$m" -v b="$f1" 'BEGIN {printf "%.2f", a / b}')
r2=$(awk -v a="$m" -v b="$f2" 'BEGIN {printf "%.2f", a / b}')
row "matched connect+close (free permit) vs 1 EVALSHA + connect" "${r1}x" "1.25x" "$(verdict "$r1" 1.25)"
row "  same vs 2 EVALSHA + connect (acquire and release)" "${r2}x" "" ""
rows+=("$(printf '|   %-58s | %-24s | %-8s | %-8s |' "ns/op: matched / floor 1 / floor 2" "$(printf '%.0f / %.0f / %.0f' "$m" "$f1" "$f2")" "" "")")
# The same with the client and redis-server pinned (taskset): on one core
# the floor's wake-ups need no other core, and on two (as with a Redis on
# another host) each one does; unpinned, the scheduler picks either, which
# moves the floor by about a third from run to run.
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    for place in "0 1 two cores" "0 0 one core"; do
        set -- $place
        taskset -a -p -c "$2" "$REDIS_PID" >/dev/null || continue
        pm=""; pf=""
        for i in 1 2 3 4 5; do
            pm="$pm $(shim taskset -c "$1" "$B/bench" conn "$MP" 2000)"
            pf="$pf $(taskset -c "$1" "$B/bench" floor "$REDIS_SOCK" "$LP" 2000 1)"
        done
        pm=$(printf '%s\n' $pm | fastest); pf=$(printf '%s\n' $pf | fastest)
        row "  same, client and redis pinned to ${*:3}" "$(awk -v a="$pm" -v b="$pf" 'BEGIN {printf "%.2fx (%.0f/%.0f ns)", a / b, a, b}')" "" ""
    done
    taskset -a -p -c "0-$(( $(nproc) - 1 ))" "$REDIS_PID" >/dev/null
fi

# 4. hand-off latency: two processes take turns on a permit of limit 1
shim "$B/bench" handoff "$HP" 1000 1000 >"$T/handoff" || h_fail "hand-off bench failed"
sort -n "$T/handoff" | awk 'NR > 1 { printf "%.3f\n", ($1 - prev) / 1e6 } { prev = $2 }' | sort -g >"$T/lat"
n=$(wc -l <"$T/lat")
p50=$(sed -n "$(( (n + 1) / 2 ))p" "$T/lat"); p99=$(sed -n "$(( (n * 99 + 99) / 100 ))p" "$T/lat")
row "hand-off: release to the waiter's connect, p50" "$p50 ms" "" ""
row "hand-off: release to the waiter's connect, p99" "$p99 ms" "2 ms" "$(verdict "$p99" 2)"

# 5. acquire/release pairs per second, 8 processes, next to redis-semaphore
ours=$("$B/pairs" "$REDIS_SOCK" 8 3 8)
row "acquire/release pairs/s, 8 processes: conncap" "$ours" "" ""
if command -v npm >/dev/null && command -v node >/dev/null; then
    [ -d bench/node_modules/redis-semaphore ] || (cd bench && npm install --no-audit --no-fund --loglevel=error >/dev/null 2>&1)
    if [ -d bench/node_modules/redis-semaphore ]; then
        theirs=$(node bench/pairs.js "$REDIS_SOCK" 8 3 8 2>/dev/null || echo failed)
        v=$(node -p 'require("./bench/node_modules/redis-semaphore/package.json").version' 2>/dev/null)
        row "same with npm redis-semaphore $v (ioredis)" "$theirs" "" ""
    else
        row "same with npm redis-semaphore" "npm install failed" "" ""
    fi
else
    row "same with npm redis-semaphore" "npm not installed" "" ""
fi

# 6. memory: added resident memory holding 1000 permits
read -r _ rss_with < <(shim "$B/bench" mem "$XP" 1000)
read -r _ rss_without < <("$B/bench" mem "$XP" 1000)
row "added resident memory, 1000 permits held" "$((rss_with - rss_without)) KiB" "" ""
fi

. bench/scale.sh
only scale && scale_rows
only fleet && scale_fleet

# Redis time per pair through the real shim, the direct calls and redis-semaphore in one pattern (issue 26)
. bench/shim_pairs.sh
only shim && shim_pairs_rows

# 7. the CLI at 100,000 holders and 10,000 waiters: its longest Redis call
only cli && while IFS= read -r l; do rows+=("$l"); done < <(bash bench/cli_scale.sh)

# 8. sleeping waiters: Redis commands, CPU and connections (bench/waiters.sh)
. bench/waiters.sh
only waiters && waiters_rows 15

# 9. the queued connect's hand-off next to a blocking waiter's, one run (bench/qconn.sh)
. bench/qconn.sh
only qconn && qconn_rows 300

# 10. 10,000 queued connects in one event-loop process: memory, Redis connections, Redis time (bench/qmany.sh)
. bench/qmany.sh
only qmany && qmany_rows 10000 100

echo
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "conncap bench -- $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -r), redis $(redis-server --version | awk '{print $3}' | sed 's/^v=//')${ipns:+, $ipns instr/ns}"
echo "load average at the end: $load (wall-clock rows move with it; the instruction counts do not)"
echo
printf '| %-60s | %-24s | %-8s | %-8s |\n' "figure" "result" "target" "verdict"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..62})" "$(printf -- '-%.0s' {1..26})" "$(printf -- '-%.0s' {1..10})" "$(printf -- '-%.0s' {1..10})"
printf '%s\n' "${rows[@]}"

# short-lived processes: a section of its own (bench/shortlived.sh)
if only shortlived; then echo; bash bench/shortlived.sh; fi
