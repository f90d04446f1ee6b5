#!/usr/bin/env bash
# waiters.sh -- what sleeping waiters cost Redis: commands and CPU per waiter-second, connections per process.
# Usage: bench/waiters.sh [WINDOW_S]  (BUILD=dir selects the library, e.g. an older build to compare).
# Sourced by bench/run.sh, which calls waiters_rows to add its rows to the table.
# Method: a holder takes the only permit (lease 30 s); 50 threads of one
# process and 20 single-connect processes wait for it (wait_timeout 60 s);
# once all 70 are queued, a window of WINDOW_S seconds is measured on a
# private redis-server over TCP: the commands clients sent (INFO
# commandstats deltas of the commands a client sends: scripts, BLPOP, the
# poke's LPUSH and PEXPIRE (each LPUSH counted
# twice, the scripts' wake tokens too: an upper bound), connection set-up; not those run inside
# scripts), Redis CPU (INFO cpu user + sys deltas, idle server included:
# also printed alone), and the connections of each process (ss).

# waiters_measure WINDOW_S: prints "cmds_per_ws cpu_us_per_ws idle_cpu_us_per_ws max_conns_per_process clients"
waiters_measure() {
    local win=${1:-15} port pf sp
    port=$(h_free_port)
    mkdir -p "$T/wr"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$T/wr" --save '' --appendonly no --daemonize no \
        --logfile "$T/wr.log" &
    _pids+=("$!"); local rp=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    pf="$T/wl.port"; rm -f "$pf"
    python3 "$ROOT/tests/lib/countserver.py" --hold 0 --stats "$T/wl.json" --portfile "$pf" &
    _pids+=("$!"); sp=$!
    h_wait_file "$pf" || return 1
    local lp; lp=$(cat "$pf")
    cat >"$T/w.conf" <<CONF
redis = { host = "127.0.0.1"; port = $port; command_timeout_ms = 1000; key_prefix = "conncap:"; };
semaphores = ( { name = "wb"; limit = 1; lease_ms = 30000; wait_timeout_ms = 60000; } );
rules = ( { semaphore = "wb"; match = ( "127.0.0.1:$lp" ); } );
CONF
    local cpu0 cpu1 idle0 idle1 s0 s1 ps=()
    idle0=$(waiters_cpu "$port"); sleep "$win"; idle1=$(waiters_cpu "$port")
    mkfifo "$T/wa.in"
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/w.conf" "$PROGS/hold" 127.0.0.1 "$lp" -1 <"$T/wa.in" >/dev/null 2>&1 &
    ps+=("$!")
    exec 9>"$T/wa.in"
    for _ in $(seq 100); do [ "$(redis-cli -p "$port" zcard 'conncap:{wb}:holders')" = 1 ] && break; sleep 0.05; done
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/w.conf" "$PROGS/capclient" 127.0.0.1 "$lp" 50 1 0 >/dev/null 2>&1 9>&- &
    ps+=("$!")
    for _ in $(seq 20); do
        LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/w.conf" "$PROGS/capclient" 127.0.0.1 "$lp" 1 1 0 >/dev/null 2>&1 9>&- &
        ps+=("$!")
    done
    for _ in $(seq 400); do [ "$(redis-cli -p "$port" zcard 'conncap:{wb}:queue')" = 70 ] && break; sleep 0.05; done
    sleep 1
    s0=$(h_redis_sent -p "$port"); cpu0=$(waiters_cpu "$port"); local t0; t0=$(date +%s%N)
    sleep $((win / 2))
    local most; most=$(ss -Htnp state established "( dport = :$port )" 2>/dev/null | grep -o 'pid=[0-9]*' |
        sort | uniq -c | sort -rn | awk 'NR == 1 {print $1}')
    local clients; clients=$(redis-cli -p "$port" client list | grep -vc 'cmd=client')
    sleep $((win - win / 2))
    s1=$(h_redis_sent -p "$port"); cpu1=$(waiters_cpu "$port"); local t1; t1=$(date +%s%N)
    exec 9>&-
    for p in "${ps[@]}"; do wait "$p"; done
    kill "$rp" "$sp" 2>/dev/null; wait "$rp" "$sp" 2>/dev/null; rm -f "$T/wa.in"
    awk -v s="$((s1 - s0))" -v c="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN {print b - a}')" \
        -v i="$(awk -v a="$idle0" -v b="$idle1" 'BEGIN {print b - a}')" -v w="$win" \
        -v ns="$((t1 - t0))" -v m="$most" -v cl="$clients" 'BEGIN {
        ws = 70 * ns / 1e9
        printf "%.3f %.1f %.1f %s %s\n", s / ws, c * 1e6 / ws, i * 1e6 / (70 * w), m, cl }'
}

# Redis CPU seconds so far (user + sys).
waiters_cpu() {
    redis-cli -p "$1" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f\n", s}'
}

waiters_rows() {
    read -r cmds cpu idle most clients < <(waiters_measure "${1:-15}")
    row "sleeping waiters: commands per waiter-second (70 waiters)" "$cmds" "0.25" "$(verdict "$cmds" 0.25)"
    row "sleeping waiters: Redis CPU per waiter-second, above idle" "$cpu us, +$(awk -v a="$cpu" -v b="$idle" 'BEGIN {printf "%.1f", a - b}') us" "" ""
    row "sleeping waiters: Redis connections, most in one process" "$most ($clients in all, 22 processes)" "2" "$(verdict "$most" 2)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    . "$(dirname "$0")/lib.sh"
    bench_alone
    waiters_rows "${1:-15}"
    printf '%s\n' "${rows[@]}"
fi
