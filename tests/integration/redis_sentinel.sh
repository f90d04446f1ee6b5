# redis_sentinel.sh -- Redis Sentinel: the master is killed while clients keep connecting; after the failover the cap holds again and no connect hangs.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_sentinel_start
h_note "master :$SENT_MASTER_PORT, replica :$SENT_REPLICA_PORT, sentinels ${SENT_PORTS[*]}"
h_server_start 200
limit=3 wait_ms=2000
cat > "$T/c.conf" <<CONF
redis = { sentinels = ( "127.0.0.1:${SENT_PORTS[0]}", "127.0.0.1:${SENT_PORTS[1]}", "127.0.0.1:${SENT_PORTS[2]}" );
          master = "$SENT_NAME"; connect_timeout_ms = 300; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "api"; limit = $limit; lease_ms = 3000; wait_timeout_ms = $wait_ms; } );
rules = ( { semaphore = "api"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_redis_down = "closed";
log_level = "info";
CONF
"$CLI" check -c "$T/c.conf" > "$T/check.out" 2>&1 || h_fail "check through sentinel failed: $(cat "$T/check.out")"
grep -q "redis: master \"$SENT_NAME\" via sentinels 127.0.0.1:${SENT_PORTS[0]}" "$T/check.out" ||
    h_fail "check does not show the sentinels: $(cat "$T/check.out")"
at() { redis-cli -p "$1" "${@:2}"; }
# re-evaluated checks for h_wait_for
acquired_ge() { [ "$(at "$1" hget 'conncap:{api}:stats' acquired 2>/dev/null)" -ge "$2" ] 2>/dev/null; }
# (holders have a lease: score > 0; after a failover the set also holds the
# window's marker, score 0, until the first acquire after the window)
holders_on() { [ "$(at "$1" zcount 'conncap:{api}:holders' '(0' '+inf' 2>/dev/null)" -eq "$2" ] 2>/dev/null; }
master_is() { [ "$(h_sentinel_master)" = "127.0.0.1:$1" ]; }

# clients keep connecting (the server holds each 200 ms) until told to stop
n=6 dur=60000
for i in $(seq $n); do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" loop 127.0.0.1 "$SRV_PORT" $dur 0 \
        > "$T/l$i.out" 2> "$T/l$i.err" &
    _pids+=("$!")   # stopped by the harness if the test fails early
    pids+=($!)
done
cur_master_acquired_ge() { local m; m=$(h_sentinel_master) && acquired_ge "${m#127.0.0.1:}" "$1"; }
h_wait_for cur_master_acquired_ge 5 ||
    h_fail "no permits through the sentinels' master: $(cat "$T/check.out" "$T/l1.err")"
h_sentinel_settled
sleep 1
# kill whichever is the master now (on a loaded machine the sentinels may
# already have failed over once on their own: then the roles are swapped)
old=$(h_sentinel_master) old=${old#127.0.0.1:}
if [ "$old" = "$SENT_MASTER_PORT" ]; then victim=$SENT_MASTER_PID new=$SENT_REPLICA_PORT
else victim=$SENT_REPLICA_PID new=$SENT_MASTER_PORT; h_note "(the sentinels had failed over on their own)"; fi
kill -9 "$victim"
t0=$(date +%s%N)
h_note "master :$old killed"
WAIT_S=20 h_wait_for master_is "$new" || h_fail "no failover within 20 s: $(h_sentinel_master)"
h_note "sentinels promoted :$new $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"
a0=$(at "$new" hget 'conncap:{api}:stats' acquired)
a0=${a0:-0}
# the clients find the new master by themselves
WAIT_S=10 h_wait_for acquired_ge "$new" $((a0 + 5)) || h_fail "no permits from the new master"
h_note "permits flow again $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"
sleep 1
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p"; done

mx=$(h_server_stat max)
worst=0
for i in $(seq $n); do
    read -r _ ok _ fail _ ms < "$T/l$i.out"
    [ "$ok" -gt 0 ] || h_fail "client $i never connected: $(cat "$T/l$i.out")"
    [ "$ms" -gt "$worst" ] && worst=$ms
done
h_note "server max $mx (limit $limit); slowest connect call $worst ms (wait_timeout_ms $wait_ms)"
[ "$mx" -le $limit ] || h_fail "the server saw $mx connections at once, limit $limit"
[ "$worst" -le $((wait_ms + 1500)) ] || h_fail "a connect hung $worst ms, longer than the wait timeout (+1.5 s)"
grep -h 'master "mymaster" is at' "$T"/l*.err | grep -q "at 127.0.0.1:$new, was 127.0.0.1:$old" ||
    h_fail "the master switch was not logged: $(cat "$T"/l1.err)"
# the cap holds on the new master: fill it, a fourth connect is refused
for i in 1 2 3; do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" hold 127.0.0.1 "$SRV_PORT" > "$T/h$i.out" 2> "$T/h$i.err" &
    _pids+=("$!")   # stopped by the harness if the test fails early
    holders+=($!)
done
WAIT_S=5 h_wait_for holders_on "$new" 3 ||
    h_fail "three holders not on the new master"
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$SRV_PORT" 1 2>/dev/null)
case "$out" in ETIMEDOUT*) ;; *) h_fail "a fourth connect after the failover: $out" ;; esac
"$CLI" status -c "$T/c.conf" > "$T/status.out" 2>&1 || h_fail "status through sentinel failed: $(cat "$T/status.out")"
grep -q '^api  *3/3' "$T/status.out" || h_fail "status: $(cat "$T/status.out")"
for p in "${holders[@]:1}"; do h_stop_pid "$p"; done
h_wait_for holders_on "$new" 1 || h_fail "holders left"

# a planned failover (SENTINEL FAILOVER) demotes the master to a replica:
# the remaining holder's renewal gets READONLY there and asks the sentinels again
mkdir -p "$T/revived"
redis-server --port "$old" --bind 127.0.0.1 --dir "$T/revived" --save '' --appendonly no --daemonize no \
    --logfile "$T/revived.log" --replicaof 127.0.0.1 "$new" &
_pids+=($!)
synced() { at "$old" info replication 2>/dev/null | tr -d '\r' | grep -q '^master_link_status:up'; }
WAIT_S=15 h_wait_for synced || h_fail "the old master did not come back as a replica"
ok_replica() { at "${SENT_PORTS[0]}" sentinel replicas "$SENT_NAME" | tr -d '\r' | grep -A1 '^flags$' | grep -qx slave; }
WAIT_S=20 h_wait_for ok_replica || h_fail "the sentinels do not see a healthy replica"
at "${SENT_PORTS[0]}" sentinel failover "$SENT_NAME" >/dev/null
WAIT_S=20 h_wait_for master_is "$old" || h_fail "no planned failover: $(h_sentinel_master)"
h_note "planned failover: :$new demoted, :$old promoted"
followed() { grep -q "redis sentinel: master \"$SENT_NAME\" is at 127.0.0.1:$old, was 127.0.0.1:$new" "$T/h1.err"; }
WAIT_S=10 h_wait_for followed || h_fail "the holder did not follow the planned failover: $(cat "$T/h1.err")"
sleep 1.2   # one more renewal, on the promoted master
holders_on "$old" 1 || h_fail "the holder is not on the promoted master"
[ "$(at "$old" zscore 'conncap:{api}:holders' "$(at "$old" zrangebyscore 'conncap:{api}:holders' '(0' '+inf')")" -gt \
  "$(( $(at "$old" time | head -1) * 1000 + 1500 ))" ] || h_fail "the holder's lease is not renewed on :$old"
grep -q 'is a replica now: asking the sentinels again' "$T/h1.err" &&
    h_note "(the holder saw READONLY on the demoted master)"
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$SRV_PORT" 2 2>/dev/null | sort -u)
[ "$out" != "${out#ok}" ] || h_fail "connects after the planned failover: $out"
h_stop_pid "${holders[0]}"
h_wait_for holders_on "$old" 0 || h_fail "holders left"
echo ok
