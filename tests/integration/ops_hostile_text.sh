# ops_hostile_text.sh -- text stored in Redis (holder ids, audit entries) and semaphore names given on the command line reach the operator escaped: no control byte on stdout or stderr, valid UTF-8, --json valid JSON.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
CONF_EXTRA='audit = true;' h_conf "$T/c.conf" api 3 3000 300 "127.0.0.1:1"
now=$(h_rcli time | head -1)
until=$(( now * 1000 + 600000 ))
# holder ids of the shim's shapes (host/pid/fd/destination/nonce.seq, and
# .../destination/program/nonce.seq) and free text, each with a forged line,
# escape sequences, C1 and bad UTF-8
HOST=$(printf 'web1\n2026-01-01T00:00:00.000Z  reset     by=root\033[2J\033]0;pwned\007')
SHAPED="$HOST/123/7/$(printf '10.0.0.1:443\033[31m\302\233')/abcd.1"
PROGRAM="$HOST/124/8/10.0.0.1:443/$(printf 'ev\033[2J\nil\302\233')/abcd.2"
FREE=$(printf 'evil\r\nforged line\033[1A\033[K\377\376\300\257 \302\205end')
for id in "$SHAPED" "$PROGRAM" "$FREE"; do
    h_rcli zadd 'conncap:{api}:holders' "$until" "$id" >/dev/null
    h_rcli hset 'conncap:{api}:since' "$id" $(( now * 1000 - 5000 )) >/dev/null
done
h_rcli xadd 'conncap:{api}:audit' '*' event "$(printf 'acquire\033[2J')" holder "$SHAPED" \
    "$(printf 'k\nforged=1')" "$FREE" >/dev/null
h_rcli xadd 'conncap:{api}:audit' '*' event release holder "$FREE" count 1 >/dev/null
[ "$(h_rcli zcard 'conncap:{api}:holders')" -eq 3 ] || h_fail "hostile holders not stored"

check() { # NAME [--json]: the captured output of a command is safe
    python3 "$ROOT/tests/lib/safe_output.py" "$T/$1.out" ${2:-} ||
        h_fail "conncap $1 printed unsafe text: $(od -c "$T/$1.out" | head -20)"
    python3 "$ROOT/tests/lib/safe_output.py" "$T/$1.err" || h_fail "conncap $1 wrote unsafe text to stderr"
}
cli() { # NAME ARGS...: runs conncap ARGS, stdout and stderr apart
    local n=$1; shift
    "$CLI" "$@" -c "$T/c.conf" > "$T/$n.out" 2> "$T/$n.err"
}
cli audit audit --count 10 api || h_fail "audit: $(cat "$T/audit.err")"
check audit
grep -q 'x1b\[2J' "$T/audit.out" || h_fail "audit does not show the escaped text: $(cat "$T/audit.out")"
[ "$(grep -c . "$T/audit.out")" -eq 2 ] || h_fail "audit: a stored newline forged a line: $(cat "$T/audit.out")"
cli audit_json audit --json --count 10 api || h_fail "audit --json"
check audit_json --json
python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2, rows
assert rows[0]["event"] == "acquire\x1b[2J", rows[0]
assert rows[0]["k\nforged=1"].startswith("evil\r\nforged line\x1b[1A"), rows[0]
' "$T/audit_json.out" || h_fail "audit --json does not give the stored text back"
cli holders holders api || h_fail "holders: $(cat "$T/holders.err")"
check holders
[ "$(grep -c . "$T/holders.out")" -eq 4 ] || h_fail "holders: a stored newline forged a line: $(cat "$T/holders.out")"
cli holders_json holders --json api || h_fail "holders --json"
check holders_json --json
cli status status || h_fail "status: $(cat "$T/status.err")"
check status
cli status_json status --json || h_fail "status --json"
check status_json --json
cli stats stats || h_fail "stats"
check stats
cli stats_json stats --json || h_fail "stats --json"
check stats_json --json
cli watch watch --iterations 1 api || h_fail "watch"
check watch
cli watch_json watch --json --iterations 1 api || h_fail "watch --json"
check watch_json --json
cli metrics metrics || h_fail "metrics"
check metrics
# a hostile semaphore name on the command line comes back escaped in the error
for c in holders audit; do
    cli bad_$c $c "$(printf 'x\033[2J\nforged\377')" && h_fail "$c accepted an unknown semaphore"
    check bad_$c
    grep -q 'x1b\[2J' "$T/bad_$c.err" || h_fail "$c: $(cat "$T/bad_$c.err")"
done
echo ok
