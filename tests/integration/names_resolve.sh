# names_resolve.sh -- resolve = true: programs that never ask libc for the name (python3 and a C program
# connecting to the literal address) are capped by a host-name rule; the shim's lookups follow DNS changes.
. "$(dirname "$0")/../lib/harness.sh"
NSSW=$(dpkg -L libnss-wrapper 2>/dev/null | grep '/libnss_wrapper\.so$' | head -n1)
[ -r "$NSSW" ] || h_fail "libnss_wrapper.so not found (Debian package libnss-wrapper)"
if [ "${SAN:-}" = tsan ]; then echo "skipped under SAN=tsan: nss_wrapper's own locking trips ThreadSanitizer"; exit 77; fi
printf '127.0.0.1 api.partner.test\n' > "$T/hosts"
export NSS_WRAPPER_HOSTS="$T/hosts"
[ -n "${SAN:-}" ] && export NSS_WRAPPER_DISABLE_DEEPBIND=1
h_redis_start
commands() { h_rcli info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p'; }
conf() { # RESOLVE(true|false) FILE
    cat > "$2" <<CONF
redis = { socket = "$REDIS_SOCK"; connect_timeout_ms = 300; command_timeout_ms = 500; };
semaphores = ( { name = "api"; limit = 2; lease_ms = 5000; wait_timeout_ms = 30000; } );
rules = ( { semaphore = "api"; match = ( "api.partner.test" ); resolve = $1; resolve_interval_s = 1; } );
log_level = "info";
CONF
}
# The shim first, nss_wrapper after it (for the shim's own lookups).
clients() { # CONF: 6 python3 + 6 C clients to 127.0.0.1, each process starting cold (12 C ones under SAN)
    pids=()
    rm -f "$T"/py.* "$T"/c.*
    for i in $(seq 6); do
        if [ -z "${SAN:-}" ]; then
            LD_PRELOAD="$LIB:$NSSW" CONNCAP_CONFIG="$1" python3 "$ROOT/tests/lib/pyclient.py" 127.0.0.1 "$SRV_PORT" \
                >"$T/py.$i" 2>&1 &
        else
            LD_PRELOAD="$LIB:$NSSW" CONNCAP_CONFIG="$1" "$PROGS/resolvecon" none 127.0.0.1 "$SRV_PORT" -1 \
                >"$T/c.x$i" 2>&1 &
        fi
        pids+=($!)
        LD_PRELOAD="$LIB:$NSSW" CONNCAP_CONFIG="$1" "$PROGS/resolvecon" none 127.0.0.1 "$SRV_PORT" -1 >"$T/c.$i" 2>&1 &
        pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
    for f in "$T"/c.*; do grep -qx 'connect ok' "$f" || { echo "C client: $(cat "$f")"; failed=$((failed + 1)); }; done
}

# 1. resolve = false: the name never reaches the shim, nothing is capped
conf false "$T/off.conf"
h_server_start 1500
before=$(commands)
clients "$T/off.conf"
after=$(commands)
h_note "resolve = false: server max $(h_server_stat max), redis commands $((after - before - 1)), failed $failed"
[ "$failed" -eq 0 ] || h_fail "$failed clients failed"
[ $((after - before)) -le 1 ] || h_fail "resolve = false: clients of a literal address sent redis commands"
[ "$(h_server_stat max)" -gt 2 ] || h_fail "resolve = false: clients were held to $(h_server_stat max) at once"

# 2. resolve = true: the shim looks the name up itself; even a process's very first connect matches
conf true "$T/on.conf"
h_server_start 600
clients "$T/on.conf"
max=$(h_server_stat max); total=$(h_server_stat total)
h_note "resolve = true: server max $max, total $total, failed $failed"
[ "$failed" -eq 0 ] || h_fail "$failed clients failed"
[ "$total" -eq 12 ] || h_fail "server saw $total connections, want 12"
[ "$max" -le 2 ] || h_fail "cap exceeded: $max concurrent, limit 2"
[ "$max" -eq 2 ] || h_fail "only $max concurrent: the cap of 2 was never reached"
grep -h 'no permit\|bad config' "$T"/c.* $(ls "$T"/py.* 2>/dev/null) && h_fail "unexpected log lines"

# 3. the lookups are refreshed: the name moves to our address under a running program
printf '127.0.0.9 api.partner.test\n' > "$T/hosts.new"; mv "$T/hosts.new" "$T/hosts"
h_server_start 300
rm -f "$T/stop"
LD_PRELOAD="$LIB:$NSSW" CONNCAP_CONFIG="$T/on.conf" "$PROGS/nameloop" 127.0.0.1 "$SRV_PORT" 4 "$T/stop" \
    >"$T/loop.out" 2>"$T/loop.err" &
LOOP=$!; _pids+=("$LOOP")
WAIT_S=20 h_wait_for eval '[ "$(h_server_stat total)" -ge 20 ]' || h_fail "nameloop does not connect: $(cat "$T/loop.err")"
[ "$(h_holders api)" -eq 0 ] || h_fail "127.0.0.1 matched while the name pointed elsewhere"
printf '127.0.0.1 api.partner.test\n' > "$T/hosts.new"; mv "$T/hosts.new" "$T/hosts"
WAIT_S=20 h_wait_for h_holders_is api 2 || h_fail "after the name moved to 127.0.0.1 the loop was not capped (holders $(h_holders api))"
h_note "name moved to 127.0.0.1: capped within the refresh interval"
touch "$T/stop"
wait "$LOOP" || h_fail "nameloop failed: $(cat "$T/loop.err")"
h_wait_for h_holders_is api 0 || h_fail "holders left"
grep -q 'failed 0' "$T/loop.out" || h_fail "nameloop saw failures: $(cat "$T/loop.out")"

# 4. resolve = true with nothing to look up is reported: by conncap check, and by
# the shim only at debug (every process of a fleet would say it)
cat > "$T/wild.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; };
semaphores = ( { name = "api"; limit = 2; } );
rules = ( { semaphore = "api"; match = ( "*.partner.test", "10.0.0.0/8" ); resolve = true; } );
CONF
want="wild.conf:3: rules\[0\]: resolve = true, but the rule has no exact host name to look up"
"$CLI" check --offline -c "$T/wild.conf" >/dev/null 2>"$T/wild.check" || h_fail "check: exit $?: $(cat "$T/wild.check")"
grep -q "^conncap check: warning: .*$want" "$T/wild.check" || h_fail "check does not warn: $(cat "$T/wild.check")"
LD_PRELOAD="$LIB:$NSSW" CONNCAP_CONFIG="$T/wild.conf" "$PROGS/resolvecon" none 127.0.0.1 "$SRV_PORT" 0 >/dev/null 2>"$T/wild.err"
! grep -q "$want" "$T/wild.err" || h_fail "the shim warns at log_level warn: $(cat "$T/wild.err")"
echo 'log_level = "debug";' >> "$T/wild.conf"
LD_PRELOAD="$LIB:$NSSW" CONNCAP_CONFIG="$T/wild.conf" "$PROGS/resolvecon" none 127.0.0.1 "$SRV_PORT" 0 >/dev/null 2>"$T/wild.err"
grep -q "debug: .*$want" "$T/wild.err" || h_fail "no debug line for a resolve = true rule without names: $(cat "$T/wild.err")"
echo ok
