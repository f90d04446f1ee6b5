# names_nss.sh -- curl and python3 reach api.partner.test (a host-name rule, limit 2) and other.test (no rule),
# both 127.0.0.1 through nss_wrapper, on one countserver: only the named destination is capped.
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
NSSW=$(dpkg -L libnss-wrapper 2>/dev/null | grep '/libnss_wrapper\.so$' | head -n1)
[ -r "$NSSW" ] || h_fail "libnss_wrapper.so not found (Debian package libnss-wrapper)"
printf '127.0.0.1 api.partner.test\n127.0.0.1 other.test\n' > "$T/hosts"
export NSS_WRAPPER_HOSTS="$T/hosts"
h_redis_start
# curl connects non-blocking: queued under the default configuration
h_conf "$T/c.conf" api 2 5000 30000 "api.partner.test"

# Every client runs under `conncap run`, which puts the shim first in
# LD_PRELOAD and keeps nss_wrapper after it: the program's getaddrinfo() is
# the shim's, whose RTLD_NEXT is nss_wrapper's. (nss_wrapper first would
# answer the program itself and the shim would never see the names.)
clients() { # NAME N OUTPREFIX: N curl and N python3 clients to NAME, in parallel
    local name=$1 n=$2 out=$3 i
    pids=()
    for i in $(seq "$n"); do
        LD_PRELOAD="$NSSW" "$CLI" run -c "$T/c.conf" -- curl -sS -o /dev/null -w '%{http_code}\n' \
            "http://$name:$SRV_PORT/" >"$out.curl.$i" 2>&1 &
        pids+=($!)
        LD_PRELOAD="$NSSW" "$CLI" run -c "$T/c.conf" -- python3 "$ROOT/tests/lib/pyclient.py" "$name" "$SRV_PORT" \
            >"$out.py.$i" 2>&1 &
        pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
    for f in "$out".curl.*; do grep -q '^200$' "$f" || { echo "curl failed: $(cat "$f")"; failed=$((failed + 1)); }; done
}
commands() { h_rcli info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p'; }

# 1. the named destination: at most 2 at once, and the cap is reached
h_server_start 500
clients api.partner.test 6 "$T/a"
max=$(h_server_stat max); total=$(h_server_stat total)
h_note "api.partner.test: server max $max, total $total, failed $failed"
[ "$failed" -eq 0 ] || h_fail "$failed clients of api.partner.test failed"
[ "$total" -eq 12 ] || h_fail "server saw $total connections from api.partner.test clients, want 12"
[ "$max" -le 2 ] || h_fail "cap exceeded: $max concurrent connections to api.partner.test, limit 2"
[ "$max" -eq 2 ] || h_fail "only $max concurrent: the cap of 2 was never reached"
h_wait_for h_holders_is api 0 || h_fail "holders left: $(h_rcli zrange 'conncap:{api}:holders' 0 -1)"

# 2. the unnamed one, same address: no Redis command at all, more than 2 at once
h_server_start 3000
before=$(commands)
clients other.test 6 "$T/o"
after=$(commands)
max=$(h_server_stat max); total=$(h_server_stat total)
h_note "other.test: server max $max, total $total, failed $failed, redis commands $((after - before - 1))"
[ "$failed" -eq 0 ] || h_fail "$failed clients of other.test failed"
[ "$total" -eq 12 ] || h_fail "server saw $total connections from other.test clients, want 12"
[ $((after - before)) -le 1 ] || h_fail "other.test clients sent $((after - before - 1)) commands to redis"
[ "$max" -gt 2 ] || h_fail "other.test clients were held to $max at once: they look capped"

# 3. one process that resolved both names: a connect to the shared address
# matches by any of its names (documented precedence), here api.partner.test
h_server_start 100
both() {
    LD_PRELOAD="$NSSW" "$CLI" run -c "$T/c.conf" -- python3 -c '
import socket, sys, time
for n in sys.argv[1:-2]:
    socket.getaddrinfo(n, 80)
s = socket.create_connection(("other.test", int(sys.argv[-2])))
print("connected", flush=True)
while not __import__("os").path.exists(sys.argv[-1]):
    time.sleep(0.05)
s.close()' "$@" "$SRV_PORT" "$T/stop.both" >"$T/both.out" 2>&1 &
    BOTH=$!; _pids+=("$BOTH")
    h_wait_file "$T/both.out" || h_fail "python client did not connect: $(cat "$T/both.out")"
}
rm -f "$T/stop.both"; both other.test
sleep 0.3
[ "$(h_holders api)" -eq 0 ] || h_fail "a process that resolved only other.test took a permit"
touch "$T/stop.both"; wait "$BOTH"
rm -f "$T/stop.both" "$T/both.out"; both api.partner.test other.test
h_wait_for h_holders_is api 1 || h_fail "a process that resolved both names was not capped on the shared address"
touch "$T/stop.both"; wait "$BOTH"
h_wait_for h_holders_is api 0 || h_fail "permit not given back"
echo ok
