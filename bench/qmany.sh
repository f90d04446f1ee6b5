#!/usr/bin/env bash
# qmany.sh -- 10,000 queued connects in one event-loop process: memory, descriptors, threads, Redis connections and Redis time.
# Usage: bench/qmany.sh [N [LIMIT]]  (BUILD=dir selects the library, e.g. an older build to compare).
# Sourced by bench/run.sh (ROWS=qmany), which calls qmany_rows to add its rows to the table.
# Method: a private redis-server over TCP (its connections counted per
# process with ss), slowlog-log-slower-than 100 us, stats reset. bench/qmany
# takes the LIMIT permits with blocking connects, queues N non-blocking
# connects (epoll, added after each connect), reports resident memory,
# descriptors and threads per queued connect; the process's Redis
# connections are counted while they are queued and sampled every 0.2 s
# while the holders' permits go down the queue (each connected socket is
# closed at once). Then Redis's own accounting: SLOWLOG entries over 1 ms,
# the slowest call, INFO commandstats calls and usec_per_call. qmany raises
# RLIMIT_NOFILE to 3 N + LIMIT + 1024 when it may (root), else its soft
# limit to the hard one, which then bounds N with what the shim needs per
# queued connect: qmany stops at the first connect it cannot queue.
# redis-server runs at nice -20 when allowed (root): SLOWLOG and
# commandstats count wall time, and on a shared 2-core machine the other
# programs (and qmany's own 10,000 threads) preempt it in the middle of its
# calls otherwise (an LPUSH "took" 11 ms, an HINCRBY 262 ms). QMANY_NICE
# sets qmany's niceness (default 0: at 19 it starves on a loaded machine).
# Redis and the sleeper get the last core to themselves, everything else the
# others (QMANY_PIN=0: all share), as a fleet's Redis has a host of its own;
# the steal time /proc/stat counts on that core during the run says how long
# the hypervisor ran something else there (a call that spans it counts it).

# qmany_measure N LIMIT: prints "key value" lines
qmany_measure() {
    local n=${1:-10000} lim=${2:-100} port
    local B="$BUILD/bench"
    mkdir -p "$B"
    cc -O2 -g -std=gnu11 -D_GNU_SOURCE -o "$B/qmany" "$ROOT/bench/qmany.c" || return 1
    [ "$B/bench" -nt "$ROOT/bench/bench.c" ] || cc -O2 -g -std=gnu11 -D_GNU_SOURCE -o "$B/bench" "$ROOT/bench/bench.c" \
        $(pkg-config --cflags --libs hiredis) || return 1
    port=$(h_free_port)
    mkdir -p "$T/qm"
    local rnice="" rpin="" qpin=""
    nice -n -20 true 2>/dev/null && rnice="nice -n -20" # root: Redis first on a loaded machine
    if [ "${QMANY_PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
        rpin="taskset -c $(($(nproc) - 1))" qpin="taskset -c 0-$(($(nproc) - 2))" # Redis on a core of its own
    fi
    $rpin $rnice redis-server --port "$port" --bind 127.0.0.1 --dir "$T/qm" --save '' --appendonly no --daemonize no \
        --logfile "$T/qm.log" --slowlog-log-slower-than 100 --slowlog-max-len 100000 &
    _pids+=("$!"); local rp=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    local pf="$T/qm.lport"; rm -f "$pf"
    $qpin "$B/bench" listen "$pf" >/dev/null 2>&1 &
    _pids+=("$!"); local lpid=$!
    h_wait_file "$pf" || return 1
    local lp; lp=$(cat "$pf")
    cat >"$T/qm.conf" <<CONF
redis = { host = "127.0.0.1"; port = $port; command_timeout_ms = 1000; key_prefix = "conncap:"; };
semaphores = ( { name = "qm"; limit = $lim; lease_ms = 60000; wait_timeout_ms = 600000; } );
rules = ( { semaphore = "qm"; match = ( "127.0.0.1:$lp" ); } );
CONF
    redis-cli -p "$port" config resetstat >/dev/null
    redis-cli -p "$port" slowlog reset >/dev/null
    rm -f "$T/qm.in" "$T/qm.out"; mkfifo "$T/qm.in"
    # the floor during the run: a sleeper at Redis's niceness, woken every 1 ms, and how late
    $rpin $rnice "$B/bench" lateness >"$T/qm.late" &
    local latep=$!
    local rcpu=cpu; [ -n "$rpin" ] && rcpu="cpu$(($(nproc) - 1))"
    steal() { awk -v c="$rcpu" '$1 == c {print $9 * 1000 / '"$(getconf CLK_TCK)"'}' /proc/stat; } # ms the hypervisor ran something else
    local steal0; steal0=$(steal)
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/qm.conf" $qpin nice -n "${QMANY_NICE:-0}" "$B/qmany" "$lp" "$n" "$lim" <"$T/qm.in" >"$T/qm.out" 2>"$T/qm.err" &
    local qp=$!
    exec 8>"$T/qm.in"
    for _ in $(seq 1200); do grep -q '^ready' "$T/qm.out" && break; kill -0 "$qp" 2>/dev/null || break; sleep 0.1; done
    conns() { ss -Htnp state established "( dport = :$port )" 2>/dev/null | grep -c "pid=$qp,"; }
    local cq; cq=$(conns)
    local tgo; tgo=$(date +%s)
    local perfp=""
    if [ -n "${QMANY_PERF:-}" ]; then
        perf record -e cpu-clock -g -o "$QMANY_PERF" -p "$qp" >/dev/null 2>&1 &
        perfp=$!
    fi
    echo go >&8
    local most=$cq c
    while kill -0 "$qp" 2>/dev/null; do
        c=$(conns); [ "$c" -gt "$most" ] && most=$c
        sleep 0.2
    done
    wait "$qp"; local rc=$?
    kill -TERM "$latep"; wait "$latep"
    echo "steal-ms-during $(($(steal) - steal0)) $rcpu"
    [ -n "$perfp" ] && wait "$perfp"
    exec 8>&-
    cat "$T/qm.out"
    echo "exit $rc"
    echo "redis-nice ${rnice:-0}"
    echo "redis-core ${rpin:-shared}"
    echo "lateness-during $(cat "$T/qm.late")" # wakes, over 1 ms late, the latest (us)
    echo "redis-conns-queued $cq"
    echo "redis-conns-max $most"
    redis-cli -p "$port" --json slowlog get 100000 | python3 -c '
import json, sys
tgo = int(sys.argv[1])
log = json.load(sys.stdin)
print("slowlog-over-1ms-queueing", len([e for e in log if e[2] > 1000 and e[1] < tgo]))
over = [e for e in log if e[2] > 1000]
top = max(log, key=lambda e: e[2]) if log else None
print("slowlog-over-1ms", len(over))
# an O(1) command (HINCRBY, LPUSH...) over 1 ms was held off the CPU: the time is the machine, not the work
print("slowlog-over-1ms-plain", len([e for e in over if e[3][0].upper() not in ("EVALSHA", "EVAL", "FCALL", "BLPOP", "SLOWLOG")]))
print("slowest-us", top[2] if top else 0, (top[3][0] + " (%d args)" % len(top[3])) if top else "")
for e in sorted(over, key=lambda e: -e[2])[:5]:
    print("over-1ms", e[2], e[3][0], len(e[3]), "args", "at go%+d s" % (e[1] - tgo), " ".join(e[3][1:4])[:90])' "$tgo"
    redis-cli -p "$port" info commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_\([a-z|]*\):calls=\([0-9]*\),usec=\([0-9]*\),usec_per_call=\([0-9.]*\).*/cmd \1 calls \2 usec_per_call \4/p'
    # the machine's own floor: the longest a busy loop at Redis's niceness was held off the CPU in 3 s
    echo "intrinsic-latency-us $($rnice redis-cli --intrinsic-latency 3 2>/dev/null | tr '\r' '\n' |
        sed -n 's/^Max latency so far: \([0-9]*\) microseconds.*/\1/p' | tail -n 1)"
    kill "$rp" "$lpid" 2>/dev/null; wait "$rp" "$lpid" 2>/dev/null; rm -f "$T/qm.in"
}

