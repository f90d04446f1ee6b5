# queue_fd_exhausted.sh -- a process that runs out of descriptors after a connect was queued still gets
# its permit when one is released, and its poller is still woken: a non-blocking connect queued (limit 1,
# another connect holds the permit), then every free descriptor used up -- RLIMIT_NOFILE lowered to 64,
# below the shim's own numbers ("lower"), or every number below a limit of 256 taken ("plain") -- then
# poll() or epoll_wait() on the queued socket while a thread lets the holder go after 300 ms; and the
# same for a blocking connect() whose wait began (in another thread) before the descriptors ran out. The
# waker's Redis connection is made lazily, at its first BLPOP, and the poll's eventfd at the first poll:
# neither can be made then. The socket must be reported writable (the blocking connect return),
# connected, well before the 6 s timeout (within 2 s of the release; wait_timeout_ms is 8 s), and
# nothing be left in Redis.
. "$(dirname "$0")/../lib/harness.sh"
h_redis_start
"$PROGS/qready" echo "$T/echo.port" 2>"$T/echo.err" & _pids+=("$!")
h_wait_file "$T/echo.port"; UP=$(cat "$T/echo.port")
h_conf "$T/q.conf" qx 1 30000 8000 "127.0.0.1:$UP"
clean() { local k; for k in holders queue qexp; do [ "$(h_rcli zcard "conncap:{qx}:$k")" -eq 0 ] || return 1; done; }
fails=0
for how in lower plain; do
    for waitfn in poll epoll connect; do
        out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/q.conf" timeout 40 "$PROGS/qfdexh" "$UP" $waitfn $how \
            2>"$T/err.$how.$waitfn"); rc=$?
        h_note "$how $waitfn: $out (exit $rc)"
        [ $rc -eq 0 ] || { fails=$((fails + 1)); sed 's/^/    /' "$T/err.$how.$waitfn" | head -${ERR_LINES:-5} >&2; }
        WAIT_S=10 h_wait_for clean || { h_note "$how $waitfn: left in redis"; fails=$((fails + 1)); }
    done
done
[ $fails -eq 0 ] || h_fail "$fails of 6 cases not woken in time (or left something in Redis)"
echo ok
