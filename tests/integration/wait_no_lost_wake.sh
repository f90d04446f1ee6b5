# wait_no_lost_wake.sh -- no lost wake-up with one waker per process: releases racing waiters between their attempt and their block, and Redis restarted under waiting processes (with its data: FIFO kept; empty with restart grace: the cap kept).
. "$(dirname "$0")/../lib/harness.sh"
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }
blocked() { [ "$(h_rcli client list | grep -c "cmd=blpop")" -ge "$1" ]; }   # a waker lingers 10 s after its last waiter
queued() { [ "$(h_rcli zcard "conncap:{$1}:queue")" -eq "$2" ]; }

# 1. churn: 2 permits, 6 processes x 5 threads x 8 short connects. Each
# release wakes a waiter that may be anywhere between its attempt and its
# block. A lost token leaves its waiter asleep until its deadline (20 s:
# leases of 30 s, no re-check before): its connect fails.
REDIS_EXTRA="--appendonly yes --appendfsync always"    # restarts keep the data (part 2)
h_redis_start
h_server_start 30
h_conf "$T/c.conf" ch 2 30000 20000 "127.0.0.1:$SRV_PORT"
t0=$("$PROGS/monotime")
cp=()
for i in $(seq 6); do
    run "$PROGS/capclient" 127.0.0.1 "$SRV_PORT" 5 8 0 >"$T/c$i.out" 2>"$T/c$i.err" &
    cp+=("$!"); _pids+=("$!")
done
for p in "${cp[@]}"; do wait "$p" || h_fail "a client failed (a lost wake-up): $(grep -h fail "$T"/c*.out | head -3)"; done
t1=$("$PROGS/monotime")
h_note "churn: 240 connects through 2 permits in $(python3 -c "print(int($t1 - $t0))") ms, server max $(h_server_stat max)"
[ "$(h_server_stat max)" -le 2 ] || h_fail "cap exceeded: $(h_server_stat max)"
[ "$(h_server_stat total)" -eq 240 ] || h_fail "the server saw $(h_server_stat total) connections, want 240"

# 2. Redis restarted with its data (AOF) while three processes wait: each
# waker's connection breaks, each waiter re-checks once (its ticket is still
# queued, in place), blocks again, and the release wakes them in order.
# while Redis is down a waiter's re-check applies on_redis_down: "local" with
# local_limit 0 keeps it waiting ("open" would let it through)
h_server_start 200
ON_DOWN=local h_conf "$T/c.conf" rs 1 6000 30000 "127.0.0.1:$SRV_PORT"
sed -i 's/wait_timeout_ms = 30000;/wait_timeout_ms = 30000; local_limit = 0;/' "$T/c.conf"
mkfifo "$T/a.in"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/a.in" >"$T/a.out" 2>"$T/a.err" &
_pids+=("$!")
exec 7>"$T/a.in"
h_wait_for h_holders_is rs 1 || h_fail "A got no permit"
bp=()
for i in 1 2 3; do
    run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 300 >"$T/b$i.out" 2>"$T/b$i.err" 7>&- &
    bp+=("$!"); _pids+=("$!")
    h_wait_for queued rs "$i" || h_fail "B$i not queued"
done
h_wait_for blocked 3 || h_fail "the three wakers do not block: $(h_rcli client list)"
score=$(h_rcli zrange 'conncap:{rs}:holders' 0 0 withscores | tail -1)
h_redis_restart 7>&-   # the new server must not keep the fifo to A open
[ "$(h_rcli zcard 'conncap:{rs}:queue')" -eq 3 ] || h_fail "the queue did not survive the restart"
WAIT_S=10 h_wait_for blocked 3 || h_fail "the wakers did not block again after the restart: $(h_rcli client list)"
# A closes once its heartbeat (every 2 s) reached the new server: a release
# sent while A's own circuit is still open would wait for A's next heartbeat
renewed() { [ "$(h_rcli zrange 'conncap:{rs}:holders' 0 0 withscores | tail -1)" != "$score" ]; }
WAIT_S=15 h_wait_for renewed || h_fail "A did not renew after the restart"
exec 7>&-          # A closes: B1, B2, B3 in turn
for p in "${bp[@]}"; do wait "$p" || h_fail "a waiter failed after the restart: $(cat "$T"/b*.out)"; done
order=$(for i in 1 2 3; do echo "$(awk '/^connected/ {print $2}' "$T/b$i.out") $i"; done | sort -n | awk '{printf "%s", $2}')
h_note "after the restart the waiters got the permit in the order $order"
[ "$order" = 123 ] || h_fail "not FIFO after the restart: $order"
[ "$(h_server_stat max)" -le 1 ] || h_fail "cap exceeded after the restart: $(h_server_stat max)"

# 3. Redis restarted empty, with restart grace: the holder re-registers with
# its heartbeat, the waiters (their tickets lost) re-check, queue again, and
# get the permit once A closes -- never two at once.
h_redis_stop
REDIS_EXTRA=""
h_redis_start r2
h_server_start 200
ON_DOWN=local h_conf "$T/c.conf" gr 1 6000 30000 "127.0.0.1:$SRV_PORT"
sed -i 's/wait_timeout_ms = 30000;/wait_timeout_ms = 30000; local_limit = 0; restart_grace_ms = 3000;/' "$T/c.conf"
mkfifo "$T/g.in"
run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" -1 <"$T/g.in" >"$T/g.out" 2>"$T/g.err" &
_pids+=("$!")
exec 8>"$T/g.in"
WAIT_S=10 h_wait_for h_holders_is gr 1 || h_fail "G got no permit"
dp=()
for i in 1 2 3; do
    run "$PROGS/hold" 127.0.0.1 "$SRV_PORT" 300 >"$T/d$i.out" 2>"$T/d$i.err" 7>&- 8>&- &
    dp+=("$!"); _pids+=("$!")
done
h_wait_for queued gr 3 || h_fail "three waiters not queued"
h_wait_for blocked 3 || h_fail "the three wakers do not block"
h_rcli set marker 1 >/dev/null
h_redis_restart r2 8>&-
[ "$(h_rcli exists marker)" -eq 0 ] || h_fail "redis did not come back empty"
WAIT_S=10 h_wait_for queued gr 3 || h_fail "the waiters did not queue again after the restart"
WAIT_S=10 h_wait_for h_holders_is gr 1 || h_fail "G did not re-register"
sleep 3            # past the grace: still nobody but G
[ "$(h_server_stat max)" -le 1 ] || h_fail "cap exceeded during the grace: $(h_server_stat max)"
exec 8>&-
for p in "${dp[@]}"; do wait "$p" || h_fail "a waiter failed after the empty restart: $(cat "$T"/d*.out)"; done
[ "$(h_server_stat max)" -le 1 ] || h_fail "cap exceeded after the empty restart: $(h_server_stat max)"
echo ok
