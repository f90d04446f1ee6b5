# redis_acl.sh -- the shim and every CLI command as the least-privilege ACL user of examples/redis-acl.conf; the password is never shown.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
PW="pw-$RANDOM-Zq9xK7-secret"
ADMIN="admin-$RANDOM"
sed "s/>change-me/>$PW/" "$ROOT/examples/redis-acl.conf" > "$T/acl.conf"
grep -q ">$PW" "$T/acl.conf" || h_fail "could not set the password in the ACL example"
REDIS_EXTRA="--include $T/acl.conf --requirepass $ADMIN" h_redis_start
admin() { redis-cli -s "$REDIS_SOCK" --no-auth-warning -a "$ADMIN" "$@"; }
[ "$(admin acl whoami)" = default ] || h_fail "admin access failed"
admin acl list | grep -q '^user conncap on' || h_fail "the example's user was not loaded: $(admin acl list)"
admin acl log reset >/dev/null
h_server_start 50
RATED_PORT=$SRV_PORT
h_server_start 400

printf '%s\n' "$PW" > "$T/secret"
chmod 600 "$T/secret"
cat > "$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; connect_timeout_ms = 300; command_timeout_ms = 1000; key_prefix = "conncap:";
          username = "conncap"; password_file = "$T/secret"; };
semaphores = ( { name = "api"; limit = 2; lease_ms = 1500; wait_timeout_ms = 4000; },
               { name = "short"; limit = 0; lease_ms = 1500; wait_timeout_ms = 200; },
               { name = "rated"; limit = 5; lease_ms = 1500; wait_timeout_ms = 3000; rate = 20.0; burst = 2; } );
rules = ( { semaphore = "api"; match = ( "127.0.0.1:$SRV_PORT" ); },
          { semaphore = "short"; match = ( "127.0.0.2:$SRV_PORT" ); },
          { semaphore = "rated"; match = ( "127.0.0.1:$RATED_PORT" ); } );
on_redis_down = "closed";
log_level = "debug";
audit = true;
CONF
CLI_() { "$CLI" "$@" -c "$T/c.conf"; }
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }

# ---- the shim: acquire (with waiting and wake-up), renew, release, timeout
for i in 1 2 3; do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 1 1200 \
        > "$T/c$i.out" 2> "$T/c$i.err" &
    _pids+=("$!")   # stopped by the harness if the test fails early
    eval "p$i=\$!"
done
wait $p1 $p2 $p3
for i in 1 2 3; do
    grep -q '^held 1$' "$T/c$i.out" || h_fail "client $i got no permit as the ACL user: $(cat "$T/c$i.out" "$T/c$i.err")"
done
[ "$(h_server_stat max)" -le 2 ] || h_fail "cap exceeded as the ACL user"
grep -h 'redis' "$T"/c*.err | grep -iq 'unreachable\|NOPERM\|refused' && h_fail "redis trouble as the ACL user: $(cat "$T"/c*.err)"
# a timeout (the "short" semaphore has limit 0)
out=$(run "$FC" try 127.0.0.2 "$SRV_PORT" 1 2> "$T/short.err")
case "$out" in ETIMEDOUT*) ;; *) h_fail "short: expected ETIMEDOUT, got $out $(cat "$T/short.err")" ;; esac
# the rate limiter (burst 2 at 20/s: the third connect waits for a token)
run "$FC" try 127.0.0.1 "$RATED_PORT" 4 > "$T/rated.out" 2> "$T/rated.err"
[ "$(grep -c '^ok' "$T/rated.out")" -eq 4 ] || h_fail "rated: $(cat "$T/rated.out" "$T/rated.err")"
# a holder for the CLI to show, renewed by its heartbeat meanwhile
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" hold 127.0.0.1 "$SRV_PORT" > "$T/h.out" 2> "$T/h.err" &
_pids+=("$!")   # stopped by the harness if the test fails early
holder=$!
h_wait_for grep -q connected "$T/h.out" || h_fail "no holder: $(cat "$T/h.out" "$T/h.err")"
sleep 1.2   # > 2 heartbeats (lease 1500 ms)

# ---- every CLI command that talks to Redis
: > "$T/cli.out"
cli_ok() { # EXPECTED_STATUS ARGS...
    local want=$1 rc; shift
    CLI_ "$@" >> "$T/cli.out" 2>&1; rc=$?
    [ $rc -eq "$want" ] || h_fail "conncap $* exited $rc (wanted $want): $(tail -5 "$T/cli.out")"
}
cli_ok 0 check
cli_ok 0 status
cli_ok 0 status --json
cli_ok 0 holders api
cli_ok 0 stats
cli_ok 0 stats --json api
cli_ok 0 metrics
cli_ok 0 set-limit api 3
cli_ok 0 set-limit api --default
cli_ok 0 audit --count 5 api
cli_ok 0 watch --iterations 1 api
cli_ok 0 reset api --yes
h_stop_pid $holder
grep -q 'redis: reachable' "$T/cli.out" || h_fail "check did not reach redis: $(cat "$T/cli.out")"

# ---- nothing was refused: Redis logs every ACL denial (commands inside scripts too)
denied=$(admin acl log)
[ -z "$denied" ] || h_fail "the ACL refused something conncap needs: $(echo "$denied" | paste -sd' ' -)"
# ... and that check can fail: without hgetall, `conncap stats` is refused and logged
admin acl setuser conncap -hgetall >/dev/null
CLI_ stats >/dev/null 2>&1
admin acl log | grep -q hgetall || h_fail "a missing command was not caught by the ACL log"
admin acl setuser conncap +hgetall >/dev/null

# ---- the password is never shown: not by check, the CLI, nor the shim's debug log
grep -rq -- "$PW" "$T/cli.out" "$T"/*.err && h_fail "the password appears in output or logs"
grep -q 'user "conncap", password set' "$T/cli.out" || h_fail "check does not show the user and that a password is set"

# ---- password_env, and a wrong password
sed -i "s|password_file = \"$T/secret\"|password_env = \"CCAP_TEST_PW\"|" "$T/c.conf"
CCAP_TEST_PW="$PW" CLI_ status > "$T/env.out" 2>&1 || h_fail "password_env: status failed: $(cat "$T/env.out")"
CCAP_TEST_PW="wrong-$PW" CLI_ check > "$T/bad.out" 2>&1 && h_fail "a wrong password was accepted"
grep -qi 'auth' "$T/bad.out" || h_fail "a wrong password is not reported as such: $(cat "$T/bad.out")"
grep -q -- "$PW" "$T/env.out" "$T/bad.out" && h_fail "the password appears in output"
[ -n "${SHOW:-}" ] && cat "$T/cli.out" "$T/bad.out" >&2
echo ok
