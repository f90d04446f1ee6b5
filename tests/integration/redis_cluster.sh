# redis_cluster.sh -- Redis Cluster: semaphores on every master hold their caps; a slot migration is followed (ASK, then MOVED).
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_cluster_start
P=("${CLUSTER_PORTS[@]}")
h_note "cluster masters ${P[*]}"
owner() { h_cluster_owner "conncap:{$1}:holders"; }

# six semaphore names, two on each master
names=() per=()
for i in $(seq 0 200); do
    nm="sem$i" o=$(owner "sem$i")
    for k in 0 1 2; do
        if [ "$o" = "${P[$k]}" ] && [ "${per[$k]:-0}" -lt 2 ]; then
            names+=("$nm"); per[$k]=$(( ${per[$k]:-0} + 1 ))
        fi
    done
    [ ${#names[@]} -eq 6 ] && break
done
[ ${#names[@]} -eq 6 ] || h_fail "could not spread six names over the three masters"

# one countserver per semaphore (started together: interpreters are slow to start)
srv_ports=() srv_stats=()
for nm in "${names[@]}"; do
    python3 "$ROOT/tests/lib/countserver.py" --hold 150 --stats "$T/$nm.json" --portfile "$T/$nm.port" &
    _pids+=("$!")
done
for nm in "${names[@]}"; do
    h_wait_file "$T/$nm.port" 20 || h_fail "countserver for $nm did not start"
    srv_ports+=("$(cat "$T/$nm.port")")
done
stat_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$T/$1.json" "$2"; }

sems="" rules=""
for i in "${!names[@]}"; do
    sems="$sems${sems:+, }{ name = \"${names[$i]}\"; limit = 2; lease_ms = 3000; wait_timeout_ms = 3000; }"
    rules="$rules${rules:+, }{ semaphore = \"${names[$i]}\"; match = ( \"127.0.0.1:${srv_ports[$i]}\" ); }"
done
cat > "$T/c.conf" <<CONF
redis = { cluster = ( "127.0.0.1:${P[0]}" ); connect_timeout_ms = 300; command_timeout_ms = 2500; key_prefix = "conncap:"; };
semaphores = ( $sems );
rules = ( $rules );
on_redis_down = "closed";
log_level = "debug";
CONF
"$CLI" check -c "$T/c.conf" > "$T/check.out" 2>&1 || h_fail "check against the cluster failed: $(cat "$T/check.out")"
grep -q "redis: cluster, seeds 127.0.0.1:${P[0]}" "$T/check.out" || h_fail "check does not show the cluster: $(cat "$T/check.out")"
# the function library on every master (setup from one seed), then FCALL only
"$CLI" setup -c "$T/c.conf" > "$T/setup.out" 2>&1 || h_fail "setup on the cluster failed: $(cat "$T/setup.out")"
for p in "${P[@]}"; do
    redis-cli -p "$p" function list | grep -q '^conncap_[0-9a-f]\{12\}$' || h_fail "no function library on :$p: $(cat "$T/setup.out")"
    redis-cli -p "$p" config resetstat >/dev/null
done
"$CLI" check -c "$T/c.conf" 2>&1 | grep -q 'function library conncap_.* loaded (FCALL)' ||
    h_fail "check does not see the library on every master: $("$CLI" check -c "$T/c.conf" 2>&1 | tail -2)"

# ---- every semaphore: 4 clients looping for 3 s (8 s in sanitizer builds) at limit 2
dur=3000
[ -n "${SAN:-}" ] && dur=8000
pids=()
for i in "${!names[@]}"; do
    for j in 1 2 3 4; do
        env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" loop 127.0.0.1 "${srv_ports[$i]}" $dur 0 \
            > "$T/${names[$i]}.$j.out" 2> "$T/${names[$i]}.$j.err" &
        _pids+=("$!")   # stopped by the harness if the test fails early
        pids+=($!)
    done
done
for p in "${pids[@]}"; do wait "$p"; done
for i in "${!names[@]}"; do
    nm=${names[$i]} o=$(owner "${names[$i]}")
    mx=$(stat_of "$nm" max) tot=$(stat_of "$nm" total)
    acq=$(redis-cli -p "$o" hget "conncap:{$nm}:stats" acquired)
    h_note "$nm (slot $(redis-cli -p "${P[0]}" cluster keyslot "conncap:{$nm}:holders") on :$o): $tot connections, at most $mx at once, $acq acquired"
    [ "$mx" -le 2 ] || h_fail "$nm: the server saw $mx connections, limit 2"
    [ "$tot" -ge 4 ] || h_fail "$nm: only $tot connections"
    [ "${acq:-0}" -ge "$tot" ] || h_fail "$nm: the owner :$o counted ${acq:-0} acquires for $tot connections"
    grep -h 'NOSCRIPT\|CROSSSLOT\|MOVED\|unreachable\|refused the\|not loaded' "$T/$nm".*.err && h_fail "$nm: redis trouble"
done
for p in "${P[@]}"; do
    st=$(redis-cli -p "$p" info commandstats | tr -d '\r')
    echo "$st" | grep -q '^cmdstat_fcall:' || h_fail "no FCALL on :$p"
    echo "$st" | grep -Eq '^cmdstat_(evalsha|script)' && h_fail "EVALSHA or SCRIPT on :$p with the library loaded"
done
"$CLI" status -c "$T/c.conf" > "$T/status.out" 2>&1 || h_fail "status in cluster mode failed: $(cat "$T/status.out")"
[ "$(grep -c '^sem' "$T/status.out")" -eq 6 ] || h_fail "status does not list the six semaphores: $(cat "$T/status.out")"

# ---- a slot migration while a permit is held: ASK during it, MOVED after it
nm=${names[0]} port=${srv_ports[0]}
key="conncap:{$nm}:holders"
slot=$(redis-cli -p "${P[0]}" cluster keyslot "$key")
src=$(owner "$nm")
for d in "${P[@]}"; do [ "$d" != "$src" ] && { dst=$d; break; }; done
id_of() { redis-cli -p "$1" cluster myid; }
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" hold 127.0.0.1 "$port" > "$T/hold.out" 2> "$T/hold.err" &
_pids+=("$!")   # stopped by the harness if the test fails early
holder=$!
h_wait_for grep -q connected "$T/hold.out" || h_fail "no holder: $(cat "$T/hold.out" "$T/hold.err")"
[ "$(redis-cli -p "$src" zcard "$key")" -eq 1 ] || h_fail "the holder is not on :$src"
redis-cli -p "$dst" cluster setslot "$slot" importing "$(id_of "$src")" >/dev/null
redis-cli -p "$src" cluster setslot "$slot" migrating "$(id_of "$dst")" >/dev/null
for _ in 1 2 3; do
    keys=$(redis-cli -p "$src" cluster getkeysinslot "$slot" 100)
    [ -z "$keys" ] && break
    # shellcheck disable=SC2086
    redis-cli -p "$src" migrate 127.0.0.1 "$dst" "" 0 5000 keys $keys > "$T/migrate.out" 2>&1
done
[ "$(printf 'ASKING\nEXISTS %s\n' "$key" | redis-cli -p "$dst" | tail -1)" = 1 ] || h_fail "the holders key did not move: $(cat "$T/migrate.out")"
# single-key commands are served through ASK: the CLI lists the holder
"$CLI" holders -c "$T/c.conf" "$nm" > "$T/holders.out" 2>&1 || h_fail "holders during the migration: $(cat "$T/holders.out")"
grep -q "127.0.0.1:$port" "$T/holders.out" || h_fail "holders during the migration: $(cat "$T/holders.out")"
# the acquire script (several keys, some not created yet) gets ASK from the
# source, then TRYAGAIN from the target until the migration is through
env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$port" 1 > "$T/ask.out" 2> "$T/ask.err" &
_pids+=("$!")   # stopped by the harness if the test fails early
asker=$!
h_wait_for grep -q "TRYAGAIN" "$T/ask.err" || h_fail "no TRYAGAIN during the migration: $(cat "$T/ask.err")"
grep -q "ASK slot $slot to 127.0.0.1:$dst" "$T/ask.err" || h_fail "no ASK redirect followed: $(cat "$T/ask.err")"
for p in "${P[@]}"; do redis-cli -p "$p" cluster setslot "$slot" node "$(id_of "$dst")" >/dev/null; done
wait $asker
grep -q '^ok' "$T/ask.out" || h_fail "the connect during the migration did not get through: $(cat "$T/ask.out" "$T/ask.err")"
[ "$(owner "$nm")" = "$dst" ] || h_fail "the slot did not move to :$dst"
# the holder's heartbeat (every second) now gets MOVED and follows it
WAIT_S=8 h_wait_for grep -q "MOVED slot $slot to 127.0.0.1:$dst" "$T/hold.err" ||
    h_fail "the holder's renewals did not follow MOVED: $(cat "$T/hold.err")"
sleep 1.2
h_note "slot $slot moved :$src -> :$dst; ASK and MOVED followed"
[ "$(redis-cli -p "$dst" zcard "$key")" -eq 1 ] || h_fail "the held permit is not on :$dst"
left=$(redis-cli -p "$dst" pttl "$key")
[ "$left" -gt 1500 ] || h_fail "the lease on :$dst is not renewed (pttl $left)"
out=$(LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$FC" try 127.0.0.1 "$port" 2 2>/dev/null | sort -u)
[ "$out" != "${out#ok}" ] || h_fail "connects after the migration: $out"
h_stop_pid $holder
h_wait_for test "$(redis-cli -p "$dst" zcard "$key")" = 0 2>/dev/null
[ "$(redis-cli -p "$dst" zcard "$key")" -eq 0 ] || h_fail "the holder's release did not reach :$dst"
echo ok
