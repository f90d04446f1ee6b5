# redis_hostile_wake.sh -- integers from a reply are range-checked where parsed: a huge (or negative) wake_ms is a bad reply (counted by the breaker, reason logged), never an overflow or a busy loop on Redis.
. "$(dirname "$0")/../lib/harness.sh"
. "$ROOT/tests/lib/fakeredis.sh"
h_server_start 0
for wake in 9223372036854775807 -9223372036854775808 2147483648; do
    fr_start --mode wake --wake "$wake"
    fr_conf "$T/c.conf" api 1000 "127.0.0.1:$SRV_PORT"
    fr_measure w 20 env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$PROGS/failclient" try 127.0.0.1 "$SRV_PORT" 1
    cmds=$(fr_stat cmds)
    h_note "wake_ms $wake: exit $M_RC, $(cat "$T/w.out"), $cmds commands, $M_MS ms"
    [ "$M_RC" -eq 0 ] || h_fail "wake_ms $wake: the program exited $M_RC: $(tail -3 "$T/w.err")"
    read -r e ms < "$T/w.out"
    [ "$e" = ECONNREFUSED ] || h_fail "wake_ms $wake: connect: $e, want ECONNREFUSED (a bad reply, on_redis_down closed)"
    [ "$cmds" -le 5 ] || h_fail "wake_ms $wake: $cmds commands to Redis for one connect"
    grep -q "wake_ms: $wake, out of range" "$T/w.err" || h_fail "wake_ms $wake: no reason logged: $(cat "$T/w.err")"
done
echo ok
