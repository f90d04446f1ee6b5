# queue_above_limit.sh -- a non-blocking connect on a number at or above the program's own soft
# RLIMIT_NOFILE (it lowered the limit under its sockets: socket 40, soft limit 30, registered in epoll
# before connect()). With room under the hard limit the connect is queued (EINPROGRESS) and connects when
# the permit comes (the old code refused it: dup3 onto 40 fails with EBADF). With none (soft == hard == 30)
# it fails at once with nonblocking_errno, and nothing of the shim's is left behind: no descriptor of
# the closed socket, no epoll event for its closed number (the old code kept its copy of the socket,
# forgotten, and the set went on reporting the closed number).
. "$(dirname "$0")/../lib/harness.sh"
h_plain_only
h_redis_start
h_server_start 5000
h_conf "$T/c.conf" al 1 10000 8000 "127.0.0.1:$SRV_PORT"
py="$ROOT/tests/lib/clients/above_limit.py"
for mode in room noroom; do
    out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" timeout 30 python3 "$py" "$SRV_PORT" $mode 2>"$T/$mode.err")
    h_note "$mode: $out"
    read -r _ conn _ done _ same _ events <<<"$out"
    [ -n "${events:-}" ] || h_fail "$mode: no result: $(tail -n 3 "$T/$mode.err")"
    if [ $mode = room ]; then
        [ "$conn" = EINPROGRESS ] || h_fail "room: connect gave $conn, want EINPROGRESS (queued)"
        [ "$done" = 0 ] || h_fail "room: the queued connect ended as '$done', want connected (SO_ERROR 0, a peer)"
    else
        [ "$conn" = ECONNREFUSED ] || h_fail "noroom: connect gave $conn, want nonblocking_errno ECONNREFUSED"
        grep -q 'cannot be queued' "$T/$mode.err" || h_fail "noroom: the refusal was not logged"
    fi
    [ "$same" = 0 ] || h_fail "$mode: $same descriptors still refer to the socket the program closed"
    [ "$events" = 0 ] || h_fail "$mode: the epoll set reports the closed number"
    WAIT_S=10 h_wait_for h_holders_is al 0 || h_fail "$mode: holders left: $(h_holders al)"
done
echo ok