qmany_rows() {
    local out="$T/qm.facts" f
    qmany_measure "${1:-10000}" "${2:-100}" >"$out"
    [ -z "${QMANY_KEEP:-}" ] || cp "$out" "$QMANY_KEEP"
    f() { sed -n "s/^$1 //p" "$out" | head -1; }
    local q; q=$(f queued)
    row "queued connects in one epoll process (nofile $(f nofile))" "$q (stopped: $(f stopped))" "10000" "$(verdict 10000 "${q:-0}")"
    row "  resident memory per queued connect" "$(f kib-per-queued) KiB" "" ""
    row "  descriptors / threads per queued connect" "$(f fds-per-queued) / $(f threads-per-queued)" "" ""
    row "  Redis connections of the process, queued / max after" "$(f redis-conns-queued) / $(f redis-conns-max)" "2" "$(verdict "$(f redis-conns-max)" 2)"
    row "  Redis calls over 1 ms (SLOWLOG), slowest" "$(f slowlog-over-1ms) (O(1) commands: $(f slowlog-over-1ms-plain)), $(f slowest-us) us" "0" "$(verdict "$(f slowlog-over-1ms)" 0)"
    row "  the machine's floor: longest stall of a busy loop in 3 s" "$(f intrinsic-latency-us) us" "" ""
    local late; read -r -a late <<<"$(f lateness-during)"
    row "  the floor during the run: 1 ms sleeps woken over 1 ms late, latest" "${late[1]:-?} of ${late[0]:-?}, ${late[2]:-?} us" "" ""
    local st; read -r -a st <<<"$(f steal-ms-during)"
    row "  time the hypervisor took from Redis's core during the run (steal)" "${st[0]:-?} ms (${st[1]:-?}; $(f redis-core))" "" ""
    row "  Redis usec per call (commandstats): EVALSHA / BLPOP" "$(sed -n 's/^cmd evalsha calls [0-9]* usec_per_call //p' "$out") / $(sed -n 's/^cmd blpop calls [0-9]* usec_per_call //p' "$out")" "" ""
    row "  events for numbers the program had closed" "$(f stale-events)" "0" "$(verdict "$(f stale-events)" 0)"
    row "  all granted and connected, time" "$(f granted), $(f grant-all-ms) ms" "" ""
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    . "$(dirname "$0")/lib.sh"
    bench_alone
    if [ -n "${QMANY_RAW:-}" ]; then qmany_measure "${1:-10000}" "${2:-100}"; exit; fi
    qmany_rows "${1:-10000}" "${2:-100}"
    printf '%s\n' "${rows[@]}"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
