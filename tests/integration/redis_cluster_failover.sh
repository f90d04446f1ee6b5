# redis_cluster_failover.sh -- Redis Cluster: CLUSTER FAILOVER of the master that serves a semaphore, whose two holders were killed: their permits come back one re-registration window after the switch, not a lease.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_cluster_start
P=("${CLUSTER_PORTS[@]}")
owner() { h_cluster_owner "conncap:{$1}:holders"; }
nm=
for i in $(seq 0 200); do [ "$(owner "fo$i")" = "${P[0]}" ] && { nm="fo$i"; break; }; done
[ -n "$nm" ] || h_fail "no name served by :${P[0]}"
# a replica of that master
mapfile -t rp < <(h_free_ports 2)
mkdir -p "$T/creplica"
(cd "$T/creplica" && exec redis-server --port "${rp[0]}" --cluster-port "${rp[1]}" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "$T/creplica/nodes.conf" --cluster-node-timeout 2000 --dir "$T/creplica" \
    --save '' --appendonly no --daemonize no --logfile "$T/creplica.log") &
_pids+=("$!")
h_wait_for redis-cli -p "${rp[0]}" ping >/dev/null || h_fail "the replica did not start"
redis-cli --cluster add-node "127.0.0.1:${rp[0]}" "127.0.0.1:${P[0]}" --cluster-slave \
    --cluster-master-id "$(redis-cli -p "${P[0]}" cluster myid)" > "$T/add-node.log" 2>&1 ||
    h_fail "add-node failed: $(tail -3 "$T/add-node.log")"
synced() { redis-cli -p "${rp[0]}" info replication 2>/dev/null | tr -d '\r' | grep -q '^master_link_status:up'; }
WAIT_S=20 h_wait_for synced || h_fail "the replica did not sync"
h_server_start 50
limit=2 lease=12000 beat=4000 wait_ms=10000
cat > "$T/c.conf" <<CONF
redis = { cluster = ( "127.0.0.1:${P[1]}" ); connect_timeout_ms = 300; command_timeout_ms = 1000; key_prefix = "conncap:"; };
semaphores = ( { name = "$nm"; limit = $limit; lease_ms = $lease; wait_timeout_ms = $wait_ms; } );
rules = ( { semaphore = "$nm"; match = ( "127.0.0.1:$SRV_PORT" ); } );
on_redis_down = "closed";
log_level = "info";
CONF
run() { env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }   # in the foreground only ($! of a
# function run in the background is its subshell's, not the program's)
acquired() { redis-cli -c -p "${P[0]}" hget "conncap:{$nm}:stats" acquired; }
lp=()
for i in 1 2 3; do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" loop 127.0.0.1 "$SRV_PORT" 60000 0 > "$T/l$i.out" 2> "$T/l$i.err" &
    _pids+=("$!")
    lp+=($!)
done
acquired_ge() { [ "$(acquired)" -ge "$1" ] 2>/dev/null; }
WAIT_S=10 h_wait_for acquired_ge 20 || h_fail "no permits: $(cat "$T/l1.err")"
hp=()
for i in 1 2; do
    env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" hold 127.0.0.1 "$SRV_PORT" > "$T/h$i.out" 2> "$T/h$i.err" &
    _pids+=("$!")
    hp+=($!)
done
for i in 1 2; do h_wait_for grep -q connected "$T/h$i.out" || h_fail "holder $i got no permit"; done
sleep 0.3 # their leases run 12 s from now on the master (and its replica)
kill -9 "${hp[@]}"
t0=$(date +%s%N)
redis-cli -p "${rp[0]}" cluster failover > /dev/null
owner_is() { [ "$(owner "$nm")" = "$1" ]; }
WAIT_S=15 h_wait_for owner_is "${rp[0]}" || h_fail "no failover to :${rp[0]}"
ts=$(date +%s%N)
h_note "CLUSTER FAILOVER: :${rp[0]} serves $nm $(( (ts - t0) / 1000000 )) ms after the holders were killed"
out=$(run "$FC" try 127.0.0.1 "$SRV_PORT" 1 2> "$T/fresh.err")
read -r res ms <<< "$out"
h_note "a fresh connect at the switch: $res after ${ms%.*} ms (lease $lease ms, two heartbeats $((2 * beat)) ms)"
sleep 1
for p in "${lp[@]}"; do kill -TERM "$p"; done
for p in "${lp[@]}"; do wait "$p"; done
worst=0 tmo=0
for i in 1 2 3; do
    read -r _ _ _ _ _ m < "$T/l$i.out"
    [ "$m" -gt "$worst" ] && worst=$m
    e=$(awk '$1 == "err" && $2 == "ETIMEDOUT" { print $3 }' "$T/l$i.out"); tmo=$((tmo + ${e:-0}))
done
mx=$(h_server_stat max)
h_note "loops: slowest connect $worst ms, $tmo ETIMEDOUT (wait_timeout_ms $wait_ms); server max $mx (limit $limit)"
grep -h 'redis cluster: .*failed over\|redis failover:' "$T"/l*.err | sort | uniq -c | head -4 >&2
[ "$mx" -le $limit ] || h_fail "the server saw $mx connections at once, limit $limit"
[ "$res" = ok ] || h_fail "the fresh connect failed: $out"
[ "${ms%.*}" -le $((2 * beat)) ] || h_fail "the fresh connect waited ${ms%.*} ms, more than two heartbeats"
[ "$tmo" -eq 0 ] || h_fail "$tmo connects waited their full wait_timeout_ms"
grep -q 'redis failover: .* opened a re-registration window' "$T"/l*.err || h_fail "no window opened"
[ "$(redis-cli -p "${rp[0]}" hget "conncap:{$nm}:stats" reclaimed)" -ge 2 ] || h_fail "the dead holders were not reclaimed"
echo ok
