# check_redis_errors.sh -- `conncap check` against a silent port: one clear line, exit 2, no wait per script; a no-op `resolve = true` is warned about.
. "$(dirname "$0")/../lib/harness.sh"
port=$(h_free_port)
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
open(sys.argv[2], "w").write("up")
time.sleep(60)' "$port" "$T/up" &
_pids+=($!)
h_wait_file "$T/up" || h_fail "silent listener did not start"
cat > "$T/c.conf" <<CONF
redis = { host = "127.0.0.1"; port = $port; command_timeout_ms = 200; };
semaphores = ( { name = "a"; limit = 1; } );
rules = ( { semaphore = "a"; match = ( "127.0.0.1:1" ); } );
CONF
"$CLI" check -c "$T/c.conf" >"$T/out" 2>"$T/err"; rc=$?
cat "$T/err"
[ $rc -eq 2 ] || h_fail "check exited $rc, want 2"
[ "$(grep -c . "$T/err")" -eq 1 ] || h_fail "want exactly one error line, got: $(cat "$T/err")"
grep -q "did not answer PING like a Redis server" "$T/err" || h_fail "unclear message"
grep -q "reachable" "$T/out" && h_fail "check claimed redis is reachable"
# a setting that loads but does nothing: check says so (the shim logs the
# same at start), with file and line, and still exits 0 with Redis fine
h_redis_start
cat > "$T/r.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; };
semaphores = ( { name = "a"; limit = 1; } );
rules = ( { semaphore = "a"; match = ( "10.0.0.0/8:443" );
            resolve = true; } );
CONF
"$CLI" check -c "$T/r.conf" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || h_fail "check of a config with a no-op resolve exited $rc: $(cat "$T/err")"
grep -q "^conncap check: warning: $T/r.conf:3: rules\[0\]: resolve = true, but the rule has no exact host name" "$T/err" ||
    h_fail "no warning for resolve = true without a host name: $(cat "$T/err")"
grep -q "reachable" "$T/out" || h_fail "check did not reach redis"
echo ok
