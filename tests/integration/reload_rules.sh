# reload_rules.sh -- hot reload under a running program: a raised limit and a changed rule take effect,
# held permits keep their semaphore, a broken file keeps the rules (logged once with file and line).
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
h_server_start 300
commands() { h_rcli info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p'; }
write_conf() { # TEXT: replaces the file atomically, as an editor or a config tool should
    printf '%s\n' "$1" > "$T/c.conf.new" && mv "$T/c.conf.new" "$T/c.conf"
}
R="redis = { socket = \"$REDIS_SOCK\"; connect_timeout_ms = 300; command_timeout_ms = 500; };"
P="log_level = \"info\";"
write_conf "$R
semaphores = ( { name = \"a\"; limit = 2; lease_ms = 5000; wait_timeout_ms = 30000; },
               { name = \"b\"; limit = 1; lease_ms = 5000; wait_timeout_ms = 30000; } );
rules = ( { semaphore = \"a\"; match = ( \"127.0.0.1:$SRV_PORT\" ); } );
$P"
rm -f "$T/stop"
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/nameloop" 127.0.0.1 "$SRV_PORT" 6 "$T/stop" >"$T/loop.out" 2>"$T/loop.err" &
LOOP=$!; _pids+=("$LOOP")
WAIT_S=20 h_wait_for h_holders_is a 2 || h_fail "v1: holders of a never reached 2: $(cat "$T/loop.err")"
for i in $(seq 10); do [ "$(h_holders a)" -le 2 ] || h_fail "v1: more than 2 holders of a"; sleep 0.1; done
h_note "v1: a capped at 2"

# v2: the limit goes up
write_conf "$R
semaphores = ( { name = \"a\"; limit = 4; lease_ms = 5000; wait_timeout_ms = 30000; },
               { name = \"b\"; limit = 1; lease_ms = 5000; wait_timeout_ms = 30000; } );
rules = ( { semaphore = \"a\"; match = ( \"127.0.0.1:$SRV_PORT\" ); } );
$P"
WAIT_S=20 h_wait_for h_holders_is a 4 || h_fail "v2: the new limit 4 was not applied (holders $(h_holders a))"
for i in $(seq 10); do [ "$(h_holders a)" -le 4 ] || h_fail "v2: more than 4 holders of a"; sleep 0.1; done
h_note "v2: limit 2 -> 4 applied"

# v3: the rule moves to semaphore b; a leaves the file, c arrives; the redis
# section changes too (which needs a restart: logged, not applied)
write_conf "redis = { socket = \"$REDIS_SOCK\"; connect_timeout_ms = 301; command_timeout_ms = 500; };
semaphores = ( { name = \"c\"; limit = 3; }, { name = \"b\"; limit = 1; lease_ms = 5000; wait_timeout_ms = 30000; } );
rules = ( { semaphore = \"b\"; match = ( \"127.0.0.1:$SRV_PORT\" ); } );
$P"
WAIT_S=20 h_wait_for eval '[ "$(h_holders b)" -eq 1 ] && [ "$(h_holders a)" -eq 0 ]' ||
    h_fail "v3: rule change not applied (a $(h_holders a), b $(h_holders b))"
[ "$(h_holders c)" -eq 0 ] || h_fail "v3: c has holders"
max=$(h_server_stat max)
h_note "v3: rule -> b (limit 1); permits of a went back to a; server max so far $max"
[ "$max" -ge 4 ] || h_fail "the server never saw the raised limit of 4 (max $max)"
[ "$max" -le 5 ] || h_fail "the server saw $max at once: more than 4 of a + 1 of b"
grep -q 'c.conf: the redis settings changed: they take effect when the program restarts' "$T/loop.err" ||
    h_fail "v3: no log line about the redis settings"

# v4: a broken file keeps the rules in force, logged once with file and line
printf '%s\nsemaphores = ( { name = "b"; limit = 1; }\nrules = ( );\n' "$R" > "$T/c.conf.new" && mv "$T/c.conf.new" "$T/c.conf"
sleep 3.5
n=$(grep -c "reload failed, keeping the rules in force: .*c.conf:3: " "$T/loop.err")
[ "$n" -eq 1 ] || h_fail "v4: want one error line with file and line, got $n: $(grep reload "$T/loop.err")"
for i in $(seq 10); do [ "$(h_holders b)" -le 1 ] || h_fail "v4: more than 1 holder of b"; sleep 0.1; done
h_wait_for h_holders_is b 1 || h_fail "v4: the old rules are no longer in force"
max=$(h_server_stat max)
[ "$max" -le 5 ] || h_fail "v4: the server saw $max at once"
h_note "v4: broken file kept the rules; logged once: $(grep 'reload failed' "$T/loop.err" | sed 's/.*keeping/keeping/')"

# v5: no rule matches any more: no permits, no Redis commands, uncapped
write_conf "$R
semaphores = ( { name = \"b\"; limit = 1; } );
rules = ( { semaphore = \"b\"; match = ( \"10.99.0.0/16\" ); } );
$P"
# (connects that were already waiting for b when the rule went finish under
# the rules they started with: give them time to drain)
quiet() { local b=$(commands); sleep 1; [ $(($(commands) - b)) -le 1 ]; }
WAIT_S=30 h_wait_for quiet || h_fail "v5: redis commands do not stop"
WAIT_S=20 h_wait_for h_holders_is b 0 || h_fail "v5: still holders of b"
before=$(commands); sleep 2; after=$(commands)
[ $((after - before)) -le 1 ] || h_fail "v5: unmatched connects sent $((after - before - 1)) redis commands"
WAIT_S=20 h_wait_for eval '[ "$(h_server_stat cur)" -ge 4 ]' || h_fail "v5: connects still look capped"
h_note "v5: rule gone: uncapped, no redis commands"

touch "$T/stop"
wait "$LOOP" || h_fail "nameloop failed: $(cat "$T/loop.err")"
grep -q 'failed 0' "$T/loop.out" || h_fail "connects failed: $(cat "$T/loop.out"): $(grep -v "info: reloaded" "$T/loop.err")"
n=$(grep -c 'info: reloaded .*c.conf' "$T/loop.err")
[ "$n" -eq 3 ] || h_fail "want 3 reloads logged (v2, v3, v5), got $n"
echo ok
