# tls_programs.sh -- TLS to Redis inside programs: no libssl mapped under a plain configuration (measured in /proc/PID/maps), libssl mapped at the first matched connect under TLS; fork children never use their parent's TLS session; curl, itself an OpenSSL program, fetches over https while capped through Redis over TLS.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_tls_certs
h_redis_tls_start
h_server_start 600000
TLSURL="rediss://localhost:$REDIS_TLS_PORT"

# hold_maps CONF OUT: a program holding one matched connection under CONF; OUT gets its libssl/libcrypto mappings.
hold_maps() {
    mkfifo "$T/in.$2"
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$1" "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/in.$2" >"$T/$2.out" 2>"$T/$2.err" &
    local pid=$!
    exec {w}>"$T/in.$2"
    h_wait_for grep -q '^connected' "$T/$2.out" || h_fail "$2: hold did not connect: $(cat "$T/$2.out" "$T/$2.err")"
    grep -E 'libssl|libcrypto' "/proc/$pid/maps" > "$T/$2.maps"
    h_note "$2: $(grep -c . "$T/$2.maps") libssl/libcrypto mappings, holders $(h_holders lc)"
    [ "$(h_holders lc)" -eq 1 ] || h_fail "$2: the connect took no permit"
    exec {w}>&-
    wait "$pid"
}
lc_setup 30000 100
hold_maps "$LC_CONF" plain
[ -s "$T/plain.maps" ] && h_fail "a plain-TCP configuration mapped OpenSSL: $(cat "$T/plain.maps")"
CONF_EXTRA="" h_conf "$T/tls.conf" lc 100 30000 20000 "127.0.0.1:$SRV_PORT"
sed -i "s|^redis = .*|redis = { url = \"$TLSURL\"; tls = { ca_file = \"$TLS_DIR/ca.pem\"; }; connect_timeout_ms = 1000; command_timeout_ms = 1000; };|" "$T/tls.conf"
# the function library, loaded as an operator would (setup over TLS): the shim then calls FCALL
"$CLI" setup -c "$T/tls.conf" >"$T/setup.out" 2>&1 || h_fail "conncap setup over TLS: $(cat "$T/setup.out")"
hold_maps "$T/tls.conf" tls
grep -q 'libssl\.so\.3' "$T/tls.maps" || h_fail "under TLS, libssl.so.3 is not mapped: did the shim use TLS?"

# ---- fork: 20 children of a threaded parent connect over TLS (environment overrides on the
# plain file): each its own permit, the parent's kept, no reply mixed up
[ "${SAN:-}" = asan ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export CONNCAP_REDIS_URL="$TLSURL" CONNCAP_REDIS_TLS_CA_FILE="$TLS_DIR/ca.pem"
lc_run fork 20
pids=$(grep -v "^[^/]*/$(head -n1 "$T/step.parent" | cut -d/ -f2)/" "$T/step.children-connected" | cut -d/ -f2 | sort -u | wc -l)
[ "$pids" -eq 20 ] || h_fail "want 20 children holding their own permits over TLS, have $pids"
cmp -s "$T/step.parent" "$T/step.children-gone" || h_fail "the parent's permit changed while children closed their copies"
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left: $(h_rcli zrange 'conncap:{lc}:holders' 0 -1)"
grep -qi "tls\|ssl\|protocol" "$T/lc.err" && h_fail "TLS errors in the fork run: $(cat "$T/lc.err")"
# exit() and return from main give the permits back over TLS at once (not by lease expiry)
for how in return exit; do
    lc_run exit $how
    [ "$(lc_live)" -eq 0 ] || h_fail "$how: the permit was not given back at exit over TLS"
done
unset CONNCAP_REDIS_URL CONNCAP_REDIS_TLS_CA_FILE

# ---- curl (OpenSSL) over https to a local TLS server, matched and capped through Redis over TLS
[ "${SAN:-}" ] && { echo ok; exit 0; }   # third-party program: not under a sanitizer runtime
port=$(h_free_port)
(cd "$T" && exec openssl s_server -quiet -www -accept "$port" -cert "$TLS_DIR/server.pem" -key "$TLS_DIR/server.key" \
    </dev/null >"$T/s_server.log" 2>&1) &
_pids+=($!)
WAIT_S=10 h_wait_for curl -s -o /dev/null --cacert "$TLS_DIR/ca.pem" "https://127.0.0.1:$port/" || h_fail "s_server did not start"
curlconf() {
    cat > "$T/curl.conf" <<CONF
redis = { url = "$TLSURL"; tls = { ca_file = "$TLS_DIR/ca.pem"; }; };
semaphores = ( { name = "web"; limit = $1; wait_timeout_ms = 0; } );
rules = ( { semaphore = "web"; match = ( "127.0.0.1:$port" ); } );
on_timeout = "ECONNREFUSED";
on_redis_down = "closed";
CONF
}
curlconf 1
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/curl.conf" curl -sS --max-time 10 --cacert "$TLS_DIR/ca.pem" \
    "https://127.0.0.1:$port/" >"$T/curl.out" 2>"$T/curl.err" || h_fail "curl under the shim failed: $(cat "$T/curl.err")"
grep -q "s_server" "$T/curl.out" || h_fail "curl did not get the page: $(head -c 300 "$T/curl.out")"
grep -q "conncap" "$T/curl.err" && h_fail "the shim complained inside curl: $(cat "$T/curl.err")"
[ -n "$(h_rcli --scan --pattern 'conncap:{web}:*')" ] || h_fail "curl's connect never reached the semaphore"
curlconf 0
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/curl.conf" curl -sS --max-time 10 --cacert "$TLS_DIR/ca.pem" \
    "https://127.0.0.1:$port/" >"$T/curl.out" 2>"$T/curl.err" && h_fail "curl passed with limit 0"
grep -q "Connection refused\|Failed to connect\|Couldn't connect" "$T/curl.err" || h_fail "limit 0: curl failed otherwise: $(cat "$T/curl.err")"
h_note "curl with limit 0: $(head -n1 "$T/curl.err")"

# ---- a program that uses OpenSSL itself and exits holding a permit: the permit goes back at exit,
# before the program's OPENSSL_cleanup (an atexit handler registered earlier) could pull OpenSSL away
curlconf 1
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/curl.conf" /usr/bin/python3 -c '
import ssl, socket, sys
ssl.create_default_context()                     # OpenSSL initialised by the program first
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("held", flush=True)
s.detach()                                       # the descriptor stays open until the process ends
sys.exit(0)' "$port" >"$T/py.out" 2>"$T/py.err" || h_fail "python with ssl under the shim failed: $(cat "$T/py.err")"
grep -q held "$T/py.out" || h_fail "python did not connect: $(cat "$T/py.err")"
live=$(h_rcli zcard 'conncap:{web}:holders')
h_note "python (OpenSSL) exited holding a permit: $live holders left"
[ "$live" -eq 0 ] || h_fail "the permit was not given back at exit: $live holders (left to the lease)"
echo ok
