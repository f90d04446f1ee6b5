# redis_down.sh -- Redis unreachable: "closed" fails fast (circuit), "open" passes, "local" caps each process; recovery without restart.
. "$(dirname "$0")/../lib/harness.sh"
FC="$PROGS/failclient"
h_redis_start
h_server_start 200
run() { LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf" "$@"; }
# Background clients are started with env, so that $! is the client itself.
PRE=(env LD_PRELOAD="$LIB" CONNCAP_CONFIG="$T/c.conf")
max_ms() { awk '{ if ($2 + 0 > m) m = $2 + 0 } END { printf "%d\n", m }' "$1"; }
count() { grep -c "^$1 " "$2" || true; }

# ---- closed: with on_timeout = ECONNREFUSED too, "closed" must not wait
# out wait_timeout_ms (3 s): it fails at once.
ON_DOWN=closed ON_TIMEOUT=ECONNREFUSED h_conf "$T/c.conf" api 2 3000 3000 "127.0.0.1:$SRV_PORT"
run "$FC" try 127.0.0.1 "$SRV_PORT" 1 > "$T/up.out" 2> "$T/up.err"
grep -q '^ok ' "$T/up.out" || h_fail "no connect with redis up: $(cat "$T/up.out" "$T/up.err")"
h_redis_down
run "$FC" try 127.0.0.1 "$SRV_PORT" 10 > "$T/closed.out" 2> "$T/closed.err"
[ "$(count ECONNREFUSED "$T/closed.out")" -eq 10 ] || h_fail "closed: not 10 x ECONNREFUSED: $(cat "$T/closed.out")"
m=$(max_ms "$T/closed.out")
h_note "closed, redis stopped: 10 connects refused, slowest $m ms"
[ "$m" -lt 1000 ] || h_fail "closed: a refused connect took $m ms (must be well under a second)"
[ "$(grep -c 'redis unreachable' "$T/closed.err")" -eq 1 ] || h_fail "the outage was not logged exactly once: $(cat "$T/closed.err")"

# ---- the circuit: a Redis that accepts but never answers costs
# command_timeout_ms (500 ms) per try; repeated connects must not each pay it.
nc -lkU "$T/black.sock" >/dev/null 2>&1 &
_pids+=("$!")
h_wait_for test -S "$T/black.sock" || h_fail "no blackhole socket"
( REDIS_SOCK="$T/black.sock" ON_DOWN=closed h_conf "$T/c.conf" api 2 3000 3000 "127.0.0.1:$SRV_PORT" )
t0=$(date +%s%N)
run "$FC" try 127.0.0.1 "$SRV_PORT" 30 50 > "$T/black.out" 2> "$T/black.err"
total=$(( ($(date +%s%N) - t0) / 1000000 ))
fast=$(awk '$2 + 0 < 50' "$T/black.out" | wc -l)
slow=$(awk '$2 + 0 >= 400' "$T/black.out" | wc -l)
h_note "closed, redis silent: 30 connects in $total ms; $fast took < 50 ms, $slow paid the 500 ms timeout"
[ "$(count ECONNREFUSED "$T/black.out")" -eq 30 ] || h_fail "silent redis: not all refused: $(cat "$T/black.out")"
[ "$slow" -ge 1 ] || h_fail "no connect paid the command timeout: is the blackhole a blackhole?"
[ "$fast" -ge 20 ] || h_fail "only $fast of 30 connects skipped redis while the circuit was open"
[ "$slow" -le 8 ] || h_fail "$slow of 30 connects waited for redis: the circuit does not back off"

# ---- open: passes; permits granted meanwhile are registered once Redis
# is back, and the recovery is logged once.
ON_DOWN=open h_conf "$T/c.conf" api 2 3000 3000 "127.0.0.1:$SRV_PORT"
"${PRE[@]}" "$FC" hold 127.0.0.1 "$SRV_PORT" > "$T/open.out" 2> "$T/open.err" &
_pids+=("$!")   # stopped by the harness if the test fails early
holder=$!
h_wait_for grep -q connected "$T/open.out" || h_fail "open: the connect did not pass: $(cat "$T/open.out" "$T/open.err")"
run "$FC" try 127.0.0.1 "$SRV_PORT" 3 > "$T/open2.out" 2>/dev/null
[ "$(count ok "$T/open2.out")" -eq 3 ] || h_fail "open: connects failed: $(cat "$T/open2.out")"
[ "$(max_ms "$T/open2.out")" -lt 1000 ] || h_fail "open: a connect took $(max_ms "$T/open2.out") ms"
h_redis_spawn_again
t0=$(date +%s%N)
WAIT_S=8 h_wait_for h_holders_is api 1 || h_fail "the permit granted while redis was down was not registered"
h_note "open: the permit granted while redis was down was registered $(( ($(date +%s%N) - t0) / 1000000 )) ms after redis came back"
h_wait_for grep -q 'reachable again' "$T/open.err" || h_fail "recovery not logged: $(cat "$T/open.err")"
grep -q 're-registered 1 permit' "$T/open.err" || h_fail "re-registration not logged: $(cat "$T/open.err")"
[ "$(grep -c 'reachable again' "$T/open.err")" -eq 1 ] || h_fail "recovery logged more than once"
[ "$(h_rcli hget 'conncap:{api}:stats' fallback_granted)" = 1 ] || h_fail "fallback_granted is not 1"
kill -TERM $holder; wait $holder
h_wait_for h_holders_is api 0 ||
    h_fail "the holder did not give its permit back: $(h_rcli zrange 'conncap:{api}:holders' 0 -1) $(cat "$T/open.err")"

# ---- local: each process stays within local_limit (2), whatever the
# shared limit (10); two processes at once, each asking for 4.
h_server_start 3000
ON_DOWN=local h_conf "$T/c.conf" api 10 3000 400 "127.0.0.1:$SRV_PORT"
sed -i 's/wait_timeout_ms = 400;/wait_timeout_ms = 400; local_limit = 2;/' "$T/c.conf"
grep -q 'local_limit = 2' "$T/c.conf" || h_fail "could not set local_limit"
h_redis_down
"${PRE[@]}" "$FC" multi 127.0.0.1 "$SRV_PORT" 4 1500 > "$T/l1.out" 2>/dev/null &
_pids+=("$!")   # stopped by the harness if the test fails early
p1=$!
"${PRE[@]}" "$FC" multi 127.0.0.1 "$SRV_PORT" 4 1500 > "$T/l2.out" 2>/dev/null &
_pids+=("$!")   # stopped by the harness if the test fails early
p2=$!
wait $p1 $p2
for f in "$T/l1.out" "$T/l2.out"; do
    grep -q '^held 2$' "$f" || h_fail "local: a process held other than 2: $(cat "$f")"
    [ "$(count ETIMEDOUT "$f")" -eq 2 ] || h_fail "local: beyond local_limit not ETIMEDOUT: $(cat "$f")"
done
mx=$(h_server_stat max)
h_note "local: each process held 2 of 4, the server saw at most $mx at once"
[ "$mx" -le 4 ] || h_fail "the server saw $mx connections: more than 2 processes x local_limit 2"

# ---- local: the permits a process took from Redis before it went down count. One process holds 2
# while Redis is up, then asks for 3 more once it is down: with local_limit 2 none may pass (a tester's
# process held 6 at once under local_limit 3: the local count left the Redis permits out).
h_redis_spawn_again
h_server_start 3000
ON_DOWN=local h_conf "$T/c.conf" api 10 3000 400 "127.0.0.1:$SRV_PORT"
sed -i 's/wait_timeout_ms = 400;/wait_timeout_ms = 400; local_limit = 2;/' "$T/c.conf"
cat >"$T/held.py" <<'PY'
import os, socket, sys, time
up = ("127.0.0.1", int(sys.argv[1]))
held = [socket.create_connection(up) for _ in range(2)]   # from Redis
print("held 2", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
more = []
for _ in range(3):
    try:
        more.append(socket.create_connection(up))
        print("ok", flush=True)
    except OSError as e:
        print("failed", e.errno, flush=True)
time.sleep(1)
PY
"${PRE[@]}" python3 "$T/held.py" "$SRV_PORT" "$T/down" >"$T/held.out" 2>"$T/held.err" &
_pids+=("$!")
p=$!
h_wait_for grep -q 'held 2' "$T/held.out" || h_fail "local: the 2 permits were not taken from Redis: $(cat "$T/held.out" "$T/held.err")"
h_redis_down
touch "$T/down"
wait $p
h_note "local, 2 held from Redis, 3 asked once it was down: $(grep -c '^ok' "$T/held.out") passed; the server saw at most $(h_server_stat max)"
[ "$(grep -c '^ok' "$T/held.out")" -eq 0 ] ||
    h_fail "local: $(grep -c '^ok' "$T/held.out") more passed with local_limit 2 already held from Redis: $(tr '\n' ' ' <"$T/held.out")"
[ "$(h_server_stat max)" -le 2 ] || h_fail "local: the server saw $(h_server_stat max) at once from one process, local_limit 2"

# ---- recovery without restarting the program: one process keeps
# connecting while Redis is stopped and started again.
h_server_start 50
ON_DOWN=closed h_conf "$T/c.conf" api 2 3000 1000 "127.0.0.1:$SRV_PORT"
h_redis_spawn_again
"${PRE[@]}" "$FC" try 127.0.0.1 "$SRV_PORT" 60 150 > "$T/rec.out" 2> "$T/rec.err" &
_pids+=("$!")   # stopped by the harness if the test fails early
p=$!
sleep 1.5
h_redis_down
sleep 2
h_redis_spawn_again
wait $p
h_note "recovery: $(count ok "$T/rec.out") ok, $(count ECONNREFUSED "$T/rec.out") refused of 60"
head -3 "$T/rec.out" | grep -qv '^ok' && h_fail "recovery: first connects failed: $(head -3 "$T/rec.out")"
[ "$(count ECONNREFUSED "$T/rec.out")" -ge 3 ] || h_fail "recovery: redis was down but nothing was refused"
tail -5 "$T/rec.out" | grep -qv '^ok' && h_fail "recovery: the program did not recover: $(tail -5 "$T/rec.out")"
[ "$(grep -c 'reachable again' "$T/rec.err")" -eq 1 ] || h_fail "recovery not logged once: $(cat "$T/rec.err")"
echo ok
