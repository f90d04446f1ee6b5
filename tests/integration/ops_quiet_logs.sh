# ops_quiet_logs.sh -- what every capped process of a fleet would say alike is not said by each: before
# `conncap setup` (the function library missing: the scripts run with EVALSHA), a password_file others may
# read, a resolve = true rule with nothing to look up -- the shim logs these at debug only, and `conncap
# check` (all three) and `conncap status` (the library) carry the warning, once.
. "$(dirname "$0")/../lib/harness.sh"
REDIS_EXTRA="--requirepass s3cret" h_redis_start
rcli() { redis-cli -s "$REDIS_SOCK" -a s3cret --no-auth-warning "$@"; }
h_server_start 100
printf 's3cret\n' > "$T/secret"
chmod 644 "$T/secret"
conf() { # LOG_LEVEL
    cat > "$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; password_file = "$T/secret"; };
semaphores = ( { name = "api"; limit = 8; lease_ms = 3000; wait_timeout_ms = 2000; } );
rules = ( { semaphore = "api"; match = ( "127.0.0.1:$SRV_PORT" ); resolve = true; } );
log_level = "$1";
CONF
}
conf warn
rcli config resetstat >/dev/null

# -- a fleet of 6 processes before setup: each takes its permit (EVALSHA), none says a word
fleet=()
for i in 1 2 3 4 5 6; do
    LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 50 >"$T/p$i.out" 2>"$T/p$i.err" &
    _pids+=("$!"); fleet+=("$!")
done
wait "${fleet[@]}"
for i in 1 2 3 4 5 6; do
    grep -q '^connected' "$T/p$i.out" || h_fail "process $i did not connect: $(cat "$T/p$i.out" "$T/p$i.err")"
    ! grep -q 'conncap\[' "$T/p$i.err" || h_fail "process $i logged at log_level warn: $(cat "$T/p$i.err")"
done
evals=$(rcli info commandstats | grep -cE '^cmdstat_(evalsha|eval):')
[ "$evals" -ge 1 ] || h_fail "the processes did not run the scripts with EVALSHA: $(rcli info commandstats)"
h_note "6 processes before setup (EVALSHA): no line on their stderr"

# -- at debug a process still says it, once
conf debug
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 50 >/dev/null 2>"$T/dbg.err"
[ "$(grep -c 'debug: redis: the function library conncap_.* is not loaded' "$T/dbg.err")" -eq 1 ] ||
    h_fail "log_level debug: the missing library is not said once: $(cat "$T/dbg.err")"
grep -q 'debug: .*redis.password_file: .* is readable by group and others' "$T/dbg.err" ||
    h_fail "log_level debug: no line for the password file: $(cat "$T/dbg.err")"
conf warn

# -- check warns about all three, status about the library
"$CLI" check -c "$T/c.conf" >"$T/check.out" 2>"$T/check.err" || h_fail "check: exit $?: $(cat "$T/check.err")"
for w in 'the function library conncap_[0-9a-f]* is not loaded' 'redis.password_file: .* is readable by group and others' \
         'resolve = true, but the rule has no exact host name'; do
    [ "$(grep -c "^conncap check: warning: .*$w" "$T/check.err")" -eq 1 ] || h_fail "check does not warn once: $w: $(cat "$T/check.err")"
done
"$CLI" status -c "$T/c.conf" >"$T/st.out" 2>"$T/st.err" || h_fail "status: exit $?: $(cat "$T/st.err")"
grep -q '^conncap status: warning: the function library conncap_[0-9a-f]* is not loaded .*run `conncap setup`' "$T/st.err" ||
    h_fail "status does not warn about the missing library: $(cat "$T/st.out" "$T/st.err")"
"$CLI" status --json -c "$T/c.conf" 2>/dev/null | python3 -c '
import json, sys; d = json.load(sys.stdin)
assert d["functions"] is False and d["library"].startswith("conncap_"), d' || h_fail "status --json before setup"

# -- after setup: FCALL, and status is quiet
"$CLI" setup -c "$T/c.conf" >/dev/null 2>"$T/setup.err" || h_fail "setup: $(cat "$T/setup.err")"
"$CLI" status -c "$T/c.conf" >"$T/st.out" 2>"$T/st.err" || h_fail "status after setup: exit $?"
! grep -q 'function library' "$T/st.err" || h_fail "status after setup still warns: $(cat "$T/st.err")"
"$CLI" status --json -c "$T/c.conf" | python3 -c '
import json, sys; d = json.load(sys.stdin)
assert d["functions"] is True, d' || h_fail "status --json after setup"
echo ok
