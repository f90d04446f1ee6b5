# queue_keeper_refused.sh -- where the keeper cannot run, queued connects keep the program's socket on a
# descriptor of the shim's, as before the keeper, and nothing fails: Python asyncio, 300 concurrent opens
# at limit 4 (so about 296 queued at once), under a seccomp filter that refuses pidfd_getfd (a container
# profile without it), then one that refuses close_range (kernels before 5.9 have no CLOSE_RANGE_UNSHARE).
# Each run: all 300 succeed, the cap held, the log says once that there is no keeper and why, and the
# client held about two descriptors per open at its peak (the keeper's runs hold about one).
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/realclient.sh"
h_plain_only
h_redis_start
py="$ROOT/tests/lib/clients/asyncio_opens.py"
n=300
"$PROGS/refuse" 438 true 2>/dev/null || h_skip "no seccomp filter can be installed here"

# peak PORT OUT: the client's most descriptors, sampled every 50 ms, into OUT
peak() {
    local most=0 p k
    while :; do
        for p in $(pgrep -f "^[^ ]*python3[^ ]* [^ ]*asyncio_opens.py $1"); do
            k=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
            [ "$k" -gt "$most" ] && most=$k
        done
        echo "$most" >"$2.new" && mv "$2.new" "$2"
        sleep 0.05
    done
}

for nr in 438:pidfd_getfd 436:close_range; do
    h_server_start 50
    h_conf "$T/c.conf" api 4 10000 60000 "127.0.0.1:$SRV_PORT"
    peak "$SRV_PORT" "$T/peak" & pp=$!
    _pids+=("$pp")
    rc_run "${nr#*:}" 120 bash -c 'ulimit -n 4096 && exec "$@"' _ "$PROGS/refuse" "${nr%%:*}" \
        "$CLI" run -c "$T/c.conf" -- python3 "$py" "$SRV_PORT" $n
    kill "$pp" 2>/dev/null
    wait "$pp" 2>/dev/null
    most=$(cat "$T/peak")
    h_note "${nr#*:} refused: the client held up to $most descriptors; log: $(grep -c 'no keeper thread' "$T/${nr#*:}.err") line(s) about the keeper"
    rc_all $n 90000
    rc_cap 4
    rc_clean api
    [ "$(grep -c 'no keeper thread' "$T/${nr#*:}.err")" -eq 1 ] ||
        h_fail "${nr#*:} refused: want one log line saying there is no keeper: $(grep 'keeper' "$T/${nr#*:}.err" | head -3)"
    [ "$most" -ge $((n * 3 / 2)) ] ||
        h_fail "${nr#*:} refused: the client held at most $most descriptors for $n opens: was a keeper running after all?"
done
echo ok
