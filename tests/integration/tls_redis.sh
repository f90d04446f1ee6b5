# tls_redis.sh -- Redis over TLS: the cap held, verification (wrong CA, wrong name), client certificates, a silent TLS port bounded by connect_timeout_ms, a restart, the environment overrides, check's report; passwords never shown.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_tls_certs
h_redis_tls_start
h_server_start 300
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }
# tconf FILE URL [TLS-SETTINGS]: a config on Redis at URL, limit 2, rule on the count server.
tconf() {
    cat > "$1" <<CONF
redis = { url = "$2"; connect_timeout_ms = 500; command_timeout_ms = 1000; ${3:-} };
semaphores = ( { name = "tls"; limit = 2; lease_ms = 30000; wait_timeout_ms = 20000; } );
rules = ( { semaphore = "tls"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_redis_down = "closed";
on_timeout = "ETIMEDOUT";
CONF
}
CA="tls = { ca_file = \"$TLS_DIR/ca.pem\"; };"

# ---- the cap held over TLS: 6 threads x 2 connects, limit 2, only the TLS port configured
tconf "$T/c.conf" "rediss://localhost:$REDIS_TLS_PORT" "$CA"
"$CLI" check -c "$T/c.conf" >"$T/check.out" 2>"$T/check.err" || h_fail "check over TLS: $(cat "$T/check.err")"
grep -q "^redis tls: TLSv1\.[23] .*peer .*CN *= *localhost" "$T/check.out" || h_fail "check names no protocol/peer: $(cat "$T/check.out")"
grep -q "^tls: on, verify on, ca $TLS_DIR/ca.pem" "$T/check.out" || h_fail "check does not show the TLS settings"
run "$PROGS/capclient" 127.0.0.1 "$SRV_PORT" 6 2 >"$T/cap.out" 2>"$T/cap.err" || h_fail "capclient over TLS: $(cat "$T/cap.out" "$T/cap.err")"
max=$(h_server_stat max)
h_note "over TLS: $(tail -n1 "$T/cap.out"), at most $max at once (limit 2)"
[ "$max" -le 2 ] || h_fail "the cap did not hold over TLS: $max at once"
[ "$max" -eq 2 ] || h_fail "never 2 at once: is the semaphore reached at all?"
[ "$(h_holders tls)" -eq 0 ] || h_fail "holders left after the run"
[ -n "$(h_rcli --scan --pattern 'conncap:{tls}:*')" ] || h_fail "no semaphore keys in Redis: the shim did not use it"
# every CLI command takes the same path
for cmd in "status" "stats" "holders tls" "set-limit tls 3" "status tls"; do
    "$CLI" $cmd -c "$T/c.conf" >"$T/cli.out" 2>"$T/cli.err" || h_fail "conncap $cmd over TLS: $(cat "$T/cli.err")"
done
grep -q "3" "$T/cli.out" || h_fail "set-limit over TLS did not show: $(cat "$T/cli.out")"
"$CLI" set-limit tls --default -c "$T/c.conf" >/dev/null 2>&1 || h_fail "set-limit --default over TLS"

# ---- wrong CA: check says why; the shim logs it once and applies on_redis_down (closed)
CONNCAP_REDIS_TLS_CA_FILE="$TLS_DIR/other-ca.pem" "$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" && h_fail "check passed with the wrong CA"
grep -q "certificate verify failed: self-signed certificate in certificate chain" "$T/e" || h_fail "wrong CA: unclear: $(cat "$T/e")"
grep -q "tls.ca_file CONNCAP_REDIS_TLS_CA_FILE" "$T/o" || h_fail "check does not say the CA came from the environment"
CONNCAP_REDIS_TLS_CA_FILE="$TLS_DIR/other-ca.pem" run "$FC" try 127.0.0.1 "$SRV_PORT" 5 >"$T/wca.out" 2>"$T/wca.err"
[ "$(grep -c '^ECONNREFUSED' "$T/wca.out")" -eq 5 ] || h_fail "wrong CA, on_redis_down closed: not refused: $(cat "$T/wca.out")"
[ "$(grep -c 'certificate verify failed' "$T/wca.err")" -eq 1 ] || h_fail "wrong CA not logged exactly once: $(cat "$T/wca.err")"

# ---- wrong name: the certificate names localhost and 127.0.0.1
tconf "$T/n.conf" "rediss://127.0.0.1:$REDIS_TLS_PORT" "tls = { ca_file = \"$TLS_DIR/ca.pem\"; server_name = \"redis.example\"; };"
"$CLI" check -c "$T/n.conf" >"$T/o" 2>"$T/e" && h_fail "check passed with the wrong server name"
grep -q "certificate verify failed: hostname mismatch" "$T/e" || h_fail "wrong name: unclear: $(cat "$T/e")"
tconf "$T/n.conf" "rediss://127.0.0.1:$REDIS_TLS_PORT" "$CA"
"$CLI" check -c "$T/n.conf" >"$T/o" 2>"$T/e" || h_fail "an IP address in the certificate was refused: $(cat "$T/e")"
tconf "$T/n.conf" "rediss://127.0.0.1:$REDIS_TLS_PORT" "tls = { ca_file = \"$TLS_DIR/ca.pem\"; server_name = \"redis.example\"; verify = false; };"
"$CLI" check -c "$T/n.conf" >"$T/o" 2>"$T/e" || h_fail "verify = false still checked: $(cat "$T/e")"
grep -q "verify OFF" "$T/o" || h_fail "check does not show verify off"

# ---- plain TCP to the TLS port, and TLS to the plain port: clear failures, bounded
tconf "$T/p.conf" "redis://127.0.0.1:$REDIS_PORT" "$CA"
"$CLI" check -c "$T/p.conf" >"$T/o" 2>"$T/e" && h_fail "redis:// with a tls group was accepted"
grep -q "redis.tls: the URL says redis:// (plain TCP): use rediss://" "$T/e" || h_fail "redis:// + tls: unclear: $(cat "$T/e")"
tconf "$T/p.conf" "rediss://127.0.0.1:$REDIS_PORT" "$CA"
t0=$(date +%s%N)
"$CLI" check -c "$T/p.conf" >"$T/o" 2>"$T/e" && h_fail "TLS to the plain port passed"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
h_note "TLS to a plain Redis port: refused in $ms ms: $(cat "$T/e")"
[ "$ms" -lt 3000 ] || h_fail "TLS to a plain port took $ms ms"

# ---- a silent TLS port: accepts, never answers: the handshake gives up at connect_timeout_ms
port=$(h_free_port)
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
open(sys.argv[2], "w").write("up")
time.sleep(120)' "$port" "$T/up" &
_pids+=($!)
h_wait_file "$T/up" || h_fail "silent listener did not start"
tconf "$T/s.conf" "rediss://localhost:$port" "$CA"
t0=$(date +%s%N)
"$CLI" check -c "$T/s.conf" >"$T/o" 2>"$T/e" && h_fail "check passed against a silent port"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
h_note "silent TLS port: check gave up in $ms ms (connect_timeout_ms 500): $(cat "$T/e")"
grep -q "TLS handshake with localhost:$port: timed out (connect_timeout_ms)" "$T/e" || h_fail "silent port: unclear: $(cat "$T/e")"
[ "$ms" -lt 2500 ] || h_fail "the handshake was not bounded by connect_timeout_ms: $ms ms"
cp "$T/s.conf" "$T/c.conf"
t0=$(date +%s%N)
run "$FC" try 127.0.0.1 "$SRV_PORT" 1 >"$T/sil.out" 2>"$T/sil.err"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -q '^ECONNREFUSED' "$T/sil.out" || h_fail "silent TLS port, closed: not refused: $(cat "$T/sil.out")"
[ "$ms" -lt 2500 ] || h_fail "a connect under a silent TLS port took $ms ms"

# ---- client certificate required: refused without one, served with one (from the environment)
REDIS_PORT0=$REDIS_PORT REDIS_SOCK0=$REDIS_SOCK REDIS_PID0=$REDIS_PID TLS0=$REDIS_TLS_PORT EXTRA0=$REDIS_TLS_EXTRA
h_redis_tls_start mtls yes
tconf "$T/m.conf" "rediss://localhost:$REDIS_TLS_PORT" "$CA"
"$CLI" check -c "$T/m.conf" >"$T/o" 2>"$T/e" && h_fail "check passed without the client certificate Redis requires"
h_note "no client certificate: $(cat "$T/e")"
CONNCAP_REDIS_TLS_CERT_FILE="$TLS_DIR/client.pem" CONNCAP_REDIS_TLS_KEY_FILE="$TLS_DIR/client.key" \
    "$CLI" check -c "$T/m.conf" >"$T/o" 2>"$T/e" || h_fail "client certificate refused: $(cat "$T/e")"
grep -q "tls.cert_file CONNCAP_REDIS_TLS_CERT_FILE, tls.key_file CONNCAP_REDIS_TLS_KEY_FILE" "$T/o" ||
    h_fail "check does not say where the client certificate came from: $(cat "$T/o")"
CONNCAP_REDIS_TLS_CERT_FILE="$TLS_DIR/client.pem" "$CLI" check -c "$T/m.conf" >"$T/o" 2>"$T/e" && h_fail "a cert without a key passed"
grep -q "go together" "$T/e" || h_fail "cert without key: unclear: $(cat "$T/e")"

# ---- the environment: CONNCAP_REDIS_URL replaces the file's address (a file with no redis section),
# its password is never printed, CONNCAP_LOG_LEVEL replaces log_level
REDIS_PORT=$REDIS_PORT0 REDIS_SOCK=$REDIS_SOCK0 REDIS_PID=$REDIS_PID0 REDIS_TLS_PORT=$TLS0
h_rcli acl setuser capper on '>s3cr%t' '~conncap:*' '&*' '+@all' >/dev/null
cat > "$T/c.conf" <<CONF
semaphores = ( { name = "tls"; limit = 2; wait_timeout_ms = 20000; } );
rules = ( { semaphore = "tls"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_redis_down = "closed";
log_level = "error";
CONF
export CONNCAP_REDIS_URL="rediss://capper:s3cr%25t@localhost:$REDIS_TLS_PORT/0" CONNCAP_REDIS_TLS_CA_FILE="$TLS_DIR/ca.pem"
CONNCAP_LOG_LEVEL=debug "$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" || h_fail "check with the environment's URL: $(cat "$T/e")"
grep -q "from: redis address CONNCAP_REDIS_URL, log_level CONNCAP_LOG_LEVEL (debug), tls.ca_file CONNCAP_REDIS_TLS_CA_FILE" "$T/o" ||
    h_fail "check does not say where the values came from: $(cat "$T/o")"
grep -q 'user "capper", password set' "$T/o" || h_fail "the URL's user was not used"
grep -q "s3cr" "$T/o" "$T/e" && h_fail "the password was printed"
"$CLI" check -c "$T/c.conf" --json >"$T/j" 2>"$T/e" || h_fail "check --json: $(cat "$T/e")"
grep -q '"tls":true' "$T/j" && grep -q '"address":"CONNCAP_REDIS_URL"' "$T/j" || h_fail "json: $(cat "$T/j")"
grep -q "s3cr" "$T/j" && h_fail "the password was printed in JSON"
CONNCAP_REDIS_URL="rediss://capper:s3cr%zzt@localhost:$REDIS_TLS_PORT" "$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" &&
    h_fail "a bad URL passed"
grep -q 'CONNCAP_REDIS_URL: "rediss://capper:\*\*\*@localhost:[0-9]*": the password has a bad %-escape' "$T/e" ||
    h_fail "bad URL: unclear: $(cat "$T/e")"
grep -q "s3cr" "$T/e" && h_fail "the password was printed in an error"
CONNCAP_LOG_LEVEL=loud "$CLI" check -c "$T/c.conf" >"$T/o" 2>"$T/e" && h_fail "a bad CONNCAP_LOG_LEVEL passed"
grep -q 'CONNCAP_LOG_LEVEL: "loud" is not one of' "$T/e" || h_fail "bad level: unclear: $(cat "$T/e")"
# the shim: read once at start, so a program that changes its environment changes nothing
run "$PROGS/capclient" 127.0.0.1 "$SRV_PORT" 4 2 >"$T/env.out" 2>"$T/env.err" || h_fail "capclient with the env URL: $(cat "$T/env.out" "$T/env.err")"
[ "$(h_server_stat max)" -le 2 ] || h_fail "the cap did not hold with the environment's URL"
grep -q "s3cr" "$T/env.err" && h_fail "the shim printed the password"
# a wrong password in the URL: refused; log_level "error" in the file keeps the warning quiet,
# CONNCAP_LOG_LEVEL=warn lets it out: why, without the password
CONNCAP_REDIS_URL="rediss://capper:wr0ngpw@localhost:$REDIS_TLS_PORT" run "$FC" try 127.0.0.1 "$SRV_PORT" 2 >"$T/pw.out" 2>"$T/pw.err"
grep -q '^ECONNREFUSED' "$T/pw.out" || h_fail "a wrong password was not refused: $(cat "$T/pw.out")"
[ -s "$T/pw.err" ] && h_fail "log_level error in the file, yet: $(cat "$T/pw.err")"
CONNCAP_LOG_LEVEL=warn CONNCAP_REDIS_URL="rediss://capper:wr0ngpw@localhost:$REDIS_TLS_PORT" run "$FC" try 127.0.0.1 "$SRV_PORT" 2 >"$T/pw.out" 2>"$T/pw.err"
grep -q "wr0ngpw" "$T/pw.err" && h_fail "the shim logged the password"
grep -q "WRONGPASS" "$T/pw.err" || h_fail "the shim did not log why: $(cat "$T/pw.err")"
unset CONNCAP_REDIS_URL CONNCAP_REDIS_TLS_CA_FILE

# ---- Redis restarted under a running program: its TLS connection is replaced, no connect fails
tconf "$T/c.conf" "rediss://localhost:$REDIS_TLS_PORT" "$CA"
run "$FC" try 127.0.0.1 "$SRV_PORT" 40 100 >"$T/rs.out" 2>"$T/rs.err" &
fcpid=$!
sleep 1.5
REDIS_EXTRA=$EXTRA0 h_redis_restart
wait "$fcpid"
okc=$(grep -c '^ok' "$T/rs.out")
h_note "Redis restarted under 40 connects (100 ms apart): $okc ok; $(grep -v '^ok' "$T/rs.out" | sort | uniq -c | tr '\n' ' ')"
[ "$(tail -n 5 "$T/rs.out" | grep -c '^ok')" -eq 5 ] || h_fail "no recovery over TLS after the restart: $(tail -n5 "$T/rs.out")"
[ "$okc" -ge 30 ] || h_fail "only $okc of 40 connects passed around a restart"

# ---- a changed tls group under a running program is a Redis change: logged, taken at restart
run "$FC" try 127.0.0.1 "$SRV_PORT" 30 100 >"$T/rl.out" 2>"$T/rl.err" &
fcpid=$!
sleep 1
tconf "$T/c.conf.new" "rediss://localhost:$REDIS_TLS_PORT" "tls = { ca_file = \"$TLS_DIR/ca.pem\"; verify = false; };"
mv "$T/c.conf.new" "$T/c.conf"
wait "$fcpid"
grep -q 'c.conf: the redis settings changed: they take effect when the program restarts' "$T/rl.err" ||
    h_fail "a changed tls group was not reported: $(cat "$T/rl.err")"
[ "$(grep -c '^ok' "$T/rl.out")" -eq 30 ] || h_fail "connects failed around the reload: $(grep -v '^ok' "$T/rl.out")"
echo ok
