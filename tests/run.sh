#!/usr/bin/env bash
# run.sh -- runs the cmocka unit tests, the integration tests and (without SAN)
# the fuzz targets briefly over their corpora; prints a closing line
# "N passed, N failed". Usage: tests/run.sh [unit|integration|fuzz|NAME...]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac   # BUILD=/abs/dir as well as build
export BUILD ROOT
pass=0; fail=0; skip=0; failed=()
sel=("$@")

want() {
    [ ${#sel[@]} -eq 0 ] && return 0
    local s
    for s in "${sel[@]}"; do
        case "$s" in unit|integration|fuzz) [ "$s" = "$1" ] && return 0 ;; *) [[ "$2" == *"$s"* ]] && return 0 ;; esac
    done
    return 1
}

run_one() { # kind name cmd...
    local kind=$1 name=$2; shift 2
    local log="$BUILD/test-logs/$name.log" t0=$SECONDS rc
    mkdir -p "$(dirname "$log")"
    timeout 300 "$@" >"$log" 2>&1; rc=$?
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1)); printf 'PASS %-40s %3ss\n' "$name" $((SECONDS - t0))
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1)); printf 'SKIP %-40s %s\n' "$name" "$(tail -n 1 "$log")"
    else
        fail=$((fail + 1)); failed+=("$name")
        printf 'FAIL %-40s %3ss (exit %d)\n' "$name" $((SECONDS - t0)) $rc
        tail -n 30 "$log" | sed 's/^/    | /'
    fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    want unit "$n" && run_one unit "$n" "$t"
done
for t in tests/integration/*.sh; do
    [ -f "$t" ] || continue
    n=$(basename "$t" .sh)
    want integration "$n" && run_one integration "$n" bash "$t"
done
# The fuzz targets are their own sanitizer build (build-fuzz/, made by make test
# when clang's libFuzzer runtime is installed); not run again under SAN.
for t in tests/fuzz/fuzz_*.c; do
    [ -f "$t" ] && [ -z "${SAN:-}" ] || continue
    n=$(basename "$t" .c)
    want fuzz "$n" || continue
    if [ -x "${FUZZ_BUILD:-$ROOT/build-fuzz}/fuzz/$n" ]; then
        run_one fuzz "$n" bash tests/fuzz/run.sh brief "$n"
    else
        skip=$((skip + 1)); printf 'SKIP %-40s %s\n' "$n" "not built: no libFuzzer runtime (libclang-rt-14-dev)"
    fi
done

echo
[ $fail -gt 0 ] && echo "failed: ${failed[*]} (logs in $BUILD/test-logs/)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
