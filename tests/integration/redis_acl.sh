# redis_acl.sh -- examples/redis-acl.conf as is with --aclfile: the worker runs the shim through the function library only and cannot change the limit, holders or audit by itself; the operator runs the CLI; passwords never shown.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
PW="pw-$RANDOM-Zq9xK7-secret"
ADMIN="admin-$RANDOM-pw"
sed -e "s/^\(user conncap-admin on\) >change-me/\1 >$ADMIN/" -e "s/>change-me/>$PW/" \
    "$ROOT/examples/redis-acl.conf" > "$T/acl.conf"
grep -q -- '>change-me' "$T/acl.conf" && h_fail "a password of the ACL example was not replaced"
REDIS_EXTRA="--aclfile $T/acl.conf" h_redis_start
as() { local u=$1 p=$2; shift 2; redis-cli -s "$REDIS_SOCK" --no-auth-warning --user "$u" --pass "$p" "$@"; }
admin() { as conncap-admin "$ADMIN" "$@"; }
worker() { as conncap-worker "$PW" "$@"; }
operator() { as conncap-operator "$PW" "$@"; }
[ "$(admin acl whoami)" = conncap-admin ] || h_fail "admin access failed"
for u in conncap-worker conncap-operator; do
    admin acl list | grep -q "^user $u on" || h_fail "the example's user $u was not loaded: $(admin acl list)"
done
redis-cli -s "$REDIS_SOCK" get conncap:x | grep -q NOAUTH || h_fail "the default user is not disabled"
h_server_start 50
RATED_PORT=$SRV_PORT
h_server_start 400

printf '%s\n' "$PW" > "$T/secret"
printf '%s\n' "$ADMIN" > "$T/admin.secret"
chmod 600 "$T/secret" "$T/admin.secret"
conf() { # FILE USER SECRET
    cat > "$1" <<CONF
redis = { socket = "$REDIS_SOCK"; connect_timeout_ms = 300; command_timeout_ms = 1000; key_prefix = "conncap:";
          username = "$2"; password_file = "$3"; };
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
}
conf "$T/c.conf" conncap-worker "$T/secret"
conf "$T/o.conf" conncap-operator "$T/secret"
conf "$T/a.conf" conncap-admin "$T/admin.secret"
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }

# ---- before `conncap setup`: the worker may not run Lua of its own, so its
# connects are refused (on_redis_down closed), with a warning naming setup
out=$(run "$FC" try 127.0.0.1 "$SRV_PORT" 1 2> "$T/pre.err")
case "$out" in ok*) h_fail "a worker without the function library got a permit: $out" ;; esac
grep -q 'conncap setup' "$T/pre.err" || h_fail "no warning that the library is missing: $(cat "$T/pre.err")"
[ "$(grep -c 'is not loaded' "$T/pre.err")" -eq 1 ] || h_fail "the missing library was not warned about once"
"$CLI" check -c "$T/o.conf" > "$T/pre.out" 2>&1 && h_fail "check passed without the library and without EVAL rights"
grep -q 'conncap setup' "$T/pre.out" || h_fail "check does not tell to run setup: $(cat "$T/pre.out")"
# the operator cannot load functions; the administrator can
"$CLI" setup -c "$T/o.conf" > "$T/setup-op.out" 2>&1 && h_fail "the operator could load the function library"
"$CLI" setup -c "$T/a.conf" > "$T/setup.out" 2>&1 || h_fail "setup as admin failed: $(cat "$T/setup.out")"
lib=$(admin function list | grep -A1 '^library_name$' | grep '^conncap_')
[ -n "$lib" ] || h_fail "setup loaded no conncap library: $(admin function list)"
"$CLI" setup -c "$T/a.conf" > /dev/null 2>&1 || h_fail "setup is not idempotent"
"$CLI" check -c "$T/o.conf" > "$T/check.out" 2>&1 || h_fail "check after setup: $(cat "$T/check.out")"
grep -q "function library $lib loaded (FCALL)" "$T/check.out" || h_fail "check: $(cat "$T/check.out")"
admin acl log reset > /dev/null
admin config resetstat > /dev/null

# ---- the shim as the worker: acquire (with waiting and wake-up), renew, release, timeout
for i in 1 2 3; do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 1 1200 \
        > "$T/c$i.out" 2> "$T/c$i.err" &
    _pids+=("$!")   # stopped by the harness if the test fails early
    eval "p$i=\$!"
done
wait $p1 $p2 $p3
for i in 1 2 3; do
    grep -q '^held 1$' "$T/c$i.out" || h_fail "client $i got no permit as the worker: $(cat "$T/c$i.out" "$T/c$i.err")"
done
[ "$(h_server_stat max)" -le 2 ] || h_fail "cap exceeded as the worker"
grep -h 'redis' "$T"/c*.err | grep -iq 'unreachable\|NOPERM\|refused\|not loaded\|cannot serve\|can.t run' &&
    h_fail "redis trouble as the worker: $(cat "$T"/c*.err)"
