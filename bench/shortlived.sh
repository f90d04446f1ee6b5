#!/usr/bin/env bash
# shortlived.sh -- what a short-lived process pays (make bench's "short-lived" section; alone:
# BENCH_ONLY=shortlived make bench, or bash bench/shortlived.sh after make test-build).
# Rows: the instructions (callgrind, whole process) of a process that makes one
# matched connect and close (its permit acquired and released against a
# private redis-server with the function library loaded) against one that
# makes one unmatched connect; the threads it starts; the Redis commands it
# sends (MONITOR, commands run inside scripts excluded), by default and with
# CONNCAP_HEARTBEAT=lazy; curl fetching one
# page plain, under LD_PRELOAD and under `conncap run`, as same-run ratios
# of the fastest of several interleaved rounds.
. "$(dirname "$0")/lib.sh"
bench_alone
B="$BUILD/bench"
mkdir -p "$B"
cc -O2 -g -o "$B/hold" tests/progs/hold.c && cc -O2 -g -o "$B/taskhold" tests/progs/taskhold.c || exit 1

h_redis_start
h_server_start 600000; MP=$SRV_PORT                     # matched: accept, hold until EOF
UP=$(h_free_port)                                       # unmatched: an HTTP server, also curl's
python3 -m http.server "$UP" --bind 127.0.0.1 --directory "$T" >/dev/null 2>&1 &
_pids+=("$!")
HP=$(h_free_port)                                       # matched HTTP server for curl
python3 -m http.server "$HP" --bind 127.0.0.1 --directory "$T" >/dev/null 2>&1 &
_pids+=("$!")
echo hello >"$T/index.html"
h_wait_for curl -sf "http://127.0.0.1:$UP/" -o /dev/null || h_fail "http server did not start"
h_wait_for curl -sf "http://127.0.0.1:$HP/" -o /dev/null || h_fail "http server did not start"
h_conf "$T/c.conf" s 1000 30000 2000 "127.0.0.1:$MP" "127.0.0.1:$HP"
export CONNCAP_CONFIG="$T/c.conf"
"$CLI" setup -c "$T/c.conf" >/dev/null || h_fail "conncap setup failed"

# 1. instructions of the whole process (shim start, config, connect, close, exit)
instr() {
    local out="$T/cg.$RANDOM"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >/dev/null 2>&1 || { echo -1; return; }
    awk '/^(summary|totals):/ {print $2; exit}' "$out"
}
if command -v valgrind >/dev/null; then
    plain=$(instr "$B/hold" 127.0.0.1 "$UP" 0)
    un=$(LD_PRELOAD="$LIB" instr "$B/hold" 127.0.0.1 "$UP" 0)
    ma=$(LD_PRELOAD="$LIB" instr "$B/hold" 127.0.0.1 "$MP" 0)
    lz=$(CONNCAP_HEARTBEAT=lazy LD_PRELOAD="$LIB" instr "$B/hold" 127.0.0.1 "$MP" 0)
    row "process, one unmatched connect: instructions (plain $plain)" "$un" "" ""
    row "process, one matched connect+close (acquire, release)" "$ma" "" ""
    row "  matched - unmatched (first matched connect's extra)" "$((ma - un))" "400000" "$(verdict $((ma - un)) 400000)"
    row "  same, CONNCAP_HEARTBEAT=lazy" "$((lz - un))" "400000" "$(verdict $((lz - un)) 400000)"
else
    row "process instructions" "valgrind not installed" "" ""
fi

# 2. threads and Redis commands of one such process
LD_PRELOAD="$LIB" "$B/taskhold" 127.0.0.1 "$MP" 0 0 >"$T/th"
th=$(awk '/^tasks/ {print $2}' "$T/th")
row "threads of a process holding a permit < 1/3 lease" "$th (main + heartbeat)" "" ""
CONNCAP_HEARTBEAT=lazy LD_PRELOAD="$LIB" "$B/taskhold" 127.0.0.1 "$MP" 0 0 >"$T/th"
th=$(awk '/^tasks/ {print $2}' "$T/th")
row "  same, CONNCAP_HEARTBEAT=lazy" "$th (the main one)" "1" "$(verdict "$th" 1)"
redis-cli -s "$REDIS_SOCK" monitor >"$T/mon" 2>&1 &
mon=$!
h_wait_for grep -q OK "$T/mon"
n=10
for i in $(seq $n); do LD_PRELOAD="$LIB" "$B/hold" 127.0.0.1 "$MP" 0 >/dev/null; done
sleep 0.3; kill $mon; wait $mon 2>/dev/null
cmds=$(grep '^[0-9]' "$T/mon" | grep -vc ' lua\] ')
per=$(awk -v c="$cmds" -v n=$n 'BEGIN {printf "%.2f", c / n}')
row "Redis commands per process, one matched connection" "$per ($(grep '^[0-9]' "$T/mon" | grep -v ' lua\] ' | awk '{print toupper($4)}' | tr -d '"' | sort | uniq -c | awk '{printf "%s%s x%s", s, $2, $1; s=", "}'))" "2" "$(verdict "$per" 2)"

# 3. curl: plain, LD_PRELOAD, conncap run -- each run timed alone, the three
#    interleaved, 15 rounds; the fastest run of each (interference only adds)
once() { local t0; t0=$(date +%s%N); "$@" -sf "http://127.0.0.1:$HP/" -o /dev/null || echo fail >&2; echo $(( ($(date +%s%N) - t0) / 1000 )); }
if command -v curl >/dev/null; then
    a=(); b=(); c=(); d=()
    for r in $(seq 15); do
        a+=("$(once env -u LD_PRELOAD curl)")
        b+=("$(once env LD_PRELOAD="$LIB" curl)")
        d+=("$(once env CONNCAP_HEARTBEAT=lazy LD_PRELOAD="$LIB" curl)")
        c+=("$(CONNCAP_LIBRARY="$LIB" once "$CLI" run -c "$T/c.conf" -- curl)")
    done
    fa=$(printf '%s\n' "${a[@]}" | sort -g | head -1); fb=$(printf '%s\n' "${b[@]}" | sort -g | head -1)
    fc=$(printf '%s\n' "${c[@]}" | sort -g | head -1); fd=$(printf '%s\n' "${d[@]}" | sort -g | head -1)
    row "curl, one page from a matched server: plain, us (fastest)" "$fa" "" ""
    row "curl under LD_PRELOAD / plain (same run)" "$(awk -v x="$fb" -v y="$fa" 'BEGIN {printf "%.2fx", x / y}')" "" ""
    row "curl under LD_PRELOAD, CONNCAP_HEARTBEAT=lazy / plain" "$(awk -v x="$fd" -v y="$fa" 'BEGIN {printf "%.2fx", x / y}')" "" ""
    row "curl under conncap run / plain (same run)" "$(awk -v x="$fc" -v y="$fa" 'BEGIN {printf "%.2fx", x / y}')" "" ""
fi

echo
echo "short-lived processes -- $(nproc) cores, $(uname -r), redis $(redis-server --version | awk '{print $3}' | sed 's/^v=//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${rows[@]}"
