# ops_conventions.sh -- the CLI's conventions: run's exit statuses (125 its own, 126/127, else the program's),
# check --offline, --json wherever a command prints data (and a usage error where it does not apply),
# a full --help for every command, -c - (standard input), bash completion.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_conf "$T/c.conf" api 2 3000 300 "127.0.0.1:1"
jq_py() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }   # CODE reads d, exits nonzero to fail

# -- run: 125 for its own errors, 126/127 for the command, the command's own status otherwise
runrc() { # WANT ARGS...: conncap run ARGS, its exit status must be WANT
    local want=$1 rc; shift
    "$CLI" run "$@" >"$T/run.out" 2>"$T/run.err"; rc=$?
    [ $rc -eq "$want" ] || h_fail "run $*: exit $rc, want $want: $(cat "$T/run.err")"
}
printf 'semaphores = ( { name = "api"; limit = -1; } );\n' > "$T/bad.conf"
runrc 125 -c "$T/bad.conf" -- true
grep -q 'bad.conf:1' "$T/run.err" || h_fail "run with a bad config does not say file and line: $(cat "$T/run.err")"
runrc 125 -c "$T/nonexistent.conf" -- true
CONNCAP_LIBRARY="$T/no-such-libconncap.so" runrc 125 -c "$T/c.conf" -- true
grep -q 'cannot read the shim' "$T/run.err" || h_fail "run without a shim: $(cat "$T/run.err")"
runrc 125 -c "$T/c.conf"
runrc 125 -c "$T/c.conf" --bogus -- true
runrc 125 -c "$T/c.conf" --json -- true
runrc 125 -c - -- true < "$T/c.conf"
runrc 127 -c "$T/c.conf" -- "$T/no-such-program"
printf '#!/bin/sh\nexit 0\n' > "$T/noexec"; chmod 0644 "$T/noexec"
runrc 126 -c "$T/c.conf" -- "$T/noexec"
# the program's own status (a sanitizer-built shim cannot be preloaded into sh)
if [ -z "${SAN:-}" ]; then
    runrc 2 -c "$T/c.conf" -- sh -c 'exit 2'
    runrc 125 -c "$T/c.conf" -- sh -c 'exit 125'   # the program's own 125 passes through too
    runrc 0 -c "$T/c.conf" -- sh -c 'case "$LD_PRELOAD" in *libconncap.so*) exit 0;; esac; exit 9'
    # a --help of the wrapped program is the program's
    runrc 0 -c "$T/c.conf" sh -c 'echo ran' --help
    grep -qx ran "$T/run.out" || h_fail "run CMD --help printed conncap's help: $(head -3 "$T/run.out")"
fi

# -- check --offline: no Redis contacted; a valid file is 0, a bad one 2 with file and line
h_redis_stop
out=$("$CLI" check -c "$T/c.conf" 2>/dev/null) && h_fail "check with Redis down: exit 0"
out=$("$CLI" check --offline -c "$T/c.conf" 2>"$T/err") || h_fail "check --offline with Redis down: exit $?: $(cat "$T/err")"
echo "$out" | grep -q '^redis: not contacted (--offline)$' || h_fail "check --offline says: $out"
"$CLI" check --offline -c "$T/bad.conf" >/dev/null 2>"$T/err" && h_fail "check --offline accepted a bad file"
grep -q 'bad.conf:1: semaphores\[0\].limit' "$T/err" || h_fail "check --offline bad file: $(cat "$T/err")"
"$CLI" check --offline --json -c "$T/c.conf" | jq_py '
s = d["semaphores"][0]; r = d["rules"][0]
assert d["config"].endswith("/c.conf") and s["name"] == "api" and s["limit"] == 2 and s["lease_ms"] == 3000, d
assert r["semaphore"] == "api" and r["match"] == ["127.0.0.1:1"] and r["line"] == 3, d
assert d["redis_checked"] is False and d["redis_ok"] is None and d["redis"]["mode"] == "unix", d' ||
    h_fail "check --offline --json"
h_redis_spawn_again
"$CLI" check --json -c "$T/c.conf" | jq_py 'assert d["redis_ok"] is True and d["scripts_loaded"] >= 1, d' ||
    h_fail "check --json with Redis"

# -- -c -: the configuration from standard input, named <stdin> in messages
"$CLI" check --offline -c - < "$T/c.conf" | grep -q '^config <stdin>: ok$' || h_fail "check -c - does not read stdin"
printf 'semaphores = ( { name = "api"; limit = 1; } );\nrules = ( { semaphore = "nope"; match = ( "1.2.3.4" ); } );\n' |
    "$CLI" check --offline -c - >/dev/null 2>"$T/err" && h_fail "check -c - accepted a bad file"