out=$(run "$FC" try 127.0.0.2 "$SRV_PORT" 1 2> "$T/short.err")
case "$out" in ETIMEDOUT*) ;; *) h_fail "short: expected ETIMEDOUT, got $out $(cat "$T/short.err")" ;; esac
run "$FC" try 127.0.0.1 "$RATED_PORT" 4 > "$T/rated.out" 2> "$T/rated.err"
[ "$(grep -c '^ok' "$T/rated.out")" -eq 4 ] || h_fail "rated: $(cat "$T/rated.out" "$T/rated.err")"
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" hold 127.0.0.1 "$SRV_PORT" > "$T/h.out" 2> "$T/h.err" &
_pids+=("$!")
holder=$!
h_wait_for grep -q connected "$T/h.out" || h_fail "no holder: $(cat "$T/h.out" "$T/h.err")"
sleep 1.2   # > 2 heartbeats (lease 1500 ms)
calls=$(admin info commandstats)
echo "$calls" | grep -q '^cmdstat_fcall:calls=' || h_fail "the shim made no FCALL"
echo "$calls" | grep -Eq '^cmdstat_(evalsha|eval|script)' && h_fail "something ran EVAL/EVALSHA/SCRIPT: $calls"

# ---- nothing the shim needed so far was refused (the ACL log: commands run
# inside functions too); the cases below are refused on purpose
denied=$(admin acl log)
[ -z "$denied" ] || h_fail "the ACL refused the shim something: $(echo "$denied" | paste -sd' ' -)"

# ---- acquire's short call (a semaphore without audit or rate): the example
# lets the worker run it; an ACL written before it (no EXISTS) still caps,
# through the full call, with one warning per process
grep -v '^audit = true;$' "$T/c.conf" > "$T/plain.conf"
for acl in example no-exists; do
    [ $acl = no-exists ] && admin acl setuser conncap-worker -exists >/dev/null
    admin acl log reset >/dev/null
    for i in 1 2 3; do
        env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/plain.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 1 600 \
            > "$T/p$i.out" 2> "$T/p$i.err" &
        _pids+=("$!")
        eval "p$i=\$!"
    done
    wait $p1 $p2 $p3
    for i in 1 2 3; do
        grep -q '^held 1$' "$T/p$i.out" || h_fail "$acl ACL: client $i got no permit: $(cat "$T/p$i.out" "$T/p$i.err")"
        n=$(grep -c "refused acquire's short call" "$T/p$i.err")
        if [ $acl = example ]; then
            [ "$n" -eq 0 ] || h_fail "the example ACL refused the short call: $(cat "$T/p$i.err")"
        else
            [ "$n" -eq 1 ] || h_fail "no-exists ACL: want one warning of the refused short call, got $n: $(cat "$T/p$i.err")"
        fi
    done
    [ "$(h_server_stat max)" -le 2 ] || h_fail "$acl ACL: cap exceeded as the worker"
    if [ $acl = example ]; then
        denied=$(admin acl log)
        [ -z "$denied" ] || h_fail "the example ACL refused the short call: $(echo "$denied" | paste -sd' ' -)"
        admin info commandstats | grep -q '^cmdstat_exists:' || h_fail "no short call was made (no EXISTS ran)"
    fi
done
admin acl setuser conncap-worker +exists >/dev/null
admin acl log reset >/dev/null

