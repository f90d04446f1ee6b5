# lib.sh -- sourced by the bench scripts: the result table's rows, one format for every section.
# row NAME RESULT TARGET VERDICT: appends one line to the array rows (the caller declares it).
row() { rows+=("$(printf '| %-60s | %-24s | %-8s | %-8s |' "$1" "$2" "$3" "$4")"); }
# verdict VALUE TARGET: "ok" if VALUE <= TARGET, else "MISSED".
verdict() { awk -v v="$1" -v t="$2" 'BEGIN {print (v <= t) ? "ok" : "MISSED"}'; }
# bench_alone: what a section run directly (bash bench/NAME.sh) sets up
# before its rows, as bench/run.sh does for them all: the tree's root as the
# working directory, the test harness (BUILD, T, h_redis_start, the clean-up
# at exit), an empty rows array.
bench_alone() {
    set -u
    ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    cd "$ROOT" || exit 1
    . tests/lib/harness.sh
    rows=()
}
