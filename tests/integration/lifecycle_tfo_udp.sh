# lifecycle_tfo_udp.sh -- MSG_FASTOPEN sendto/sendmsg/sendmmsg to a matched destination takes a permit
# like connect (and none when the cap is full: no SYN; 8 sockets opened by sendmmsg at a limit of 3: the
# server sees 3); UDP connect() and AF_UNIX sockets are not counted and cost no Redis command.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/lifecycle.sh"
h_redis_start
h_server_start 600000
lc_setup 30000 100
# UDP and AF_UNIX first (no other client has talked to Redis yet): untouched, no Redis command
h_rcli config resetstat >/dev/null
lc_run udpunix "$T/u.sock"
h_note "commandstats after UDP/AF_UNIX: $(h_rcli info commandstats | tr -d '\r' | grep -i eval | tr '\n' ' ')"
# the driver's own lc_live runs EVAL; the program must have sent nothing
h_rcli info commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|script|zadd)' && h_fail "UDP/AF_UNIX sockets sent commands to Redis"

tfo=$(sysctl -n net.ipv4.tcp_fastopen 2>/dev/null || echo 0)
total=$(h_server_stat total)
lc_run tfo
h_note "net.ipv4.tcp_fastopen=$tfo: sendto $(lc_fact tfo-sendto), sendmsg $(lc_fact tfo-sendmsg), again $(lc_fact tfo-again), sendmmsg $(lc_fact tfo-sendmmsg)"
if [ $((tfo & 1)) -eq 1 ]; then
    # client TFO on: the sends connected (the server need not support TFO: no cookie, plain handshake)
    [ "$(lc_fact tfo-sendto)" = sent ] || h_fail "MSG_FASTOPEN sendto failed: $(lc_fact tfo-sendto)"
    [ "$(lc_fact tfo-sendmsg)" = sent ] || h_fail "MSG_FASTOPEN sendmsg failed: $(lc_fact tfo-sendmsg)"
    [ "$(lc_fact tfo-sendmmsg)" = sent ] || h_fail "MSG_FASTOPEN sendmmsg failed: $(lc_fact tfo-sendmmsg)"
    WAIT_S=5 h_wait_for eval '[ "$(h_server_stat total)" -ge $((total + 3)) ]' || h_fail "the server saw no TFO connection"
else
    h_note "client TFO is off here: the sends failed with the real errno and their permits went back"
fi
[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left after TFO"

# the cap is full: a MSG_FASTOPEN send fails like connect, with no SYN
lc_setup 30000 1 300
LD_PRELOAD="$LIB" CONNCAP_CONFIG="$LC_CONF" "$PROGS/lifecycle" hold "$SRV_PORT" "$DEAD_PORT" 60000 >/dev/null &
holder=$!
WAIT_S=10 h_wait_for h_holders_is lc 1 || h_fail "the holder got no permit"
total=$(h_server_stat total)
lc_run full tfo
h_note "MSG_FASTOPEN with the cap full: $(lc_fact result)"
[ "$(lc_fact result | cut -d' ' -f1)" = ETIMEDOUT ] || h_fail "want ETIMEDOUT, got $(lc_fact result)"
[ "$(h_server_stat total)" -eq "$total" ] || h_fail "a refused MSG_FASTOPEN send reached the server"
lc_run full tfommsg
h_note "sendmmsg MSG_FASTOPEN with the cap full: $(lc_fact result)"
[ "$(lc_fact result | cut -d' ' -f1)" = ETIMEDOUT ] || h_fail "sendmmsg: want ETIMEDOUT, got $(lc_fact result)"
[ "$(h_server_stat total)" -eq "$total" ] || h_fail "a refused MSG_FASTOPEN sendmmsg reached the server"
kill $holder; wait $holder 2>/dev/null
h_rcli del 'conncap:{lc}:holders' >/dev/null   # SIGTERM left its permit to the lease

# 8 sockets opened by sendmmsg(MSG_FASTOPEN) and kept open, limit 3: 3 connect, 5 time out unsent
if [ $((tfo & 1)) -eq 1 ]; then
    h_server_start 600000
    lc_setup 30000 3 300
    lc_run tfomany 8
    h_note "8 sendmmsg opens at a limit of 3: $(lc_fact tfomany) (sent refused first-errno); server max $(h_server_stat max)"
    [ "$(lc_fact tfomany)" = "3 5 ETIMEDOUT" ] || h_fail "sendmmsg opens at a limit of 3: want 3 sent, 5 ETIMEDOUT, got $(lc_fact tfomany)"
    [ "$(h_server_stat max)" -le 3 ] || h_fail "the server saw $(h_server_stat max) concurrent sendmmsg connections at a limit of 3"
fi

[ "$(h_holders lc)" -eq 0 ] || h_fail "holders left"
echo ok
