# queue_rtt.sh -- queued connects whose handshake outlasts the swap (issue 26). On loopback the whole
# handshake runs inside connect(), so every other queue test swaps an established socket onto the program's
# numbers; here the destination is across a delay line (bench/bench.c delayline: a tun device in a network
# namespace of the test's own, 5 ms each way), so the swap finds the real socket in SYN_SENT and the
# program learns of its connection from the kernel, 10 ms later, as without the shim. Limit 1 and 2: bench
# qhandoff's blocking, epoll and poll waiters (20 rounds each) all connect; curl --parallel over 12 URLs
# gets 200 for each, the upstream sees at most 2 at once; nothing is left in Redis. Needs root (unshare -n,
# /dev/net/tun); skipped where they cannot be had.
if [ -z "${QRTT_NETNS:-}" ]; then
    if ! { [ -c /dev/net/tun ] && command -v ip >/dev/null && unshare -n true 2>/dev/null; }; then
        echo "skipped: needs unshare -n, /dev/net/tun (root) and ip (iproute2)"
        exit 77
    fi
    QRTT_NETNS=1 exec unshare -n bash "$0" "$@"
fi
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
ip link set lo up || h_fail "lo"
h_build_bench
"$T/bench" delayline ccq0 5000 >"$T/dl.out" 2>"$T/dl.err" &
_pids+=("$!")
h_wait_file "$T/dl.out" || h_fail "the delay line did not start: $(cat "$T/dl.err")"
ip addr add 10.9.0.1/24 dev ccq0 && ip link set ccq0 up || h_fail "the delay line's address"
h_redis_start

# ---- one waiter at a time: blocking, epoll, poll
port=$(h_free_port)
h_conf "$T/h.conf" qh 1 30000 10000 "10.9.0.2:$port"
rounds=20
QH_BIND=10.9.0.1 QH_PEER=10.9.0.2 CONNCAP_CONFIG="$T/h.conf" LD_PRELOAD="$LIB" \
    "$T/bench" qhandoff "$port" $rounds bqp >"$T/h.out" 2>"$T/h.err" || h_fail "qhandoff failed: $(tail -n 3 "$T/h.err")"
for m in b q p; do
    n=$(awk -v m=$m '$1 == m && $2 > 0 && $3 > 0' "$T/h.out" | wc -l)
    [ "$n" -eq $rounds ] || h_fail "waiters of kind $m: $n of $rounds connected after the release"
    # connected a round trip after the release at the earliest: the handshake was not over inside connect()
    slow=$(awk -v m=$m '$1 == m && $3 >= 10000000' "$T/h.out" | wc -l)
    [ "$slow" -eq $rounds ] || h_fail "kind $m: $slow of $rounds connected 10 ms or more after the release (no round trip?)"
done
h_note "qhandoff: $((3 * rounds)) hand-offs over a 10 ms round trip, p50 connected $(awk '$1 == "q" { print $3 / 1e6 }' "$T/h.out" | sort -g | sed -n "$((rounds / 2))p") ms (epoll)"
RC_LABEL=qhandoff rc_clean qh
grep -iE 'error|warn' "$T/h.err" && h_fail "the shim complained (above)"

# ---- curl, 12 URLs 6 at a time, limit 2 (third-party program: not under a sanitizer's shim)
if [ -z "${SAN:-}" ]; then
    h_server_start 100 --host 10.9.0.1
    h_conf "$T/c.conf" api 2 10000 30000 "10.9.0.2:$SRV_PORT"
    RC_LABEL=curl
    urls=()
    for i in $(seq 12); do urls+=(-o /dev/null "http://10.9.0.2:$SRV_PORT/?i=$i"); done
    timeout 60 "$CLI" run -c "$T/c.conf" -- curl -sS --max-time 50 --parallel --parallel-immediate --parallel-max 6 \
        -w '%{http_code}\n' "${urls[@]}" >"$T/curl.out" 2>"$T/curl.err"
    st=$?
    ok=$(grep -c '^200$' "$T/curl.out")
    h_note "curl: exit $st, $ok of 12 got 200; upstream max $(h_server_stat max), total $(h_server_stat total)"
    [ "$ok" -eq 12 ] && [ "$st" -eq 0 ] || h_fail "curl: $ok of 12 got 200, exit $st: $(head -n 3 "$T/curl.err")"
    rc_cap 2
    [ "$(h_server_stat total)" -eq 12 ] || h_fail "curl: the upstream saw $(h_server_stat total) connections, want 12"
    rc_clean api
fi
echo ok