grep -q '^conncap: <stdin>:2: ' "$T/err" || h_fail "check -c - error: $(cat "$T/err")"
"$CLI" status -c - --json < "$T/c.conf" | jq_py 'assert d["semaphores"][0]["name"] == "api", d' || h_fail "status -c -"
"$CLI" explain -c - 127.0.0.1:1 < "$T/c.conf" | grep -q 'matched: rule 1, semaphore "api"' || h_fail "explain -c -"

# -- --json wherever a command prints data
"$CLI" explain --json -c "$T/c.conf" 127.0.0.1:1 | jq_py '
a = d["addresses"][0]
assert d["matched"] and d["rule"] == 1 and d["semaphore"] == "api" and d["port"] == 1, d
assert a["address"] == "127.0.0.1" and a["semaphore"] == "api" and a["line"] == 3 and "127.0.0.1:1" in a["because"], d' ||
    h_fail "explain --json"
out=$("$CLI" explain --json -c "$T/c.conf" 127.0.0.2:80); rc=$?
[ $rc -eq 1 ] && echo "$out" | jq_py 'assert not d["matched"] and d["addresses"][0]["rule"] is None, d' ||
    h_fail "explain --json unmatched: exit $rc: $out"
"$CLI" watch --json --iterations 2 --interval 0.2 -c "$T/c.conf" > "$T/w.json" || h_fail "watch --json: exit $?"
[ "$(wc -l < "$T/w.json")" -eq 2 ] || h_fail "watch --json: want 2 lines: $(cat "$T/w.json")"
python3 - "$T/w.json" <<'PY' || h_fail "watch --json: $(cat "$T/w.json")"
import json, sys
frames = [json.loads(l) for l in open(sys.argv[1])]
for f in frames:
    assert f["redis_ok"] is True and f["error"] is None and f["time_ms"] > 0, f
    s = f["semaphores"][0]
    assert s["name"] == "api" and s["holders"] == 0 and s["limit"] == 2 and s["waiters"] == 0, f
assert frames[0]["semaphores"][0]["acquired_per_s"] is None and frames[1]["semaphores"][0]["acquired_per_s"] == 0, frames
PY
"$CLI" metrics --json -c "$T/c.conf" | jq_py 'assert d["redis_up"] == 1 and d["semaphores"][0]["limit"] == 2, d' ||
    h_fail "metrics --json"
"$CLI" set-limit --json -c "$T/c.conf" api 5 | jq_py '
assert d == {"semaphore": "api", "limit": 5, "override": True, "configured_limit": 2, "previous_limit": 2,
             "previous_override": False}, d' || h_fail "set-limit --json"
"$CLI" set-limit --json -c "$T/c.conf" api --default | jq_py '
assert d["limit"] == 2 and d["override"] is False and d["previous_limit"] == 5 and d["previous_override"], d' ||
    h_fail "set-limit --default --json"
"$CLI" reset --json --yes -c "$T/c.conf" api 2>/dev/null | jq_py 'assert d["semaphore"] == "api" and d["dropped"] == 0, d' ||
    h_fail "reset --json"
# where it does not apply: a usage error, nothing on stdout
out=$("$CLI" metrics --json --listen 127.0.0.1:0 -c "$T/c.conf" 2>"$T/err"); rc=$?
[ $rc -eq 2 ] && [ -z "$out" ] && grep -q 'does not apply' "$T/err" || h_fail "metrics --json --listen: exit $rc: $(cat "$T/err")"

# -- a full --help for every command: usage, what it does, options, exit statuses
for c in run check setup explain status holders stats metrics set-limit reset watch audit; do
    out=$("$CLI" "$c" --help) || h_fail "$c --help: exit $?"
    echo "$out" | head -1 | grep -q "^usage: conncap $c" || h_fail "$c --help: $out"
    [ "$(echo "$out" | wc -l)" -ge 8 ] || h_fail "$c --help is not a full help: $out"
    echo "$out" | grep -q '^Exit: ' || h_fail "$c --help gives no exit statuses: $out"
done
for c in check explain watch metrics; do
    "$CLI" "$c" --help | grep -q -- '--json' || h_fail "$c --help does not mention --json"
done
"$CLI" check --help | grep -q -- '--offline' || h_fail "check --help does not mention --offline"
"$CLI" run --help | grep -q '125' || h_fail "run --help does not give 125"

# -- bash completion: commands, options, semaphore names of -c FILE
comp() { # WORDS...: the completions of the last word
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _conncap; printf "%s\n" "${COMPREPLY[@]}"' \
        _ "$ROOT/completions/conncap" "$@"
}
comp conncap st | grep -qx status || h_fail "completion of 'st': $(comp conncap st)"
comp conncap check --o | grep -qx -- --offline || h_fail "completion of check --o"
comp conncap holders -c "$T/c.conf" "" | grep -qx api || h_fail "completion of a semaphore name: $(comp conncap holders -c "$T/c.conf" "")"
echo ok
