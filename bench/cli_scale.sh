#!/usr/bin/env bash
# cli_scale.sh -- bench rows: the longest Redis call of each CLI command at 100,000 holders of one semaphore and
# 10,000 waiters, against a plain ZCARD in the same run. Prints markdown table rows (bench/run.sh adds them to its
# table); runs alone too: BUILD=build bash bench/cli_scale.sh [NH NW].
# Method (bench/RESULTS.md): a private redis-server (SCHED_FIFO where allowed, so the figures are its own work more
# than the shared machine's scheduling), filled by tests/lib/scale_fill.lua; SLOWLOG at 0 us records every call of
# each run of a command; the row gives the longest call (of the best of 3 runs), the command that took it, the
# number of calls and their median.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. tests/lib/harness.sh
NH=${1:-100000}
NW=${2:-10000}
h_redis_start
chrt -f -a -p 1 "$REDIS_PID" 2>/dev/null || echo "cli_scale: redis-server not SCHED_FIFO (figures include scheduling)" >&2
CONF_EXTRA='audit = true;' h_conf "$T/c.conf" big "$NH" 3600000 300 "10.0.0.1:443"
k() { echo "conncap:{big}:$1"; }
fill() {
    h_rcli config set slowlog-log-slower-than -1 > /dev/null
    h_rcli --eval tests/lib/scale_fill.lua "$(k holders)" "$(k since)" "$(k waiters)" "$(k queue)" "$(k qexp)" , \
        "$NH" "$NW" "$(h_rcli time | head -1)000" "$(hostname)" > /dev/null
}
fill
h_rcli config set slowlog-max-len 1000000 > /dev/null
fmt() { printf '| %-60s | %-24s | %-8s | %-8s |\n' "$@"; }
# measure: SLOWLOG of the calls since `arm`, but redis-cli's own: "max_us calls command"
arm() { h_rcli slowlog reset > /dev/null; h_rcli config set slowlog-log-slower-than 0 > /dev/null; }
measure() {
    h_rcli config set slowlog-log-slower-than -1 > /dev/null
    h_rcli --json slowlog get -1 | python3 -c '
import json, sys
es = [e for e in json.load(sys.stdin) if e[3][0].lower() not in ("slowlog", "config", "hello")]
m = max(es, key=lambda e: e[2]) if es else [0, 0, 0, ["-"]]
d = sorted(e[2] for e in es) or [0]
print(m[2], d[len(d) // 2], len(es), m[3][0].upper())'
}
# row_of LABEL CONNCAP ARGS...: the run (of 3) with the shortest longest
# call: the other runs only add the machine's interference. reset refills.
row_of() {
    local label=$1 us med calls cmd best="" i; shift
    for i in 1 2 3; do
        [ "$1" = reset ] && [ "$i" -gt 1 ] && fill
        arm
        "$CLI" "$1" -c "$T/c.conf" "${@:2}" > /dev/null 2>&1 || echo "cli_scale: conncap $* failed" >&2
        read -r us med calls cmd < <(measure)
        [ -z "$best" ] || [ "$us" -lt "${best%% *}" ] && best="$us $med $calls $cmd"
    done
    read -r us med calls cmd <<< "$best"
    fmt "  $label" "$us us ($cmd; $calls calls, median $med us)" "1000 us" "$(awk -v v="$us" 'BEGIN {print (v <= 1000) ? "ok" : "MISSED"}')"
}

# the baseline: 200 plain ZCARD of the holders set, longest and median
arm
h_rcli -r 200 zcard "$(k holders)" > /dev/null
base=$(h_rcli config set slowlog-log-slower-than -1 > /dev/null; h_rcli --json slowlog get -1 | python3 -c '
import json, sys
d = sorted(e[2] for e in json.load(sys.stdin) if e[3][0].lower() == "zcard")
print("%d us max, %d us median" % (d[-1], d[len(d) // 2]))')
fmt "CLI at $NH holders / $NW waiters: longest Redis call per command" "" "" ""
fmt "  baseline: plain ZCARD of the holders set, same run (200)" "$base" "" ""
row_of "status" status
row_of "status --json" status --json
row_of "holders NAME (ages: acquire times too)" holders big
row_of "holders NAME --limit 10" holders big --limit 10
row_of "stats" stats
row_of "metrics (what the exporter's scrape reads)" metrics
row_of "watch NAME, one frame" watch --iterations 1 big
row_of "audit NAME" audit big
row_of "set-limit NAME N" set-limit big "$NH"
row_of "check" check
row_of "setup (FUNCTION LOAD REPLACE: a compile, any scale)" setup
row_of "reset NAME --yes" reset big --yes
