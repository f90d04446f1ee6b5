# ops_cli.sh -- every ops command: --help (exit 0), usage errors and unknown names (2), bad config (2), Redis unreachable (2).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_conf "$T/c.conf" api 2 3000 300 "127.0.0.1:1"
cmds="status holders stats metrics set-limit reset watch audit"
for c in $cmds; do
    out=$("$CLI" "$c" --help) || h_fail "$c --help: exit $?"
    echo "$out" | head -1 | grep -q "^usage: conncap $c " || h_fail "$c --help: $out"
    echo "$out" | grep -q "^Exit: 0 " || h_fail "$c --help does not give the exit statuses: $out"
    "$CLI" help | grep -q "^  $c " || h_fail "conncap help does not list $c"
    grep -q "^\.B ${c//-/\\\\-}$" "$ROOT/doc/conncap.1" || h_fail "doc/conncap.1 has no entry for $c"
    grep -q "^### conncap $c$" "$ROOT/README.md" || h_fail "README has no section for $c"
done
# --version: exit 0, the Makefile's version and the library beside the binary
out=$("$CLI" --version) || h_fail "--version: exit $?"
want=$(sed -n 's/^VERSION *:= *//p' "$ROOT/Makefile")
echo "$out" | head -1 | grep -q "^conncap $want (hiredis [0-9.]*, libconfig [0-9.]*)$" || h_fail "--version says: $out"
echo "$out" | grep -qx "library: $(realpath "${LIB##*:}")" || h_fail "--version names another library: $out"
# usage errors: exit 2 and a usage line on stderr, nothing on stdout
usage() {
    local out rc
    out=$("$CLI" "$@" 2>"$T/err"); rc=$?
    [ $rc -eq 2 ] || h_fail "conncap $*: exit $rc, want 2"
    [ -z "$out" ] || h_fail "conncap $*: wrote to stdout: $out"
    grep -q "usage: conncap\|no semaphore" "$T/err" || h_fail "conncap $*: says $(cat "$T/err")"
}
usage status -c "$T/c.conf" --bogus
usage status -c "$T/c.conf" nosuch
usage status -c "$T/c.conf" --full-alert x
usage holders -c "$T/c.conf"
usage holders -c "$T/c.conf" nosuch
usage holders -c "$T/c.conf" api extra
usage stats -c "$T/c.conf" nosuch
usage metrics -c "$T/c.conf" extra
usage metrics -c "$T/c.conf" --listen
usage set-limit -c "$T/c.conf" api
usage reset -c "$T/c.conf" api
usage reset -c "$T/c.conf" --yes
usage watch -c "$T/c.conf" --iterations -1
usage watch -c "$T/c.conf" api api
usage audit -c "$T/c.conf"
usage audit -c "$T/c.conf" --count many api
# a bad config: exit 2 with file and line
printf 'semaphores = ( { name = "api"; limit = -1; } );\n' > "$T/bad.conf"
for c in "status" "holders api" "stats" "metrics" "set-limit api 1" "reset api --yes" "watch --iterations 1" "audit api"; do
    # shellcheck disable=SC2086
    "$CLI" $c -c "$T/bad.conf" >/dev/null 2>"$T/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "bad.conf:1" "$T/err" || h_fail "$c with a bad config: exit $rc: $(cat "$T/err")"
done
# Redis unreachable: exit 2, the address in the message
h_redis_stop
for c in "status" "holders api" "stats" "metrics" "set-limit api 1" "reset api --yes" "watch --iterations 1" "audit api"; do
    # shellcheck disable=SC2086
    "$CLI" $c -c "$T/c.conf" >/dev/null 2>"$T/err"; rc=$?
    [ $rc -eq 2 ] && grep -q "redis at $REDIS_SOCK" "$T/err" || h_fail "$c with Redis down: exit $rc: $(cat "$T/err")"
done
# watch started while Redis is down says so and keeps trying: it shows the
# semaphores once Redis is back, and ends with 0
"$CLI" watch -c "$T/c.conf" --interval 0.2 >"$T/w.txt" 2>"$T/w.err" </dev/null &
w=$!
_pids+=("$w")
h_wait_for grep -q "(retrying)" "$T/w.txt" || h_fail "watch with Redis down: $(cat "$T/w.txt" "$T/w.err")"
h_redis_spawn_again
h_wait_for grep -q '^api ' "$T/w.txt" || h_fail "watch did not recover when Redis came back: $(tail -5 "$T/w.txt")"
kill -TERM $w
wait $w; rc=$?
[ $rc -eq 0 ] || h_fail "watch: exit $rc after SIGTERM with Redis back"
echo ok
