#!/usr/bin/env bash
# qconn.sh -- the queued (non-blocking) connect's hand-off next to a blocking waiter's, in one run.
# Usage: bench/qconn.sh [ROUNDS]  (BUILD=dir selects the library). Sourced by bench/run.sh (ROWS=qconn),
# which calls qconn_rows to add its rows to the table. The "connected" rows are measured again over a
# round trip (QCONN_ONEWAY_US each way, default 250) where unshare -n and a tun device can be had.
# Method (bench/bench.c, mode qhandoff): one process under the shim listens on 127.0.0.1 (a rule of a
# semaphore of limit 1), holds the permit with one connection, starts one waiter, lets it queue and sleep
# (20 ms), and closes the holder. Times from that close() call (CLOCK_MONOTONIC, one process): to the
# waiter's connection accepted by the listener (its SYN answered), and to the waiter knowing itself
# connected -- a blocking connect() returning, or the queued socket reported writable (epoll,
# edge-triggered, the socket added before its connect as nginx does; or poll) and its SO_ERROR read
# as 0. ROUNDS of each of b (blocking), q (epoll), p (poll), interleaved b q p, p q b, ...

# QC_NETNS: the delay line's network in a new network namespace, then the command given ("$@"), then
# the delay line killed; $1 the one-way delay (us). Local 10.9.0.1, the far end 10.9.0.2 (bench.c).
QC_NETNS='d=$1; shift
ip link set lo up
"$B/bench" delayline ccq0 "$d" >"$T/dl.out" &
dl=$!
for i in $(seq 100); do grep -q ready "$T/dl.out" 2>/dev/null && break; sleep 0.05; done
ip addr add 10.9.0.1/24 dev ccq0 && ip link set ccq0 up && "$@"; rc=$?
kill $dl; exit $rc'

# qconn_netns_ok: true where a delay line can be had (root: unshare -n, /dev/net/tun).
qconn_netns_ok() { [ -c /dev/net/tun ] && command -v ip >/dev/null && unshare -n true 2>/dev/null; }

# qconn_measure ROUNDS [LIB] [ONEWAY_US]: prints, for b, q and p in turn, "acc50 acc99 rdy50 rdy99" (ms),
# then for b, q and p "syn50 syn99": the SYN's own time, from its packet ("- -" without CAP_NET_RAW).
# With ONEWAY_US (not 0), over the delay line: each packet ONEWAY_US late each way (qconn_netns_ok).
qconn_measure() {
    local n=${1:-300} lib=${2:-$LIB} d=${3:-0} port out="" m col peer=127.0.0.1
    local -a run=(env)
    port=$(h_free_port)
    if [ "$d" != 0 ]; then
        peer=10.9.0.2
        run=(unshare -n bash -c "$QC_NETNS" qc "$d" env QH_BIND=10.9.0.1 QH_PEER=$peer)
    fi
    cat >"$T/qc.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; key_prefix = "bench:"; command_timeout_ms = 1000; };
semaphores = ( { name = "qc"; limit = 1; lease_ms = 30000; wait_timeout_ms = 10000; } );
rules = ( { semaphore = "qc"; match = ( "$peer:$port" ); } );
CONF
    B=$B T=$T "${run[@]}" QH_SYN=1 CONNCAP_CONFIG="$T/qc.conf" LD_PRELOAD="$lib" "$B/bench" qhandoff "$port" "$n" \
        bqp >"$T/qc.out" 2>"$T/qc.err" || { echo "qhandoff failed: $(tail -n 2 "$T/qc.err")" >&2; return 1; }
    for m in b q p; do for col in 2 3; do out="$out $(qconn_p50_p99 "$m" "$col")"; done; done
    for m in b q p; do out="$out $(qconn_p50_p99 "$m" 4)"; done
    echo $out
}

# qconn_p50_p99 MODE COLUMN: p50 and p99 (ms) of column COLUMN of $T/qc.out's MODE lines ("- -": none;
# column 4, the SYN's packet time, is there only with a packet socket; -1: no SYN seen, dropped)
qconn_p50_p99() {
    local k
    awk -v m="$1" -v c="$2" '$1 == m && NF >= c && $c >= 0 { printf "%.3f\n", $c / 1e6 }' "$T/qc.out" | sort -g >"$T/qc.lat"
    k=$(wc -l <"$T/qc.lat")
    [ "$k" -gt 0 ] || { echo "- -"; return; }
    echo "$(sed -n "$(( (k + 1) / 2 ))p" "$T/qc.lat") $(sed -n "$(( (k * 99 + 99) / 100 ))p" "$T/qc.lat")"
}

