# redis_failover_capacity.sh -- 20 short-lived clients in a loop through two SENTINEL FAILOVERs: the cap holds at the switch, and capacity comes back within two heartbeats, not a lease, although the new master holds permits nobody holds any more.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_sentinel_start
h_note "master :$SENT_MASTER_PORT, replica :$SENT_REPLICA_PORT, sentinels ${SENT_PORTS[*]}"
# one counting server per phase (the cap is read per phase), both in the rule
h_server_start 50; srvA=$SRV_PORT statsA=$SRV_STATS
h_server_start 50; srvB=$SRV_PORT statsB=$SRV_STATS
# lease 6 s: a heartbeat every 2 s. Sentinel's own failover takes 1-2 s even
# when the test ends it early (phase B): with a 3 s lease the stale holders'
# own expiry would come too close after the switch to tell from a window of
# one heartbeat on a loaded machine.
limit=4 lease=6000 wait_ms=4500 beat=2000 n=20
cat > "$T/c.conf" <<CONF
redis = { sentinels = ( "127.0.0.1:${SENT_PORTS[0]}", "127.0.0.1:${SENT_PORTS[1]}", "127.0.0.1:${SENT_PORTS[2]}" );
          master = "$SENT_NAME"; connect_timeout_ms = 300; command_timeout_ms = 500; key_prefix = "conncap:"; };
