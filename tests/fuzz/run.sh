#!/usr/bin/env bash
# run.sh -- runs the libFuzzer targets built in build-fuzz/fuzz/ (make fuzz-build).
# Usage: tests/fuzz/run.sh brief NAME   -- NAME over its committed corpus, then a few
#                                          thousand runs more (make test's step; exit 0/1)
#        tests/fuzz/run.sh long [NAME...] -- each target (or the NAMEs) for FUZZ_SECONDS
#                                          (default 180) over build-fuzz/corpus/NAME, a working
#                                          copy of its corpus kept between runs (make fuzz)
# A committed corpus is never written to. Crash inputs go to build-fuzz/artifacts/NAME/.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FB=${FUZZ_BUILD:-$ROOT/build-fuzz}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# libconfig 1.5 leaks a few bytes on some parse errors (not ours): tests/fuzz/lsan.supp
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/tests/fuzz/lsan.supp}

# fuzz NAME WORKDIR EXTRA_ARGS...: runs target NAME with new inputs going to WORKDIR and
# the committed corpus read too; returns libFuzzer's status.
fuzz() {
    local n=$1 work=$2; shift 2
    local bin="$FB/fuzz/$n" seeds="$ROOT/tests/fuzz/corpus/${n#fuzz_}" art="$FB/artifacts/$n"
    local dict="$ROOT/tests/fuzz/${n#fuzz_}.dict"
    [ -x "$bin" ] || { echo "$n: not built ($bin); run make fuzz-build" >&2; return 1; }
    [ -n "$(ls -A "$seeds" 2>/dev/null)" ] || { echo "$n: no seed corpus in $seeds" >&2; return 1; }
    mkdir -p "$work" "$art"
    "$bin" -artifact_prefix="$art/" -error_exitcode=1 -timeout_exitcode=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        $([ -f "$dict" ] && echo "-dict=$dict") "$@" "$work" "$seeds"
}

brief() {
    local n=$1 tmp rc
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/conncap-fuzz.XXXXXX")
    fuzz "$n" "$tmp" -runs="${FUZZ_RUNS:-5000}" -max_total_time=10; rc=$?
    rm -rf "$tmp"
    [ $rc -eq 77 ] && rc=1   # 77 means "skipped" to tests/run.sh
    [ $rc -eq 0 ] || echo "FAIL: $n found a failing input (exit $rc); it is in $FB/artifacts/$n/" >&2
    return $rc
}

long() {
    local n s pass=0 fail=0 names=("$@")
    if [ ${#names[@]} -eq 0 ]; then
        for s in "$ROOT"/tests/fuzz/fuzz_*.c; do [ -f "$s" ] && names+=("$(basename "$s" .c)"); done
    fi
    for n in "${names[@]}"; do
        local log="$FB/logs/$n.log" t0=$SECONDS
        mkdir -p "$FB/logs"
        if fuzz "$n" "$FB/corpus/${n#fuzz_}" -max_total_time="${FUZZ_SECONDS:-180}" >"$log" 2>&1; then
            pass=$((pass + 1))
            printf 'PASS %-30s %4ss  %s\n' "$n" $((SECONDS - t0)) "$(grep -o 'Done [0-9]* runs' "$log" | tail -n 1)"
        else
            fail=$((fail + 1))
            printf 'FAIL %-30s %4ss  (log %s; inputs in %s)\n' "$n" $((SECONDS - t0)) "$log" "$FB/artifacts/$n/"
            grep -E 'ERROR|SUMMARY|fuzz_|runtime error' "$log" | head -n 10 | sed 's/^/    | /'
        fi
    done
    echo
    echo "$pass passed, $fail failed (new inputs in $FB/corpus/; keep the useful ones with -merge=1 into tests/fuzz/corpus/)"
    [ $fail -eq 0 ] && [ $pass -gt 0 ]
}

case "${1:-}" in
    brief) [ $# -eq 2 ] || { echo "usage: $0 brief NAME" >&2; exit 2; }; brief "$2" ;;
    long) shift; long "$@" ;;
    *) echo "usage: $0 brief NAME | long [NAME...]" >&2; exit 2 ;;
esac
