# redis_restart_grace.sh -- restart_grace_ms: Redis restarted empty while the limit is held; newcomers wait for the holders to re-register, and the server never sees more than the limit.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_redis_start                     # no persistence: a restart comes back empty
h_server_start 60000
lease=6000                        # heartbeat every lease/3 = 2000 ms
grace=3000                        # > one heartbeat
cat > "$T/c.conf" <<CONF
redis = { socket = "$REDIS_SOCK"; connect_timeout_ms = 300; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "api"; limit = 3; lease_ms = $lease; wait_timeout_ms = 8000; restart_grace_ms = $grace; } );
rules = ( { semaphore = "api"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_redis_down = "closed";
CONF

# first use of the semaphore: the grace is waited once (Redis cannot tell new from lost)
t0=$(date +%s%N)
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 3 60000 > "$T/m.out" 2> "$T/m.err" &
_pids+=("$!")
holder=$!
WAIT_S=15 h_wait_for grep -q '^held 3$' "$T/m.out" || h_fail "three permits not held: $(cat "$T/m.out" "$T/m.err")"
first=$(( ($(date +%s%N) - t0) / 1000000 ))
h_note "first use: the three permits came after $first ms (grace $grace ms)"
[ $first -ge $((grace - 500)) ] || h_fail "the first use did not wait for the grace ($first ms)"
sleep 1   # somewhere in the middle of a heartbeat period

h_redis_restart
[ "$(h_rcli exists 'conncap:{api}:epoch')" = 0 ] || h_fail "redis did not come back empty"
"$CLI" status -c "$T/c.conf" | grep -q "restart grace: starts at the next connect" ||
    h_fail "status does not say a grace will start: $("$CLI" status -c "$T/c.conf")"
# three newcomers at once, right after the empty restart: without the grace
# they would be granted from a count of zero (six open against a limit of 3)
for i in 1 2 3; do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" multi 127.0.0.1 "$SRV_PORT" 1 1000 > "$T/n$i.out" 2>&1 &
    _pids+=("$!")
    eval "new$i=\$!"
done
h_wait_for bash -c '"$0" status -c "$1" --json | grep -q "\"restart_grace_left_ms\":[1-9]"' "$CLI" "$T/c.conf" ||
    h_fail "status --json shows no grace under way: $("$CLI" status -c "$T/c.conf" --json)"
"$CLI" status -c "$T/c.conf" | grep -q "restart grace: new permits in" || h_note "(the grace ended before status ran)"
WAIT_S=10 h_wait_for h_holders_is api 3 || h_fail "the holders were not re-registered"
wait "$new1" "$new2" "$new3"
for i in 1 2 3; do
    grep -q '^ETIMEDOUT' "$T/n$i.out" || h_fail "newcomer $i got a permit over the limit: $(cat "$T/n$i.out")"
done
max=$(h_server_stat max)
h_note "after the empty restart: server max $max (limit 3), the newcomers timed out"
[ "$max" -le 3 ] || h_fail "the server saw $max connections at once, limit 3"
[ "$(h_rcli hget 'conncap:{api}:stats' reregistered)" = 3 ] || h_fail "stats: reregistered is not 3"

# the grace is over: a permit freed is granted at once again
h_stop_pid $holder
h_wait_for h_holders_is api 0 || h_fail "holders left after the holder exited"
out=$(env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$SRV_PORT" 1 2>/dev/null)
case "$out" in ok*) ;; *) h_fail "after the grace a free permit was not granted: $out" ;; esac
echo ok