# qconn_same A50 A99 B50 B99: "ok" when B's p50 is within 0.02 ms of A's (what the two halves of one run's
# blocking rounds differed by at p50, bench/RESULTS.md) and its p99 within 0.1 ms, else "MISSED". Under load
# the p99s of one kind's own halves differ by far more: read a p99 verdict with the load average next to it.
qconn_same() {
    awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" 'BEGIN {print (c <= a + 0.02 && d <= b + 0.1) ? "ok" : "MISSED"}'
}

qconn_rows() {
    local v
    read -r -a v < <(qconn_measure "${1:-300}")
    row "queued hand-off: release to the SYN accepted, blocking p50/p99" "${v[0]} / ${v[1]} ms" "" ""
    row "  same, queued non-blocking connect in epoll (ET)" "${v[4]} / ${v[5]} ms" "= blk" "$(qconn_same "${v[@]:0:2}" "${v[@]:4:2}")"
    row "  same, queued non-blocking connect in poll" "${v[8]} / ${v[9]} ms" "= blk" "$(qconn_same "${v[@]:0:2}" "${v[@]:8:2}")"
    if [ "${v[12]}" = - ]; then
        row "  release to the SYN sent (its packet's time), blocking" "no packet socket (CAP_NET_RAW)" "" ""
    else
        row "  release to the SYN sent (its packet's time), blocking" "${v[12]} / ${v[13]} ms" "" ""
        row "    same, queued in epoll (ET)" "${v[14]} / ${v[15]} ms" "= blk" "$(qconn_same "${v[@]:12:2}" "${v[@]:14:2}")"
        row "    same, queued in poll" "${v[16]} / ${v[17]} ms" "= blk" "$(qconn_same "${v[@]:12:2}" "${v[@]:16:2}")"
    fi
    row "queued hand-off: release to connected, blocking connect()" "${v[2]} / ${v[3]} ms" "" ""
    row "  same, queued in epoll: writable, SO_ERROR 0" "${v[6]} / ${v[7]} ms" "= blk" "$(qconn_same "${v[@]:2:2}" "${v[@]:6:2}")"
    row "  same, queued in poll: writable, SO_ERROR 0" "${v[10]} / ${v[11]} ms" "= blk" "$(qconn_same "${v[@]:2:2}" "${v[@]:10:2}")"
    qconn_rtt_rows "${1:-300}" "${QCONN_ONEWAY_US:-250}"
}

# qconn_rtt_rows ROUNDS ONEWAY_US: the "connected" rows again over a round trip of 2 x ONEWAY_US (the
# delay line), where the handshake is no longer over inside connect() as on loopback.
qconn_rtt_rows() {
    local v name="same, over a $(( $2 * 2 )) us round trip: connected, blocking"
    if ! qconn_netns_ok; then
        row "$name" "skipped: needs unshare -n, /dev/net/tun, ip" "" ""
        return 0
    fi
    read -r -a v < <(qconn_measure "$1" "$LIB" "$2")
    row "$name" "${v[2]} / ${v[3]} ms" "" ""
    row "  same, queued in epoll: writable, SO_ERROR 0" "${v[6]} / ${v[7]} ms" "= blk" "$(qconn_same "${v[@]:2:2}" "${v[@]:6:2}")"
    row "  same, queued in poll: writable, SO_ERROR 0" "${v[10]} / ${v[11]} ms" "= blk" "$(qconn_same "${v[@]:2:2}" "${v[@]:10:2}")"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    . "$(dirname "$0")/lib.sh"
    bench_alone
    B="$BUILD/bench"
    mkdir -p "$B"
    cc -O2 -g -std=gnu11 -D_GNU_SOURCE -pthread $(pkg-config --cflags hiredis) -o "$B/bench" bench/bench.c \
        $(pkg-config --libs hiredis) || exit 1
    h_redis_start
    qconn_rows "${1:-300}"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%s\n' "${rows[@]}"
fi
