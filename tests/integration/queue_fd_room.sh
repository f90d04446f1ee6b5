# queue_fd_room.sh -- a queued connect takes none of the program's descriptor numbers where the hard
# RLIMIT_NOFILE leaves room above the soft one (systemd's default: 1024 / 524288): Python asyncio, 450
# concurrent opens at limit 4 under a soft limit of 512, which all succeed without the shim, all succeed
# under it (the first 32 queued at once keep the program's socket at numbers >= 512, the rest in the
# keeper's own descriptor table, runtime/keep.h; the program's limit back at 512 after each of the shim's
# calls that raise it); with no room (soft == hard == 512) they all succeed too, all in the keeper (32
# numbers of ours would be 6% of that table), so the client never holds much more than one descriptor
# per open. Code before the room lost about 200 of the 450 with room as without; code before the keeper
# lost about 200 without room (ECONNREFUSED, the connects it could not queue).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
h_redis_start
py="$ROOT/tests/lib/clients/asyncio_opens.py"
n=450 soft=512
hard=$(ulimit -H -n)
[ "$hard" = unlimited ] || [ "$hard" -gt $((2 * soft)) ] || h_skip "hard RLIMIT_NOFILE $hard: no room above $soft"

# watch PORT OUT: samples the client's /proc every 50 ms: "most-high N samples K other M all A" (its
# descriptors at numbers >= $soft at most, the samples of its limits, how many of them showed a soft limit
# other than $soft -- the shim raises it for one call at a time, a few microseconds, so a sample may fall
# in one -- and its descriptors at most)
watch() {
    local port=$1 out=$2 most=0 samples=0 other=0 all=0 p k s
    while :; do
        for p in $(pgrep -f "^[^ ]*python3[^ ]* [^ ]*asyncio_opens.py $port"); do
            k=$(ls "/proc/$p/fd" 2>/dev/null | awk -v s=$soft '$1 >= s' | wc -l)
            [ "$k" -gt "$most" ] && most=$k
            k=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
            [ "$k" -gt "$all" ] && all=$k
            s=$(awk '/^Max open files/ {print $4}' "/proc/$p/limits" 2>/dev/null)
            [ -n "$s" ] || continue
            samples=$((samples + 1))
            [ "$s" = $soft ] || other=$((other + 1))
        done
        echo "most-high $most samples $samples other $other all $all" >"$out.new" && mv "$out.new" "$out" # (whole)
        sleep 0.05
    done
}

h_server_start 50
h_conf "$T/c.conf" api 4 10000 60000 "127.0.0.1:$SRV_PORT"
watch "$SRV_PORT" "$T/watch" & wp=$!
_pids+=("$wp")
rc_run room 120 bash -c 'ulimit -S -n "$0" && exec "$@"' $soft "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n
kill "$wp" 2>/dev/null
wait "$wp" 2>/dev/null
h_note "room: $(cat "$T/watch")"
rc_all $n 90000
rc_cap 4
rc_clean api
read -r _ high _ samples _ other _ all <"$T/watch" || h_fail "room: the watcher wrote nothing"
[ "$high" -ge 16 ] || h_fail "room: at most $high of the client's descriptors at numbers >= $soft: the first 32 queued connects' kept sockets did not go above the soft limit"
[ "$all" -le $((n + 32 + 40)) ] ||
    h_fail "room: the client held up to $all descriptors for $n opens: the queue kept more than the first 32 sockets outside the keeper"
[ "$samples" -ge 10 ] && [ $((other * 10)) -le "$samples" ] ||
    h_fail "room: the client's soft RLIMIT_NOFILE was not $soft in $other of $samples samples: the shim left it raised"

h_server_start 50
h_conf "$T/c.conf" api 4 10000 60000 "127.0.0.1:$SRV_PORT"
watch "$SRV_PORT" "$T/watch" & wp=$!
_pids+=("$wp")
rc_run noroom 120 bash -c 'ulimit -n "$0" && exec "$@"' $soft "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n
kill "$wp" 2>/dev/null
wait "$wp" 2>/dev/null
h_note "noroom: $(cat "$T/watch")"
rc_all $n 90000
! grep -q 'cannot be queued' "$T/noroom.err" || h_fail "noroom: a connect could not be queued: $(grep -m1 'cannot be queued' "$T/noroom.err")"
read -r _ high _ samples _ other _ all <"$T/watch" || h_fail "noroom: the watcher wrote nothing"
[ "$samples" -ge 10 ] || h_fail "noroom: only $samples samples of the client's /proc"
[ "$all" -le $((n + 32 + 40)) ] ||
    h_fail "noroom: the client held up to $all descriptors for $n opens: the queue kept more than the first 32 sockets in the program's table"
rc_cap 4
rc_clean api

# a small table: 300 opens, at most 40 at once (the program's own asyncio.Semaphore), limit 3, nofile 64:64.
# Without the shim all succeed; the first keeper kept the first 32 queued connects' sockets on numbers of
# the program's and lost 274 with ECONNREFUSED.
h_server_start 20
h_conf "$T/c.conf" api 3 10000 60000 "127.0.0.1:$SRV_PORT"
rc_run tiny 120 bash -c 'ulimit -n 64 && exec "$@"' _ "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" 300 \
    --semaphore 40
rc_all 300 90000
rc_cap 3
rc_clean api
echo ok