semaphores = ( { name = "api"; limit = $limit; lease_ms = $lease; wait_timeout_ms = $wait_ms; } );
rules = ( { semaphore = "api"; match = ( "127.0.0.1:$srvA", "127.0.0.1:$srvB" ); } );
on_redis_down = "closed";
log_level = "info";
CONF
at() { redis-cli -p "$1" "${@:2}"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
stat_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
master_is() { [ "$(h_sentinel_master)" = "127.0.0.1:$1" ]; }
role_is() { [ "$(at "$1" role 2>/dev/null | head -1)" = "$2" ]; }
acquired_ge() { [ "$(at "$1" hget 'conncap:{api}:stats' acquired 2>/dev/null)" -ge "$2" ] 2>/dev/null; }
holders_on() { [ "$(at "$1" zcount 'conncap:{api}:holders' '(0' '+inf' 2>/dev/null)" -eq "$2" ] 2>/dev/null; }
problems=()
fail_later() { problems+=("$*"); h_note "NOT OK: $*"; }

# loops PHASE PORT: 20 clients connecting in a loop (the server answers each
# request after 50 ms) until stopped
loops() {
    lpids=()
    for i in $(seq $n); do
        env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" loop 127.0.0.1 "$2" 120000 0 \
            > "$T/$1.l$i.out" 2> "$T/$1.l$i.err" &
        _pids+=("$!")
        lpids+=($!)
    done
}
# after PHASE STATS SWITCH_MS FRESH_OUT MASTER: stops the loops, then checks
# the phase: the cap, the longest connect, the fresh connect, leftovers
after() {
    local ph=$1 stats=$2 fresh=$4 m=$5 p worst=0 fails=0 tmo=0 refused=0 ok=0 mx ms e r o f fres fms
    for p in "${lpids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${lpids[@]}"; do wait "$p"; done
    for i in $(seq $n); do
        read -r _ o _ f _ ms < "$T/$ph.l$i.out"
        ok=$((ok + o)) fails=$((fails + f))
        [ "$ms" -gt "$worst" ] && worst=$ms
        e=$(awk '$1 == "err" && $2 == "ETIMEDOUT" { print $3 }' "$T/$ph.l$i.out")
        r=$(awk '$1 == "err" && $2 == "ECONNREFUSED" { print $3 }' "$T/$ph.l$i.out")
        tmo=$((tmo + ${e:-0})) refused=$((refused + ${r:-0}))
    done
    mx=$(stat_of "$stats" max)
    read -r fres fms < "$fresh"
    h_note "phase $ph: $ok connects, $fails failed ($tmo ETIMEDOUT, $refused ECONNREFUSED); slowest connect ${worst} ms" \
        "(wait_timeout_ms $wait_ms); server max $mx (limit $limit); a fresh connect at the switch: $fres after ${fms%.*} ms" \
        "(two heartbeats: $((2 * beat)) ms)"
    [ "$mx" -le $limit ] || fail_later "phase $ph: the server saw $mx connections at once, limit $limit"
    [ "$tmo" -eq 0 ] || fail_later "phase $ph: $tmo connects waited their full wait_timeout_ms ($wait_ms ms)"
    [ "$worst" -lt "$wait_ms" ] || fail_later "phase $ph: a connect took $worst ms, wait_timeout_ms is $wait_ms"
    [ "$fres" = ok ] || fail_later "phase $ph: the fresh connect after the switch failed: $fres after $fms ms"
    [ "${fms%.*}" -le $((2 * beat)) ] || fail_later "phase $ph: the fresh connect waited ${fms%.*} ms, more than two heartbeats"
    # every release reached the new master (none waits for its lease there)
    h_wait_for holders_on "$m" 0 || fail_later "phase $ph: holders left on :$m: $(at "$m" zrange 'conncap:{api}:holders' 0 -1)"
}

# ---- phase A: a planned failover as Sentinel runs it. The old master keeps
# serving the clients connected to it for about 10 s after the promotion (4
# publish periods), then Sentinel makes it a replica and closes their
# connections: they all move to the new master at once, where the permits
# they still hold were never registered.
h_sentinel_settled
old=$SENT_MASTER_PORT new=$SENT_REPLICA_PORT
loops A "$srvA"
WAIT_S=15 h_wait_for acquired_ge "$old" 40 || h_fail "no permits through the sentinels' master: $(cat "$T/A.l1.err")"
sleep 1
at "${SENT_PORTS[0]}" sentinel failover "$SENT_NAME" >/dev/null
t0=$(now_ms)
WAIT_S=20 h_wait_for master_is "$new" || h_fail "no failover within 20 s: $(h_sentinel_master)"
h_note "phase A: the sentinels name :$new $(( $(now_ms) - t0 )) ms after SENTINEL FAILOVER"
WAIT_S=30 h_wait_for role_is "$old" slave || h_fail "Sentinel did not demote :$old within 30 s"
ts=$(now_ms)
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$srvA" 1 > "$T/A.fresh" 2> "$T/A.fresh.err" &
_pids+=("$!")
fresh=$!
h_note "phase A: :$old demoted $((ts - t0)) ms after SENTINEL FAILOVER: the switch"
sleep $(( (2 * beat + 1500) / 1000 ))
wait $fresh
after A "$statsA" "$ts" "$T/A.fresh" "$new"

# ---- phase B: back to :$old, with permits nobody holds any more on the
# master that takes over: two holders killed (kill -9) right before the
# failover, and the permits the loops held when :$old was promoted, whose
# releases went to :$new afterwards and are lost with its data. The test
# demotes :$new itself as soon as the sentinels name :$old (what Sentinel
# does about 10 s later), so that the failover is over well within a lease,
# as it is with the default 30 s lease.
synced() { at "$old" info replication 2>/dev/null | tr -d '\r' | grep -q '^master_link_status:up'; }
WAIT_S=15 h_wait_for synced || h_fail ":$old is not an up-to-date replica"
ok_replica() { at "${SENT_PORTS[0]}" sentinel replicas "$SENT_NAME" | tr -d '\r' | grep -A1 '^flags$' | grep -qx slave; }
WAIT_S=20 h_wait_for ok_replica || h_fail "the sentinels do not see a healthy replica"
loops B "$srvB"
WAIT_S=15 h_wait_for acquired_ge "$new" $(( $(at "$new" hget 'conncap:{api}:stats' acquired) + 40 )) ||
    h_fail "phase B: no permits through :$new"
hp=()
for i in 1 2; do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" hold 127.0.0.1 "$srvB" > "$T/B.h$i.out" 2> "$T/B.h$i.err" &
    _pids+=("$!")
    hp+=($!)
done
for i in 1 2; do h_wait_for grep -q connected "$T/B.h$i.out" || h_fail "holder $i got no permit"; done
sleep 0.5
kill -9 "${hp[@]}"
at "${SENT_PORTS[0]}" sentinel failover "$SENT_NAME" >/dev/null
t0=$(now_ms)
WAIT_S=20 h_wait_for master_is "$old" || h_fail "phase B: no failover within 20 s: $(h_sentinel_master)"
# the sentinels name :$old before it has left its replica role: demoting :$new
# before then leaves no master at all for a moment (seen on a loaded machine)
is_master() { [ "$(at "$1" role 2>/dev/null | head -n 1)" = master ]; }
WAIT_S=10 h_wait_for is_master "$old" || h_fail "phase B: :$old named master but still $(at "$old" role | head -n 1)"
at "$new" replicaof 127.0.0.1 "$old" >/dev/null
at "$new" client kill type normal >/dev/null
ts=$(now_ms)
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$srvB" 1 > "$T/B.fresh" 2> "$T/B.fresh.err" &
_pids+=("$!")
fresh=$!
h_note "phase B: :$old promoted, :$new demoted by the test $((ts - t0)) ms after SENTINEL FAILOVER:" \
    "$(at "$old" zcount 'conncap:{api}:holders' '(0' '+inf') live holders on :$old (limit $limit)"
sleep $(( (2 * beat + 1500) / 1000 ))
wait $fresh
after B "$statsB" "$ts" "$T/B.fresh" "$old"
grep -h 'failover\|master "mymaster" is at' "$T"/B.l1.err | sort | uniq -c | head -5 >&2

[ ${#problems[@]} -eq 0 ] || h_fail "$(printf '%s; ' "${problems[@]}")"
echo ok
