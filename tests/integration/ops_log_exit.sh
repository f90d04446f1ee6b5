# ops_log_exit.sh -- refusals whose lines were held back (one line per semaphore per interval, and the log's own
# rate limit) are reported with the next line, and at exit when no line follows: every refused connect is
# accounted for on stderr, as a line or in a count.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 1 0
n=60
lc_run logburst $n
[ "$(lc_fact refused)" -eq $n ] || h_fail "want $n refused connects, have $(lc_fact refused)"
sum() { tr -dc '0-9\n' | awk '{ s += $1 } END { print s + 0 }'; }
lines=$(grep -c 'no permit of lc within [0-9]* ms' "$T/lc.err" || true)
inline=$(grep -o '(\([0-9]*\) \(messages suppressed\|more since\))' "$T/lc.err" | sum)
atexit=$(sed -n 's/.*warn: \([0-9]*\) more refusals of lc since its last line.*/\1/p' "$T/lc.err")
dropped=$(sed -n 's/.*warn: \([0-9]*\) messages suppressed by the rate limit$/\1/p' "$T/lc.err" | sum)
h_note "$lines lines written, $inline reported with a later line, ${atexit:-none} at exit (+ $dropped lines dropped)"
[ -n "$atexit" ] || h_fail "the refusals held back at the end were never reported"
[ $((lines + inline + atexit + dropped)) -eq $n ] || h_fail "$n refusals, but $lines + $inline + $atexit + $dropped accounted for"
[ "$(tail -n 1 "$T/lc.err" | grep -c 'more refusals of lc\|by the rate limit')" -eq 1 ] || h_fail "the exit report is not the last line"
echo ok