# ---- what a stolen worker password cannot do (each refused with NOPERM)
admin set 'conncap:{api}:limit' 2 > /dev/null
audit_len=$(admin xlen 'conncap:{api}:audit')
holders=$(admin zcard 'conncap:{api}:holders')
[ "$holders" -ge 1 ] && [ "$audit_len" -ge 1 ] || h_fail "nothing to protect: holders $holders, audit $audit_len"
aid=$(admin xrevrange 'conncap:{api}:audit' + - COUNT 1 | head -1)
denied() { # COMMAND...: refused for the worker
    local got
    got=$(worker "$@" 2>&1)
    case "$got" in NOPERM*) ;; *) h_fail "the worker may run: $* -> $got" ;; esac
}
denied eval 'while true do end' 0
denied eval_ro 'return 1' 0
denied evalsha 0123456789012345678901234567890123456789 0
denied script load 'while true do end'
denied script kill
denied function load "#!lua name=evil
redis.register_function('evil', function() while true do end end)"
denied function flush
denied function delete "$lib"
denied set 'conncap:{api}:limit' 1000000
denied del 'conncap:{api}:limit'
denied incrby 'conncap:{api}:limit' 1000
denied del 'conncap:{api}:holders'
denied unlink 'conncap:{api}:holders'
denied zremrangebyrank 'conncap:{api}:holders' 0 -1
denied zpopmin 'conncap:{api}:holders' 100
denied rename 'conncap:{api}:holders' 'conncap:{api}:x'
denied del 'conncap:{api}:audit'
denied xtrim 'conncap:{api}:audit' MAXLEN 0
denied xdel 'conncap:{api}:audit' "$aid"
denied set 'conncap:{api}:audit' x
denied select 1
denied flushall
denied keys '*'
denied config set maxmemory 1
denied get 'other:key'
denied acl setuser conncap-worker '+@all'
# ... nor point one of the library's functions at another key than its own
fn=${lib#conncap_}
got=$(worker fcall "conncap_acquire_$fn" 2 'conncap:{api}:holders' 'conncap:{api}:rate' w1 60000 1000000 2>&1)
case "$got" in *"ERR conncap: key 2"*) ;; *) h_fail "acquire ran on a foreign limit key: $got" ;; esac
got=$(worker fcall "conncap_release_$fn" 1 'conncap:{api}:limit' x 2>&1)
case "$got" in *"ERR conncap"*) ;; *) h_fail "release ran on the limit key: $got" ;; esac
[ "$(admin get 'conncap:{api}:limit')" = 2 ] || h_fail "the worker changed the limit"
[ "$(admin zcard 'conncap:{api}:holders')" -ge "$holders" ] || h_fail "the worker removed holders"
[ "$(admin xlen 'conncap:{api}:audit')" -ge "$audit_len" ] || h_fail "the worker shortened the audit stream"
[ "$(admin function list | grep -A1 '^library_name$' | grep -c '^conncap_')" -eq 1 ] || h_fail "the library changed"
# the operator runs no Lua either
for c in "eval return 1 0" "script load return" "function flush"; do
    got=$(operator $c 2>&1)
    case "$got" in NOPERM*) ;; *) h_fail "the operator may run: $c -> $got" ;; esac
done
admin acl log reset > /dev/null

# ---- every CLI command as the operator
: > "$T/cli.out"
cli_ok() { # EXPECTED_STATUS ARGS...
    local want=$1 rc; shift
    "$CLI" "$@" -c "$T/o.conf" >> "$T/cli.out" 2>&1; rc=$?
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
[ "$(admin get 'conncap:{api}:limit')" = 3 ] || h_fail "set-limit as the operator did not set the limit"
cli_ok 0 set-limit api 0   # full under 0: set-limit dates full_since (HSET)
cli_ok 0 set-limit api --default
cli_ok 0 audit --count 5 api
cli_ok 0 watch --iterations 1 api
admin zadd 'conncap:{api}:queue' 1 acl-test-waiter >/dev/null   # reset wakes it, as the operator
cli_ok 0 reset api --yes
[ "$(admin llen 'conncap:{api}:wake:acl-test-waiter')" = 1 ] || h_fail "reset as the operator woke no waiter"
admin zrem 'conncap:{api}:queue' acl-test-waiter >/dev/null
admin del 'conncap:{api}:wake:acl-test-waiter' >/dev/null
h_stop_pid $holder
grep -q 'redis: reachable' "$T/cli.out" || h_fail "check did not reach redis: $(cat "$T/cli.out")"
grep -q 'event=reset' "$T/cli.out" || "$CLI" audit --count 3 api -c "$T/o.conf" 2>&1 | grep -q reset ||
    h_fail "the operator's reset is not in the audit stream"

# ---- nothing the shim or the CLI needs was refused (Redis logs every ACL
# denial, commands inside functions too)
denied=$(admin acl log)
[ -z "$denied" ] || h_fail "the ACL refused something conncap needs: $(echo "$denied" | paste -sd' ' -)"
admin acl setuser conncap-operator -hgetall >/dev/null
"$CLI" stats -c "$T/o.conf" >/dev/null 2>&1
admin acl log | grep -q hgetall || h_fail "a missing command was not caught by the ACL log"
admin acl setuser conncap-operator +hgetall >/dev/null

# ---- the password is never shown: not by check, the CLI, nor the shim's debug log
grep -rq -- "$PW" "$T/cli.out" "$T"/*.err "$T"/*.out && h_fail "the password appears in output or logs"
grep -q 'user "conncap-operator", password set' "$T/cli.out" || h_fail "check does not show the user and that a password is set"

# ---- password_env, and a wrong password
sed -i "s|password_file = \"$T/secret\"|password_env = \"CCAP_TEST_PW\"|" "$T/o.conf"
CCAP_TEST_PW="$PW" "$CLI" status -c "$T/o.conf" > "$T/env.out" 2>&1 || h_fail "password_env: status failed: $(cat "$T/env.out")"
CCAP_TEST_PW="wrong-$PW" "$CLI" check -c "$T/o.conf" > "$T/bad.out" 2>&1 && h_fail "a wrong password was accepted"
grep -qi 'auth' "$T/bad.out" || h_fail "a wrong password is not reported as such: $(cat "$T/bad.out")"
grep -q -- "$PW" "$T/env.out" "$T/bad.out" && h_fail "the password appears in output"
[ -n "${SHOW:-}" ] && cat "$T/cli.out" "$T/bad.out" >&2
echo ok
